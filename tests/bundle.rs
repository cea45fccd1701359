//! The policy as an artifact: bundle digests that stay put for the same inputs and move with
//! any asset or policy change, export/import that moves a bundle unchanged (and catches
//! tampering), bindings that place a bundle but can never change its meaning, and a bound
//! bundle served through the real Envoy with its resolution lock and digests in every record.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::{self, binding, bundle};
use mom_router::inference::Head;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::stack::{header, Stack};

fn cache(path: &str) -> String {
    support::repo()
        .join(".cache")
        .join(path)
        .display()
        .to_string()
}

/// A policy with one trained head (an asset) and the encoder it reads; `keyword` varies the
/// policy, `admin` varies a deployment setting.
fn spec(head: &Path, keyword: &str, admin: u16) -> String {
    format!(
        r#"
version: bundle-test
server: {{adminListen: "127.0.0.1:{admin}"}}
inference:
  encoder:
    backend: onnx
    modelDir: {model}
    onnxModel: {onnx}
    runtimeLibrary: {ort}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct, quality: 0.3}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct, quality: 0.6}}
identities:
  - name: mom/auto
    version: "1"
    defaultModel: smollm2-135m
    decisions: [code, jailbreak]
signals:
  - {{name: code, type: keyword, keywords: [{keyword}]}}
  - {{name: jailbreak, type: jailbreak, head: {head}, threshold: 0.9}}
decisions:
  - name: jailbreak
    priority: 10
    rules: {{signal: jailbreak}}
    modelRefs: [{{model: smollm2-135m}}]
  - name: code
    rules: {{signal: code}}
    modelRefs: [{{model: qwen2.5-coder-0.5b}}]
"#,
        model = cache("models/all-MiniLM-L6-v2"),
        onnx = cache("models/all-MiniLM-L6-v2-int8/model.onnx"),
        ort = cache("onnxruntime/libonnxruntime.so"),
        head = head.display(),
    )
}

/// A temp folder holding a copy of the trained jailbreak head and a spec naming it.
struct Workspace {
    dir: tempfile::TempDir,
    head: PathBuf,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("jailbreak.safetensors");
        std::fs::copy(support::repo().join("heads/jailbreak.safetensors"), &head).unwrap();
        Self { dir, head }
    }

    /// Writes the spec and builds it into a new folder `name`.
    fn build(&self, name: &str, keyword: &str, admin: u16) -> bundle::Manifest {
        let spec_path = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&spec_path, spec(&self.head, keyword, admin)).unwrap();
        bundle::build(&spec_path, &self.dir.path().join(name))
            .unwrap()
            .manifest
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn mom_router(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(args)
        .env("ORT_DYLIB_PATH", cache("onnxruntime/libonnxruntime.so"))
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_digest_is_the_same_for_the_same_inputs_and_moves_with_any_asset_or_policy_change() {
    let work = Workspace::new();
    let first = work.build("first", "python", 9190);
    let again = work.build("again", "python", 9190);
    assert!(first.digest.starts_with("sha256:"));
    assert_eq!(first.digest, again.digest);
    assert_eq!(first.files, again.files);
    assert_eq!(
        first
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>(),
        vec![first.assets[0].path.as_str(), "policy.yaml"]
    );
    assert_eq!(first.assets[0].role, "signals[1].head");
    assert_eq!(first.binds, vec!["server", "inference"]);

    // A deployment setting is not part of the bundle.
    let moved_admin = work.build("moved-admin", "python", 9191);
    assert_eq!(moved_admin.digest, first.digest);

    // A policy change is.
    let other_keyword = work.build("other-keyword", "rust", 9190);
    assert_ne!(other_keyword.digest, first.digest);
    assert_eq!(other_keyword.assets, first.assets);

    // So is an asset change: the same head with one bias nudged.
    let mut head = Head::load(&work.head).unwrap();
    head.layers[0].bias[0] += 0.25;
    head.save(&work.head, &[]).unwrap();
    let other_head = work.build("other-head", "python", 9190);
    assert_ne!(other_head.digest, first.digest);
    assert_ne!(other_head.assets[0].sha256, first.assets[0].sha256);

    // A bundle is never written over another.
    let spec_path = work.path("first.yaml");
    let errors = bundle::build(&spec_path, &work.path("first")).unwrap_err();
    assert!(errors.to_string().contains("not empty"), "{errors}");
    // Nor built from a policy that does not compile.
    std::fs::write(&spec_path, "models: [{name: a}]\n").unwrap();
    let errors = bundle::build(&spec_path, &work.path("broken")).unwrap_err();
    assert!(errors.to_string().contains("models[0]"), "{errors}");
    assert!(!work.path("broken").exists());
}

#[test]
fn export_and_import_move_a_bundle_unchanged_and_catch_tampering() {
    let work = Workspace::new();
    let manifest = work.build("built", "python", 9190);
    let folder = work.path("built");
    let archive = work.path("built.tar");
    let out = mom_router(&[
        "bundle",
        "export",
        folder.to_str().unwrap(),
        "-o",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Building straight into an archive gives the same bytes: export is deterministic.
    let direct = work.path("direct.tar");
    let out = mom_router(&[
        "bundle",
        "build",
        work.path("built.yaml").to_str().unwrap(),
        "-o",
        direct.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read(&archive).unwrap(),
        std::fs::read(&direct).unwrap()
    );

    let imported = work.path("imported");
    let out = mom_router(&[
        "bundle",
        "import",
        archive.to_str().unwrap(),
        "-o",
        imported.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&manifest.digest));
    let out = mom_router(&["bundle", "inspect", "--json", imported.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspected["manifest"]["digest"], json!(manifest.digest));
    assert_eq!(inspected["policy"]["identities"], json!(["mom/auto v1"]));
    assert_eq!(
        inspected["policy"]["signals"],
        json!(["code (keyword)", "jailbreak (jailbreak)"])
    );
    assert_eq!(
        std::fs::read(imported.join("policy.yaml")).unwrap(),
        std::fs::read(folder.join("policy.yaml")).unwrap()
    );

    // An edited policy no longer matches its manifest.
    let policy = imported.join("policy.yaml");
    let mut edited = std::fs::read_to_string(&policy).unwrap();
    edited = edited.replace("python", "java");
    std::fs::write(&policy, edited).unwrap();
    let out = mom_router(&["bundle", "inspect", imported.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("policy.yaml: content does not match"),
        "{}",
        text(&out.stderr)
    );
    // Neither does a manifest whose digest was rewritten.
    let manifest_path = folder.join("bundle.json");
    let original = std::fs::read_to_string(&manifest_path).unwrap();
    let forged = original.replace(&manifest.digest[7..15], "00000000");
    std::fs::write(&manifest_path, forged).unwrap();
    let errors = bundle::open(&folder).unwrap_err();
    assert!(
        errors.to_string().contains("bundle.json.digest"),
        "{errors}"
    );
    std::fs::write(&manifest_path, original).unwrap();

    // An archive entry that would leave the bundle folder is refused and nothing is left.
    let hostile = work.path("hostile.tar");
    let mut builder = tar::Builder::new(std::fs::File::create(&hostile).unwrap());
    let mut entry = tar::Header::new_old();
    entry.as_old_mut().name[..7].copy_from_slice(b"../evil");
    entry.set_size(4);
    entry.set_entry_type(tar::EntryType::Regular);
    entry.set_cksum();
    builder.append(&entry, &b"evil"[..]).unwrap();
    builder.into_inner().unwrap();
    let landed = work.path("landed");
    let out = mom_router(&[
        "bundle",
        "import",
        hostile.to_str().unwrap(),
        "-o",
        landed.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not a plain file inside the bundle"),
        "{}",
        text(&out.stderr)
    );
    assert!(!landed.exists());
    assert!(!work.dir.path().join("evil").exists());
}

#[test]
fn a_binding_places_a_bundle_but_can_never_change_its_meaning() {
    let work = Workspace::new();
    let manifest = work.build("built", "python", 9190);
    let folder = work.path("built");
    let bind = |text: &str| {
        let path = work.path("binding.yaml");
        std::fs::write(&path, text).unwrap();
        binding::compile_bound(&folder, Some(&path))
    };
    let encoder = format!(
        "inference:\n  encoder: {{backend: onnx, modelDir: {}, onnxModel: {}, runtimeLibrary: {}}}\n",
        cache("models/all-MiniLM-L6-v2"),
        cache("models/all-MiniLM-L6-v2-int8/model.onnx"),
        cache("onnxruntime/libonnxruntime.so"),
    );
    let good = format!(
        "bundle: {}\n{encoder}models:\n  smollm2-135m: {{providerModel: smollm2-135m-q8}}\n",
        manifest.digest
    );
    let snapshot = bind(&good).unwrap();
    let smol = snapshot.model_index("smollm2-135m").unwrap();
    assert_eq!(&*snapshot.models[smol].provider_model, "smollm2-135m-q8");
    let artifact = snapshot.artifact.clone().unwrap();
    assert_eq!(artifact.bundle_digest, manifest.digest);
    assert_eq!(
        artifact.binding_digest,
        format!("sha256:{}", config::hex_sha256(good.as_bytes()))
    );
    assert_eq!(artifact.assets[0].2, manifest.assets[0].sha256);

    let refused = |extra: &str| -> Vec<String> {
        match bind(&format!("{encoder}{extra}")) {
            Ok(_) => panic!("binding accepted: {extra}"),
            Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
        }
    };
    let cases = [
        (
            "decisions: []\n",
            "binding.decisions: `decisions` is part of the bundle's decision semantics",
        ),
        (
            "identities: [{name: mom/auto, defaultModel: qwen2.5-coder-0.5b}]\n",
            "binding.identities: `identities` is part of",
        ),
        (
            "signals: [{name: jailbreak, type: jailbreak, threshold: 0.99}]\n",
            "binding.signals: `signals` is part of",
        ),
        (
            "models:\n  gemma3-270m: {providerModel: gemma}\n",
            "binding.models.gemma3-270m: not a model of the bundle; adding a model changes the decision graph",
        ),
        (
            "models:\n  smollm2-135m: {quality: 0.9}\n",
            "binding.models.smollm2-135m.quality: part of the bundle's semantics",
        ),
        (
            "bundle: sha256:0000\n",
            "binding.bundle: this binding is for bundle \"sha256:0000\"",
        ),
        ("routes: {}\n", "binding.routes: unknown key"),
    ];
    for (extra, expected) in cases {
        let errors = refused(extra);
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{extra:?} gave {errors:?}"
        );
    }
    // Unbound, a policy that reads the encoder does not compile: the binding must supply it.
    let errors = binding::compile_bound(&folder, None).unwrap_err();
    assert!(errors.to_string().contains("inference.encoder"), "{errors}");
}

/// The binding of the served bundle: Envoy's addresses, the encoder, records, and one model
/// placed on the id its backend really lists.
fn served_binding(records: &Path) -> String {
    format!(
        r#"server: {{internalUrl: INTERNAL_URL, envoyAdmin: ENVOY_ADMIN}}
inference:
  encoder: {{backend: onnx, modelDir: {}, onnxModel: {}, runtimeLibrary: {}}}
records: {{path: {}}}
models:
  smollm2-135m: {{providerModel: smollm2-135m}}
"#,
        cache("models/all-MiniLM-L6-v2"),
        cache("models/all-MiniLM-L6-v2-int8/model.onnx"),
        cache("onnxruntime/libonnxruntime.so"),
        records.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_bundle_serves_through_envoy_with_its_lock_and_digests_in_every_record() {
    let work = Workspace::new();
    let manifest = work.build("built", "python", 9190);
    let records = work.path("runs.jsonl");
    let stack = Stack::start_bundle(&work.path("built"), &served_binding(&records)).await;
    let sidecar = stack.sidecar.as_ref().unwrap();
    let admin = sidecar.admin_url();
    let lock = support::eventually(Duration::from_secs(40), async || {
        let response = reqwest::get(format!("{admin}/lock")).await.ok()?;
        (response.status() == 200).then_some(())?;
        response.json::<Value>().await.ok()
    })
    .await
    .expect("the lock resolves");

    assert_eq!(lock["format"], "mom-router.lock/v1");
    assert_eq!(lock["bundle"]["digest"], json!(manifest.digest));
    let binding_bytes = std::fs::read(&sidecar.config).unwrap();
    assert_eq!(
        lock["binding"]["digest"],
        json!(format!("sha256:{}", config::hex_sha256(&binding_bytes)))
    );
    assert_eq!(lock["configVersion"], json!(sidecar.version()));
    let asset = &lock["bundle"]["assets"][0];
    assert_eq!(asset["role"], "signals[1].head");
    assert_eq!(asset["sha256"], json!(manifest.assets[0].sha256));

    // Runtimes and hashes as they really are.
    let ort = cache("onnxruntime/libonnxruntime.so");
    let onnx_runtime = &lock["runtime"]["onnxRuntime"];
    assert_eq!(onnx_runtime["library"], json!(ort));
    assert_eq!(
        onnx_runtime["sha256"],
        json!(config::hex_sha256(&std::fs::read(&ort).unwrap()))
    );
    assert!(
        onnx_runtime["build"]
            .as_str()
            .unwrap()
            .contains("git-commit-id="),
        "{onnx_runtime}"
    );
    assert_eq!(lock["runtime"]["encoder"]["executionProvider"], "cpu");
    let weights = cache("models/all-MiniLM-L6-v2-int8/model.onnx");
    let weights_sha = config::hex_sha256(&std::fs::read(&weights).unwrap());
    assert_eq!(lock["runtime"]["encoder"]["sha256"], json!(weights_sha));
    let head = Head::load(&work.head).unwrap();
    assert_eq!(
        lock["heads"][0]["trainedOnEncoder"],
        json!(head.encoder_sha256)
    );
    assert_eq!(
        lock["heads"][0]["matchesEncoder"],
        json!(head.encoder_sha256 == weights_sha)
    );

    // What each backend lists, through Envoy: the bound model is listed, the unbound one's
    // provider id is not what its backend serves.
    let upstream = |name: &str| {
        lock["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["model"] == name)
            .unwrap()
            .clone()
    };
    let smol = upstream("smollm2-135m");
    assert_eq!(smol["observed"], json!(["smollm2-135m"]));
    assert_eq!(smol["listed"], true);
    let qwen = upstream("qwen2.5-coder-0.5b");
    assert_eq!(qwen["providerModel"], "Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(qwen["observed"], json!(["qwen2.5-coder-0.5b"]));
    assert_eq!(qwen["listed"], false);

    // The Envoy version is the one the binary reports.
    let envoy_version = Command::new(support::envoy::binary())
        .arg("--version")
        .output()
        .unwrap();
    let reported = lock["envoy"]["version"].as_str().unwrap();
    assert!(!reported.is_empty());
    assert!(text(&envoy_version.stdout).contains(reported), "{reported}");

    // The lock file holds the same document.
    let lock_path = sidecar.config.with_file_name("lock.json");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&lock_path).unwrap()).unwrap();
    assert_eq!(written["digest"], lock["digest"]);

    // Requests carry the binding's provider model and leave records with all three digests.
    let response = stack
        .chat(&support::stack::ask("hello there"), "bundle-1")
        .await;
    assert_eq!(response.status(), 200);
    let run_id = header(&response, "x-mom-run-id");
    let seen = stack.backends["smollm2-135m"].bodies();
    assert_eq!(seen.last().unwrap()["model"], "smollm2-135m");
    let record = support::eventually(Duration::from_secs(5), async || {
        let text = std::fs::read_to_string(&records).ok()?;
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["runId"] == json!(run_id))
    })
    .await
    .expect("the request's record");
    assert_eq!(record["bundleDigest"], json!(manifest.digest));
    assert_eq!(record["bindingDigest"], lock["binding"]["digest"]);
    assert_eq!(record["lockDigest"], lock["digest"]);
    assert_eq!(record["providerModel"], "smollm2-135m");

    // Replaying under the same bundle: nothing differs.
    let out = mom_router(&[
        "replay",
        records.to_str().unwrap(),
        "--bundle",
        work.path("built").to_str().unwrap(),
        "--binding",
        sidecar.config.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["bundle"], json!(manifest.digest));
    assert_eq!(report["from_this_bundle"], 1);
    assert_eq!(report["replayed"], 1);
    assert_eq!(report["same"], 1);

    // A binding rewritten to change the decision graph is refused; the bundle keeps serving.
    let version = sidecar.version();
    let hostile = format!(
        "{}decisions: []\n",
        std::fs::read_to_string(&sidecar.config).unwrap()
    );
    sidecar.rewrite_config(&hostile);
    let rejected = support::eventually(Duration::from_secs(10), async || {
        let metrics = sidecar.metrics().await;
        metrics
            .contains("mom_config_reloads_total{result=\"rejected\"} 1")
            .then_some(())
    })
    .await;
    assert!(rejected.is_some(), "{}", sidecar.metrics().await);
    assert_eq!(sidecar.version(), version);
}

#[test]
fn a_learned_policy_carries_its_router_head_as_one_hashed_asset() {
    let dir = tempfile::tempdir().unwrap();
    let spec = support::repo().join("examples/eval/config.yaml");
    let bundled = bundle::build(&spec, &dir.path().join("eval")).unwrap();
    let binding = dir.path().join("binding.yaml");
    std::fs::write(&binding, serde_yaml::to_string(&bundled.binding).unwrap()).unwrap();
    let built = bundled.manifest;
    let roles: Vec<&str> = built.assets.iter().map(|a| a.role.as_str()).collect();
    assert_eq!(
        roles,
        (0..4)
            .map(|i| format!("decisions[{i}].algorithm.router"))
            .collect::<Vec<_>>(),
        "{roles:?}"
    );
    let head = std::fs::read(support::repo().join("heads/router.safetensors")).unwrap();
    let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&head));
    assert!(built.assets.iter().all(|a| a.sha256 == sha));
    // Four decisions read one head: one file under assets/.
    let files: Vec<&str> = built
        .files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| p.starts_with("assets/"))
        .collect();
    assert_eq!(files, [format!("assets/{}-router.safetensors", &sha[..12])]);
    // Bound to the spec's own deployment sections, the bundle compiles: the head it names is
    // the asset, checked against the encoder.
    let snapshot = config::Source::Bundle {
        bundle: dir.path().join("eval"),
        binding: Some(binding),
    }
    .load()
    .unwrap();
    assert_eq!(snapshot.identities.len(), 5);
}
