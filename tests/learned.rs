//! The `learned` selection algorithm on the real encoder: a router head whose predictions are
//! known by construction (they depend only on the request's code-fence feature) routes each
//! request to the model with the largest utility computed by hand; each identity's operating
//! point (latency weight, quality floor, latency budget) moves the choice; a busy choice gives
//! way only to a model predicted nearly as likely to be right; a head for other models, or
//! trained on another encoder, is a configuration error naming both sides. Training a head:
//! tests/train_router.rs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::cli::explain_json;
use mom_router::config::compile_str;
use mom_router::engine;
use mom_router::inference::{
    crossed_width, kind_input_width, Dense, ModelHeads, RouterHead, PROBE_TEXT,
};
use mom_router::llm::Headers;
use mom_router::state::{Outcome, Run};
use serde_json::Value;
use std::path::Path;
use support::stack::ask;

fn encoder_section() -> String {
    let encoder = support::repo().join(".cache/models/all-MiniLM-L6-v2");
    format!(
        "inference:\n  encoder: {{backend: candle, modelDir: {}}}\n",
        encoder.display()
    )
}

/// The running encoder's probe embedding (what a head trained on it records).
fn probe() -> Vec<f32> {
    let snapshot = compile_str(&format!(
        "{}models: [{{name: a, providerModel: a}}]\nidentities: [{{name: mom/auto, defaultModel: a}}]\n",
        encoder_section()
    ))
    .unwrap();
    let encoder = snapshot.encoder.clone().unwrap();
    encoder.embed_blocking(&[PROBE_TEXT.to_owned()]).unwrap()[0]
        .as_ref()
        .clone()
}

/// One request kind, and P(correct) logits and ln-latency that read only the code-fence
/// feature: the small model is right with probability sigmoid(1) ≈ 0.731 on plain text and
/// sigmoid(−3) ≈ 0.047 on code, in 500 ms; the coder with sigmoid(1.5) ≈ 0.818 on both, in 3 s.
fn head(probe: Vec<f32>, names: [&str; 2]) -> RouterHead {
    // The crossed input of one kind is [1, cheap features…]; the code fence is feature 1.
    let inputs = crossed_width(1);
    let fence = 2;
    let model = |name: &str, right: f32, on_code: f32, latency_ms: f32| {
        let mut weight = vec![0.0; 2 * inputs];
        weight[inputs + fence] = on_code;
        ModelHeads {
            model: name.to_owned(),
            correct: Dense {
                weight,
                bias: vec![0.0, right],
                inputs,
            },
            cost: Dense {
                weight: vec![0.0; 2 * inputs],
                bias: vec![latency_ms.ln(), 3.0],
                inputs,
            },
        }
    };
    RouterHead {
        kinds: vec!["any".to_owned()],
        kind: Dense {
            weight: vec![0.0; kind_input_width(probe.len())],
            bias: vec![0.0],
            inputs: kind_input_width(probe.len()),
        },
        models: vec![
            model(names[0], 1.0, -4.0, 500.0),
            model(names[1], 1.5, 0.0, 3000.0),
        ],
        probe,
        encoder: "the test's encoder".to_owned(),
        encoder_sha256: "00".to_owned(),
    }
}

/// A fresh directory holding `router.safetensors`: the toy head over SmolLM2 and the coder.
fn dir_with_head() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    head(probe(), ["smollm2-135m", "qwen2.5-coder-0.5b"])
        .save(&dir.path().join("router.safetensors"), &[])
        .unwrap();
    dir
}

fn policy(dir: &Path, algorithms: &[&str]) -> String {
    let decisions: Vec<String> = algorithms
        .iter()
        .enumerate()
        .map(|(i, algorithm)| {
            format!(
                "  - name: d{i}\n    rules: {{signal: anything}}\n    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}]\n    algorithm: {{type: learned, router: {}, {algorithm}}}\n",
                dir.join("router.safetensors").display()
            )
        })
        .collect();
    let identities: Vec<String> = (0..algorithms.len())
        .map(|i| format!("  - {{name: mom/i{i}, defaultModel: smollm2-135m, decisions: [d{i}]}}\n"))
        .collect();
    format!(
        "{}models:\n  - {{name: smollm2-135m, providerModel: s}}\n  - {{name: qwen2.5-coder-0.5b, providerModel: q}}\n\
         identities:\n{}signals:\n  - {{name: anything, type: context_length, minTokens: 0}}\ndecisions:\n{}",
        encoder_section(),
        identities.concat(),
        decisions.concat()
    )
}

async fn explain(config: &str, identity: &str, text: &str) -> Value {
    let snapshot = compile_str(config).unwrap();
    let state = engine::Services::offline(&snapshot);
    explain_with(&snapshot, &state, identity, text).await
}

async fn explain_with(
    snapshot: &mom_router::config::Snapshot,
    state: &engine::Services,
    identity: &str,
    text: &str,
) -> Value {
    let headers = Headers::new(vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
    ]);
    let mut body = ask(text);
    body["model"] = Value::from(identity);
    let routed =
        engine::on_request_body(snapshot, state, &headers, body.to_string().as_bytes()).await;
    explain_json(&routed)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const PLAIN: &str = "What is the capital of Peru? Answer with one word only.";
const CODE: &str = "Fix this:\n```python\ndef f(x):\n    return x +\n```";

#[tokio::test]
async fn learned_routes_to_the_largest_hand_computed_utility() {
    let dir = dir_with_head();
    let config = policy(dir.path(), &["latencyWeight: 0.05"]);
    let plain = explain(&config, "mom/i0", PLAIN).await;
    assert_eq!(plain["model"], "smollm2-135m", "{plain:#}");
    assert_eq!(plain["algorithm"], "learned");
    // By hand: small 0.731 − 0.05 × 0.5 = 0.706; coder 0.818 − 0.05 × 3 = 0.668.
    let scores: Vec<f64> = plain["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["score"].as_f64().unwrap())
        .collect();
    assert!(
        (scores[0] - (sigmoid(1.0) - 0.025)).abs() < 1e-3,
        "{scores:?}"
    );
    assert!(
        (scores[1] - (sigmoid(1.5) - 0.15)).abs() < 1e-3,
        "{scores:?}"
    );
    let reason = plain["selection_reason"].as_str().unwrap();
    assert!(reason.starts_with("largest utility 0.706"), "{reason}");
    // The head's one kind, named with its probability.
    assert!(reason.ends_with("; request kind any (1.00)"), "{reason}");
    // Code: small 0.047 − 0.025 = 0.022 < the coder's 0.668.
    let code = explain(&config, "mom/i0", CODE).await;
    assert_eq!(code["model"], "qwen2.5-coder-0.5b", "{code:#}");
}

#[tokio::test]
async fn reported_outcomes_move_the_learned_p_within_its_bound() {
    let dir = dir_with_head();
    let config = policy(dir.path(), &["latencyWeight: 0.05"]);
    let snapshot = compile_str(&config).unwrap();
    let services = engine::Services::offline(&snapshot);
    let before = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    assert_eq!(before["model"], "smollm2-135m", "{before:#}");
    let credit = |model: &str, outcome: Outcome| {
        let id = mom_router::state::RunId::random();
        services.state.remember_run(
            id,
            Run {
                identity: "mom/i0".into(),
                decision: "d0".into(),
                model: model.into(),
            },
        );
        let state = services.state.clone();
        async move { state.apply(&id.to_string(), &outcome).await.unwrap() }
    };
    // Ten failed verifications of the small model: by hand (20 × 0.731) / 30 = 0.487, utility
    // 0.462, below the coder's 0.668.
    for _ in 0..10 {
        credit("smollm2-135m", Outcome::Verified(false)).await;
    }
    let after = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    assert_eq!(after["model"], "qwen2.5-coder-0.5b", "{after:#}");
    let small = after["scores"][0]["score"].as_f64().unwrap();
    let expected = 20.0 * sigmoid(1.0) / 30.0 - 0.025;
    assert!((small - expected).abs() < 1e-3, "{small} vs {expected}");
    // Rewards for the coder are named in the reason.
    for _ in 0..3 {
        credit("qwen2.5-coder-0.5b", Outcome::Reward(1.0)).await;
    }
    let credited = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    let reason = credited["selection_reason"].as_str().unwrap();
    assert!(
        reason.contains("(head 0.82, moved by 3 outcomes at 1.00, worth at most 20)"),
        "{reason}"
    );
    // A flood of failures moves P at most halfway: 0.731 / 2 − 0.025.
    for _ in 10..500 {
        credit("smollm2-135m", Outcome::Verified(false)).await;
    }
    let flooded = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    let small = flooded["scores"][0]["score"].as_f64().unwrap();
    assert!(
        (small - (sigmoid(1.0) / 2.0 - 0.025)).abs() < 1e-3,
        "{small}"
    );
}

#[test]
fn replay_shows_which_models_a_retrained_head_would_change() {
    let dir = dir_with_head();
    let snapshot = compile_str(&policy(dir.path(), &["latencyWeight: 0.05"])).unwrap();
    // Records as an older head served them: both to SmolLM2, one without its prompt.
    let record = |id: &str, prompt: Option<&str>| {
        let mut line = serde_json::json!({
            "runId": id, "identity": "mom/i0", "decision": "d0", "model": "smollm2-135m",
            "signals": [{"name": "anything", "kind": "context_length", "matched": true, "confidence": 1.0}],
        });
        if let Some(prompt) = prompt {
            line["prompt"] = Value::from(prompt);
        }
        line.to_string()
    };
    let text = [
        record("plain", Some(PLAIN)),
        record("code", Some(CODE)),
        record("blind", None),
    ]
    .join("\n");
    let records = mom_router::records::replay::read(&text).unwrap();
    let report = mom_router::records::replay::replay(&snapshot, &records);
    assert_eq!(report.same, 3, "{report:?}");
    assert_eq!(report.models_replayed, 2);
    // By hand: on code the coder's utility 0.668 beats SmolLM2's 0.022.
    assert_eq!(report.model_differences.len(), 1, "{report:?}");
    let moved = &report.model_differences[0];
    assert_eq!(moved.run_id, "code");
    assert_eq!(
        (moved.recorded.as_str(), moved.replayed.as_str()),
        ("smollm2-135m", "qwen2.5-coder-0.5b")
    );
    assert!(
        moved.reason.starts_with("largest utility 0.668"),
        "{}",
        moved.reason
    );
    assert_eq!(
        report.models_skipped,
        vec![(
            "blind".to_owned(),
            "no prompt recorded (records.includePrompts is off)".to_owned()
        )]
    );
}

#[tokio::test]
async fn each_operating_point_moves_the_choice() {
    let dir = dir_with_head();
    let config = policy(
        dir.path(),
        &[
            "latencyWeight: 0",   // the most probable model
            "latencyWeight: 1",   // flash: seconds dominate
            "minCorrect: 0.7",    // light: small clears 0.7 on plain text
            "minCorrect: 0.8",    // light with a higher floor: only the coder clears it
            "minCorrect: 0.9",    // a floor nothing clears
            "maxLatencyMs: 1000", // ultra within a 1 s budget
        ],
    );
    let model = |v: &Value| v["model"].as_str().unwrap().to_owned();
    let pick = |i: usize, text: &'static str| {
        let config = config.clone();
        async move { model(&explain(&config, &format!("mom/i{i}"), text).await) }
    };
    assert_eq!(pick(0, PLAIN).await, "qwen2.5-coder-0.5b");
    assert_eq!(pick(1, PLAIN).await, "smollm2-135m");
    assert_eq!(pick(1, CODE).await, "smollm2-135m");
    assert_eq!(pick(2, PLAIN).await, "smollm2-135m");
    assert_eq!(pick(2, CODE).await, "qwen2.5-coder-0.5b");
    assert_eq!(pick(3, PLAIN).await, "qwen2.5-coder-0.5b");
    let none = explain(&config, "mom/i4", PLAIN).await;
    assert_eq!(none["model"], "qwen2.5-coder-0.5b");
    let reason = none["selection_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("no model predicted to clear the floor 0.9"),
        "{reason}"
    );
    let budget = explain(&config, "mom/i5", CODE).await;
    assert_eq!(budget["model"], "smollm2-135m");
    let reason = budget["selection_reason"].as_str().unwrap();
    assert!(
        reason.ends_with("1 of 2 models predicted over 1000 ms; request kind any (1.00)"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_busy_choice_gives_way_only_to_a_model_predicted_nearly_as_likely_to_be_right() {
    let dir = dir_with_head();
    // The most probable model (the coder, 0.818 on plain text, small 0.731) with the default
    // busyMaxLoss (0.05) and with 0.1; each model serves one request at a time.
    let config = policy(dir.path(), &["latencyWeight: 0", "busyMaxLoss: 0.1"])
        .replace("providerModel: s}", "providerModel: s, maxConcurrency: 1}")
        .replace("providerModel: q}", "providerModel: q, maxConcurrency: 1}");
    let snapshot = compile_str(&config).unwrap();
    let services = engine::Services::offline(&snapshot);
    let idle = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    assert_eq!(idle["model"], "qwen2.5-coder-0.5b", "{idle:#}");
    let _held = services.state.pool.start("qwen2.5-coder-0.5b");
    // 0.731 is 0.087 below the busy coder: more than 0.05 may be lost, so the request waits.
    let waits = explain_with(&snapshot, &services, "mom/i0", PLAIN).await;
    assert_eq!(waits["model"], "qwen2.5-coder-0.5b", "{waits:#}");
    let reason = waits["selection_reason"].as_str().unwrap();
    assert!(
        reason.contains("no adequate free slot: qwen2.5-coder-0.5b busy: 1 in flight on 1 slot"),
        "{reason}"
    );
    // Within 0.1 it is served at once by the free model, and the reason says why.
    let moved = explain_with(&snapshot, &services, "mom/i1", PLAIN).await;
    assert_eq!(moved["model"], "smollm2-135m", "{moved:#}");
    let reason = moved["selection_reason"].as_str().unwrap();
    assert!(
        reason.contains("set aside: qwen2.5-coder-0.5b busy: 1 in flight on 1 slot"),
        "{reason}"
    );
    // Code: small is 0.047 likely, never adequate.
    let code = explain_with(&snapshot, &services, "mom/i1", CODE).await;
    assert_eq!(code["model"], "qwen2.5-coder-0.5b", "{code:#}");
    // A loss outside [0, 1] is a configuration error naming its path.
    let bad = policy(dir.path(), &["busyMaxLoss: 1.5"]);
    let errors = compile_str(&bad).unwrap_err().to_string();
    assert!(
        errors.contains("decisions[0].algorithm.busyMaxLoss: must be between 0 and 1, got 1.5"),
        "{errors}"
    );
}

#[test]
fn a_head_for_other_models_or_another_encoder_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.safetensors");
    head(probe(), ["smollm2-135m", "llama-3-8b"])
        .save(&file, &[])
        .unwrap();
    let config = policy(dir.path(), &["latencyWeight: 0.05"]);
    let errors = compile_str(&config).unwrap_err().to_string();
    assert!(
        errors.contains("decisions[0].algorithm.router: ")
            && errors.contains(
                "predicts for models smollm2-135m, llama-3-8b, not for \"qwen2.5-coder-0.5b\""
            ),
        "{errors}"
    );
    let mut other = probe();
    other.reverse();
    head(other, ["smollm2-135m", "qwen2.5-coder-0.5b"])
        .save(&file, &[])
        .unwrap();
    let errors = compile_str(&config).unwrap_err().to_string();
    assert!(
        errors.contains("was trained on another encoder (the test's encoder; probe cosine")
            && errors.contains("than the configured one (candle cpu")
            && errors.contains("retrain it with `mom-router train-router`"),
        "{errors}"
    );
}
