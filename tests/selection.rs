//! Selection algorithms end to end: through a real Envoy with FAKE backends for the algorithms
//! that learn from responses and outcomes (latency_aware, cost_aware, bandit), and with the real
//! encoder for the ones that compare embeddings (knn, router_dc).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::cli::explain_json;
use mom_router::config::compile_str;
use mom_router::engine;
use mom_router::llm::Headers;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use support::stack::{ask, header, Stack};

/// Three models behind the quickstart Envoy and one decision that always matches, using
/// `algorithm` over `refs`.
fn policy(algorithm: &str, refs: &[&str]) -> String {
    let refs: Vec<String> = refs.iter().map(|m| format!("{{model: {m}}}")).collect();
    format!(
        r#"
version: selection-test
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct, quality: 0.4,
      pricing: {{inputPerMillion: 1.0, outputPerMillion: 10.0}}}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct, quality: 0.7,
      pricing: {{inputPerMillion: 5.0, outputPerMillion: 2.0}}}}
  - {{name: gemma3-270m, providerModel: gemma-3-270m, quality: 0.65,
      pricing: {{inputPerMillion: 9.0, outputPerMillion: 9.0}}}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
decisions:
  - name: pick
    rules: {{signal: anything}}
    modelRefs: [{refs}]
    algorithm: {algorithm}
"#,
        refs = refs.join(", ")
    )
}

async fn send(stack: &Stack, body: &Value, marker: &str) -> (String, reqwest::header::HeaderMap) {
    let response = stack.chat(body, marker).await;
    assert_eq!(response.status(), 200, "{marker}");
    let model = header(&response, "x-mom-model");
    let headers = response.headers().clone();
    let _ = response.bytes().await.unwrap();
    (model, headers)
}

fn text(headers: &reqwest::header::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_aware_measures_every_model_then_a_slow_upstream_loses_traffic() {
    let stack = Stack::start_with_config(&policy(
        "{type: latency_aware, metric: total, percentile: 90, minSamples: 2}",
        &["gemma3-270m", "smollm2-135m"],
    ))
    .await;
    stack.backends["gemma3-270m"]
        .delay_ms
        .store(250, Ordering::Relaxed);
    let mut served = Vec::new();
    for i in 0..12 {
        let (model, headers) = send(&stack, &ask("hello"), &format!("lat{i}")).await;
        assert_eq!(text(&headers, "x-mom-algorithm"), "latency_aware");
        served.push((model, text(&headers, "x-mom-selection-reason")));
    }
    let slow = served.iter().filter(|(m, _)| m == "gemma3-270m").count();
    assert_eq!(
        slow, 2,
        "the slow model is measured minSamples times, then avoided: {served:?}"
    );
    for (model, reason) in &served[6..] {
        assert_eq!(model, "smollm2-135m", "{served:?}");
        assert!(reason.starts_with("lowest observed latency"), "{reason}");
    }
    // Envoy's clock agrees: the slow backend really was slow.
    assert!(stack.backends["gemma3-270m"].seen.lock().unwrap().len() == 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_aware_prices_each_request_by_its_prompt_and_completion_size() {
    // smollm2 is below the floor; qwen has cheap output, gemma is expensive both ways, and a
    // floor of 0.6 leaves qwen and gemma. Then a lower floor lets smollm2 (cheap input) in.
    let stack = Stack::start_with_config(&policy(
        "{type: cost_aware, qualityFloor: 0.6}",
        &["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"],
    ))
    .await;
    let (model, headers) = send(&stack, &ask("hi"), "cost1").await;
    assert_eq!(model, "qwen2.5-coder-0.5b", "{headers:?}");
    let scores = text(&headers, "x-mom-scores");
    assert!(
        scores.contains("smollm2-135m=") && scores.contains("gemma3-270m="),
        "{scores}"
    );
    assert!(text(&headers, "x-mom-selection-reason").contains("quality >= 0.6"));
    // The access log carries the same evidence: scores and the run id outcomes refer to.
    let log = stack.envoy.access_log_line("cost1").await;
    assert_eq!(log["mom_router"]["algorithm"], "cost_aware");
    assert_eq!(log["mom_router"]["scores"], scores.as_str());
    assert_eq!(
        log["mom_router"]["run_id"],
        text(&headers, "x-mom-run-id").as_str()
    );
    let sidecar = stack.sidecar.as_ref().unwrap();
    let lower_floor = policy(
        "{type: cost_aware, qualityFloor: 0.3}",
        &["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"],
    );
    // Lowering the floor changes what mom/auto means: the identity's version is bumped.
    sidecar.rewrite_config(
        &lower_floor.replace("{name: mom/auto,", "{name: mom/auto, version: \"2\","),
    );
    support::eventually(std::time::Duration::from_secs(5), async || {
        (sidecar.running.store.snapshot().decisions[0].algorithm
            == mom_router::selection::Algorithm::CostAware { quality_floor: 0.3 })
        .then_some(())
    })
    .await
    .expect("reload applied");
    // A short prompt with a long answer: output price dominates, qwen is cheapest.
    let chatty = json!({"model": "mom/auto", "max_tokens": 2000,
        "messages": [{"role": "user", "content": "tell me a long story"}]});
    assert_eq!(send(&stack, &chatty, "cost2").await.0, "qwen2.5-coder-0.5b");
    // A long prompt with a short answer: input price dominates, smollm2 is cheapest.
    let long = json!({"model": "mom/auto", "max_tokens": 8,
        "messages": [{"role": "user", "content": "word ".repeat(4000)}]});
    assert_eq!(send(&stack, &long, "cost3").await.0, "smollm2-135m");
}

async fn post_outcome(stack: &Stack, body: &Value) -> (u16, Value) {
    let url = format!(
        "{}/v1/outcomes",
        stack.sidecar.as_ref().unwrap().admin_url()
    );
    let response = stack.client.post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandit_learns_from_reported_outcomes_to_prefer_the_rewarded_model() {
    let stack = Stack::start_with_config(&policy(
        "{type: bandit}",
        &["smollm2-135m", "qwen2.5-coder-0.5b"],
    ))
    .await;
    let mut served: HashMap<String, usize> = HashMap::new();
    let mut late = Vec::new();
    for i in 0..40 {
        let (model, headers) = send(&stack, &ask(&format!("question {i}")), &format!("b{i}")).await;
        let run_id = text(&headers, "x-mom-run-id");
        assert_eq!(run_id.len(), 32, "every forwarded response names its run");
        let reward = if model == "qwen2.5-coder-0.5b" {
            1.0
        } else {
            0.0
        };
        let (status, applied) =
            post_outcome(&stack, &json!({"run_id": run_id, "reward": reward})).await;
        assert_eq!(status, 200, "{applied}");
        assert_eq!(applied["applied"][0]["model"], model.as_str());
        *served.entry(model.clone()).or_default() += 1;
        if i >= 25 {
            late.push(model);
        }
    }
    let rewarded = late.iter().filter(|m| *m == "qwen2.5-coder-0.5b").count();
    assert!(rewarded >= 12, "late choices {late:?} (all: {served:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_validated_and_unknown_runs_are_not_found() {
    let stack =
        Stack::start_with_config(&policy("{type: elo}", &["smollm2-135m", "gemma3-270m"])).await;
    let (_, first) = send(&stack, &ask("a"), "o1").await;
    let run = text(&first, "x-mom-run-id");
    let cases = [
        (
            json!({"run_id": run, "reward": 1.5}),
            400,
            "between 0 and 1",
        ),
        (json!({"run_id": run}), 400, "gives no outcome"),
        (
            json!({"run_id": run, "reward": 1, "thumbs": "up"}),
            400,
            "several outcomes",
        ),
        (
            json!({"run_id": run, "thumbs": "sideways"}),
            400,
            "outcome object",
        ),
        (
            json!({"run_id": "nope", "thumbs": "up"}),
            404,
            "unknown run id \"nope\"",
        ),
        (
            json!({"run_id": run, "preferred_over": "gone"}),
            404,
            "unknown run id \"gone\"",
        ),
        (json!([1, 2]), 400, "outcome object"),
    ];
    for (body, status, needle) in cases {
        let (got, error) = post_outcome(&stack, &body).await;
        assert_eq!(got, status, "{body} → {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    // Elo: the first request went to smollm2 (ties keep declared order); a preference for a
    // gemma run over it moves the next choice to gemma.
    assert_eq!(text(&first, "x-mom-model"), "smollm2-135m");
    let runs = &stack.sidecar.as_ref().unwrap().running.state;
    let gemma_run = mom_router::state::RunId::random();
    runs.remember_run(
        gemma_run,
        mom_router::state::Run {
            identity: "mom/auto".into(),
            decision: "pick".into(),
            model: "gemma3-270m".into(),
        },
    );
    let (status, _) = post_outcome(
        &stack,
        &json!({"run_id": gemma_run.to_string(), "preferred_over": run}),
    )
    .await;
    assert_eq!(status, 200);
    // The same preference again, or twice in one body, is refused: one run id repeated
    // cannot take the ratings over.
    let again = json!({"run_id": gemma_run.to_string(), "preferred_over": run});
    let (status, error) = post_outcome(&stack, &again).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("duplicate_outcome"))
    );
    let (status, error) = post_outcome(
        &stack,
        &json!([{"run_id": run, "thumbs": "up"}, {"run_id": run, "reward": 0.2}]),
    )
    .await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (400, &json!("duplicate_outcome"))
    );
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("[1] repeats a reward"));
    let (model, headers) = send(&stack, &ask("b"), "o2").await;
    assert_eq!(model, "gemma3-270m");
    assert!(text(&headers, "x-mom-selection-reason").contains("highest Elo rating 1516.0"));
}

fn semantic_policy(algorithm: &str) -> String {
    let encoder = support::repo().join(".cache/models/all-MiniLM-L6-v2");
    format!(
        r#"
inference:
  encoder: {{backend: candle, modelDir: {encoder}}}
models:
  - {{name: smollm2-135m, providerModel: s, description: "Small talk, greetings and short everyday facts.", capabilities: [chat]}}
  - {{name: qwen2.5-coder-0.5b, providerModel: q, description: "Programming, debugging code and writing functions.", capabilities: [code, math]}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
decisions:
  - name: pick
    rules: {{signal: anything}}
    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}]
    algorithm: {algorithm}
"#,
        encoder = encoder.display()
    )
}

async fn explain(config: &str, text: &str) -> Value {
    let snapshot = compile_str(config).unwrap();
    let state = engine::Services::offline(&snapshot);
    let headers = Headers::new(vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
    ]);
    let body = ask(text).to_string();
    let routed = engine::on_request_body(&snapshot, &state, &headers, body.as_bytes()).await;
    explain_json(&routed)
}

#[tokio::test]
async fn router_dc_sends_each_query_to_the_model_described_nearest_it() {
    let config = semantic_policy("{type: router_dc, temperature: 0.05}");
    let code = explain(
        &config,
        "My function throws a null pointer exception, how do I fix it?",
    )
    .await;
    assert_eq!(code["model"], "qwen2.5-coder-0.5b", "{code:#}");
    assert_eq!(code["algorithm"], "router_dc");
    let chat = explain(&config, "Good morning! How are you today?").await;
    assert_eq!(chat["model"], "smollm2-135m", "{chat:#}");
    let scores: f64 = chat["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["score"].as_f64().unwrap())
        .sum();
    assert!((scores - 1.0).abs() < 1e-6);
}

#[tokio::test]
async fn knn_follows_the_labels_of_the_nearest_exemplars() {
    let config = semantic_policy(
        r#"{type: knn, k: 3, exemplars: [
            {text: "reverse a linked list in python", model: qwen2.5-coder-0.5b},
            {text: "why does my rust code not compile", model: qwen2.5-coder-0.5b},
            {text: "sort an array of numbers in javascript", model: qwen2.5-coder-0.5b},
            {text: "what a lovely day for a walk", model: smollm2-135m},
            {text: "tell me a joke about cats", model: smollm2-135m},
            {text: "how was your weekend", model: smollm2-135m}]}"#,
    );
    let code = explain(&config, "how do I fix a compile error in my C++ program").await;
    assert_eq!(code["model"], "qwen2.5-coder-0.5b", "{code:#}");
    let chat = explain(&config, "any fun plans for the weekend?").await;
    assert_eq!(chat["model"], "smollm2-135m", "{chat:#}");
    // A label that is not one of the decision's models is a config error naming the path.
    let bad = semantic_policy(r#"{type: knn, exemplars: [{text: hi, model: gpt-9}]}"#);
    let errors = compile_str(&bad).unwrap_err().to_string();
    assert!(
        errors.contains("decisions[0].algorithm.exemplars[0].model: \"gpt-9\" is not one of this decision's modelRefs"),
        "{errors}"
    );
}
