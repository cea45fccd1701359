//! Hostile upstreams through the real Envoy: a sub-request answered with a body past the reply
//! cap, a redirect (never followed, so the internal token goes nowhere else), a stream whose
//! choice index is enormous, and a stream that never sends a newline (both with a
//! content-length, through PII restore). Each is handled within its stated bound — a failed
//! call named in the looper's steps, or bytes passed on unchanged — and the sidecar keeps
//! serving the next request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use axum::body::Bytes;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::fake_openai::Hostile;
use support::stack::{header, Stack};

const POLICY: &str = r#"
version: hostile-test
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: smollm2-135m}
  - {name: qwen2.5-coder-0.5b, providerModel: qwen2.5-coder-0.5b}
  - {name: gemma3-270m, providerModel: gemma3-270m}
identities:
  - {name: mom/auto, defaultModel: gemma3-270m, decisions: [panel]}
  - name: mom/private
    defaultModel: smollm2-135m
    decisions: []
    plugins:
      - {type: pii, signal: personal_data, mode: mask}
signals:
  - {name: panel, type: keyword, keywords: [panel]}
  - {name: personal_data, type: pii}
decisions:
  - name: panel
    rules: {signal: panel}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}]
    looper: {type: ratings, maxConcurrent: 2, minSuccesses: 1, perCallTimeoutMs: 5000}
"#;

fn ask(identity: &str, text: &str, stream: bool) -> Value {
    json!({"model": identity, "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

/// The sidecar still answers an ordinary request after whatever came before.
async fn still_serving(stack: &Stack, marker: &str) {
    let response = stack
        .chat(&ask("mom/auto", "hello there", false), marker)
        .await;
    assert_eq!(response.status(), 200, "the sidecar stopped serving");
    assert_eq!(header(&response, "x-mom-model"), "gemma3-270m");
}

fn sse(events: &[String]) -> Bytes {
    Bytes::from(events.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_sub_request_reply_fails_that_call_and_the_panel_goes_on() {
    let stack = Stack::start_with_config(POLICY).await;
    // 9 MiB of JSON: past the 8 MiB a sub-request reply may hold.
    let padding = "x".repeat(9 << 20);
    let huge = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": padding},
                                   "finish_reason": "stop"}]});
    stack.backends["qwen2.5-coder-0.5b"].turn_hostile(Hostile {
        status: 200,
        headers: vec![("content-type", "application/json".to_owned())],
        body: Bytes::from(huge.to_string()),
    });
    stack.backends["smollm2-135m"].queue(&["a small answer"]);
    let response = stack
        .chat(&ask("mom/auto", "panel: hi", false), "huge")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "ratings");
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains("qwen2.5-coder-0.5b:") && steps.contains("bytes"),
        "the oversize call is named in the steps: {steps}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "a small answer");
    still_serving(&stack, "after-huge").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_and_the_token_goes_nowhere_else() {
    let stack = Stack::start_with_config(POLICY).await;
    // A trap where the redirect points: it counts every connection.
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let trap_url = format!("http://{}/v1/chat/completions", trap.local_addr().unwrap());
    let caught = Arc::new(AtomicUsize::new(0));
    let counter = caught.clone();
    tokio::spawn(async move {
        while trap.accept().await.is_ok() {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    stack.backends["qwen2.5-coder-0.5b"].turn_hostile(Hostile {
        status: 307,
        headers: vec![("location", trap_url)],
        body: Bytes::new(),
    });
    stack.backends["smollm2-135m"].queue(&["the only answer"]);
    let response = stack
        .chat(&ask("mom/auto", "panel: hi", false), "redirect")
        .await;
    assert_eq!(response.status(), 200);
    let steps = header(&response, "x-mom-looper-steps");
    assert!(steps.contains("qwen2.5-coder-0.5b:"), "{steps}");
    assert!(
        steps.contains("307"),
        "the redirect is named as a failure: {steps}"
    );
    assert_eq!(
        caught.load(Ordering::SeqCst),
        0,
        "the redirect target was never called"
    );
    still_serving(&stack, "after-redirect").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_an_enormous_index_or_no_newline_is_relayed_within_bounds() {
    let stack = Stack::start_with_config(POLICY).await;
    let small = &stack.backends["smollm2-135m"];
    let chunk = |index: &str| {
        format!(
            "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":{index},\"delta\":{{\"content\":\"[EMAIL_1]\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    small.turn_hostile(Hostile {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        body: sse(&[
            chunk("0"),
            chunk("18446744073709551615"),
            "data: [DONE]\n\n".to_owned(),
        ]),
    });
    let text = "Write to jane.doe@example.com";
    let response = stack.chat(&ask("mom/private", text, true), "index").await;
    // The upstream declares a content-length; restoring changes the length, so it is dropped
    // (Envoy would otherwise refuse the response with a bare 500).
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-length").is_none());
    let body = String::from_utf8_lossy(&response.bytes().await.unwrap()).into_owned();
    // The first choice's placeholder is restored; the absurd index is passed through as sent,
    // never used to size anything.
    assert!(body.contains("jane.doe@example.com"), "{body}");
    assert!(body.contains("18446744073709551615"), "{body}");
    still_serving(&stack, "after-index").await;

    // Two MiB with no newline: past the restorer's 1 MiB line bound, the line is passed on
    // as it is rather than held while waiting for a newline that never comes.
    let endless = format!("data: {}", "y".repeat(2 << 20));
    small.turn_hostile(Hostile {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        body: Bytes::from(endless.clone()),
    });
    let response = stack.chat(&ask("mom/private", text, true), "newline").await;
    let received = response.bytes().await.unwrap();
    assert_eq!(received.len(), endless.len());
    assert!(received.starts_with(b"data: yyyy"));
    still_serving(&stack, "after-newline").await;
}
