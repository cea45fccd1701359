//! Run records through the real Envoy: every chat request leaves one JSON line — linked by
//! `x-mom-run-id`, with the signals, decision, model, plugins, status and timings — refusals
//! included; prompts only when configured, and redacted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::stack::{header, Stack};

fn policy(path: &Path, prompts: bool) -> String {
    format!(
        r#"
version: records-test
records: {{path: "{}", includePrompts: {prompts}}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct, powerWatts: 40}}
identities:
  - name: mom/auto
    defaultModel: smollm2-135m
    decisions: [code]
    plugins: [{{type: semantic_cache}}]
signals:
  - {{name: code, type: keyword, keywords: [python]}}
decisions:
  - name: code
    rules: {{signal: code}}
    modelRefs: [{{model: qwen2.5-coder-0.5b}}]
"#,
        path.display()
    )
}

/// The records written so far, waiting (at most 5 s) until there are `count`.
async fn records(path: &Path, count: usize) -> Vec<Value> {
    let found = support::eventually(Duration::from_secs(5), async || {
        let text = std::fs::read_to_string(path).ok()?;
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines.len() >= count).then_some(lines)
    })
    .await;
    found.unwrap_or_else(|| panic!("fewer than {count} records in {}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_leaves_a_record_linked_by_its_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    let stack = Stack::start_with_config(&policy(&path, true)).await;
    let ask = json!({"model": "mom/auto", "messages": [
        {"role": "user", "content": "Write python to email jane.doe@example.com"}]});
    let response = stack.chat(&ask, "r1").await;
    assert_eq!(response.status(), 200);
    let run_id = header(&response, "x-mom-run-id");
    let _ = response.bytes().await.unwrap();
    // A cache hit, and a refusal, are recorded too.
    let hit = stack.chat(&ask, "r2").await;
    assert_eq!(header(&hit, "x-mom-cache-hit"), "true");
    let hit_run = header(&hit, "x-mom-run-id");
    assert_eq!(hit_run.len(), 32);
    assert_ne!(hit_run, run_id);
    let unknown = json!({"model": "gpt-nothing", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(stack.chat(&unknown, "r3").await.status(), 400);

    let lines = records(&path, 3).await;
    let first = &lines[0];
    assert_eq!(first["runId"], run_id.as_str());
    assert_eq!(first["identity"], "mom/auto");
    assert_eq!(first["decision"], "code");
    assert_eq!(first["model"], "qwen2.5-coder-0.5b");
    assert_eq!(first["providerModel"], "Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(first["responsePath"], "upstream");
    assert_eq!(first["status"], 200);
    assert_eq!(first["signals"][0]["name"], "code");
    assert_eq!(first["signals"][0]["matched"], true);
    assert_eq!(first["plugins"][0]["plugin"], "semantic_cache");
    assert_eq!(first["plugins"][0]["action"], "miss");
    assert!(first["ttftMs"].as_f64().unwrap() > 0.0, "{first}");
    // The forwarded call's energy: 40 W × its total time.
    let total = first["totalMs"].as_f64().unwrap();
    let energy = first["energyJoules"].as_f64().unwrap();
    assert!(
        total > 0.0 && (energy - 40.0 * total / 1000.0).abs() < 1e-9,
        "{first}"
    );
    assert!(first["timeUnixMs"].as_u64().unwrap() > 1_700_000_000_000);
    // The prompt is kept because the policy asks for it, with the address redacted.
    assert_eq!(first["prompt"], "Write python to email [EMAIL]");

    let hit = &lines[1];
    assert_eq!(hit["responsePath"], "immediate");
    assert_eq!(hit["status"], 200);
    assert_eq!(hit["plugins"][0]["action"], "hit exact");
    assert_eq!(hit["runId"], hit_run.as_str());
    let refused = &lines[2];
    assert_eq!(refused["status"], 400);
    assert_eq!(refused["error"], "model_not_found");
    assert_eq!(refused["decision"], "none");
    assert_eq!(refused["runId"].as_str().unwrap().len(), 32);
    // No bundle served these: the digests are empty.
    assert_eq!(first["bundleDigest"], "");
    // The observed call in the GenAI conventions' metrics, labelled from the configuration.
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let count = |name: &str, labels: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_count{{")) && l.contains(labels))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
    };
    let call = r#"gen_ai_operation_name="chat",gen_ai_request_model="mom/auto",gen_ai_response_model="qwen2.5-coder-0.5b""#;
    assert_eq!(
        count("gen_ai_client_operation_duration_seconds", call).as_deref(),
        Some("1"),
        "{metrics}"
    );
    let output = format!(r#"{call},gen_ai_token_type="output""#);
    assert_eq!(
        count("gen_ai_client_token_usage", &output).as_deref(),
        Some("1"),
        "{metrics}"
    );

    // A reported outcome becomes a line joined to its run by id (and replay skips it).
    let admin = stack.sidecar.as_ref().unwrap().admin_url();
    let reported = reqwest::Client::new()
        .post(format!("{admin}/v1/outcomes"))
        .json(&json!({"run_id": run_id, "reward": 0.75}))
        .send()
        .await
        .unwrap();
    assert_eq!(reported.status(), 200);
    let lines = records(&path, 4).await;
    assert_eq!(lines[3]["runId"], run_id.as_str());
    assert_eq!(
        lines[3]["outcome"],
        json!({"kind": "reward", "value": 0.75, "otherRunId": ""})
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(mom_router::records::replay::read(&text).unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_not_recorded_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    let stack = Stack::start_with_config(&policy(&path, false)).await;
    let ask =
        json!({"model": "mom/auto", "messages": [{"role": "user", "content": "secret plans"}]});
    let response = stack.chat(&ask, "p1").await;
    assert_eq!(response.status(), 200);
    let _ = response.bytes().await.unwrap();
    let lines = records(&path, 1).await;
    assert!(lines[0]["prompt"].is_null(), "{}", lines[0]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("secret plans"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_re_derives_every_decision_and_names_what_a_new_policy_would_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    let config = policy(&path, false);
    let stack = Stack::start_with_config(&config).await;
    let mut code_runs = Vec::new();
    for (i, text) in [
        "python sort a list",
        "hello there",
        "python regex",
        "good morning",
    ]
    .iter()
    .enumerate()
    {
        let ask = json!({"model": "mom/auto", "messages": [{"role": "user", "content": text}]});
        let response = stack.chat(&ask, &format!("replay{i}")).await;
        assert_eq!(response.status(), 200);
        if text.starts_with("python") {
            code_runs.push(header(&response, "x-mom-run-id"));
        }
        let _ = response.bytes().await.unwrap();
    }
    let unknown = json!({"model": "gpt-nothing", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(stack.chat(&unknown, "replay-refused").await.status(), 400);
    let lines = records(&path, 5).await;
    let text = std::fs::read_to_string(&path).unwrap();
    let recorded = mom_router::records::replay::read(&text).unwrap();
    assert_eq!(recorded.len(), lines.len());

    // The policy that served them re-derives every decision.
    let same = mom_router::config::compile_str(&config).unwrap();
    let report = mom_router::records::replay::replay(&same, &recorded);
    assert_eq!((report.replayed, report.same), (4, 4), "{report:?}");
    assert!(report.differences.is_empty());
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].1, "refused before a decision");

    // A policy that sends code elsewhere: exactly the code requests would route differently.
    let changed = config.replace("rules: {signal: code}", "rules: {not: {signal: code}}");
    assert_ne!(changed, config);
    let changed_path = dir.path().join("changed.yaml");
    std::fs::write(&changed_path, &changed).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .arg("replay")
        .arg(&path)
        .arg("--config")
        .arg(&changed_path)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "differences exit 1");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["replayed"], 4);
    let moved: Vec<&str> = report["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["run_id"].as_str().unwrap())
        .collect();
    // The code requests now fall to the default; the others now match `code`.
    assert_eq!(
        report["differences"].as_array().unwrap().len(),
        4,
        "{report}"
    );
    for run in &code_runs {
        assert!(moved.contains(&run.as_str()), "{run} not in {moved:?}");
    }
    let first = &report["differences"][0];
    assert_eq!(
        (first["recorded"].as_str(), first["replayed"].as_str()),
        (Some("code"), Some("none"))
    );

    // The same policy from the command line: exit 0.
    let same_path = dir.path().join("same.yaml");
    std::fs::write(&same_path, &config).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args([
            "replay",
            path.to_str().unwrap(),
            "--config",
            same_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("4 replayed, 4 same, 0 different, 1 not replayed"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_records_each_call_with_its_tokens_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    // Each FAKE call reports 5 prompt and 7 completion tokens: 0.019 on SmolLM2, 0.057 on the
    // coder at these prices. Declared power 10 W and 40 W: a call's energy is that × latency.
    let policy = format!(
        r#"
version: records-calls
server: {{internalUrl: "http://127.0.0.1:10001"}}
records: {{path: "{}"}}
models:
  - {{name: smollm2-135m, providerModel: smollm2-135m, powerWatts: 10, pricing: {{inputPerMillion: 1000, outputPerMillion: 2000}}}}
  - {{name: qwen2.5-coder-0.5b, providerModel: qwen2.5-coder-0.5b, powerWatts: 40, pricing: {{inputPerMillion: 3000, outputPerMillion: 6000}}}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m, decisions: [panel]}}
signals:
  - {{name: any, type: context_length, minTokens: 1}}
decisions:
  - name: panel
    rules: {{signal: any}}
    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}]
    looper: {{type: ratings, maxConcurrent: 2, minSuccesses: 2, perCallTimeoutMs: 5000}}
"#,
        path.display()
    );
    let stack = Stack::start_with_config(&policy).await;
    let response = stack.chat(&support::stack::ask("hello"), "calls").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "ratings");
    let record = &records(&path, 1).await[0];
    let looper = &record["looper"];
    let calls = looper["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let mut energy = 0.0;
    for call in calls {
        let watts = if call["model"] == "smollm2-135m" {
            10.0
        } else {
            40.0
        };
        let joules = call["energyJoules"].as_f64().unwrap();
        let latency = call["latencyMs"].as_f64().unwrap();
        assert!(latency > 0.0, "{call}");
        assert!((joules - watts * latency / 1000.0).abs() < 1e-9, "{call}");
        energy += joules;
        assert_eq!(call["promptTokens"], 5);
        assert_eq!(call["completionTokens"], 7);
        let expected = if call["model"] == "smollm2-135m" {
            0.019
        } else {
            0.057
        };
        assert!(
            (call["cost"].as_f64().unwrap() - expected).abs() < 1e-12,
            "{call}"
        );
    }
    assert_eq!(looper["promptTokens"], 10);
    assert_eq!(looper["completionTokens"], 14);
    assert!(
        (looper["cost"].as_f64().unwrap() - 0.076).abs() < 1e-12,
        "{looper}"
    );
    // The looper's energy is its calls', and the request's is the looper's (it answered in hand).
    assert!((looper["energyJoules"].as_f64().unwrap() - energy).abs() < 1e-9);
    assert!((record["energyJoules"].as_f64().unwrap() - energy).abs() < 1e-9);
    let usage = header(&response, "x-mom-looper-usage");
    assert!(usage.contains(&format!("energy_j={energy:.3}")), "{usage}");
}
