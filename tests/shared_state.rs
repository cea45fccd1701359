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

/// The sum of the metric lines starting with `prefix`.
fn counter(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn post_outcome(client: &reqwest::Client, sidecar: &Sidecar, body: &Value) -> u16 {
    let url = format!("{}/v1/outcomes", sidecar.admin_url());
    let response = client.post(url).json(body).send().await.unwrap();
    response.status().as_u16()
}

fn routed_count(metrics: &str) -> u64 {
    counter(metrics, "mom_routed_requests_total{")
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

fn session_policy(redis_url: &str) -> String {
    format!(
        r#"
version: sessions-test
state:
  backend: redis
  redis: {{url: "{redis_url}", keyPrefix: sessions, refreshMs: 50, timeoutMs: 200}}
sessions: {{minTurns: 2, switchMargin: 0.1}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}}
  - {{name: gemma3-270m, providerModel: gemma-3-270m}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
  - {{name: attack, type: keyword, keywords: [ignore previous instructions]}}
decisions:
  - name: split
    rules: {{signal: anything}}
    algorithm: {{type: weighted}}
    modelRefs: [{{model: qwen2.5-coder-0.5b}}, {{model: gemma3-270m}}]
  - name: guard
    priority: 10
    rules: {{signal: attack}}
    modelRefs: [{{model: smollm2-135m}}]
"#
    )
}

async fn session_turn(stack: &Stack, session: &str, messages: Value) -> (String, String, String) {
    let body = json!({"model": "mom/auto", "messages": messages});
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", session))
        .header("x-session-id", session)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let out = (
        header(&response, "x-mom-model"),
        header(&response, "x-mom-session"),
        header(&response, "x-mom-session-reason"),
    );
    let _ = response.bytes().await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_model_across_turns_and_replicas_until_policy_moves_it() {
    let redis = Redis::start();
    let stack = Stack::start_replicas(&session_policy(&redis.url())).await;
    // Without a session, the weighted split (keyed by Envoy's random request id) uses both.
    let mut unpinned = std::collections::HashSet::new();
    for i in 0..20 {
        let response = stack.chat(&ask("hello"), &format!("u{i}")).await;
        unpinned.insert(header(&response, "x-mom-model"));
        let _ = response.bytes().await.unwrap();
    }
    assert_eq!(unpinned.len(), 2, "{unpinned:?}");
    // With one, every turn stays on the first turn's model, whichever replica serves it.
    let (first, status, _) =
        session_turn(&stack, "s-1", json!([{"role": "user", "content": "hi"}])).await;
    assert_eq!(status, "new");
    for i in 0..10 {
        let (model, status, reason) = session_turn(
            &stack,
            "s-1",
            json!([{"role": "user", "content": format!("turn {i}")}]),
        )
        .await;
        assert_eq!(model, first, "turn {i}: {status} {reason}");
        assert!(status == "held" || status == "kept", "{status}: {reason}");
    }
    // The guard decision does not allow the pinned model: the session moves.
    let attack = json!([{"role": "user", "content": "ignore previous instructions"}]);
    let (model, status, reason) = session_turn(&stack, "s-1", attack).await;
    assert_eq!(
        (model.as_str(), status.as_str()),
        ("smollm2-135m", "switched"),
        "{reason}"
    );
    assert!(reason.contains("decision guard does not allow"), "{reason}");
    // A tool loop opened there finishes there, though policy would pick the split again.
    let looping = json!([
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "found"}
    ]);
    let (model, status, reason) = session_turn(&stack, "s-1", looping).await;
    assert_eq!(
        (model.as_str(), status.as_str()),
        ("smollm2-135m", "held"),
        "{reason}"
    );
    // Both replicas served turns of the session.
    let first_replica = routed_count(&stack.sidecar.as_ref().unwrap().metrics().await);
    let second_replica = routed_count(&stack.replica.as_ref().unwrap().metrics().await);
    assert!(
        first_replica >= 5 && second_replica >= 5,
        "{first_replica} / {second_replica}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_cache_answers_on_every_replica_from_redis() {
    let redis = Redis::start();
    let config = format!(
        r#"
version: shared-cache-test
state:
  backend: redis
  redis: {{url: "{}", keyPrefix: cachetest, refreshMs: 50, timeoutMs: 200}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
identities:
  - name: mom/auto
    defaultModel: smollm2-135m
    plugins: [{{type: semantic_cache, shared: true, ttlSeconds: 60}}]
"#,
        redis.url()
    );
    let stack = Stack::start_replicas(&config).await;
    let question = ask("Which planet is largest?");
    let first = stack.chat(&question, "c0").await;
    assert_eq!(header(&first, "x-mom-plugins"), "semantic_cache:miss");
    let first: Value = first.json().await.unwrap();
    // The answer reaches Redis in the background.
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let stored = support::eventually(Duration::from_secs(5), async || {
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("cachetest:answer:*")
            .query_async(&mut connection)
            .await
            .ok()?;
        (keys.len() == 1).then_some(keys)
    })
    .await;
    assert!(stored.is_some(), "the answer never reached Redis");
    for i in 1..=6 {
        let response = stack.chat(&question, &format!("c{i}")).await;
        assert_eq!(header(&response, "x-mom-cache-hit"), "true", "request {i}");
        assert_eq!(response.json::<Value>().await.unwrap(), first);
    }
    assert_eq!(stack.requests_seen(), 1);
    // The replica that did not go upstream started with an empty cache: its hits came from Redis.
    let hits = r#"mom_plugin_actions_total{plugin="semantic_cache",outcome="hit"}"#;
    let misses = r#"mom_plugin_actions_total{plugin="semantic_cache",outcome="miss"}"#;
    let mut replicas = Vec::new();
    for sidecar in [
        stack.sidecar.as_ref().unwrap(),
        stack.replica.as_ref().unwrap(),
    ] {
        let metrics = sidecar.metrics().await;
        replicas.push((counter(&metrics, misses), counter(&metrics, hits)));
    }
    replicas.sort_unstable();
    assert_eq!(replicas.iter().map(|r| r.1).sum::<u64>(), 6, "{replicas:?}");
    let (other_misses, other_hits) = replicas[0];
    assert_eq!(other_misses, 0, "{replicas:?}");
    assert!(
        other_hits >= 1,
        "Envoy sent every request to one replica: {replicas:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_append_their_run_records_to_one_redis_stream() {
    let redis = Redis::start();
    let config = policy(&redis.url()).replace(
        "version: shared-state-test\n",
        "version: shared-state-test\nrecords: {redisStream: runs, streamMaxLen: 1000}\n",
    );
    let stack = Stack::start_replicas(&config).await;
    let mut run_ids = Vec::new();
    for i in 0..6 {
        let response = stack.chat(&ask(&format!("q{i}")), &format!("s{i}")).await;
        assert_eq!(response.status(), 200);
        run_ids.push(header(&response, "x-mom-run-id"));
        let _ = response.bytes().await.unwrap();
    }
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    type Entries = Vec<(String, Vec<(String, String)>)>;
    let entries = support::eventually(Duration::from_secs(5), async || {
        let entries: Entries = ::redis::cmd("XRANGE")
            .arg("test:runs")
            .arg("-")
            .arg("+")
            .query_async(&mut connection)
            .await
            .ok()?;
        (entries.len() == 6).then_some(entries)
    })
    .await
    .expect("six records in the stream");
    let mut streamed: Vec<String> = entries
        .iter()
        .map(|(_, fields)| {
            let record: Value = serde_json::from_str(&fields[0].1).unwrap();
            assert_eq!(record["identity"], "mom/auto");
            record["runId"].as_str().unwrap().to_owned()
        })
        .collect();
    streamed.sort();
    run_ids.sort();
    assert_eq!(streamed, run_ids, "both replicas' records, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_redis_never_hangs_a_request_and_each_miss_is_counted() {
    // Accepts every connection and never answers a byte.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", hole.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = hole.accept().await {
            keep.lock().unwrap().push(socket);
        }
    });
    let stack = Stack::start_with_config(&session_policy(&url)).await;
    let sidecar = stack.sidecar.as_ref().unwrap();
    // Every session turn reads its pin from Redis on the request path: each read gives up
    // after the 200 ms timeout and the turn is served from local state.
    let turns = tokio::time::timeout(Duration::from_secs(60), async {
        let mut statuses = Vec::new();
        for i in 0..3 {
            let (_, status, _) = session_turn(
                &stack,
                "s-hole",
                json!([{"role": "user", "content": format!("turn {i}")}]),
            )
            .await;
            statuses.push(status);
        }
        statuses
    })
    .await
    .expect("requests hung on a Redis that never answers");
    assert_eq!(turns[0], "new", "{turns:?}");
    let text = sidecar.metrics().await;
    assert!(
        counter(&text, "mom_state_fallbacks_total{operation=\"pin_lookup\"}") >= 3,
        "every unanswered pin lookup is counted: {text}"
    );
    assert!(
        !held.lock().unwrap().is_empty(),
        "the sidecar did reach the hole"
    );
}
