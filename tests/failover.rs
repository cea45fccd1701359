//! Cross-model failover through a real Envoy (envoy/quickstart.yaml, its failover filter
//! included) and the quickstart policy: a model that fails before its first byte hands the
//! request to the next one, for JSON and streamed Chat Completions (whose response phases are
//! skipped: the failover filter's own stream serves them) and for Messages (the forwarding
//! stream watches its response); a concrete model's failure passes through; a model that keeps
//! failing is set aside for its cool-down; nothing changes on the happy path.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::envoy;
use support::sidecar::{example_config, quickstart_config};
use support::stack::{ask, header, streamed, Stack};

/// A request the quickstart's `code` decision sends to the coder alone.
const CODE: &str = "Write a python function that reverses a list";

/// The coder fails with `status`; the request is answered by the next model.
async fn fails_over_on(stack: &Stack, status: u64, marker: &str) {
    let coder = &stack.backends["qwen2.5-coder-0.5b"];
    coder.fail_status.store(status, Ordering::Relaxed);
    let response = stack.chat(&ask(CODE), marker).await;
    assert_eq!(response.status(), 200, "{marker}");
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert_eq!(header(&response, "x-mom-decision"), "code");
    assert_eq!(
        header(&response, "x-mom-fallback"),
        format!("qwen2.5-coder-0.5b {status} -> smollm2-135m")
    );
    assert_eq!(header(&response, "x-mom-response-path"), "fallback");
    let body: Value = response.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    // The fallback's own provider model name was written into the body it received.
    assert!(
        text.starts_with("[fake backend smollm2-135m] model=SmolLM2-135M-Instruct"),
        "{text}"
    );
    let log = stack.envoy.access_log_line(marker).await;
    assert_eq!(log["status"], 200);
    assert_eq!(
        log["mom_router"]["fallback"],
        format!("qwen2.5-coder-0.5b {status} -> smollm2-135m")
    );
    coder.fail_status.store(0, Ordering::Relaxed);
}

/// Envoy's ext_proc counters: messages the main filter sent, streams the failover filter
/// opened.
async fn extproc_counts(stack: &Stack) -> (u64, u64) {
    let url = format!(
        "http://127.0.0.1:{}/stats?filter=ext_proc",
        stack.envoy.port(envoy::ADMIN)
    );
    let stats = stack
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    (
        value("http.public.ext_proc.stream_msgs_sent"),
        value("http.public.ext_proc.failover.streams_started"),
    )
}

/// The rule-only example policy (`examples/rules/config.yaml`): its responses owe mom-router
/// nothing, so Envoy skips their response phases and only the failover filter sees a failure.
fn rules_config() -> String {
    example_config("rules")
}

/// A successful request costs `messages` ext_proc messages and no failover stream; a 503 and
/// a 429 fail over, each through `streams` failover-filter streams; a 400 does not.
async fn fails_over_at_no_extra_round_trip(stack: &Stack, messages: u64, streams: u64) {
    let (sent, failovers) = extproc_counts(stack).await;
    let response = stack.chat(&ask(CODE), "happy").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(header(&response, "x-mom-fallback"), "");
    assert_eq!(extproc_counts(stack).await, (sent + messages, failovers));

    fails_over_on(stack, 503, "on-503").await;
    fails_over_on(stack, 429, "on-429").await;
    assert_eq!(extproc_counts(stack).await.1, failovers + 2 * streams);
    // A 4xx other than 429 is the request's fault: no failover.
    let coder = &stack.backends["qwen2.5-coder-0.5b"];
    coder.fail_status.store(400, Ordering::Relaxed);
    let response = stack.chat(&ask(CODE), "on-400").await;
    assert_eq!(response.status(), 400);
    assert_eq!(header(&response, "x-mom-fallback"), "");
    coder.fail_status.store(0, Ordering::Relaxed);

    // Every hand-over is counted.
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let line = |reason: &str| {
        format!("mom_fallback_total{{from=\"qwen2.5-coder-0.5b\",to=\"smollm2-135m\",reason=\"{reason}\"}} 1")
    };
    assert!(metrics.contains(&line("503")), "{metrics}");
    assert!(metrics.contains(&line("429")), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_response_phases_are_skipped_fails_over_through_the_failover_filter() {
    let stack = Stack::start_with_config(&rules_config()).await;
    fails_over_at_no_extra_round_trip(&stack, 2, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_response_is_watched_fails_over_from_its_own_stream() {
    // The quickstart's learned allocation observes every response: three messages, as before.
    let stack = Stack::start().await;
    fails_over_at_no_extra_round_trip(&stack, 3, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_fails_over_to_a_complete_event_stream() {
    for config in [rules_config(), quickstart_config()] {
        let stack = Stack::start_with_config(&config).await;
        stack.backends["qwen2.5-coder-0.5b"]
            .fail_status
            .store(503, Ordering::Relaxed);
        let mut body = ask(CODE);
        body["stream"] = json!(true);
        let response = stack.chat(&body, "streamed").await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
        assert!(header(&response, "content-type").starts_with("text/event-stream"));
        let text = response.text().await.unwrap();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        assert!(
            streamed(&text).starts_with("[fake backend smollm2-135m]"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_fails_over_and_a_concrete_model_does_not() {
    let stack = Stack::start_with_dead_backend(&rules_config(), "qwen2.5-coder-0.5b").await;
    let response = stack.chat(&ask(CODE), "refused").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert_eq!(
        header(&response, "x-mom-fallback"),
        "qwen2.5-coder-0.5b 503 -> smollm2-135m"
    );

    // Naming the model itself: its failure is the answer, nothing else is called.
    let before = stack.requests_seen();
    let concrete =
        json!({"model": "qwen2.5-coder-0.5b", "messages": [{"role": "user", "content": CODE}]});
    let response = stack.chat(&concrete, "concrete").await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "x-mom-fallback"), "");
    assert_eq!(stack.requests_seen(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_request_fails_over_in_its_own_protocol() {
    let stack = Stack::start().await;
    stack.backends["qwen2.5-coder-0.5b"]
        .fail_status
        .store(503, Ordering::Relaxed);
    let body = json!({
        "model": "mom/auto", "max_tokens": 64,
        "messages": [{"role": "user", "content": CODE}]
    });
    let response = stack
        .client
        .post(stack.url("/v1/messages", "messages"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert_eq!(
        header(&response, "x-mom-fallback"),
        "qwen2.5-coder-0.5b 503 -> smollm2-135m"
    );
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["type"], "message");
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("[fake backend smollm2-135m]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_model_fails_the_failure_reaches_the_client_with_the_attempts() {
    let stack = Stack::start_with_config(&rules_config()).await;
    for backend in stack.backends.values() {
        backend.fail_status.store(503, Ordering::Relaxed);
    }
    let response = stack.chat(&ask(CODE), "all-fail").await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        header(&response, "x-mom-fallback"),
        "qwen2.5-coder-0.5b 503 -> smollm2-135m 503 -> gemma3-270m 503 -> none answered"
    );
    // Three attempts in all (maxAttempts: 3), each model once.
    for backend in stack.backends.values() {
        assert_eq!(backend.seen.lock().unwrap().len(), 1, "{}", backend.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_keeps_failing_is_set_aside_until_its_cool_down_ends() {
    let config =
        quickstart_config().replace("deadlineMs: 30000,", "deadlineMs: 30000, coolDownMs: 1500,");
    let stack = Stack::start_with_config(&config).await;
    let coder = &stack.backends["qwen2.5-coder-0.5b"];
    coder.fail_status.store(503, Ordering::Relaxed);
    // ejectAfter defaults to 3 failures in a row.
    for i in 0..3 {
        let response = stack.chat(&ask(CODE), &format!("failing-{i}")).await;
        assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
        assert_ne!(header(&response, "x-mom-fallback"), "");
    }
    let response = stack.chat(&ask(CODE), "set-aside").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert_eq!(header(&response, "x-mom-fallback"), "");
    let reason = header(&response, "x-mom-selection-reason");
    assert!(
        reason.starts_with("qwen2.5-coder-0.5b set aside after 3 failures in a row"),
        "{reason}"
    );
    assert_eq!(coder.seen.lock().unwrap().len(), 3);

    // The cool-down ends and the coder answers again.
    coder.fail_status.store(0, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let response = stack.chat(&ask(CODE), "recovered").await;
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(coder.seen.lock().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_record_names_every_attempt_and_the_model_that_answered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    let config = rules_config().replacen(
        "version: rules-1\n",
        &format!(
            "version: rules-1\nrecords: {{ path: \"{}\" }}\n",
            path.display()
        ),
        1,
    );
    let stack = Stack::start_with_config(&config).await;
    stack.backends["qwen2.5-coder-0.5b"]
        .fail_status
        .store(503, Ordering::Relaxed);
    let response = stack.chat(&ask(CODE), "recorded").await;
    assert_eq!(response.status(), 200);
    let run_id = header(&response, "x-mom-run-id");
    let record = support::eventually(Duration::from_secs(5), async || {
        let text = std::fs::read_to_string(&path).ok()?;
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["runId"] == run_id.as_str())
    })
    .await
    .unwrap_or_else(|| panic!("no record of {run_id} in {}", path.display()));
    assert_eq!(record["fallback"], "qwen2.5-coder-0.5b 503 -> smollm2-135m");
    assert_eq!(record["model"], "smollm2-135m");
    assert_eq!(record["status"], 200);
    assert_eq!(record["responsePath"], "fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_past_its_first_byte_timeout_hands_the_request_on() {
    for config in [rules_config(), quickstart_config()] {
        let config = config.replacen(
            "providerModel: Qwen2.5-Coder-0.5B-Instruct\n",
            "providerModel: Qwen2.5-Coder-0.5B-Instruct\n    firstByteTimeoutMs: 300\n",
            1,
        );
        let stack = Stack::start_with_config(&config).await;
        let coder = &stack.backends["qwen2.5-coder-0.5b"];
        coder.delay_ms.store(3000, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let response = stack.chat(&ask(CODE), "slow-first-byte").await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
        assert_eq!(
            header(&response, "x-mom-fallback"),
            "qwen2.5-coder-0.5b 504 -> smollm2-135m"
        );
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{:?}",
            started.elapsed()
        );
    }
}
