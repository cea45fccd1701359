//! A confidence cascade on real models: SmolLM2-135M and Qwen2.5-Coder-0.5B served by llama.cpp
//! (`scripts/llm_backend.py`, installed by `./scripts/test.sh`), behind the real Envoy. The
//! tentative call's confidence comes from the model's own token log-probabilities.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::time::Instant;
use support::free_port;
use support::llm::{behind_envoy, start_llm, wait_healthy};

const POLICY: &str = r#"
version: llm-cascade
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}
  - {name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}
identities:
  - {name: mom/auto, defaultModel: smollm2-135m}
signals:
  - {name: easy, type: keyword, keywords: [easy]}
  - {name: hard, type: keyword, keywords: [hard]}
decisions:
  # Any answer passes: the cheap model's own answer comes back.
  - name: lenient
    rules: {signal: easy}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}]
    looper: {type: confidence, threshold: -100, maxTokens: 12, totalTimeoutMs: 50000}
  # No answer can reach a mean logprob of 0.5: the request escalates to the coder.
  - name: strict
    rules: {signal: hard}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}]
    looper: {type: confidence, threshold: 0.5, maxTokens: 12, totalTimeoutMs: 50000}
"#;

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "mom/auto", "stream": stream, "max_tokens": 12, "temperature": 0,
           "messages": [{"role": "user", "content": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidence_cascade_runs_on_real_models_with_their_logprobs() {
    let (small_port, coder_port) = (free_port(), free_port());
    let _small = start_llm(small_port, "smollm2-135m.gguf", "SmolLM2-135M-Instruct");
    let _coder = start_llm(
        coder_port,
        "qwen2.5-coder-0.5b.gguf",
        "Qwen2.5-Coder-0.5B-Instruct",
    );
    let client = reqwest::Client::new();
    let (_sidecar, envoy) = behind_envoy(POLICY, [Some(small_port), Some(coder_port), None]).await;
    wait_healthy(&client, small_port).await;
    wait_healthy(&client, coder_port).await;
    let url = format!("{}/v1/chat/completions", envoy.public_url());

    // Lenient: SmolLM2's answer, with its measured confidence.
    let response = client
        .post(&url)
        .json(&ask("easy: what is 2+2?", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let steps = response.headers()["x-mom-looper-steps"]
        .to_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = steps.split(':').collect();
    assert_eq!(&parts[..2], ["smollm2-135m", "confident"], "{steps}");
    let measured: f64 = parts[2].parse().unwrap();
    assert!(
        measured < 0.0 && measured > -20.0,
        "a real mean logprob: {measured}"
    );
    let body: Value = response.json().await.unwrap();
    assert!(!body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    // Strict: escalation; the coder's answer streams through Envoy as server-sent events.
    let started = Instant::now();
    let mut response = client
        .post(&url)
        .json(&ask("hard: write a python hello world", true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-mom-model"], "qwen2.5-coder-0.5b");
    assert_eq!(response.headers()["x-mom-response-path"], "upstream");
    let steps = response.headers()["x-mom-looper-steps"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(steps.starts_with("smollm2-135m:unconfident:"), "{steps}");
    let mut text = String::new();
    let mut chunks = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        chunks += 1;
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(chunks >= 2, "{chunks} chunks in {:?}", started.elapsed());
}
