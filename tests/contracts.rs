//! Output contracts through the real Envoy: answers in hand are checked and repaired once by the
//! model that wrote them; a forwarded answer is checked in the response phase — buffered and
//! repaired for a JSON client, checked (and only reported) for a streaming one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use support::stack::{header, Stack};

const POLICY: &str = r#"
version: contracts-test
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}
  - {name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}
  - {name: gemma3-270m, providerModel: gemma-3-270m}
identities:
  - {name: mom/auto, defaultModel: smollm2-135m}
signals:
  - {name: choose, type: keyword, keywords: [choose]}
  - {name: code, type: keyword, keywords: [code]}
  - {name: json, type: keyword, keywords: [json]}
  - {name: strict, type: keyword, keywords: [strict]}
  - {name: pattern, type: keyword, keywords: [digits]}
decisions:
  - name: choose
    rules: {signal: choose}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]
    looper: {type: ratings, perCallTimeoutMs: 3000}
    outputContract: {type: multiple_choice}
  - name: code
    rules: {signal: code}
    modelRefs: [{model: smollm2-135m}, {model: gemma3-270m}]
    looper: {type: confidence, threshold: -0.5, perCallTimeoutMs: 3000}
    outputContract: {type: code, language: python}
  - name: strict_json
    priority: 10
    rules: {signal: strict}
    modelRefs: [{model: qwen2.5-coder-0.5b}]
    outputContract:
      type: json_schema
      schema: {type: object, required: [answer], properties: {answer: {type: integer}}}
      onViolation: fail
  - name: json
    rules: {signal: json}
    modelRefs: [{model: qwen2.5-coder-0.5b}]
    outputContract:
      type: json_schema
      schema: {type: object, required: [answer], properties: {answer: {type: integer}}}
  - name: digits
    rules: {signal: pattern}
    modelRefs: [{model: gemma3-270m}]
    outputContract: {type: regex, pattern: '^\d+\s*$'}
"#;

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "mom/auto", "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

async fn answer_text(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_prefers_the_best_answer_that_keeps_the_contract() {
    let stack = Stack::start_with_config(POLICY).await;
    let replies = [
        ("smollm2-135m", "I believe it is B.", -0.01),
        ("qwen2.5-coder-0.5b", "Reasoning first.\nANSWER: C", -0.5),
        ("gemma3-270m", "ANSWER: Z", -0.2),
    ];
    for (model, text, logprob) in replies {
        *stack.backends[model].reply_text.lock().unwrap() = Some(text.to_owned());
        stack.backends[model].set_logprob(logprob);
    }
    let response = stack.chat(&ask("choose one", false), "mc").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-contract"), "multiple_choice:kept");
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(answer_text(response).await, "Reasoning first.\nANSWER: C");
    // Every model was told the format; nobody needed a repair.
    for (model, _, _) in replies {
        let calls = stack.backends[model].bodies();
        assert_eq!(calls.len(), 1, "{model}");
        assert!(calls[0]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with(
                "End your answer with one line `ANSWER: X`, where X is one of A, B, C, D."
            ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_repairs_a_confident_answer_and_escalates_one_that_stays_broken() {
    let stack = Stack::start_with_config(POLICY).await;
    let small = &stack.backends["smollm2-135m"];
    small.queue(&["print(42) is the code", "```python\nprint(42)\n```"]);
    let response = stack.chat(&ask("write code", false), "repaired").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "immediate");
    assert_eq!(header(&response, "x-mom-contract"), "code:repaired");
    assert!(header(&response, "x-mom-looper-steps")
        .starts_with("smollm2-135m:confident (repaired):-0.050"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "```python\nprint(42)\n```"
    );
    // Usage sums the tentative call and the repair.
    assert_eq!(body["usage"]["completion_tokens"], 14);
    let repair = &small.bodies()[1];
    let turns = repair["messages"].as_array().unwrap();
    assert_eq!(turns[turns.len() - 2]["content"], "print(42) is the code");
    assert!(turns[turns.len() - 1]["content"]
        .as_str()
        .unwrap()
        .starts_with(
            "Your answer does not have the required format: no complete fenced code block"
        ));

    // Broken twice: the cascade escalates; the last model's forwarded answer is buffered,
    // found broken, repaired by that model, and the repaired body replaces it.
    small.queue(&["no code", "still no code"]);
    stack.backends["gemma3-270m"].queue(&["prose again", "```py\nprint(1)\n```"]);
    let response = stack.chat(&ask("more code", false), "escalated").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "upstream");
    assert_eq!(header(&response, "x-mom-model"), "gemma3-270m");
    assert!(header(&response, "x-mom-looper-steps")
        .starts_with("smollm2-135m:confident but contract violated"));
    assert_eq!(header(&response, "x-mom-contract"), "code:repaired");
    assert_eq!(answer_text(response).await, "```py\nprint(1)\n```");
    let forwarded = stack.backends["gemma3-270m"].bodies();
    assert_eq!(forwarded.len(), 2);
    assert_eq!(forwarded[0]["messages"][0]["role"], "system");
    let log = stack.envoy.access_log_line("escalated").await;
    assert_eq!(log["mom_router"]["contract"], "code:repaired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_json_answer_is_kept_repaired_or_refused_per_contract() {
    let stack = Stack::start_with_config(POLICY).await;
    let qwen = &stack.backends["qwen2.5-coder-0.5b"];
    qwen.queue(&[r#"{"answer": 5}"#]);
    let response = stack.chat(&ask("json please", false), "kept").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-contract"), "json_schema:kept");
    assert_eq!(answer_text(response).await, r#"{"answer": 5}"#);
    let first = &qwen.bodies()[0];
    assert!(first["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("Reply with one JSON value and nothing else"));

    qwen.queue(&["four", r#"{"answer": 4}"#]);
    let response = stack.chat(&ask("json again", false), "repaired").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-contract"), "json_schema:repaired");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], r#"{"answer": 4}"#);
    assert_eq!(body["usage"]["completion_tokens"], 14);
    assert_eq!(qwen.bodies().len(), 3);

    qwen.queue(&["five", r#"{"answer": "five"}"#]);
    let response = stack.chat(&ask("strict json", false), "refused").await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "contract_violated");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("JSON at /answer"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_checked_and_reported_not_held_back() {
    let stack = Stack::start_with_config(POLICY).await;
    stack.backends["gemma3-270m"].queue(&["not digits at all"]);
    let mut response = stack.chat(&ask("digits please", true), "streamed").await;
    assert_eq!(response.status(), 200);
    let mut text = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains("digits ") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    let log = stack.envoy.access_log_line("streamed").await;
    assert_eq!(log["mom_router"]["contract"], "regex:violated");
    assert_eq!(stack.backends["gemma3-270m"].bodies().len(), 1);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    assert!(
        metrics.contains(r#"mom_contract_checks_total{contract="regex",outcome="violated"} 1"#),
        "{metrics}"
    );
}

/// Identities whose every answer is validated by a `response_validation` plugin: annotate only,
/// refuse without a repair, or repair once.
const VALIDATED: &str = r#"
version: validation-test
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}
identities:
  - name: mom/annotated
    defaultModel: smollm2-135m
    plugins:
      - {type: response_validation, repair: false, outputContract: {type: regex, pattern: '^\d+$'}}
  - name: mom/refused
    defaultModel: smollm2-135m
    plugins:
      - type: response_validation
        repair: false
        outputContract: {type: regex, pattern: '^\d+$', onViolation: fail}
  - name: mom/repaired
    defaultModel: smollm2-135m
    plugins:
      - {type: response_validation, outputContract: {type: regex, pattern: '^\d+$'}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_validation_plugin_annotates_refuses_or_repairs_as_configured() {
    let stack = Stack::start_with_config(VALIDATED).await;
    let upstream = &stack.backends["smollm2-135m"];
    let as_identity = |identity: &str| json!({"model": identity, "messages": [{"role": "user", "content": "How many legs has a spider?"}]});
    upstream.queue(&["Eight legs."]);
    let response = stack.chat(&as_identity("mom/annotated"), "annotated").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-contract"), "regex:violated");
    assert_eq!(answer_text(response).await, "Eight legs.");
    assert_eq!(upstream.bodies().len(), 1, "no repair was asked for");

    upstream.queue(&["Eight legs."]);
    let response = stack.chat(&as_identity("mom/refused"), "refused").await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "contract_violated");
    assert_eq!(upstream.bodies().len(), 2);

    upstream.queue(&["Eight legs.", "8"]);
    let response = stack.chat(&as_identity("mom/repaired"), "repaired").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-contract"), "regex:repaired");
    assert_eq!(answer_text(response).await, "8");
    assert_eq!(upstream.bodies().len(), 4, "one repair call");
    // The contract's instruction reached the model with the request.
    let first = &upstream.bodies()[0];
    assert!(first["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("regular expression"));
}
