//! The grounding check of `mom/halu` (examples/identities) through the real Envoy, on the real
//! all-MiniLM-L6-v2 encoder: an answer the context supports passes with `x-mom-grounding`; one it
//! does not is replaced by the declared fallback answer (JSON or events), or only flagged when the
//! rule warns.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use support::stack::{header, streamed, Stack};

const CONTEXT: &str = "The Eiffel Tower in Paris was completed in 1889. It is 330 metres tall \
    and was built by the engineering company of Gustave Eiffel for the World's Fair.";
const FALLBACK: &str = "I cannot answer that from the provided context.";
const MODEL: &str = "qwen2.5-coder-0.5b";

fn config() -> String {
    support::sidecar::example_config("identities")
}

fn question(stream: bool) -> Value {
    json!({"model": "mom/halu", "stream": stream, "messages": [
        {"role": "system", "content": CONTEXT},
        {"role": "user", "content": "When was the Eiffel Tower completed, and how tall is it?"}]})
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supported_answers_pass_and_unsupported_ones_get_the_fallback() {
    let stack = Stack::start_with_config(&config()).await;
    let upstream = &stack.backends[MODEL];
    let supported = "The Eiffel Tower was completed in 1889. It is 330 metres tall.";
    upstream.queue(&[supported]);
    let response = stack.chat(&question(false), "grounded").await;
    assert_eq!(response.status(), 200);
    let verdict = header(&response, "x-mom-grounding");
    assert!(verdict.starts_with("grounded 2/2 min="), "{verdict}");
    assert_eq!(content(&response.json().await.unwrap()), supported);
    let log = stack.envoy.access_log_line("grounded").await;
    assert_eq!(log["mom_router"]["grounding"], verdict.as_str());

    // An invented date, and a claim the context does not make.
    let invented = "The Eiffel Tower was completed in 1650 by Napoleon. It is made of chocolate.";
    upstream.queue(&[invented]);
    let response = stack.chat(&question(false), "invented").await;
    assert_eq!(response.status(), 200);
    let verdict = header(&response, "x-mom-grounding");
    assert!(verdict.starts_with("ungrounded 0/2 min=0.00"), "{verdict}");
    assert!(verdict.ends_with(";fallback"), "{verdict}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(content(&body), FALLBACK);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    // A streaming client gets the fallback as events: the answer is held for the check.
    upstream.queue(&[invented]);
    let response = stack.chat(&question(true), "streamed").await;
    assert!(header(&response, "content-type").starts_with("text/event-stream"));
    assert!(header(&response, "x-mom-grounding").ends_with(";fallback"));
    let text = response.text().await.unwrap();
    assert_eq!(streamed(&text), FALLBACK);
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    // The same answer streamed, supported this time, reaches the client whole.
    upstream.queue(&[supported]);
    let response = stack.chat(&question(true), "streamed-ok").await;
    assert!(header(&response, "x-mom-grounding").starts_with("grounded"));
    assert_eq!(streamed(&response.text().await.unwrap()).trim(), supported);

    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    for line in [
        r#"mom_plugin_actions_total{plugin="grounding",outcome="grounded"} 2"#,
        r#"mom_plugin_actions_total{plugin="grounding",outcome="replaced"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_rule_flags_the_answer_and_delivers_it() {
    let warn = config().replace(
        "        onFail: fail\n        fallback: \"I cannot answer that from the provided context.\"\n",
        "        onFail: warn\n",
    );
    assert_ne!(warn, config());
    let stack = Stack::start_with_config(&warn).await;
    let invented = "The Eiffel Tower was painted green by Picasso.";
    stack.backends[MODEL].queue(&[invented]);
    let response = stack.chat(&question(false), "warn").await;
    assert_eq!(response.status(), 200);
    let verdict = header(&response, "x-mom-grounding");
    assert!(verdict.starts_with("ungrounded 0/1"), "{verdict}");
    assert!(!verdict.contains("fallback"), "{verdict}");
    assert_eq!(content(&response.json().await.unwrap()), invented);
}
