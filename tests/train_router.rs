//! `mom-router train-router` on small trace sets: the head learns which model is right on
//! which kind of request (read back through the training encoder), refuses traces it cannot
//! learn from, and learns a confidence cascade as one more candidate.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::inference::RouterHead;
use std::path::{Path, PathBuf};

/// A small trace set: "fast" answers the fact questions right and the code tasks wrong in
/// 300 ms; "coder" answers the code tasks right and the facts half the time, in 2 s.
fn fixture_traces() -> String {
    let mut rows = Vec::new();
    let countries = [
        "France", "Peru", "Japan", "Kenya", "Chile", "Norway", "Egypt", "Cuba",
    ];
    for i in 0..48 {
        let code = i % 2 == 1;
        let prompt = if code {
            format!("Complete the following Python function.\n```python\ndef task_{i}(xs):\n    \"\"\"Return item {i}.\"\"\"\n```")
        } else {
            format!(
                "What is the capital of {}? Answer with one word only.",
                countries[i % 8]
            )
        };
        for (model, passed, latency) in [
            ("fast", !code, 300.0),
            ("coder", code || i % 4 == 0, 2000.0),
        ] {
            rows.push(serde_json::json!({
                "item": format!("item-{i:02}"), "kind": if code { "humaneval" } else { "contains" },
                "model": model, "prompt": prompt, "passed": passed, "status": 200,
                "promptTokens": 20, "completionTokens": if code { 60 } else { 4 },
                "latencyMs": latency, "finishReason": "stop", "answer": "",
            }));
        }
    }
    rows.iter().map(|r| format!("{r}\n")).collect()
}

/// The fixture traces with "fast"'s confidence: sure (−0.1) of its facts, unsure (−1.2) of
/// its code.
fn fixture_traces_with_confidence() -> String {
    fixture_traces()
        .lines()
        .map(|line| {
            let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
            if row["model"] == "fast" {
                let code = row["kind"] == "humaneval";
                row["confidence"] = serde_json::json!(if code { -1.2 } else { -0.1 });
            }
            format!("{row}\n")
        })
        .collect()
}

/// The training encoder's (heads/train.yaml's) embedding of a text.
fn embedder() -> impl Fn(&str) -> Vec<f32> {
    let snapshot =
        mom_router::train::load_config(&support::repo().join("heads/train.yaml")).unwrap();
    let encoder = snapshot.encoder.clone().unwrap();
    move |text| {
        encoder.embed_blocking(&[text.to_owned()]).unwrap()[0]
            .as_ref()
            .clone()
    }
}

/// What a head predicts for model `index` on `text`, embedded by the training encoder.
fn predictor() -> impl Fn(&RouterHead, &str, usize) -> mom_router::inference::Prediction {
    let embed = embedder();
    move |head, text, index| {
        head.predict(index, &head.input(&embed(text), text))
            .unwrap()
    }
}

/// A fresh directory with `text` written as `traces.jsonl`; returns it, that file and where a
/// head trained from it goes.
fn traces_dir(text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces.jsonl");
    std::fs::write(&traces, text).unwrap();
    let out = dir.path().join("router.safetensors");
    (dir, traces, out)
}

fn train_router(traces: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .arg("train-router")
        .arg("--traces")
        .arg(traces)
        .arg("--config")
        .arg(support::repo().join("heads/train.yaml"))
        .arg("-o")
        .arg(out)
        .args(["--folds", "3", "--latency-weight", "0.1"])
        .args(extra)
        .output()
        .unwrap()
}

/// `train_router`, which must succeed: its report.
fn trained(traces: &Path, out: &Path, extra: &[&str]) -> String {
    let run = train_router(traces, out, extra);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

#[test]
fn train_router_learns_who_is_right_where_and_refuses_bad_traces() {
    let (dir, traces, out) = traces_dir(&fixture_traces());
    let stdout = trained(&traces, &out, &[]);
    assert!(
        stdout.contains("| oracle |") && stdout.contains("| learned λ=0.1 |"),
        "{stdout}"
    );
    let head = RouterHead::load(&out).unwrap();
    assert_eq!(head.model_names(), ["coder", "fast"]);
    // The first stage tells the traces' two kinds apart, on the held-out items and on texts
    // it never saw.
    assert_eq!(head.kinds, ["contains", "humaneval"]);
    let kinds_line = stdout
        .lines()
        .find(|l| {
            l.starts_with("request kinds: contains, humaneval (held out, predicted kind right: ")
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    let right: f64 = kinds_line
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{kinds_line}"));
    assert!(right >= 0.9, "{kinds_line}");
    let embed = embedder();
    let code = "Complete the following Python function.\n```python\ndef add(a, b):\n```";
    let fact = "What is the capital of Spain? Answer with one word only.";
    let on_code = head.input_and_kinds(&embed(code), code).1;
    let on_fact = head.input_and_kinds(&embed(fact), fact).1;
    assert!(
        on_code[1] > 0.5 && on_fact[0] > 0.5,
        "{on_code:?} {on_fact:?}"
    );
    // Predictions on texts the head never saw follow the traces: facts to "fast", code to
    // "coder", and the cost heads know who is slow.
    let predictor = predictor();
    let predict = |text: &str| (predictor(&head, text, 0), predictor(&head, text, 1));
    let (coder, fast) = predict("What is the capital of Italy? Answer with one word only.");
    assert!(fast.correct > coder.correct, "{fast:?} {coder:?}");
    assert!(
        coder.latency_ms > 3.0 * fast.latency_ms,
        "{fast:?} {coder:?}"
    );
    let (coder, fast) =
        predict("Complete the following Python function.\n```python\ndef reverse(s):\n```");
    assert!(coder.correct > fast.correct, "{fast:?} {coder:?}");

    // A trace set missing a model's row for one item is refused, naming both.
    let broken: String = fixture_traces()
        .lines()
        .filter(|l| !(l.contains("\"item-07\"") && l.contains("\"fast\"")))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&traces, broken).unwrap();
    let run = train_router(&traces, &dir.path().join("other.safetensors"), &[]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("item \"item-07\" has no row for model \"fast\""),
        "{stderr}"
    );
}

#[test]
fn a_cascade_is_learned_as_one_more_candidate_from_the_first_models_confidence() {
    let (_dir, traces, out) = traces_dir(&fixture_traces_with_confidence());
    let stdout = trained(&traces, &out, &["--cascade", "fast>coder"]);
    // Facts are kept (fast is right on every one), code escalates (the coder is right on
    // every one): the cascade is right everywhere, so its most accurate threshold keeps the
    // facts and escalates exactly the code tasks.
    assert!(
        stdout.contains(
            "cascade fast>coder: fast first, coder when its mean token log-probability is below -0.100"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("| fixed fast>coder | 1.000 |"), "{stdout}");
    let head = RouterHead::load(&out).unwrap();
    assert_eq!(head.model_names(), ["coder", "fast", "fast>coder"]);
    let predictor = predictor();
    let predict = |text: &str, model: usize| predictor(&head, text, model);
    // A task and a fact in the traces' shapes that the head never saw. On code the cascade
    // pays fast's 300 ms before the coder's 2 s; on a fact it stops after fast.
    let task = "Complete the following Python function.\n```python\ndef task_99(xs):\n    \"\"\"Return item 99.\"\"\"\n```";
    let (coder, cascade) = (predict(task, 0), predict(task, 2));
    assert!(
        cascade.latency_ms > coder.latency_ms,
        "{coder:?} {cascade:?}"
    );
    let fact = "What is the capital of Italy? Answer with one word only.";
    let (coder, cascade) = (predict(fact, 0), predict(fact, 2));
    assert!(
        cascade.latency_ms < 0.5 * coder.latency_ms && cascade.correct > coder.correct,
        "{coder:?} {cascade:?}"
    );

    let run = train_router(&traces, &out, &["--cascade", "fast>nobody"]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("\"nobody\" is not a model of the traces (coder, fast)"),
        "{stderr}"
    );
    std::fs::write(&traces, fixture_traces()).unwrap();
    let run = train_router(&traces, &out, &["--cascade", "fast>coder"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("--logprobs"),
        "{stderr}"
    );
}
