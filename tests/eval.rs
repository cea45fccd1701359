//! `mom-router eval` end to end through the real Envoy with FAKE upstreams whose answers are
//! queued, so every score, call, token, cost and comparison on the scorecard can be computed by
//! hand.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::records::traces::Traces;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use support::stack::Stack;

/// Prices chosen so each FAKE call (5 prompt + 7 completion tokens) costs a round number:
/// SmolLM2 (5·1000 + 7·2000)/1e6 = 0.019, the coder (5·3000 + 7·6000)/1e6 = 0.057. Declared
/// power: 10 W and 40 W, so each answer's energy is that × its latency.
const POLICY: &str = r#"
version: eval-test
models:
  - {name: smollm2-135m, providerModel: smollm2-135m, powerWatts: 10, pricing: {inputPerMillion: 1000, outputPerMillion: 2000}}
  - {name: qwen2.5-coder-0.5b, providerModel: qwen2.5-coder-0.5b, powerWatts: 40, pricing: {inputPerMillion: 3000, outputPerMillion: 6000}}
identities:
  - name: mom/auto
    defaultModel: smollm2-135m
    decisions: [code]
signals:
  - {name: code, type: keyword, keywords: [python]}
decisions:
  - name: code
    rules: {signal: code}
    modelRefs: [{model: qwen2.5-coder-0.5b}]
"#;

const SUITE: &str = r#"{"id": "capital", "kind": "exact", "prompt": "What is the capital of France? Reply with the city only.", "answer": "Paris"}
{"id": "prime", "kind": "choice", "prompt": "Which number is prime?", "choices": ["4", "7", "9"], "answer": "B"}
{"id": "add", "kind": "humaneval", "prompt": "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n", "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"}
"#;

const GOOD_ADD: &str = "```python\ndef add(a, b):\n    return a + b\n```";
const BAD_ADD: &str = "```python\ndef add(a, b):\n    return a - b\n```";

fn close(actual: &Value, expected: f64) {
    let value = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{actual} is not a number"));
    assert!((value - expected).abs() < 1e-9, "{value} != {expected}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scorecard_matches_a_hand_computation() {
    let stack = Stack::start_with_config(POLICY).await;
    // Requests go item by item, each to mom/auto, then SmolLM2, then the coder. mom/auto sends
    // the two questions to SmolLM2 and the code task (its prompt says "python") to the coder.
    stack.backends["smollm2-135m"].queue(&[
        "Paris.",    // mom/auto, capital: right
        "Paris",     // SmolLM2, capital: right
        "ANSWER: B", // mom/auto, prime: right
        "ANSWER: A", // SmolLM2, prime: wrong
        BAD_ADD,     // SmolLM2, add: fails its tests
    ]);
    stack.backends["qwen2.5-coder-0.5b"].queue(&[
        "Lyon",      // coder, capital: wrong
        "ANSWER: B", // coder, prime: right
        GOOD_ADD,    // mom/auto, add: passes
        GOOD_ADD,    // coder, add: passes
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.yaml");
    std::fs::write(&config, POLICY).unwrap();
    let suite = dir.path().join("tiny.jsonl");
    std::fs::write(&suite, SUITE).unwrap();
    let out = dir.path().join("card");
    let traces = dir.path().join("traces.jsonl");
    // One criterion holds (1.000 ≥ 0.9), one does not (+0.333 over the coder < +0.5).
    let gate = dir.path().join("gate.yaml");
    std::fs::write(
        &gate,
        "criteria:\n  - identity: mom/auto\n    minQuality: 0.9\n    compute: cost\n    \
         minQualityVsBestFixed: 0.5\n",
    )
    .unwrap();
    let url = stack.envoy.public_url();
    let traces_path = traces.clone();
    let run = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_mom-router"))
            .args(["eval", "--identity", "mom/auto", "--url", &url])
            .arg("--suite")
            .arg(&suite)
            .arg("--config")
            .arg(&config)
            .arg("--out")
            .arg(&out)
            .arg("--traces")
            .arg(&traces_path)
            .arg("--gate")
            .arg(&gate)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the release gate failed"), "{stderr}");
    let out = dir.path().join("card");
    let card: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scorecard.json")).unwrap())
            .unwrap();
    assert_eq!(card["items"], 3);
    assert_eq!(
        card["kinds"],
        json!([["exact", 1], ["choice", 1], ["humaneval", 1]])
    );

    let summary = |target: &str| {
        card["summaries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["target"] == target)
            .unwrap()
            .clone()
    };
    let auto = summary("mom/auto");
    assert_eq!(auto["fixed"], false);
    close(&auto["quality"], 1.0);
    assert_eq!(auto["calls"], 3);
    assert_eq!(auto["prompt_tokens"], 15);
    assert_eq!(auto["completion_tokens"], 21);
    close(&auto["cost"], 0.019 + 0.019 + 0.057);
    assert_eq!(auto["errors"], 0);
    let smol = summary("smollm2-135m");
    assert_eq!(smol["fixed"], true);
    close(&smol["quality"], 1.0 / 3.0);
    close(&smol["cost"], 3.0 * 0.019);
    let coder = summary("qwen2.5-coder-0.5b");
    close(&coder["quality"], 2.0 / 3.0);
    close(&coder["cost"], 3.0 * 0.057);
    assert!(coder["latency_p50_ms"].as_f64().unwrap() > 0.0);
    assert!(coder["latency_p99_ms"].as_f64().unwrap() >= coder["latency_p50_ms"].as_f64().unwrap());

    // Each answer, graded under its item's contract and attributed to the model that gave it.
    let outcome = |target: &str, item: &str| {
        card["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["target"] == target && o["item"] == item)
            .unwrap()
            .clone()
    };
    assert_eq!(outcome("mom/auto", "add")["model"], "qwen2.5-coder-0.5b");
    assert_eq!(outcome("mom/auto", "add")["decision"], "code");
    assert_eq!(outcome("mom/auto", "prime")["model"], "smollm2-135m");
    assert_eq!(outcome("smollm2-135m", "prime")["detail"], "answered A");
    assert!(
        outcome("smollm2-135m", "add")["detail"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{}",
        outcome("smollm2-135m", "add")
    );

    // Energy: every answer is one forwarded call, so declared power × the client's wait.
    for o in card["outcomes"].as_array().unwrap() {
        let watts = if o["model"] == "smollm2-135m" {
            10.0
        } else {
            40.0
        };
        let expected = watts * o["latency_ms"].as_f64().unwrap() / 1000.0;
        let energy = o["energy_joules"].as_f64().unwrap();
        assert!(energy > 0.0 && (energy - expected).abs() < 1e-9, "{o}");
    }
    let summed: f64 = card["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == "mom/auto")
        .map(|o| o["energy_joules"].as_f64().unwrap())
        .sum();
    close(&auto["energy_joules"], summed);

    // Oracle: capital from SmolLM2 (0.019), prime and add from the coder (0.057 each).
    close(&card["oracle"]["quality"], 1.0);
    close(&card["oracle"]["cost"], 0.019 + 0.057 + 0.057);
    let compared = &card["comparisons"][0];
    assert_eq!(compared["identity"], "mom/auto");
    close(&compared["regret"], 0.0);
    assert_eq!(compared["best_fixed"]["target"], "qwen2.5-coder-0.5b");
    close(&compared["gain_over_best_fixed"], 1.0 - 2.0 / 3.0);
    // mom/auto spent 0.095: only SmolLM2 (0.057) costs no more.
    assert_eq!(compared["matched"]["target"], "smollm2-135m");
    assert_eq!(compared["matched_compute"], true);
    close(&compared["gain_at_matched_compute"], 1.0 - 1.0 / 3.0);

    let markdown = std::fs::read_to_string(out.join("scorecard.md")).unwrap();
    assert!(
        markdown.contains("| cost | energy J | p50 ms |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| mom/auto | identity | 1.000 | 1.00 | 15 | 21 | 0.095000 |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("**+0.667 at matched compute** against smollm2-135m"),
        "{markdown}"
    );
    let verdicts = "\n## Release gate\n\n\
        - pass `criteria[0].minQuality`: mom/auto quality 1.000 (bound ≥ 0.9)\n\
        - FAIL `criteria[0].minQualityVsBestFixed`: mom/auto quality 1.000 vs qwen2.5-coder-0.5b 0.667: +0.333 (bound ≥ +0.5)\n";
    // The verdicts close scorecard.md, which is also what stdout shows.
    assert!(markdown.ends_with(verdicts), "{markdown}");
    assert_eq!(String::from_utf8_lossy(&run.stdout), markdown + "\n");
    let gate: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("gate.json")).unwrap()).unwrap();
    assert_eq!(gate[1]["path"], "criteria[0].minQualityVsBestFixed");
    assert_eq!(gate[1]["passed"], false);

    // The fixed models' traces: one row per item and model, as train-router reads them.
    let traced =
        mom_router::records::traces::parse(&std::fs::read_to_string(&traces).unwrap()).unwrap();
    assert_eq!(traced.models, ["qwen2.5-coder-0.5b", "smollm2-135m"]);
    let passed: Vec<(String, Vec<bool>)> = traced
        .items
        .iter()
        .map(|i| (i.id.clone(), i.rows.iter().map(|r| r.passed).collect()))
        .collect();
    assert_eq!(
        passed,
        [
            ("add".to_owned(), vec![true, false]),
            ("capital".to_owned(), vec![false, true]),
            ("prime".to_owned(), vec![true, false]),
        ]
    );
    let row = &traced.items[1].rows[1];
    assert_eq!((row.prompt_tokens, row.completion_tokens), (5, 7));
    assert_eq!(row.answer, "Paris");
    assert_eq!(row.kind, "exact");
    assert!(row.prompt.starts_with("What is the capital of France?"));
    assert!(row.latency_ms > 0.0);
    let png = std::fs::read(out.join("frontier.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // Every request reached the backends the hand computation assumed.
    assert_eq!(stack.backends["smollm2-135m"].bodies().len(), 5);
    assert_eq!(stack.backends["qwen2.5-coder-0.5b"].bodies().len(), 4);
}

#[test]
fn unusable_inputs_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.yaml");
    std::fs::write(&config, POLICY).unwrap();
    let suite = dir.path().join("suite.jsonl");
    let eval_with = |suite_text: &str, identity: &str, extra: &[&Path]| {
        std::fs::write(&suite, suite_text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
            .args([
                "eval",
                "--identity",
                identity,
                "--url",
                "http://127.0.0.1:9",
            ])
            .arg("--suite")
            .arg(&suite)
            .arg("--config")
            .arg(&config)
            .args(extra)
            .arg("--out")
            .arg(dir.path().join("out"))
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let eval = |suite_text: &str, identity: &str| eval_with(suite_text, identity, &[]);
    let (code, stderr) = eval(SUITE, "mom/nothing");
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("\"mom/nothing\" is not an identity"),
        "{stderr}"
    );
    let (code, stderr) = eval(
        r#"{"id": "x", "kind": "humaneval", "prompt": "def f():"}"#,
        "mom/auto",
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("line 1 (x): a humaneval item needs `test`"),
        "{stderr}"
    );
    let (code, stderr) = eval("{\"id\": 1}\n", "mom/auto");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("line 1:"), "{stderr}");
    // A gate with an unknown bound is refused before any request.
    let gate = dir.path().join("gate.yaml");
    std::fs::write(
        &gate,
        "criteria:\n  - identity: mom/auto\n    maxCompute: 1\n",
    )
    .unwrap();
    let (code, stderr) = eval_with(SUITE, "mom/auto", &[Path::new("--gate"), &gate]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown field `maxCompute`"), "{stderr}");
    assert!(!dir.path().join("out").exists());
}

/// Runs `eval FLAG --traces` on the suite's first item through `stack` (which must exit 0),
/// checks that every request the backends saw asked for what FLAG names (`--stream` sets
/// `stream: true`, `--logprobs` sets `logprobs: true`), and returns the parsed traces.
async fn eval_first_item(stack: &Stack, flag: &'static str) -> Traces {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy.yaml");
    std::fs::write(&config, POLICY).unwrap();
    let suite = dir.path().join("one.jsonl");
    std::fs::write(&suite, SUITE.lines().next().unwrap()).unwrap();
    let (out, traces) = (dir.path().join("card"), dir.path().join("traces.jsonl"));
    let url = stack.envoy.public_url();
    let traces_path = traces.clone();
    let run = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_mom-router"))
            .args(["eval", flag, "--url", &url])
            .arg("--suite")
            .arg(&suite)
            .arg("--config")
            .arg(&config)
            .arg("--out")
            .arg(&out)
            .arg("--traces")
            .arg(&traces_path)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let field = flag.trim_start_matches("--");
    for backend in stack.backends.values() {
        for body in backend.bodies() {
            assert_eq!(body[field], true, "{body}");
        }
    }
    mom_router::records::traces::parse(&std::fs::read_to_string(&traces).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_run_grades_the_assembled_answer_and_times_its_first_chunk() {
    let stack = Stack::start_with_config(POLICY).await;
    stack.backends["smollm2-135m"].queue(&["Paris"]);
    stack.backends["qwen2.5-coder-0.5b"].queue(&["in Lyon"]);
    // Every request asked for a stream, and the backends answered with one.
    let traced = eval_first_item(&stack, "--stream").await;
    let rows = &traced.items[0].rows;
    // The coder's streamed "in Lyon" is wrong, SmolLM2's "Paris" right: graded assembled.
    assert_eq!(
        rows.iter()
            .map(|r| (r.model.as_str(), r.passed))
            .collect::<Vec<_>>(),
        [("qwen2.5-coder-0.5b", false), ("smollm2-135m", true)]
    );
    for row in rows {
        assert_eq!(row.finish_reason, "stop");
        // The fake pauses 150 ms before each event after the first: the first chunk comes at
        // least two pauses (SmolLM2: finish, [DONE]) before the end.
        assert!(row.ttft_ms > 0.0, "{row:?}");
        assert!(row.latency_ms - row.ttft_ms >= 290.0, "{row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_logprobs_every_trace_row_keeps_its_answers_mean_log_probability() {
    let stack = Stack::start_with_config(POLICY).await;
    stack.backends["smollm2-135m"].queue(&["Paris"]);
    stack.backends["smollm2-135m"].set_logprob(-0.25);
    stack.backends["qwen2.5-coder-0.5b"].queue(&["in Lyon"]);
    stack.backends["qwen2.5-coder-0.5b"].set_logprob(-1.5);
    let traced = eval_first_item(&stack, "--logprobs").await;
    let confidences: Vec<(&str, f64)> = traced.items[0]
        .rows
        .iter()
        .map(|r| (r.model.as_str(), r.confidence.expect("a confidence")))
        .collect();
    assert_eq!(confidences.len(), 2);
    // The fake reports the same log-probability for every token: the mean is that value.
    assert_eq!(confidences[0].0, "qwen2.5-coder-0.5b");
    assert!((confidences[0].1 + 1.5).abs() < 1e-9, "{confidences:?}");
    assert!((confidences[1].1 + 0.25).abs() < 1e-9, "{confidences:?}");
    // Streaming and log-probabilities are not asked for together.
    let both = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args([
            "eval",
            "--logprobs",
            "--stream",
            "--suite",
            "x",
            "--config",
            "y",
        ])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}
