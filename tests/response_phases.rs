//! Through a real Envoy (envoy/quickstart.yaml, which adds the `x-mom-*` response headers from
//! the dynamic metadata and says so on its ext_proc stream): a Chat Completions response that
//! owes mom-router nothing skips the response phases and still carries every decision header,
//! once; a policy whose responses owe work (here: run records) still gets its response phase.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::json;
use std::time::Duration;
use support::sidecar::example_config;
use support::stack::{ask, header, Stack};

/// The count of an ext_proc phase in mom-router's metrics (0 when it never ran).
fn phase_count(metrics: &str, phase: &str) -> u64 {
    let prefix = format!("mom_extproc_phase_seconds_count{{phase=\"{phase}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// Each decision header appears exactly once; returns its value.
fn once(response: &reqwest::Response, name: &str) -> String {
    let values = response.headers().get_all(name).iter().count();
    assert_eq!(values, 1, "{name} appears {values} times");
    header(response, name)
}

async fn streamed_text(mut response: reqwest::Response) -> String {
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), response.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_owing_nothing_skips_the_response_phases_and_keeps_its_headers() {
    let stack = Stack::start_with_config(&example_config("rules")).await;
    let response = stack
        .chat(
            &ask("Write a python function that reverses a list"),
            "plain",
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-fake-backend"), "qwen2.5-coder-0.5b");
    assert_eq!(once(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(once(&response, "x-mom-decision"), "code");
    assert_eq!(once(&response, "x-mom-identity"), "mom/auto");
    assert_eq!(once(&response, "x-mom-identity-version"), "1");
    assert_eq!(once(&response, "x-mom-response-path"), "upstream");
    assert_eq!(once(&response, "x-mom-algorithm"), "static");
    assert!(once(&response, "x-mom-config-version").starts_with("rules-1@"));
    let run_id = once(&response, "x-mom-run-id");
    assert!(
        run_id.len() == 32 && run_id.chars().all(|c| c.is_ascii_hexdigit()),
        "{run_id}"
    );
    // Headers mom-router had nothing to say in are absent, not empty.
    // (Envoy's route lists both: an empty metadata value must add nothing.)
    assert!(response.headers().get("x-mom-plugins").is_none());
    assert!(response.headers().get("x-mom-session").is_none());
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );

    let mut streamed = ask("Write a rust function to add numbers");
    streamed["stream"] = json!(true);
    let response = stack.chat(&streamed, "streamed").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    assert_eq!(once(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_ne!(once(&response, "x-mom-run-id"), run_id);
    let text = streamed_text(response).await;
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    // The run id is one mom-router knows: an outcome for it is accepted.
    let sidecar = stack.sidecar.as_ref().unwrap();
    let outcome = stack
        .client
        .post(format!("{}/v1/outcomes", sidecar.admin_url()))
        .json(&json!({"run_id": run_id, "reward": 0.75}))
        .send()
        .await
        .unwrap();
    assert_eq!(outcome.status(), 200, "{}", outcome.text().await.unwrap());

    let metrics = sidecar.metrics().await;
    assert_eq!(phase_count(&metrics, "request_headers"), 2, "{metrics}");
    assert_eq!(phase_count(&metrics, "request_body"), 2, "{metrics}");
    assert_eq!(phase_count(&metrics, "response_headers"), 0, "{metrics}");
    assert_eq!(phase_count(&metrics, "response_body"), 0, "{metrics}");
    let log = stack.envoy.access_log_line("plain").await;
    assert_eq!(log["mom_router"]["decision"], "code", "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_response_still_gets_its_response_phase() {
    let runs = tempfile::tempdir().unwrap();
    let records = format!(
        "records: {{ path: {} }}\n\nmodels:",
        runs.path().join("runs.jsonl").display()
    );
    let config = example_config("rules").replacen("\nmodels:", &format!("\n{records}"), 1);
    let stack = Stack::start_with_config(&config).await;
    let response = stack
        .chat(
            &ask("Write a python function that reverses a list"),
            "recorded",
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(once(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    let run_id = once(&response, "x-mom-run-id");
    response.bytes().await.unwrap();
    let sidecar = stack.sidecar.as_ref().unwrap();
    let metrics = sidecar.metrics().await;
    assert_eq!(phase_count(&metrics, "response_headers"), 1, "{metrics}");
    // The record carries the upstream status only the response phase sees.
    let path = runs.path().join("runs.jsonl");
    let record = support::eventually(Duration::from_secs(5), async || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .find(|r| r["runId"] == run_id.as_str())
    })
    .await
    .expect("a run record");
    assert_eq!(record["status"], 200, "{record}");
}
