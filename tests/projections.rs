//! Projections through the pipeline: a score cut into bands and a partition between competing
//! signals, referenced by decisions like signals and shown by `explain`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use serde_json::{json, Value};
use support::signal;

const POLICY: &str = r#"
version: projections-test
models:
  - { name: small, providerModel: s }
  - { name: large, providerModel: l }
  - { name: coder, providerModel: c }
identities:
  - { name: mom/auto, version: "1", defaultModel: small }
signals:
  - { name: code, type: keyword, keywords: [python, function, compile] }
  - { name: math, type: keyword, keywords: [integral, equation, proof] }
  - { name: long, type: context_length, minTokens: 40 }
  - { name: multi_turn, type: conversation, minTurns: 3 }
projections:
  - name: difficulty
    type: score
    inputs:
      - { signal: long, weight: 0.5, read: matched }
      - { signal: multi_turn, weight: 0.3, read: matched }
      - { signal: math, weight: 0.4, read: matched }
    bands:
      - { name: easy }
      - { name: medium, atLeast: 0.4 }
      - { name: hard, atLeast: 0.8 }
  - name: intent
    type: partition
    members: [code, math]
decisions:
  - { name: hard, priority: 20, rules: { signal: difficulty.hard }, modelRefs: [{ model: large }] }
  - { name: coding, priority: 10, rules: { signal: intent.code }, modelRefs: [{ model: coder }] }
"#;

fn explain(config: &str, messages: Value) -> Value {
    support::explain_offline(config, &json!({"model": "mom/auto", "messages": messages}))
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[test]
fn a_score_band_routes_when_its_inputs_add_up() {
    // Short, one turn, no maths: 0 → easy; the code partition wins → coder.
    let short = explain(POLICY, user("Write a python function to add numbers"));
    let band = signal(&short, "difficulty.easy");
    assert_eq!(band["type"], "projection");
    assert_eq!(band["matched"], true);
    assert_eq!(band["value"], 0.0);
    assert_eq!(signal(&short, "difficulty.hard")["matched"], false);
    assert_eq!(short["decision"], "coding");
    assert_eq!(short["model"], "coder");

    // Long maths question: 0.5 + 0.4 = 0.9 → hard → large, above the coding decision.
    let long = format!(
        "Give a proof for this integral equation. {}",
        "Context. ".repeat(40)
    );
    let hard = explain(POLICY, user(&long));
    assert_eq!(signal(&hard, "difficulty.hard")["matched"], true);
    assert_eq!(signal(&hard, "difficulty.hard")["label"], "hard");
    assert!((signal(&hard, "difficulty.hard")["value"].as_f64().unwrap() - 0.9).abs() < 1e-9);
    assert_eq!(hard["decision"], "hard");
    assert_eq!(hard["model"], "large");
}

#[test]
fn a_partition_lets_only_the_most_confident_member_hold() {
    // Both keyword signals match with confidence 1: the softmax splits evenly and the first
    // member wins the tie; only one output holds.
    let both = explain(POLICY, user("python proof"));
    let holding: Vec<&str> = ["intent.code", "intent.math"]
        .into_iter()
        .filter(|name| signal(&both, name)["matched"] == true)
        .collect();
    assert_eq!(holding, vec!["intent.code"]);
    assert!((signal(&both, "intent.code")["value"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    // Maths only: code does not hold, so the coding decision does not fire.
    let maths = explain(POLICY, user("an integral"));
    assert_eq!(signal(&maths, "intent.math")["matched"], true);
    assert_eq!(signal(&maths, "intent.code")["matched"], false);
    assert_eq!(maths["model"], "small");
}

#[test]
fn bad_projections_are_config_errors_naming_the_path() {
    let broken = POLICY
        .replace("{ signal: long, weight", "{ signal: lengthy, weight")
        .replace("atLeast: 0.8", "atLeast: 0.3")
        .replace("members: [code, math]", "members: [code]");
    let errors = compile_str(&broken).unwrap_err().to_string();
    assert!(
        errors.contains("projections[0].inputs[0].signal: unknown signal \"lengthy\""),
        "{errors}"
    );
    assert!(
        errors.contains("projections[1].members: a partition chooses between at least two signals"),
        "{errors}"
    );
    let falling = POLICY.replace("atLeast: 0.8", "atLeast: 0.3");
    let errors = compile_str(&falling).unwrap_err().to_string();
    assert!(
        errors.contains("projections[0].bands[2].atLeast: bands must rise"),
        "{errors}"
    );
    let unknown_output = POLICY.replace("signal: difficulty.hard", "signal: difficulty.extreme");
    let errors = compile_str(&unknown_output).unwrap_err().to_string();
    assert!(
        errors.contains("unknown signal \"difficulty.extreme\""),
        "{errors}"
    );
}
