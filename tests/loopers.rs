//! The confidence cascade through the real Envoy: tentative calls go through Envoy's internal
//! listener with the internal token; a confident cheap answer comes back at once (JSON or SSE);
//! otherwise the client's own request is forwarded to the last model and streamed by Envoy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::stack::{header, Stack};

fn policy(on_error: &str) -> String {
    format!(
        r#"
version: loopers-test
server: {{internalUrl: "http://127.0.0.1:10001"}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}}
  - {{name: gemma3-270m, providerModel: gemma-3-270m}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
decisions:
  - name: cascade
    rules: {{signal: anything}}
    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}, {{model: gemma3-270m}}]
    looper: {{type: confidence, threshold: -0.5, maxTokens: 64, perCallTimeoutMs: 2000, onError: {on_error}}}
"#
    )
}

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "mom/auto", "stream": stream, "max_tokens": 300,
           "messages": [{"role": "user", "content": text}]})
}

fn seen(stack: &Stack, model: &str) -> Vec<Value> {
    stack.backends[model]
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| {
            let mut body: Value = serde_json::from_slice(&s.body).unwrap();
            let get = |name: &str| {
                s.headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            body["_token"] = json!(get("x-mom-internal-token"));
            body["_depth"] = json!(get("x-mom-depth"));
            body
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confident_cheap_answer_is_returned_without_calling_the_others() {
    let stack = Stack::start_with_config(&policy("skip")).await;
    let response = stack
        .chat(&ask("what is two plus two", false), "conf")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "immediate");
    assert_eq!(header(&response, "x-mom-looper"), "confidence");
    assert_eq!(header(&response, "x-mom-looper-calls"), "1");
    assert!(header(&response, "x-mom-looper-steps").starts_with("smollm2-135m:confident:-0.050"));
    let body: Value = response.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("[fake backend smollm2-135m]"), "{text}");
    assert_eq!(body["usage"]["completion_tokens"], 7);
    // The tentative call went through Envoy's internal listener, signed, capped, with logprobs.
    let calls = seen(&stack, "smollm2-135m");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["logprobs"], true);
    assert_eq!(calls[0]["stream"], false);
    assert_eq!(calls[0]["max_tokens"], 64);
    assert_eq!(calls[0]["model"], "SmolLM2-135M-Instruct");
    // The internal listener strips mom-router's signature before the backend.
    assert!(calls[0]["_depth"].is_null() && calls[0]["_token"].is_null());
    assert!(
        seen(&stack, "qwen2.5-coder-0.5b").is_empty() && seen(&stack, "gemma3-270m").is_empty()
    );
    // A streaming client gets the same answer as server-sent events.
    let response = stack
        .chat(&ask("what is two plus two", true), "conf-sse")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "content-type"), "text/event-stream");
    let text = response.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"), "{text}");
    let first: Value = serde_json::from_str(events[0].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert!(first["choices"][0]["delta"]["content"]
        .as_str()
        .unwrap()
        .starts_with("[fake backend smollm2-135m]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfident_answers_escalate_and_the_last_model_streams_through_envoy() {
    let stack = Stack::start_with_config(&policy("skip")).await;
    stack.backends["smollm2-135m"].set_logprob(-2.0);
    stack.backends["qwen2.5-coder-0.5b"].set_logprob(-1.5);
    let started = Instant::now();
    let mut response = stack
        .chat(&ask("prove the theorem", true), "escalate")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "upstream");
    assert_eq!(header(&response, "x-mom-model"), "gemma3-270m");
    assert_eq!(header(&response, "x-mom-looper-calls"), "2");
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains("smollm2-135m:unconfident:-2.000")
            && steps.contains("qwen2.5-coder-0.5b:unconfident:-1.500"),
        "{steps}"
    );
    // Chunk by chunk: the fake pauses 200 ms between chunks and Envoy passes each on.
    let mut arrivals = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        arrivals.push((started.elapsed(), chunk));
    }
    assert!(arrivals.len() >= 3, "{} chunks", arrivals.len());
    let spread = arrivals.last().unwrap().0 - arrivals[0].0;
    assert!(
        spread >= Duration::from_millis(300),
        "chunks arrived together: {spread:?}"
    );
    // The last model received the client's own request, not a tentative one.
    let last = seen(&stack, "gemma3-270m");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0]["stream"], true);
    assert_eq!(last[0]["max_tokens"], 300);
    assert!(last[0]["logprobs"].is_null() && last[0]["_token"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tentative_model_is_skipped_or_fails_the_request_as_configured() {
    let stack = Stack::start_with_config(&policy("skip")).await;
    stack.backends["smollm2-135m"]
        .fail_status
        .store(500, Ordering::Relaxed);
    let response = stack.chat(&ask("hello", false), "skip").await;
    assert_eq!(response.status(), 200);
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.starts_with("smollm2-135m:error: upstream answered 500,qwen2.5-coder-0.5b:confident"),
        "{steps}"
    );
    let body: Value = response.json().await.unwrap();
    assert!(body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("qwen2.5-coder-0.5b"));

    let failing = Stack::start_with_config(&policy("fail")).await;
    failing.backends["smollm2-135m"]
        .fail_status
        .store(503, Ordering::Relaxed);
    let response = failing.chat(&ask("hello", false), "fail").await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "looper_failed");
    assert!(seen(&failing, "qwen2.5-coder-0.5b").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sub_call_fails_over_to_a_model_the_looper_does_not_ask() {
    // The cascade asks SmolLM2, then the coder; the identity fails over to gemma.
    let config = policy("fail")
        .replace(
            "{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]",
            "{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}]",
        )
        .replace(
            "defaultModel: smollm2-135m}",
            "defaultModel: smollm2-135m, failover: {models: [gemma3-270m]}}",
        );
    let stack = Stack::start_with_config(&config).await;
    stack.backends["smollm2-135m"]
        .fail_status
        .store(503, Ordering::Relaxed);
    let response = stack.chat(&ask("what is two plus two", false), "sub").await;
    assert_eq!(response.status(), 200);
    // Gemma answered the tentative call, confidently: the coder was never needed.
    assert_eq!(header(&response, "x-mom-response-path"), "immediate");
    assert_eq!(header(&response, "x-mom-model"), "gemma3-270m");
    assert_eq!(
        header(&response, "x-mom-fallback"),
        "smollm2-135m 503 -> gemma3-270m"
    );
    assert!(
        header(&response, "x-mom-looper-steps").starts_with("gemma3-270m:confident:"),
        "{}",
        header(&response, "x-mom-looper-steps")
    );
    let body: Value = response.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("[fake backend gemma3-270m]"), "{text}");
    // The fallback got the same sub-request, written for its own provider model.
    let calls = seen(&stack, "gemma3-270m");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["model"], "gemma-3-270m");
    assert_eq!(calls[0]["max_tokens"], 64);
    assert!(seen(&stack, "qwen2.5-coder-0.5b").is_empty());
    let log = stack.envoy.access_log_line("sub").await;
    assert_eq!(
        log["mom_router"]["fallback"],
        "smollm2-135m 503 -> gemma3-270m"
    );
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    assert!(
        metrics.contains(
            "mom_fallback_total{from=\"smollm2-135m\",to=\"gemma3-270m\",reason=\"503\"} 1"
        ),
        "{metrics}"
    );

    // A 400 is the request's fault: the call is not handed on, and onError: fail refuses.
    stack.backends["smollm2-135m"]
        .fail_status
        .store(400, Ordering::Relaxed);
    let response = stack
        .chat(&ask("what is two plus two", false), "sub-400")
        .await;
    assert_eq!(response.status(), 502);
    assert_eq!(header(&response, "x-mom-fallback"), "");
    assert_eq!(seen(&stack, "gemma3-270m").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_pose_as_sub_requests() {
    let stack = Stack::start_with_config(&policy("skip")).await;
    // Envoy's public listener strips the internal headers: the request is routed as a client's,
    // looper included, instead of being trusted as a sub-request.
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", "spoof"))
        .header("x-mom-internal-token", "0".repeat(32))
        .header("x-mom-depth", "1")
        .json(&ask("hello", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "confidence");
}

fn ratings_policy(min_successes: usize) -> String {
    policy("skip").replace(
        "looper: {type: confidence, threshold: -0.5, maxTokens: 64, perCallTimeoutMs: 2000, onError: skip}",
        &format!("looper: {{type: ratings, maxConcurrent: 3, minSuccesses: {min_successes}, perCallTimeoutMs: 2000}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ratings_ensemble_asks_every_model_and_returns_the_best_scored_answer() {
    let config = ratings_policy(2);
    assert!(config.contains("type: ratings"));
    let stack = Stack::start_with_config(&config).await;
    stack.backends["smollm2-135m"].set_logprob(-2.0);
    stack.backends["qwen2.5-coder-0.5b"].set_logprob(-0.1);
    stack.backends["gemma3-270m"].set_logprob(-0.5);
    for backend in stack.backends.values() {
        backend.delay_ms.store(150, Ordering::Relaxed);
    }
    let started = Instant::now();
    let response = stack
        .chat(&ask("which answer is best", false), "ratings")
        .await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "ratings");
    assert_eq!(header(&response, "x-mom-looper-calls"), "3");
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    // Three 150 ms answers in parallel, not one after another.
    assert!(elapsed < Duration::from_millis(420), "took {elapsed:?}");
    let body: Value = response.json().await.unwrap();
    assert!(body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("qwen2.5-coder-0.5b"));
    assert_eq!(
        body["usage"]["completion_tokens"], 21,
        "usage sums the three calls"
    );
    for model in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        assert_eq!(seen(&stack, model).len(), 1, "{model}");
    }
    // Two failing models leave one answer: below the quorum of two.
    stack.backends["smollm2-135m"]
        .fail_status
        .store(500, Ordering::Relaxed);
    stack.backends["gemma3-270m"]
        .fail_status
        .store(500, Ordering::Relaxed);
    let response = stack.chat(&ask("again", false), "quorum").await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 of 3 models answered; 2 needed"),
        "{error}"
    );
}

fn remom_policy() -> String {
    policy("skip").replace(
        "looper: {type: confidence, threshold: -0.5, maxTokens: 64, perCallTimeoutMs: 2000, onError: skip}",
        "looper: {type: remom, synthesizer: qwen2.5-coder-0.5b, minSuccesses: 2, perCallTimeoutMs: 2000}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remom_synthesizes_the_panel_through_envoy_and_falls_back_to_the_best_evidence() {
    let config = remom_policy();
    assert!(config.contains("type: remom"));
    let stack = Stack::start_with_config(&config).await;
    stack.backends["gemma3-270m"].set_logprob(-1.0);
    let started = Instant::now();
    let mut response = stack.chat(&ask("summarise the plan", true), "remom").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "remom");
    assert_eq!(header(&response, "x-mom-looper-calls"), "2");
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    assert_eq!(header(&response, "x-mom-response-path"), "upstream");
    let mut arrivals = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        arrivals.push(started.elapsed());
        let _ = chunk;
    }
    assert!(
        arrivals.len() >= 3
            && *arrivals.last().unwrap() - arrivals[0] >= Duration::from_millis(300)
    );
    // The synthesizer got the client's request plus the panel's answers, best first.
    let synthesis = seen(&stack, "qwen2.5-coder-0.5b");
    assert_eq!(synthesis.len(), 1);
    assert!(synthesis[0]["_token"].is_null() && synthesis[0]["stream"] == true);
    let brief = synthesis[0]["messages"][0]["content"].as_str().unwrap();
    assert_eq!(synthesis[0]["messages"][0]["role"], "system");
    let (small, gemma) = (
        brief.find("[fake backend smollm2-135m]").unwrap(),
        brief.find("[fake backend gemma3-270m]").unwrap(),
    );
    assert!(
        small < gemma,
        "the more confident answer comes first: {brief}"
    );
    assert_eq!(synthesis[0]["messages"][1]["content"], "summarise the plan");
    // The panel's sub-requests went through the internal listener, which kept their signature.
    assert!(seen(&stack, "smollm2-135m")[0]["_depth"].is_null());

    // The synthesizer fails: the best panel answer is returned instead.
    stack.backends["qwen2.5-coder-0.5b"]
        .fail_status
        .store(500, Ordering::Relaxed);
    let response = stack
        .chat(&ask("summarise the plan", false), "remom-fallback")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper-fallback"), "evidence");
    let body: Value = response.json().await.unwrap();
    assert!(body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("[fake backend smollm2-135m]"));

    // A panel below quorum fails before any synthesis.
    stack.backends["gemma3-270m"]
        .fail_status
        .store(500, Ordering::Relaxed);
    let before = seen(&stack, "qwen2.5-coder-0.5b").len();
    let response = stack.chat(&ask("again", false), "remom-quorum").await;
    assert_eq!(response.status(), 502);
    assert_eq!(seen(&stack, "qwen2.5-coder-0.5b").len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fusion_judges_the_panel_and_the_finalizer_writes_from_the_analysis() {
    let config = policy("skip").replace(
        "looper: {type: confidence, threshold: -0.5, maxTokens: 64, perCallTimeoutMs: 2000, onError: skip}",
        "looper: {type: fusion, judge: qwen2.5-coder-0.5b, finalizer: qwen2.5-coder-0.5b, perCallTimeoutMs: 2000}",
    );
    assert!(config.contains("type: fusion"));
    let stack = Stack::start_with_config(&config).await;
    *stack.backends["qwen2.5-coder-0.5b"].reply_text.lock().unwrap() = Some(
        r#"{"agreement": ["both echo the question"], "contradictions": ["they name different backends"], "unique_insights": []}"#.to_owned(),
    );
    let response = stack
        .chat(&ask("compare the options", true), "fusion")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "fusion");
    assert_eq!(header(&response, "x-mom-looper-calls"), "3");
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains("qwen2.5-coder-0.5b (judge):judged"),
        "{steps}"
    );
    let _ = response.bytes().await.unwrap();
    let calls = seen(&stack, "qwen2.5-coder-0.5b");
    assert_eq!(calls.len(), 2, "the judge, then the finalizer");
    // The judge: a sub-request (its signature stripped before the backend) comparing both
    // panel answers.
    assert!(calls[0]["_depth"].is_null());
    assert!(calls[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("\"contradictions\""));
    let compared = calls[0]["messages"][1]["content"].as_str().unwrap();
    assert!(
        compared.contains("[fake backend smollm2-135m]")
            && compared.contains("[fake backend gemma3-270m]")
    );
    // The finalizer: the client's request, streamed, with the answers and the analysis.
    assert!(calls[1]["_token"].is_null() && calls[1]["stream"] == true);
    let brief = calls[1]["messages"][0]["content"].as_str().unwrap();
    assert!(
        brief.contains("Contradictions:\n- they name different backends"),
        "{brief}"
    );
    assert!(brief.contains("[fake backend gemma3-270m]"));
    assert_eq!(calls[1]["messages"][1]["content"], "compare the options");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_verification_returns_an_answer_its_model_vouches_for_and_escalates_otherwise() {
    let config = policy("skip").replace(
        "looper: {type: confidence, threshold: -0.5,",
        "looper: {type: confidence, measure: self_verify, threshold: 0.8,",
    );
    let stack = Stack::start_with_config(&config).await;
    let small = &stack.backends["smollm2-135m"];
    small.queue(&["42", "YES"]);
    let response = stack.chat(&ask("six times seven", false), "vouched").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "immediate");
    // P(YES) = exp(-0.05) from the verification call's first token.
    assert_eq!(
        header(&response, "x-mom-looper-steps"),
        "smollm2-135m:confident:0.951"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "42");
    assert_eq!(body["usage"]["completion_tokens"], 14);
    let verification = &small.bodies()[1];
    assert_eq!(verification["max_tokens"], 4);
    assert_eq!(verification["top_logprobs"], 5);
    let question = verification["messages"][1]["content"].as_str().unwrap();
    assert!(question.contains("six times seven") && question.contains("Answer:\n42"));

    small.queue(&["41", "NO"]);
    stack.backends["qwen2.5-coder-0.5b"].queue(&["40", "No."]);
    let response = stack.chat(&ask("six times seven", false), "doubted").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "upstream");
    assert_eq!(header(&response, "x-mom-model"), "gemma3-270m");
    assert_eq!(
        header(&response, "x-mom-looper-steps"),
        "smollm2-135m:unconfident:0.000,qwen2.5-coder-0.5b:unconfident:0.000"
    );
}
