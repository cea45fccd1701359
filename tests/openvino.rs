//! The encoder on ONNX Runtime's OpenVINO execution provider, on this CPU: the OpenVINO build of
//! ONNX Runtime 1.24.1 (`onnxruntime-openvino`, which the test command fetches to
//! `.cache/onnxruntime-openvino/`) loaded by the same binary that loads the default 1.31.1
//! build. A process loads one runtime library, so these tests have their own test binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::inference::{cosine, EncoderHandle};
use mom_router::llm::LlmClient;
use mom_router::lock::{self, Patience};
use std::time::Duration;
use support::encoders::{cache, golden, onnx_on, texts};

const RUNTIME: &str = "onnxruntime-openvino/libonnxruntime.so";

#[test]
fn the_openvino_provider_matches_the_reference_embeddings_and_the_cpu_provider() {
    let openvino = EncoderHandle::spawn(onnx_on(RUNTIME, &["openvino", "cpu"], true)).unwrap();
    assert_eq!(openvino.describe(), "onnx openvino");
    let cpu = EncoderHandle::spawn(onnx_on(RUNTIME, &["cpu"], false)).unwrap();
    assert_eq!(cpu.describe(), "onnx cpu");
    let from_openvino = openvino.embed_blocking(&texts()).unwrap();
    let from_cpu = cpu.embed_blocking(&texts()).unwrap();
    for (i, want) in golden().iter().enumerate() {
        let got = &from_openvino[i];
        assert_eq!(got.len(), 384);
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "text {i}: norm {norm}");
        // int8 weights, as on the CPU provider: close to PyTorch in direction, not in digits.
        let reference = cosine(got, want);
        let same_model = cosine(got, &from_cpu[i]);
        eprintln!("text {i}: openvino vs PyTorch {reference:.6}, vs cpu provider {same_model:.6}");
        assert!(
            reference > 0.998,
            "text {i}: openvino vs PyTorch {reference}"
        );
        assert!(
            same_model > 0.9999,
            "text {i}: openvino vs cpu provider {same_model}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_names_the_openvino_provider_and_its_runtime() {
    let config = format!(
        r#"
version: openvino-lock
inference:
  encoder:
    backend: onnx
    modelDir: {model}
    onnxModel: {onnx}
    runtimeLibrary: {ort}
    executionProviders: [openvino, cpu]
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
identities:
  - {{name: mom/auto, version: "1", defaultModel: smollm2-135m, decisions: [code]}}
signals:
  - {{name: code, type: embedding, candidates: ["How do I reverse a linked list?"], threshold: 0.6}}
decisions:
  - {{name: code, rules: {{signal: code}}, modelRefs: [{{model: smollm2-135m}}]}}
"#,
        model = cache("models/all-MiniLM-L6-v2").display(),
        onnx = cache("models/all-MiniLM-L6-v2-int8/model.onnx").display(),
        ort = cache(RUNTIME).display(),
    );
    let snapshot = mom_router::config::compile_str(&config).unwrap();
    // Nothing listens on the backend port: the lock records that and still names the runtime.
    let client = LlmClient::new("http://127.0.0.1:9", "a".repeat(32));
    let patience = Patience {
        total: Duration::from_millis(200),
        attempt: Duration::from_millis(100),
    };
    let resolved = lock::resolve(&snapshot, &client, patience).await.document;
    let runtime = &resolved["runtime"];
    assert_eq!(
        runtime["encoder"]["executionProvider"], "openvino",
        "{runtime}"
    );
    assert_eq!(runtime["encoder"]["runs"], "onnx openvino");
    assert_eq!(
        runtime["onnxRuntime"]["library"],
        cache(RUNTIME).display().to_string()
    );
    let build = runtime["onnxRuntime"]["build"].as_str().unwrap();
    assert!(build.contains("rel-1.24.1"), "{build}");
}
