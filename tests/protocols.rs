//! Anthropic Messages through the real Envoy and the quickstart policy, against FAKE backends that
//! speak only Chat Completions (they serve `/v1/chat/completions` alone): requests are translated
//! on the way in and answers — JSON, streams, errors — on the way out.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::stack::{header, Stack};

fn message(text: &str) -> Value {
    json!({"model": "mom/auto", "max_tokens": 64,
        "messages": [{"role": "user", "content": text}]})
}

async fn post(stack: &Stack, path: &str, marker: &str, body: &Value) -> reqwest::Response {
    stack
        .client
        .post(stack.url(path, marker))
        .header("anthropic-version", "2023-06-01")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The events of a Messages stream: (type, data).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (kind, data) = e.split_once('\n').unwrap();
            let kind = kind.strip_prefix("event: ").unwrap().to_owned();
            (
                kind,
                serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_request_is_routed_translated_and_answered_as_a_message() {
    let stack = Stack::start().await;
    let response = post(
        &stack,
        "/v1/messages",
        "plain",
        &message("Write a python function that reverses a list"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-decision"), "code");
    assert_eq!(header(&response, "x-mom-translation"), "messages to chat");
    let model = header(&response, "x-mom-model");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["role"], "assistant");
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[fake backend qwen2.5-coder-0.5b]") && text.contains("reverses a list"),
        "{answer}"
    );
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 5, "output_tokens": 7})
    );
    // The backend got a chat request on its chat path.
    let seen = stack.backends[model.as_str()].seen.lock().unwrap()[0].clone();
    let upstream: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(upstream["max_tokens"], 64);
    assert_eq!(upstream["messages"][0]["role"], "user");
    // The access log names the client's protocol; the path is the upstream's, query kept.
    let log = stack.envoy.access_log_line("plain").await;
    assert_eq!(log["upstream_cluster"], model);
    assert_eq!(log["mom_router"]["protocol"], "messages");
    assert_eq!(log["path"], "/v1/chat/completions?t=plain");

    // What chat cannot carry is dropped, and said.
    let mut lossy = message("hello there");
    lossy["top_k"] = json!(5);
    let response = post(&stack, "/v1/messages", "lossy", &lossy).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "x-mom-translation"),
        "lossy: top_k dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_arrives_as_messages_events() {
    let stack = Stack::start().await;
    let mut body = message("Write a rust function that adds two numbers");
    body["stream"] = json!(true);
    let response = post(&stack, "/v1/messages", "streamed", &body).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("text/event-stream"));
    let events = events(&response.text().await.unwrap());
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds[0], "message_start");
    assert_eq!(kinds[1], "content_block_start");
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let text: String = events
        .iter()
        .filter(|(k, _)| k == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        text.starts_with("[fake backend qwen2.5-coder-0.5b]") && text.contains("adds two numbers"),
        "{text}"
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    // The backend was asked for usage on its last chunk.
    let seen = stack.backends["qwen2.5-coder-0.5b"].seen.lock().unwrap()[0].clone();
    let upstream: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(upstream["stream_options"]["include_usage"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_come_in_the_messages_shape_and_bad_requests_go_nowhere() {
    let stack = Stack::start().await;
    let no_limit = json!({"model": "mom/auto", "messages": [{"role": "user", "content": "hi"}]});
    let response = post(&stack, "/v1/messages", "no-max", &no_limit).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let reason = error["error"]["message"].as_str().unwrap();
    assert!(reason.contains("max_tokens"), "{error}");
    let orphan = json!({"model": "mom/auto", "max_tokens": 9, "messages": [{"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "tu_9", "content": "x"}]}]});
    let response = post(&stack, "/v1/messages", "orphan", &orphan).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("tu_9"));
    let mut unknown = message("hi");
    unknown["model"] = json!("gpt-9");
    let response = post(&stack, "/v1/messages", "unknown", &unknown).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("gpt-9"));
    assert_eq!(stack.requests_seen(), 0);

    // An upstream failure is translated too.
    for backend in stack.backends.values() {
        backend.fail_status.store(503, Ordering::Relaxed);
    }
    let response = post(&stack, "/v1/messages", "failing", &message("hello")).await;
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "overloaded_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("failing on purpose"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_counted_locally_and_masked_values_come_back_in_the_message() {
    let stack = Stack::start().await;
    let response = post(
        &stack,
        "/v1/messages/count_tokens",
        "count",
        &json!({"model": "mom/auto", "messages": [{"role": "user", "content": "Hello there, how are you?"}]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let counted: Value = response.json().await.unwrap();
    assert!(counted["input_tokens"].as_u64().unwrap() > 0, "{counted}");
    assert_eq!(stack.requests_seen(), 0);

    // mom/secu masks the address before the model and restores it in the translated answer.
    let mut secret = message("My email is jane.doe@example.com. Repeat it back to me.");
    secret["model"] = json!("mom/secu");
    let response = post(&stack, "/v1/messages", "masked", &secret).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "x-mom-plugins").contains("pii:masked"));
    let answer: Value = response.json().await.unwrap();
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("jane.doe@example.com"), "{answer}");
    let seen = stack.bodies_seen();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].contains("jane.doe"), "{}", seen[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_request_is_answered_as_a_response_json_and_streamed() {
    let stack = Stack::start().await;
    let body = json!({"model": "mom/auto", "instructions": "Answer briefly.",
        "input": "Write a python function that reverses a list", "max_output_tokens": 64});
    let response = post(&stack, "/v1/responses", "responses", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-translation"), "responses to chat");
    assert_eq!(header(&response, "x-mom-decision"), "code");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "response");
    assert_eq!(answer["status"], "completed");
    let text = answer["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("reverses a list"), "{answer}");
    assert_eq!(answer["usage"]["total_tokens"], 12);
    let seen = stack.backends["qwen2.5-coder-0.5b"].seen.lock().unwrap()[0].clone();
    let upstream: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(upstream["messages"][0]["role"], "system");
    assert_eq!(upstream["max_tokens"], 64);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let response = post(&stack, "/v1/responses", "responses-stream", &streamed).await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.unwrap());
    assert_eq!(events[0].0, "response.created");
    let last = events.last().unwrap();
    assert_eq!(last.0, "response.completed");
    let deltas: String = events
        .iter()
        .filter(|(k, _)| k == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        last.1["response"]["output"][0]["content"][0]["text"],
        deltas.as_str()
    );
    assert!(deltas.contains("reverses a list"), "{deltas}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_responses_requests_are_refused_and_go_nowhere() {
    let stack = Stack::start().await;
    let cases = [
        (json!({"model": "mom/auto", "input": 42}), "input: must be"),
        (
            json!({"model": "mom/auto", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"model": "mom/auto", "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}),
            "no earlier function_call",
        ),
    ];
    for (i, (body, reason)) in cases.into_iter().enumerate() {
        let response = post(&stack, "/v1/responses", &format!("bad{i}"), &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_request", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");
    }
    assert_eq!(stack.requests_seen(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_speaks_messages_gets_the_request_untranslated_unless_the_answer_is_owed_work(
) {
    let native = "    protocols: [chat, messages]\n";
    let config = support::sidecar::quickstart_config()
        .replace(
            "    capabilities: [code, math]\n",
            &format!("    capabilities: [code, math]\n{native}"),
        )
        .replace(
            "    capabilities: [chat, facts]\n",
            &format!("    capabilities: [chat, facts]\n{native}"),
        );
    let stack = Stack::start_with_config(&config).await;
    let mut body = message("Write a python function that reverses a list");
    body["top_k"] = json!(5);
    let response = post(&stack, "/v1/messages", "native", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(header(&response, "x-mom-translation"), "messages native");
    // The backend's own answer, untouched.
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["id"], "msg_fake");
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[fake backend qwen2.5-coder-0.5b native]"),
        "{answer}"
    );
    // The client's body with only `model` rewritten: nothing dropped, nothing added.
    let seen = stack.backends["qwen2.5-coder-0.5b"].seen.lock().unwrap()[0].clone();
    assert_eq!(seen.path, "/v1/messages");
    let upstream: Value = serde_json::from_slice(&seen.body).unwrap();
    let mut expected = body.clone();
    expected["model"] = json!("Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(upstream, expected);
    let log = stack.envoy.access_log_line("native").await;
    assert_eq!(log["path"], "/v1/messages?t=native");
    assert_eq!(log["mom_router"]["protocol"], "messages");

    // A model that speaks chat only still gets the translation.
    let mut chat_only = message("hello there");
    chat_only["model"] = json!("gemma3-270m");
    let response = post(&stack, "/v1/messages", "chat-only", &chat_only).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-translation"), "messages to chat");

    // Masked values must come back in the answer: a native model gets the translation.
    let mut secret = message("My email is jane.doe@example.com. Repeat it back to me.");
    secret["model"] = json!("mom/secu");
    let response = post(&stack, "/v1/messages", "owed", &secret).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert!(header(&response, "x-mom-plugins").contains("pii:masked"));
    assert_eq!(header(&response, "x-mom-translation"), "messages to chat");
    let answer: Value = response.json().await.unwrap();
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("jane.doe@example.com"), "{answer}");
    let paths: Vec<&str> = stack
        .backends
        .values()
        .flat_map(|b| {
            b.seen
                .lock()
                .unwrap()
                .iter()
                .map(|s| s.path)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        paths.iter().filter(|p| **p == "/v1/messages").count(),
        1,
        "{paths:?}"
    );
}
