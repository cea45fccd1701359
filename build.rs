//! Compiles mom-router's own wire contracts (`proto/`) with protox (a protobuf compiler in
//! Rust, so no `protoc` is needed) and prost. The generated types also derive serde's
//! `Serialize` with the proto3 JSON names, for the JSON encodings.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/mom/v1/run_record.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    prost_build::Config::new()
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .type_attribute(".", "#[serde(rename_all = \"camelCase\", default)]")
        .compile_fds(descriptors)?;
    Ok(())
}
