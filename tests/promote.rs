//! `bundle promote` on a real run: a bundle served through the real Envoy (FAKE upstreams with
//! queued answers) is measured by `mom-router eval`; the scorecard names the bundle it was
//! measured on; a gate that holds promotes it into a new bundle whose digest covers the
//! scorecard, the gate and the verdicts; a gate that fails, or a scorecard of another bundle,
//! promotes nothing and names why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::{binding, bundle};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use support::stack::{header, Stack};

fn spec(keyword: &str) -> String {
    format!(
        r#"
version: promote-test
models:
  - {{name: smollm2-135m, providerModel: smollm2-135m}}
  - {{name: qwen2.5-coder-0.5b, providerModel: qwen2.5-coder-0.5b}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m, decisions: [code]}}
signals:
  - {{name: code, type: keyword, keywords: [{keyword}]}}
decisions:
  - name: code
    rules: {{signal: code}}
    modelRefs: [{{model: qwen2.5-coder-0.5b}}]
"#
    )
}

const BINDING: &str = "server: {internalUrl: INTERNAL_URL, envoyAdmin: ENVOY_ADMIN}\n";

const SUITE: &str = r#"{"id": "capital", "kind": "exact", "prompt": "What is the capital of France? Reply with the city only.", "answer": "Paris"}
{"id": "prime", "kind": "choice", "prompt": "Which number is prime?", "choices": ["4", "7", "9"], "answer": "B"}
"#;

fn mom_router(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn build(dir: &Path, name: &str, keyword: &str) -> bundle::Manifest {
    let spec_path = dir.join(format!("{name}.yaml"));
    std::fs::write(&spec_path, spec(keyword)).unwrap();
    bundle::build(&spec_path, &dir.join(name)).unwrap().manifest
}

fn promote(dir: &Path, candidate: &str, card: &Path, gate: &str, out: &str) -> Output {
    let gate_path = dir.join(format!("{out}.gate.yaml"));
    std::fs::write(&gate_path, gate).unwrap();
    mom_router(&[
        "bundle",
        "promote",
        dir.join(candidate).to_str().unwrap(),
        "--scorecard",
        card.to_str().unwrap(),
        "--gate",
        gate_path.to_str().unwrap(),
        "--out",
        dir.join(out).to_str().unwrap(),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_promoted_only_on_a_passing_scorecard_measured_on_it() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let candidate = build(dir, "candidate", "python");
    let other = build(dir, "other", "rust");
    assert_ne!(candidate.digest, other.digest);

    let stack = Stack::start_bundle(&dir.join("candidate"), BINDING).await;
    // The configuration version served names the bundle.
    let probe = stack.chat(&support::stack::ask("hello"), "probe").await;
    let version = header(&probe, "x-mom-config-version");
    let tag = format!("+bundle.{}", binding::bundle_tag(&candidate.digest));
    assert!(version.ends_with(&tag), "{version} does not name {tag}");
    let _ = probe.bytes().await.unwrap();

    // Item by item: mom/auto (to SmolLM2, no "python" in the prompts), SmolLM2, the coder.
    stack.backends["smollm2-135m"].queue(&["Paris", "Paris", "ANSWER: B", "ANSWER: A"]);
    stack.backends["qwen2.5-coder-0.5b"].queue(&["Lyon", "ANSWER: B"]);
    let suite = dir.join("suite.jsonl");
    std::fs::write(&suite, SUITE).unwrap();
    let out = dir.join("card");
    let url = stack.envoy.public_url();
    let (bundle_dir, suite_path, out_dir) = (dir.join("candidate"), suite.clone(), out.clone());
    let eval = tokio::task::spawn_blocking(move || {
        mom_router(&[
            "eval",
            "--identity",
            "mom/auto",
            "--url",
            &url,
            "--suite",
            suite_path.to_str().unwrap(),
            "--bundle",
            bundle_dir.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ])
    })
    .await
    .unwrap();
    assert_eq!(eval.status.code(), Some(0), "{}", text(&eval.stderr));
    let card_path = out.join("scorecard.json");
    let card: Value = serde_json::from_slice(&std::fs::read(&card_path).unwrap()).unwrap();
    assert_eq!(card["served_versions"], serde_json::json!([version]));

    // mom/auto 1.0, each fixed model 0.5: a bound of +0.6 over the best fails, by name.
    let strict =
        "criteria:\n  - identity: mom/auto\n    minQuality: 0.9\n    minQualityVsBestFixed: 0.6\n";
    let failed = promote(dir, "candidate", &card_path, strict, "strict");
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains("not promoted: criteria[0].minQualityVsBestFixed failed"),
        "{stderr}"
    );
    assert!(!dir.join("strict").exists(), "nothing is written");

    // The scorecard of one bundle never promotes another.
    let gate =
        "criteria:\n  - identity: mom/auto\n    minQuality: 0.9\n    minQualityVsBestFixed: 0.4\n";
    let elsewhere = promote(dir, "other", &card_path, gate, "elsewhere");
    assert_eq!(elsewhere.status.code(), Some(1));
    let stderr = text(&elsewhere.stderr);
    assert!(
        stderr.contains(&format!("not on bundle {}", other.digest)),
        "{stderr}"
    );
    assert!(!dir.join("elsewhere").exists());

    // A passing gate promotes: same policy and assets, evidence inside the new digest.
    let promoted = promote(dir, "candidate", &card_path, gate, "released");
    assert_eq!(
        promoted.status.code(),
        Some(0),
        "{}",
        text(&promoted.stderr)
    );
    let released = bundle::open(&dir.join("released")).unwrap().manifest;
    assert_ne!(released.digest, candidate.digest);
    assert!(text(&promoted.stdout).contains(&released.digest));
    let roles: Vec<&str> = released.evidence.iter().map(|e| e.role.as_str()).collect();
    assert_eq!(roles, ["gate", "scorecard", "verdicts"]);
    let kept = std::fs::read(dir.join("released/evidence/scorecard.json")).unwrap();
    assert_eq!(kept, std::fs::read(&card_path).unwrap());
    let verdicts: Value =
        serde_json::from_slice(&std::fs::read(dir.join("released/evidence/gate.json")).unwrap())
            .unwrap();
    assert_eq!(verdicts.as_array().unwrap().len(), 2);
    assert!(verdicts
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["passed"] == true));
    assert_eq!(
        std::fs::read(dir.join("released/policy.yaml")).unwrap(),
        std::fs::read(dir.join("candidate/policy.yaml")).unwrap()
    );
    let inspect = mom_router(&["bundle", "inspect", dir.join("released").to_str().unwrap()]);
    assert!(
        text(&inspect.stdout).contains("evidence scorecard = evidence/scorecard.json"),
        "{}",
        text(&inspect.stdout)
    );

    // Evidence is covered by the digest: editing it breaks verification.
    std::fs::write(dir.join("released/evidence/scorecard.json"), b"{}").unwrap();
    let errors = bundle::open(&dir.join("released")).unwrap_err().0;
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().starts_with("evidence/scorecard.json:")),
        "{errors:?}"
    );
}
