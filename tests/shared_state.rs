//! State shared through a real `redis-server`: two sidecar replicas behind one Envoy learn from
//! the same outcomes, and a Redis that is down costs no request.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::redis::Redis;
use support::sidecar::Sidecar;
use support::stack::{ask, header, Stack};

const REWARDED: &str = "qwen2.5-coder-0.5b";

fn policy(redis_url: &str) -> String {
    format!(
        r#"
version: shared-state-test
state:
  backend: redis
  redis: {{url: "{redis_url}", keyPrefix: test, refreshMs: 50, timeoutMs: 200}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
decisions:
  - name: pick
    rules: {{signal: anything}}
    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}]
    algorithm: {{type: bandit}}
"#
    )
}

async fn post_outcome(client: &reqwest::Client, sidecar: &Sidecar, body: &Value) -> u16 {
    let url = format!("{}/v1/outcomes", sidecar.admin_url());
    let response = client.post(url).json(body).send().await.unwrap();
    response.status().as_u16()
}

fn routed_count(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("mom_routed_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_one_envoy_learn_from_the_same_outcomes() {
    let redis = Redis::start();
    let stack = Stack::start_replicas(&policy(&redis.url())).await;
    let first = stack.sidecar.as_ref().unwrap();
    let second = stack.replica.as_ref().unwrap();
    assert!(first.running.state.shared() && second.running.state.shared());
    let mut late = Vec::new();
    for i in 0..40 {
        let response = stack.chat(&ask(&format!("q{i}")), &format!("r{i}")).await;
        assert_eq!(response.status(), 200);
        let model = header(&response, "x-mom-model");
        let run_id = header(&response, "x-mom-run-id");
        let _ = response.bytes().await.unwrap();
        // Every outcome goes to the first replica's admin API, including runs the second
        // replica made: it finds them in Redis.
        let reward = if model == REWARDED { 1.0 } else { 0.0 };
        let status = post_outcome(
            &stack.client,
            first,
            &json!({"run_id": run_id, "reward": reward}),
        )
        .await;
        assert_eq!(status, 200, "run {run_id} of {model}");
        if i >= 25 {
            late.push(model);
        }
    }
    // Envoy balanced the streams over both replicas.
    let (a, b) = (
        routed_count(&first.metrics().await),
        routed_count(&second.metrics().await),
    );
    assert!(a >= 10 && b >= 10, "replica shares {a} / {b}");
    // The second replica received no outcome directly, yet reads them all.
    let learned = support::eventually(Duration::from_secs(5), async || {
        let view = second.running.state.view("pick", REWARDED, None);
        let seen = view.reward.alpha + view.reward.beta - 2.0;
        let first_view = first.running.state.view("pick", REWARDED, None);
        let first_seen = first_view.reward.alpha + first_view.reward.beta - 2.0;
        (seen >= 1.0 && (seen - first_seen).abs() < 1e-9).then_some(seen)
    })
    .await;
    assert!(learned.is_some(), "the second replica did not converge");
    let rewarded = late.iter().filter(|m| *m == REWARDED).count();
    assert!(rewarded >= 12, "late choices across replicas: {late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_requests_and_outcomes_fall_back_to_local_state() {
    let dead = format!("redis://127.0.0.1:{}", support::free_port());
    let stack = Stack::start_with_config(&policy(&dead)).await;
    let sidecar = stack.sidecar.as_ref().unwrap();
    for i in 0..5 {
        let response = stack.chat(&ask("hello"), &format!("d{i}")).await;
        assert_eq!(response.status(), 200, "Redis down must not fail requests");
        let run_id = header(&response, "x-mom-run-id");
        let model = header(&response, "x-mom-model");
        let _ = response.bytes().await.unwrap();
        let status = post_outcome(
            &stack.client,
            sidecar,
            &json!({"run_id": run_id, "thumbs": "up"}),
        )
        .await;
        assert_eq!(status, 200, "a run made here is found here: {model}");
    }
    let counted = support::eventually(Duration::from_secs(5), async || {
        let text = sidecar.metrics().await;
        text.lines()
            .any(|l| l.starts_with("mom_state_fallbacks_total{operation=\"refresh\"}"))
            .then_some(text)
    })
    .await;
    assert!(counted.is_some(), "refresh failures are counted");
    let total: f64 = ["smollm2-135m", REWARDED]
        .iter()
        .map(|m| {
            let view = sidecar.running.state.view("pick", m, None);
            view.reward.alpha - 1.0
        })
        .sum();
    assert_eq!(total, 5.0, "outcomes were credited locally");
}
