//! Anthropic Messages and OpenAI Responses on a real model: SmolLM2-135M served by llama.cpp,
//! which answers all three protocols itself, behind the real Envoy. Two logical models point at
//! the same server: one declared chat-only (mom-router translates), one declared native (the
//! client's body goes through). Greedy decoding: both must carry the same text.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use support::free_port;
use support::llm::{behind_envoy, start_llm, wait_healthy};

// Envoy's clusters carry fixed names (`envoy/quickstart.yaml`); both route to one server here.
const POLICY: &str = r#"
version: llm-protocols
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}
  - name: qwen2.5-coder-0.5b
    providerModel: SmolLM2-135M-Instruct
    protocols: [chat, messages, responses]
identities:
  - {name: mom/auto, defaultModel: smollm2-135m}
  - {name: mom/flash, defaultModel: qwen2.5-coder-0.5b}
"#;

const PROMPT: &str = "Name three primary colours.";

fn messages(identity: &str, stream: bool) -> Value {
    json!({"model": identity, "max_tokens": 16, "temperature": 0, "stream": stream,
           "messages": [{"role": "user", "content": PROMPT}]})
}

fn responses(identity: &str) -> Value {
    json!({"model": identity, "max_output_tokens": 16, "temperature": 0, "input": PROMPT})
}

/// The text of a Messages answer, JSON or a stream of events.
fn message_text(body: &str, stream: bool) -> String {
    if !stream {
        let answer: Value = serde_json::from_str(body).unwrap();
        return answer["content"][0]["text"].as_str().unwrap().to_owned();
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|event| event["type"] == "content_block_delta")
        .map(|event| {
            event["delta"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn translated_and_native_answers_of_a_greedy_request_carry_the_same_text() {
    let port = free_port();
    let _llm = start_llm(port, "smollm2-135m.gguf", "SmolLM2-135M-Instruct");
    let client = reqwest::Client::new();
    let (_sidecar, envoy) = behind_envoy(POLICY, [Some(port), Some(port), None]).await;
    wait_healthy(&client, port).await;

    let post = async |path: &str, body: &Value| {
        let response = client
            .post(format!("{}{path}", envoy.public_url()))
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path} {body}");
        let translation = response.headers()["x-mom-translation"]
            .to_str()
            .unwrap()
            .to_owned();
        (translation, response.text().await.unwrap())
    };
    for stream in [false, true] {
        let (how, translated) = post("/v1/messages", &messages("mom/auto", stream)).await;
        assert_eq!(how, "messages to chat");
        let (how, native) = post("/v1/messages", &messages("mom/flash", stream)).await;
        assert_eq!(how, "messages native");
        let (translated, native) = (
            message_text(&translated, stream),
            message_text(&native, stream),
        );
        assert!(!translated.trim().is_empty(), "stream={stream}");
        assert_eq!(translated, native, "stream={stream}");
    }

    let (how, translated) = post("/v1/responses", &responses("mom/auto")).await;
    assert_eq!(how, "responses to chat");
    let (how, native) = post("/v1/responses", &responses("mom/flash")).await;
    assert_eq!(how, "responses native");
    let text = |body: &str| {
        let answer: Value = serde_json::from_str(body).unwrap();
        let output = answer["output"].as_array().unwrap();
        let message = output
            .iter()
            .find(|item| item["type"] == "message")
            .unwrap();
        message["content"][0]["text"].as_str().unwrap().to_owned()
    };
    assert_eq!(text(&translated), text(&native));

    // The official SDKs parse every answer, plain and streamed, both ways, with the same text.
    let python = support::repo().join(".cache/sdk-venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run ./scripts/test.sh (it installs the SDKs)",
        python.display()
    );
    let public = envoy.public_url();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(support::repo().join("scripts/sdk_clients.py"))
            .args([public.as_str(), "mom/auto", "mom/flash"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let cases: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |identity: &str| -> Vec<&Value> {
        cases.iter().filter(|c| c["identity"] == identity).collect()
    };
    let (translated, native) = (of("mom/auto"), of("mom/flash"));
    assert_eq!(translated.len(), 6, "{stdout}");
    assert_eq!(native.len(), 6, "{stdout}");
    for (t, n) in translated.iter().zip(&native) {
        assert_eq!(t["case"], n["case"]);
        assert_eq!(t["text"], n["text"], "{}", t["case"]);
        // llama.cpp's own Responses endpoint says `completed` at the token limit, where
        // OpenAI's API (and the translation) say `incomplete`; Messages agree.
        if t["case"].as_str().unwrap().starts_with("messages") {
            assert_eq!(t["stop"], n["stop"], "{}", t["case"]);
        }
        assert!(!t["text"].as_str().unwrap().trim().is_empty(), "{t}");
    }
}
