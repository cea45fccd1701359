//! Tenants and their budgets through a real Envoy: a tenant is known by its API key (an unknown
//! or missing key gets 401), a tenant past its tokens a minute gets 429 with Retry-After before
//! any model is called while another tenant is served, the bucket refills, requests in flight
//! are bounded, and every answer carries OpenAI's `x-ratelimit-*` headers. No key appears in the
//! access log or the answer.
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

const SMALL_KEY: &str = "sk-test-small-0001";
const LARGE_KEY: &str = "sk-test-large-0002";

fn digest(key: &str) -> String {
    mom_router::config::hex_sha256(key.as_bytes())
}

/// Two tenants by API key: `small` with 40 tokens a minute and one request at a time,
/// `large` with plenty.
fn policy() -> String {
    format!(
        r#"
version: tenants-test
server:
  maxBodyBytes: 1048576
models:
  - {{ name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct }}
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct }}
identities:
  - {{ name: mom/auto, defaultModel: smollm2-135m }}
tenants:
  identifyBy: apiKey
  list:
    - name: small
      apiKeys: {{ sha256: ["{}"] }}
      limits:
        - {{ tokensPerMinute: 40 }}
        - {{ concurrentRequests: 1 }}
    - name: large
      apiKeys: {{ sha256: ["{}"] }}
      limits:
        - {{ tokensPerMinute: 100000 }}
        - {{ requestsPerMinute: 1000 }}
"#,
        digest(SMALL_KEY),
        digest(LARGE_KEY)
    )
}

/// The `tenants` section of a policy: tenant `small`, known by [`SMALL_KEY`], with one limit.
fn small_tenant(limit: &str) -> String {
    format!(
        "tenants:\n  identifyBy: apiKey\n  list:\n    - name: small\n      apiKeys: {{ sha256: [\"{}\"] }}\n      limits: [{limit}]\n",
        digest(SMALL_KEY)
    )
}

/// Posts a chat body through Envoy with `key` (none when `None`).
async fn chat(stack: &Stack, key: Option<&str>, marker: &str) -> reqwest::Response {
    let mut request = stack
        .client
        .post(stack.url("/v1/chat/completions", marker))
        .header("content-type", "application/json")
        .body(ask("hello there").to_string());
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request.send().await.unwrap()
}

fn number(response: &reqwest::Response, name: &str) -> u64 {
    let value = header(response, name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {value:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_tokens_is_refused_before_any_model_is_called_and_another_is_served() {
    let stack = Stack::start_with_config(&policy()).await;
    let mut remaining = Vec::new();
    let mut refused = None;
    for i in 0..10 {
        let response = chat(&stack, Some(SMALL_KEY), &format!("small-{i}")).await;
        if response.status() == 429 {
            refused = Some((i, response));
            break;
        }
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-tenant"), "small");
        assert_eq!(number(&response, "x-ratelimit-limit-tokens"), 40);
        remaining.push(number(&response, "x-ratelimit-remaining-tokens"));
        assert!(header(&response, "x-ratelimit-reset-tokens").ends_with('s'));
    }
    // Each answer reports 12 tokens: the third or fourth request no longer fits 40.
    let (i, response) = refused.expect("never refused");
    assert!((2..=4).contains(&i), "refused at request {i}");
    assert!(
        remaining.windows(2).all(|w| w[1] < w[0]),
        "remaining tokens fall: {remaining:?}"
    );
    let seen = stack.requests_seen();
    assert_eq!(seen, i, "the refused request reached no model");
    let sent = stack.backends["smollm2-135m"].seen.lock().unwrap().clone();
    for request in &sent {
        let names: Vec<&str> = request.headers.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            !names.contains(&"authorization") && !names.contains(&"x-api-key"),
            "a tenant's key reached a model: {names:?}"
        );
    }
    let retry_after = number(&response, "retry-after");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(number(&response, "x-ratelimit-remaining-tokens"), 0);
    assert_eq!(number(&response, "x-ratelimit-limit-tokens"), 40);
    assert_eq!(
        header(&response, "x-ratelimit-reset-tokens"),
        format!("{retry_after}s")
    );
    assert_eq!(header(&response, "x-mom-tenant"), "small");
    let marker = format!("small-{i}");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    assert_eq!(error["error"]["type"], "tokens");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("tokensPerMinute limit of 40"), "{message}");
    let line = stack.envoy.access_log_line(&marker).await;
    assert_eq!(line["status"], 429, "{line}");
    assert_eq!(line["mom_router"]["tenant"], "small", "{line}");
    assert_eq!(line["mom_router"]["error"], "rate_limit_exceeded", "{line}");

    let other = chat(&stack, Some(LARGE_KEY), "large-0").await;
    assert_eq!(other.status(), 200, "another tenant is unaffected");
    assert_eq!(header(&other, "x-mom-tenant"), "large");
    assert_eq!(number(&other, "x-ratelimit-limit-requests"), 1000);
    assert_eq!(number(&other, "x-ratelimit-remaining-requests"), 999);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    assert!(
        metrics
            .contains(r#"mom_tenant_refusals_total{tenant="small",code="rate_limit_exceeded"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"mom_tenant_requests_total{tenant="large"} 1"#),
        "{metrics}"
    );
    let log = stack.envoy.access_log_line("large-0").await.to_string();
    for key in [SMALL_KEY, LARGE_KEY] {
        assert!(!log.contains(key), "a key in the access log: {log}");
    }

    // The admin API says what the tenant has left and what it did.
    let admin = stack.sidecar.as_ref().unwrap().admin_url();
    let usage: Value = reqwest::get(format!("{admin}/v1/tenants/small/usage"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(usage["tenant"], "small", "{usage}");
    assert_eq!(usage["limits"][0]["limit"], "tokensPerMinute", "{usage}");
    let left = usage["limits"][0]["remaining"].as_f64().unwrap();
    assert!(left < 12.0, "{usage}");
    assert_eq!(usage["limits"][1]["in_flight"], 0.0, "{usage}");
    assert_eq!(usage["this_replica"]["requests"], i as u64, "{usage}");
    assert_eq!(usage["this_replica"]["tokens"], (12 * i) as f64, "{usage}");
    assert_eq!(usage["this_replica"]["refusals"], 1, "{usage}");
    let unknown = reqwest::get(format!("{admin}/v1/tenants/nobody/usage"))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // The bucket refills at 40 a minute: after the wait it asked for, the request fits.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let again = chat(&stack, Some(SMALL_KEY), "small-refilled").await;
    assert_eq!(again.status(), 200, "the window refilled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_missing_key_is_refused_with_401_and_no_model_is_called() {
    let stack = Stack::start_with_config(&policy()).await;
    for (key, marker, reason) in [
        (
            Some("sk-not-a-tenant"),
            "unknown",
            "unknown API key (sha256 ",
        ),
        (None, "missing", "no API key"),
    ] {
        let response = chat(&stack, key, marker).await;
        assert_eq!(response.status(), 401, "{marker}");
        assert_eq!(header(&response, "www-authenticate"), "Bearer");
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("sk-not-a-tenant"),
            "the key is echoed: {text}"
        );
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["code"], "invalid_api_key", "{text}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");
        let line = stack.envoy.access_log_line(marker).await;
        assert!(!line.to_string().contains("sk-not-a-tenant"), "{line}");
    }
    assert_eq!(stack.requests_seen(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_requests_in_flight_are_bounded() {
    let stack = Arc::new(Stack::start_with_config(&policy()).await);
    let backend = &stack.backends["smollm2-135m"];
    backend.delay_ms.store(1500, Ordering::Relaxed);
    let background = Arc::clone(&stack);
    let slow = tokio::spawn(async move {
        chat(&background, Some(SMALL_KEY), "slow")
            .await
            .status()
            .as_u16()
    });
    let arrived = support::eventually(Duration::from_secs(5), async || {
        (!backend.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(
        arrived.is_some(),
        "the slow request never reached its model"
    );
    let second = chat(&stack, Some(SMALL_KEY), "second").await;
    assert_eq!(second.status(), 429);
    let error: Value = second.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("concurrentRequests limit of 1"),
        "{message}"
    );
    assert_eq!(slow.await.unwrap(), 200);
    backend.delay_ms.store(0, Ordering::Relaxed);
    let third = chat(&stack, Some(SMALL_KEY), "third").await;
    assert_eq!(third.status(), 200, "the slot is free once the first ends");
}

/// Posts a streamed chat body for `key`; with `usage` the client asks for the usage chunk.
async fn stream_chat(stack: &Stack, key: &str, usage: bool, marker: &str) -> String {
    let mut body = ask("hello there");
    body["stream"] = Value::Bool(true);
    if usage {
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", marker))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{marker}");
    response.text().await.unwrap()
}

/// A counter's value in the metrics text.
fn counter(metrics: &str, series: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| l.starts_with(series))
        .unwrap_or_else(|| panic!("no {series} in {metrics}"));
    line[series.len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_counts_its_reported_usage_and_the_client_sees_no_chunk_it_did_not_ask_for(
) {
    let stack = Stack::start_with_config(&policy()).await;
    let text = stream_chat(&stack, LARGE_KEY, false, "stream-plain").await;
    let sent: Value = serde_json::from_str(&stack.bodies_seen()[0]).unwrap();
    assert_eq!(sent["stream_options"]["include_usage"], true, "{sent}");
    assert!(
        !text.contains("\"usage\""),
        "a usage chunk the client did not ask for: {text}"
    );
    assert!(text.contains("[DONE]"), "{text}");
    let words = support::stack::streamed(&text).split_whitespace().count();
    assert!(words > 0, "{text}");
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let tokens = counter(&metrics, r#"mom_tenant_tokens_total{tenant="large"}"#);
    assert_eq!(tokens, (5 + words) as f64, "the reported usage counts");

    let text = stream_chat(&stack, LARGE_KEY, true, "stream-usage").await;
    assert!(
        text.contains("\"usage\""),
        "the client asked for it: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_running_out_of_budget_is_routed_to_the_cheaper_model_and_the_reason_says_so() {
    let policy = format!(
        r#"
version: budget-signal-test
models:
  - {{ name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct }}
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct }}
identities:
  - {{ name: mom/auto, defaultModel: qwen2.5-coder-0.5b }}
signals:
  - {{ name: running_out, type: budget, below: 0.8 }}
decisions:
  - name: thrifty
    rules: {{ signal: running_out }}
    modelRefs: [{{ model: smollm2-135m }}]
{}"#,
        small_tenant("{ tokensPerMinute: 100 }")
    );
    let stack = Stack::start_with_config(&policy).await;
    let mut models = Vec::new();
    for i in 0..5 {
        let response = chat(&stack, Some(SMALL_KEY), &format!("budget-{i}")).await;
        assert_eq!(response.status(), 200);
        let model = header(&response, "x-mom-model");
        if model == "smollm2-135m" {
            assert_eq!(header(&response, "x-mom-decision"), "thrifty");
            let left = number(&response, "x-ratelimit-remaining-tokens");
            assert!(left < 80, "switched with {left} of 100 tokens left");
        }
        models.push(model);
    }
    // 12 tokens an answer: the first requests leave more than 80 of 100, then the tenant runs
    // out and its requests go to the cheaper model.
    assert_eq!(models[0], "qwen2.5-coder-0.5b", "{models:?}");
    assert_eq!(models[4], "smollm2-135m", "{models:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_client_is_known_by_its_x_api_key_and_refused_in_its_own_shape() {
    let stack = Stack::start_with_config(&policy()).await;
    let body = serde_json::json!({"model": "mom/auto", "max_tokens": 32,
        "messages": [{"role": "user", "content": "hello there"}]});
    let send = |key: &'static str, marker: &'static str| {
        stack
            .client
            .post(stack.url("/v1/messages", marker))
            .header("content-type", "application/json")
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .body(body.to_string())
            .send()
    };
    let served = send(LARGE_KEY, "messages-large").await.unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(header(&served, "x-mom-tenant"), "large");
    let refused = send("sk-not-a-tenant", "messages-unknown").await.unwrap();
    assert_eq!(refused.status(), 401);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "authentication_error", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_day_of_cost_is_spent_is_refused_until_it_refills() {
    let policy = format!(
        r#"
version: cost-test
models:
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct, pricing: {{ inputPerMillion: 1, outputPerMillion: 1 }} }}
identities:
  - {{ name: mom/auto, defaultModel: smollm2-135m }}
{}"#,
        small_tenant("{ costPerDay: 0.00001 }")
    );
    let stack = Stack::start_with_config(&policy).await;
    // The first answer (12 tokens at 1 a million) costs 0.000012: more than the day's budget.
    let first = chat(&stack, Some(SMALL_KEY), "cost-0").await;
    assert_eq!(first.status(), 200);
    let _ = first.bytes().await.unwrap();
    let second = chat(&stack, Some(SMALL_KEY), "cost-1").await;
    assert_eq!(second.status(), 429);
    // Back above zero after 0.000002 of a 0.00001-a-day refill: about 4.8 hours.
    let retry_after = number(&second, "retry-after");
    assert!((17_000..=17_600).contains(&retry_after), "{retry_after}");
    let error: Value = second.json().await.unwrap();
    assert_eq!(error["error"]["code"], "insufficient_quota", "{error}");
    assert_eq!(stack.requests_seen(), 1);
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    let cost = counter(&metrics, r#"mom_tenant_cost_total{tenant="small"}"#);
    assert!((cost - 0.000012).abs() < 1e-9, "{cost}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_served_after_a_failover_is_charged_what_the_answering_model_used() {
    let policy = format!(
        r#"
version: failover-charge-test
server:
  maxBodyBytes: 1048576
models:
  - {{ name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct }}
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct }}
identities:
  - {{ name: mom/auto, defaultModel: qwen2.5-coder-0.5b, failover: {{ maxAttempts: 2 }} }}
{}"#,
        small_tenant("{ tokensPerMinute: 1000 }")
    );
    let stack = Stack::start_with_config(&policy).await;
    let coder = &stack.backends["qwen2.5-coder-0.5b"];
    coder.fail_status.store(503, Ordering::Relaxed);
    let response = chat(&stack, Some(SMALL_KEY), "failed-over").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-model"), "smollm2-135m");
    assert!(header(&response, "x-mom-fallback").contains("503"));
    let _ = response.bytes().await.unwrap();
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    // The fallback reported 5 prompt and 7 completion tokens; the failed call used none.
    let tokens = counter(&metrics, r#"mom_tenant_tokens_total{tenant="small"}"#);
    assert_eq!(tokens, 12.0);
}
