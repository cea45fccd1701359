//! Allocation that reads the pool, through a real Envoy: requests in flight are counted per
//! model for as long as Envoy holds their ext_proc stream (to the end of the response, even with
//! the response phases skipped), a busy model is set aside while another candidate has a free
//! slot, and when every candidate's declared queue is full the request is shed with 503 and
//! `Retry-After` before any model is called.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::stack::{ask, header, Stack};

/// Two candidates, the coder first (static); each serves one request at a time, with `queue`
/// requests allowed to wait.
fn policy(queue: &str) -> String {
    format!(
        r#"
version: pool-test
server:
  maxBodyBytes: 1048576
models:
  - {{ name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct, maxConcurrency: 1{queue} }}
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct, maxConcurrency: 1{queue} }}
identities:
  - {{ name: mom/auto, defaultModel: qwen2.5-coder-0.5b, decisions: [any] }}
signals:
  - {{ name: any_prompt, type: context_length, minTokens: 1 }}
decisions:
  - name: any
    rules: {{ signal: any_prompt }}
    modelRefs: [{{ model: qwen2.5-coder-0.5b }}, {{ model: smollm2-135m }}]
"#
    )
}

/// Sends a request in the background and waits until `model`'s backend has received it.
async fn hold(
    stack: &Arc<Stack>,
    model: &str,
    marker: &'static str,
) -> tokio::task::JoinHandle<u16> {
    let seen = stack.backends[model].seen.lock().unwrap().len();
    let background = Arc::clone(stack);
    let held = tokio::spawn(async move {
        let response = background.chat(&ask("hello"), marker).await;
        response.status().as_u16()
    });
    let arrived = support::eventually(Duration::from_secs(5), async || {
        (stack.backends[model].seen.lock().unwrap().len() > seen).then_some(())
    })
    .await;
    assert!(arrived.is_some(), "{marker} never reached {model}");
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_model_is_set_aside_while_another_candidate_has_a_free_slot() {
    let stack = Arc::new(Stack::start_with_config(&policy("")).await);
    let coder = &stack.backends["qwen2.5-coder-0.5b"];
    coder.delay_ms.store(1500, Ordering::Relaxed);
    let slow = hold(&stack, "qwen2.5-coder-0.5b", "slow").await;

    let response = stack.chat(&ask("hello"), "while-busy").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    let reason = header(&response, "x-mom-selection-reason");
    assert!(
        reason.contains("set aside: qwen2.5-coder-0.5b busy: 1 in flight on 1 slot, wait ~"),
        "{reason}"
    );

    // The slow answer ends its stream: the coder's slot is free again.
    assert_eq!(slow.await.unwrap(), 200);
    coder.delay_ms.store(0, Ordering::Relaxed);
    let freed = support::eventually(Duration::from_secs(5), async || {
        let response = stack.chat(&ask("hello"), "freed").await;
        (header(&response, "x-mom-model") == "qwen2.5-coder-0.5b").then_some(())
    })
    .await;
    assert!(freed.is_some(), "the coder's slot never came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_queue_is_full_the_request_is_shed_with_retry_after() {
    let stack = Arc::new(Stack::start_with_config(&policy(", maxQueue: 0")).await);
    for backend in stack.backends.values() {
        backend.delay_ms.store(1500, Ordering::Relaxed);
    }
    let first = hold(&stack, "qwen2.5-coder-0.5b", "first").await;
    let second = hold(&stack, "smollm2-135m", "second").await;

    let response = stack.chat(&ask("hello"), "shed").await;
    assert_eq!(response.status(), 503);
    let retry_after: u64 = header(&response, "retry-after").parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "model_overloaded");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("qwen2.5-coder-0.5b busy: 1 in flight on 1 slot"),
        "{message}"
    );
    // Shed before any model was called.
    assert_eq!(stack.requests_seen(), 2);
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_own_queue_counts_requests_other_clients_sent() {
    let config = policy("").replacen(
        "maxConcurrency: 1 }",
        "maxConcurrency: 1, queueMetrics: { format: llamacpp, intervalMs: 100 } }",
        1,
    );
    let stack = Stack::start_with_config(&config).await;
    // Five requests from elsewhere wait at the coder's server.
    stack.backends["qwen2.5-coder-0.5b"]
        .deferred
        .store(5, Ordering::Relaxed);
    let seen = support::eventually(Duration::from_secs(5), async || {
        let response = stack.chat(&ask("hello"), "reported").await;
        let reason = header(&response, "x-mom-selection-reason");
        reason
            .contains("qwen2.5-coder-0.5b busy: 5 in flight on 1 slot")
            .then(|| header(&response, "x-mom-model"))
    })
    .await;
    assert_eq!(seen.as_deref(), Some("smollm2-135m"));
}
