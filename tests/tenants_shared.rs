//! Tenants' budgets shared through a real `redis-server`: two sidecar replicas behind one Envoy
//! draw on one bucket, and when Redis stops admission does what the configuration declares —
//! each replica's own buckets decide (`open`), or 503 (`closed`) — and counts it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::Value;
use support::redis::Redis;
use support::stack::{ask, header, Stack};

const KEY: &str = "sk-shared-tenant";

fn policy(redis_url: &str, when_down: &str) -> String {
    format!(
        r#"
version: tenants-shared-test
state:
  backend: redis
  redis: {{ url: "{redis_url}", keyPrefix: budgets, refreshMs: 50, timeoutMs: 200 }}
models:
  - {{ name: smollm2-135m, providerModel: SmolLM2-135M-Instruct }}
identities:
  - {{ name: mom/auto, defaultModel: smollm2-135m }}
tenants:
  identifyBy: apiKey
  whenStoreDown: {when_down}
  list:
    - name: team
      apiKeys: {{ sha256: ["{}"] }}
      limits:
        - {{ requestsPerMinute: 6 }}
"#,
        mom_router::config::hex_sha256(KEY.as_bytes())
    )
}

async fn chat(stack: &Stack, marker: &str) -> reqwest::Response {
    stack
        .client
        .post(stack.url("/v1/chat/completions", marker))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {KEY}"))
        .body(ask("hello").to_string())
        .send()
        .await
        .unwrap()
}

/// The sum of the metric lines starting with `prefix`.
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_hold_one_budget() {
    let redis = Redis::start();
    let stack = Stack::start_replicas(&policy(&redis.url(), "open")).await;
    let mut statuses = Vec::new();
    for i in 0..10 {
        let response = chat(&stack, &format!("shared-{i}")).await;
        statuses.push(response.status().as_u16());
    }
    // Six a minute between them: each replica alone would have let its five through.
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 429, 429, 429, 429],
        "{statuses:?}"
    );
    let first = stack.sidecar.as_ref().unwrap().metrics().await;
    let second = stack.replica.as_ref().unwrap().metrics().await;
    let admitted = |m: &str| counter(m, r#"mom_tenant_requests_total{tenant="team"}"#);
    assert!(
        admitted(&first) > 0.0 && admitted(&second) > 0.0,
        "both replicas admitted requests"
    );
    assert_eq!(admitted(&first) + admitted(&second), 6.0);
    for metrics in [&first, &second] {
        let fallbacks = counter(metrics, r#"mom_state_fallbacks_total{operation="budget"}"#);
        assert_eq!(fallbacks, 0.0, "Redis answered every admission");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_stops_is_met_as_the_configuration_declares() {
    for (when_down, expected) in [("closed", 503), ("open", 200)] {
        let redis = Redis::start();
        let stack = Stack::start_with_config(&policy(&redis.url(), when_down)).await;
        let before = chat(&stack, &format!("{when_down}-up")).await;
        assert_eq!(before.status(), 200, "{when_down}");
        drop(redis);
        let after = chat(&stack, &format!("{when_down}-down")).await;
        assert_eq!(after.status(), expected, "{when_down}");
        if expected == 503 {
            assert_eq!(header(&after, "retry-after"), "1");
            let error: Value = after.json().await.unwrap();
            assert_eq!(error["error"]["code"], "budgets_unavailable", "{error}");
        }
        let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
        let fallbacks = counter(&metrics, r#"mom_state_fallbacks_total{operation="budget"}"#);
        assert!(fallbacks >= 1.0, "{when_down}: the outage is counted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_two_replicas_never_take_more_than_the_budget() {
    let redis = Redis::start();
    let stack = std::sync::Arc::new(Stack::start_replicas(&policy(&redis.url(), "open")).await);
    let mut clients = Vec::new();
    for c in 0..8 {
        let stack = std::sync::Arc::clone(&stack);
        clients.push(tokio::spawn(async move {
            let mut admitted = 0;
            for i in 0..3 {
                let response = chat(&stack, &format!("burst-{c}-{i}")).await;
                admitted += usize::from(response.status() == 200);
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for client in clients {
        admitted += client.await.unwrap();
    }
    // 24 requests at once from 8 clients through both replicas: exactly the 6 a minute allows.
    assert_eq!(admitted, 6);
    assert_eq!(stack.requests_seen(), 6, "the refused reached no model");
}
