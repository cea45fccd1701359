//! Hostile conditions the sidecar must survive or refuse: guards that cannot answer fail
//! closed unless the policy says otherwise; a client cannot pick its backend, even when the
//! ext_proc filter fails open; a client that leaves mid-looper stops the looper.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use mom_router::engine::{self, Action};
use mom_router::llm::Headers;
use serde_json::Value;
use support::sidecar::{quickstart_config, TEST_CALL_TIMEOUT};
use support::stack::{ask, Stack};

/// The sum of a labelled counter over its series in a Prometheus text exposition.
fn counted(metrics: &str, name: &str) -> f64 {
    let series = format!("{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Routes `text` through the quickstart policy with its encoder and NER model gone (every
/// neural call fails, as when the queues are flooded).
async fn without_models(config: &str, text: &str) -> Action {
    let mut snapshot = compile_str(config).unwrap();
    snapshot.encoder = None;
    snapshot.ner = None;
    let body = ask(text).to_string().into_bytes();
    let services = engine::Services::offline(&snapshot);
    engine::on_request_body(&snapshot, &services, &Headers::default(), &body)
        .await
        .action
}

#[tokio::test]
async fn guards_that_cannot_answer_fail_closed_unless_the_policy_opts_out() {
    let action = without_models(&quickstart_config(), "Tell me about the weather").await;
    let Action::Respond(reply) = action else {
        panic!("a request passed a guard that could not run: {action:?}");
    };
    assert_eq!(reply.status, 503);
    let error: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(error["error"]["code"], "policy_unavailable");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("guard") && message.contains("nothing was sent upstream"),
        "{message}"
    );

    // Both guards opt out explicitly: the request goes on, the errors recorded.
    let open = quickstart_config()
        .replace("    type: pii\n", "    type: pii\n    onError: no_match\n")
        .replace(
            "    type: jailbreak\n",
            "    type: jailbreak\n    onError: no_match\n",
        );
    assert_ne!(open, quickstart_config());
    let action = without_models(&open, "Tell me about the weather").await;
    assert!(matches!(action, Action::Forward(_)), "{action:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ext_proc_failing_open_a_client_still_cannot_pick_its_backend() {
    let stack = Stack::start_failing_open_without_sidecar().await;
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", "spoof-open"))
        .header("x-selected-model", "gemma3-270m")
        .body(ask("hello").to_string())
        .send()
        .await
        .unwrap();
    // The public listener dropped the header before routing: no model, no backend.
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    assert!(error["error"]["message"].is_string(), "{error}");
    assert_eq!(stack.requests_seen(), 0);
    let log = stack.envoy.access_log_line("spoof-open").await;
    assert_eq!(log["upstream_cluster"], Value::Null, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_cascade_stops_the_cascade() {
    let policy = "version: leave-test\nserver: {internalUrl: \"http://127.0.0.1:10001\"}\n\
        models:\n  - {name: smollm2-135m, providerModel: smollm2-135m}\n  \
        - {name: gemma3-270m, providerModel: gemma3-270m}\n  \
        - {name: qwen2.5-coder-0.5b, providerModel: qwen2.5-coder-0.5b}\n\
        identities: [{name: mom/auto, defaultModel: smollm2-135m, decisions: [cascade]}]\n\
        signals: [{name: anything, type: context_length, minTokens: 0}]\n\
        decisions:\n  - name: cascade\n    rules: {signal: anything}\n    \
        modelRefs: [{model: smollm2-135m}, {model: gemma3-270m}, {model: qwen2.5-coder-0.5b}]\n    \
        looper: {type: confidence, threshold: 0.99, perCallTimeoutMs: 5000}\n";
    let stack = Stack::start_with_config(policy).await;
    let (small, middle) = (
        &stack.backends["smollm2-135m"],
        &stack.backends["gemma3-270m"],
    );
    // The first step answers after 1.5 s, never confidently enough (0.95 < 0.99): a cascade
    // still running would then send its second step, a sub-request to Gemma.
    small
        .delay_ms
        .store(1_500, std::sync::atomic::Ordering::SeqCst);
    let gone = stack
        .client
        .post(stack.url("/v1/chat/completions", "leaves"))
        .timeout(std::time::Duration::from_millis(300))
        .json(&ask("hello"))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up before any answer");
    let started = support::eventually(std::time::Duration::from_secs(5), async || {
        (small.bodies().len() == 1).then_some(())
    })
    .await;
    assert!(started.is_some(), "the cascade's first step was sent");
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert!(
        middle.bodies().is_empty(),
        "the cascade went on after its client left: {:?}",
        middle.bodies()
    );
    small.delay_ms.store(0, std::sync::atomic::Ordering::SeqCst);
    let next = stack.chat(&ask("still there?"), "after-leave").await;
    assert_eq!(next.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_guard_model_blocks_requests_through_envoy_and_counts_them() {
    // Queues of one text: concurrent requests find the PII classifier (and encoder) busy.
    let config = quickstart_config().replace(
        &format!("    {TEST_CALL_TIMEOUT}\n"),
        &format!("    {TEST_CALL_TIMEOUT}\n    queue: 1\n    maxBatch: 1\n"),
    );
    assert_eq!(config.matches("queue: 1").count(), 2);
    let stack = Stack::start_with_config(&config).await;
    let sends = (0..24).map(|i| {
        let text = format!("Request {i}: summarise the minutes of the harbour committee.");
        let mut body = ask(&text);
        body["model"] = "mom/secu".into();
        stack
            .client
            .post(stack.url("/v1/chat/completions", &format!("flood{i}")))
            .body(body.to_string())
            .send()
    });
    let mut answered = 0;
    let mut blocked = 0;
    for response in futures_util::future::join_all(sends).await {
        let response = response.unwrap();
        match response.status().as_u16() {
            200 => answered += 1,
            503 => {
                let error: Value = response.json().await.unwrap();
                assert_eq!(error["error"]["code"], "policy_unavailable", "{error}");
                blocked += 1;
            }
            other => panic!("status {other}: {}", response.text().await.unwrap()),
        }
    }
    assert!(blocked > 0, "no request found a guard model busy");
    // A blocked request never reached a model; each one is counted.
    assert_eq!(stack.requests_seen(), answered);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let errors = counted(&metrics, "mom_signal_errors_total");
    assert!(
        errors >= blocked as f64,
        "{blocked} blocked, {errors} errors\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_model_past_its_call_deadline_refuses_with_503_not_envoys_504() {
    // A deadline no forward pass meets: every guard call gives up, as under overload.
    let config = quickstart_config().replace(TEST_CALL_TIMEOUT, "callTimeoutMs: 1");
    assert_eq!(config.matches("callTimeoutMs: 1\n").count(), 2);
    let stack = Stack::start_with_config(&config).await;
    let text = "Please summarise the minutes of the harbour committee meeting held on Tuesday, \
        covering the budget, the new pier, the ferry timetable and the dredging contract.";
    let mut body = ask(text);
    body["model"] = "mom/secu".into();
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", "deadline"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "policy_unavailable", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("no answer within 1 ms"), "{message}");
    assert_eq!(stack.requests_seen(), 0);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let timed_out = counted(&metrics, "mom_model_timed_out_total");
    assert!(timed_out >= 1.0, "{metrics}");
}
