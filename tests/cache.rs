//! The semantic cache plugin through the real Envoy: a repeated conversation is answered from
//! the cache (JSON or replayed events) without an upstream call, never across system prompts,
//! parameters or tenants; only complete 2xx answers are kept; `x-mom-cache-control` is honoured;
//! identical requests in flight go upstream once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::stack::{header, streamed, Stack};

const POLICY: &str = r#"
version: cache-test
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}
  - {name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}
identities:
  - name: mom/auto
    defaultModel: qwen2.5-coder-0.5b
    decisions: []
    plugins:
      - {type: semantic_cache, ttlSeconds: 60}
  - name: mom/private
    defaultModel: qwen2.5-coder-0.5b
    decisions: []
    plugins:
      - {type: pii, signal: personal_data, mode: mask}
      - {type: semantic_cache, ttlSeconds: 60}
signals:
  - {name: personal_data, type: pii}
"#;

const MODEL: &str = "qwen2.5-coder-0.5b";

fn ask(text: &str) -> Value {
    json!({"model": "mom/auto", "messages": [{"role": "user", "content": text}]})
}

async fn post(stack: &Stack, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = stack
        .client
        .post(stack.url("/v1/chat/completions", "cache"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(body.to_string()).send().await.unwrap()
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_conversation_is_answered_from_the_cache_and_never_across_conversations() {
    let stack = Stack::start_with_config(POLICY).await;
    let upstream = &stack.backends[MODEL];
    let question = ask("What is the capital of France?");
    let first = post(&stack, &question, &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-mom-plugins"), "semantic_cache:miss");
    assert_eq!(header(&first, "x-mom-cache-hit"), "");
    let first: Value = first.json().await.unwrap();

    let again = post(&stack, &question, &[]).await;
    assert_eq!(again.status(), 200);
    assert_eq!(header(&again, "x-mom-cache-hit"), "true");
    assert_eq!(header(&again, "x-mom-plugins"), "semantic_cache:hit exact");
    assert_eq!(header(&again, "x-mom-model"), MODEL);
    assert_eq!(header(&again, "x-mom-response-path"), "immediate");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first);
    assert_eq!(upstream.bodies().len(), 1, "a hit makes no upstream call");

    // A streaming client gets the kept answer as events.
    let mut streaming = question.clone();
    streaming["stream"] = json!(true);
    let replay = post(&stack, &streaming, &[]).await;
    assert_eq!(header(&replay, "x-mom-cache-hit"), "true");
    assert!(header(&replay, "content-type").starts_with("text/event-stream"));
    let text = replay.text().await.unwrap();
    assert_eq!(streamed(&text), content(&first));
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert_eq!(upstream.bodies().len(), 1);

    // Anything else that shapes the answer is another conversation: a miss each.
    let mut system = question.clone();
    system["messages"] = json!([
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "What is the capital of France?"}]);
    let mut warmer = question.clone();
    warmer["temperature"] = json!(0.9);
    for (body, headers) in [
        (&system, &[][..]),
        (&warmer, &[][..]),
        (&question, &[("x-tenant-id", "acme")][..]),
    ] {
        let response = post(&stack, body, headers).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-cache-hit"), "", "{body}");
        assert_eq!(header(&response, "x-mom-plugins"), "semantic_cache:miss");
    }
    assert_eq!(upstream.bodies().len(), 4);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    for line in [
        r#"mom_plugin_actions_total{plugin="semantic_cache",outcome="hit"} 2"#,
        r#"mom_plugin_actions_total{plugin="semantic_cache",outcome="miss"} 4"#,
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_complete_successful_answers_are_kept_and_clients_can_opt_out() {
    let stack = Stack::start_with_config(POLICY).await;
    let upstream = &stack.backends[MODEL];
    let calls = || upstream.bodies().len();

    // A failed answer is not kept: the next request goes upstream, and its answer is kept.
    let question = ask("Name a prime number");
    upstream.fail_status.store(500, Ordering::Relaxed);
    assert_eq!(post(&stack, &question, &[]).await.status(), 500);
    upstream.fail_status.store(0, Ordering::Relaxed);
    let response = post(&stack, &question, &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-cache-hit"), "");
    let hit = post(&stack, &question, &[]).await;
    assert_eq!(header(&hit, "x-mom-cache-hit"), "true");
    assert_eq!(calls(), 2);

    // A complete stream is kept, and answers a JSON client.
    let mut streaming = ask("Tell me about rivers");
    streaming["stream"] = json!(true);
    let text = post(&stack, &streaming, &[]).await.text().await.unwrap();
    let hit = post(&stack, &ask("Tell me about rivers"), &[]).await;
    assert_eq!(header(&hit, "x-mom-cache-hit"), "true");
    let hit: Value = hit.json().await.unwrap();
    assert_eq!(content(&hit), streamed(&text));
    assert_eq!(hit["choices"][0]["finish_reason"], "stop");
    assert_eq!(calls(), 3);

    // no-store: looked up but not kept; no-cache: not looked up, but kept.
    let fresh = ask("Describe a sunset");
    let no_store = [("x-mom-cache-control", "no-store")];
    let response = post(&stack, &fresh, &no_store).await;
    assert_eq!(
        header(&response, "x-mom-plugins"),
        "semantic_cache:miss (no-store)"
    );
    let response = post(&stack, &fresh, &[]).await;
    assert_eq!(header(&response, "x-mom-plugins"), "semantic_cache:miss");
    let response = post(&stack, &fresh, &no_store).await;
    assert_eq!(header(&response, "x-mom-cache-hit"), "true");
    assert_eq!(calls(), 5);
    let response = post(&stack, &fresh, &[("x-mom-cache-control", "no-cache")]).await;
    assert_eq!(
        header(&response, "x-mom-plugins"),
        "semantic_cache:bypassed no-cache"
    );
    assert_eq!(calls(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_in_flight_go_upstream_once() {
    let stack = Stack::start_with_config(POLICY).await;
    let upstream = &stack.backends[MODEL];
    upstream.delay_ms.store(400, Ordering::Relaxed);
    let question = ask("What is the tallest mountain?");
    let requests = (0..4).map(|_| post(&stack, &question, &[]));
    let responses = futures_util::future::join_all(requests).await;
    let mut plugins = Vec::new();
    let mut answers = Vec::new();
    for response in responses {
        assert_eq!(response.status(), 200);
        plugins.push(header(&response, "x-mom-plugins"));
        answers.push(response.json::<Value>().await.unwrap());
    }
    assert_eq!(upstream.bodies().len(), 1, "{plugins:?}");
    plugins.sort();
    assert_eq!(
        plugins,
        [
            "semantic_cache:hit exact after waiting",
            "semantic_cache:hit exact after waiting",
            "semantic_cache:hit exact after waiting",
            "semantic_cache:miss",
        ]
    );
    assert!(answers.iter().all(|a| a == &answers[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_to_masked_personal_data_are_never_cached() {
    let stack = Stack::start_with_config(POLICY).await;
    let private = json!({"model": "mom/private",
        "messages": [{"role": "user", "content": "Remind jane.doe@example.com about Friday"}]});
    for _ in 0..2 {
        let response = post(&stack, &private, &[]).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-cache-hit"), "");
        assert_eq!(
            header(&response, "x-mom-plugins"),
            "pii:masked [EMAIL_1],semantic_cache:bypassed personal data"
        );
    }
    assert_eq!(stack.backends[MODEL].bodies().len(), 2);
    // Without personal data the same identity caches as usual.
    let plain = json!({"model": "mom/private",
        "messages": [{"role": "user", "content": "Remind me about Friday"}]});
    let _ = post(&stack, &plain, &[]).await;
    let hit = post(&stack, &plain, &[]).await;
    assert_eq!(header(&hit, "x-mom-cache-hit"), "true");
}
