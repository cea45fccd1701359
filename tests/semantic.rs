//! Routing by meaning: the `examples/semantic` policy, whose embedding signal runs the real
//! all-MiniLM-L6-v2 encoder, through the pipeline and through a real Envoy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use mom_router::engine::{self, Action, Routed};
use mom_router::llm::Headers;
use serde_json::Value;
use support::sidecar::semantic_config;
use support::stack::{ask, header, Stack};

fn body(text: &str) -> Vec<u8> {
    ask(text).to_string().into_bytes()
}

fn model_of(routed: &Routed) -> &str {
    match &routed.action {
        Action::Forward(forward) => &forward.model,
        Action::Respond(reply) => panic!("expected a forward, got {reply:?}"),
    }
}

#[tokio::test]
async fn a_programming_question_without_keywords_routes_to_the_coder() {
    let snapshot = compile_str(&semantic_config()).unwrap();
    assert_eq!(snapshot.encoder.as_ref().unwrap().describe(), "candle cpu");
    let routed = engine::on_request_body(
        &snapshot,
        &mom_router::engine::Services::offline(&snapshot),
        &Headers::default(),
        &body("My program crashes with a null pointer when the list is empty, why?"),
    )
    .await;
    assert_eq!(model_of(&routed), "qwen2.5-coder-0.5b");
    let signal = &routed.trace.signals[0];
    assert_eq!(signal.kind, "embedding");
    assert!(signal.matched);
    assert!(signal.value.unwrap() >= 0.35, "{signal:?}");
    assert!(signal.label.is_some());
    let chat = engine::on_request_body(
        &snapshot,
        &mom_router::engine::Services::offline(&snapshot),
        &Headers::default(),
        &body("What a lovely sunny day for a picnic!"),
    )
    .await;
    assert_eq!(model_of(&chat), "smollm2-135m");
    assert!(!chat.trace.signals[0].matched);
}

#[tokio::test]
async fn on_error_decides_what_a_missing_embedding_means() {
    let question = body("Why does my code throw an exception?");
    for (policy, expect_status, expect_model) in [
        ("no_match", None, Some("smollm2-135m")),
        ("match", None, Some("qwen2.5-coder-0.5b")),
        ("fail", Some(503), None),
    ] {
        let text = semantic_config().replace("onError: no_match", &format!("onError: {policy}"));
        let mut snapshot = compile_str(&text).unwrap();
        snapshot.encoder = None; // the encoder is gone: every embedding call fails
        let routed = engine::on_request_body(
            &snapshot,
            &mom_router::engine::Services::offline(&snapshot),
            &Headers::default(),
            &question,
        )
        .await;
        match (&routed.action, expect_status, expect_model) {
            (Action::Forward(forward), None, Some(model)) => {
                assert_eq!(&*forward.model, model, "{policy}");
                assert!(
                    routed.trace.signals[0].error.is_some(),
                    "{policy}: error not recorded"
                );
            }
            (Action::Respond(reply), Some(status), None) => {
                assert_eq!(reply.status, status);
                let error: Value = serde_json::from_slice(&reply.body).unwrap();
                assert_eq!(error["error"]["code"], "signal_unavailable");
                assert!(error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("programming"));
            }
            (action, _, _) => panic!("{policy}: unexpected {action:?}"),
        }
    }
}

#[tokio::test]
async fn an_embedding_signal_without_an_encoder_is_a_config_error() {
    let start = semantic_config().find("inference:").unwrap();
    let end = semantic_config().find("models:").unwrap();
    let mut text = semantic_config();
    text.replace_range(start..end, "");
    let errors = compile_str(&text).unwrap_err().0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let kinds = [
        "embedding",
        "complexity",
        "user_feedback",
        "modality",
        "fact_check",
        "preference",
    ];
    assert_eq!(lines.len(), kinds.len(), "{lines:#?}");
    for (i, (line, kind)) in lines.iter().zip(kinds).enumerate() {
        let article = if kind == "embedding" { "an" } else { "a" };
        assert_eq!(
            line,
            &format!("signals[{i}].type: {article} {kind} signal needs an encoder; configure inference.encoder")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_routes_by_the_embedding_signal_and_logs_it() {
    let stack = Stack::start_with_config(&semantic_config()).await;
    let response = stack
        .chat(
            &ask("How can I make this loop in my script run faster?"),
            "semantic-code",
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-fake-backend"), "qwen2.5-coder-0.5b");
    assert_eq!(header(&response, "x-mom-decision"), "programming");
    let log = stack.envoy.access_log_line("semantic-code").await;
    assert_eq!(log["mom_router"]["decision"], "programming");
    let confidence = log["mom_router"]["confidence"].as_f64().unwrap();
    assert!((0.35..=1.0).contains(&confidence), "{confidence}");
    let small_talk = stack
        .chat(
            &ask("Good morning! Any plans for the weekend?"),
            "semantic-chat",
        )
        .await;
    assert_eq!(header(&small_talk, "x-fake-backend"), "smollm2-135m");
    let ready: Value = reqwest::get(format!(
        "{}/ready",
        stack.sidecar.as_ref().unwrap().admin_url()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(ready["encoder"], "candle cpu");
    let metrics = stack.sidecar.as_ref().unwrap().metrics().await;
    assert!(
        metrics.contains("mom_model_batches_total{worker=\"encoder\"} "),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"));
}

#[tokio::test]
async fn exemplar_signals_label_clear_cases_as_a_person_would() {
    let snapshot = compile_str(&semantic_config()).unwrap();
    // Labels observed in a real run of this encoder; the exemplar sets are small, so only
    // clear-cut prompts are pinned here.
    let cases = [
        (
            "What is the capital of Italy?",
            Some("easy"),
            Some("no_feedback"),
        ),
        (
            "Design a consensus protocol tolerant to Byzantine faults and prove its safety.",
            Some("hard"),
            None,
        ),
        (
            "No, that is wrong, the code still crashes.",
            None,
            Some("wrong_answer"),
        ),
        ("Thanks, that fixed it!", None, Some("satisfied")),
    ];
    for (text, complexity, feedback) in cases {
        let routed = engine::on_request_body(
            &snapshot,
            &mom_router::engine::Services::offline(&snapshot),
            &Headers::default(),
            &body(text),
        )
        .await;
        let label = |kind: &str| {
            routed
                .trace
                .signals
                .iter()
                .find(|s| s.kind == kind)
                .and_then(|s| s.label.clone())
                .unwrap()
        };
        if let Some(complexity) = complexity {
            assert_eq!(label("complexity"), complexity, "{text}");
        }
        if let Some(feedback) = feedback {
            assert_eq!(label("user_feedback"), feedback, "{text}");
        }
    }
}

#[tokio::test]
async fn tool_selection_keeps_the_closest_tools_and_every_tool_already_called() {
    let config = semantic_config().replace(
        "    defaultModel: smollm2-135m\n\nsignals:",
        "    defaultModel: smollm2-135m\n    plugins: [{type: tool_selection, topK: 2}]\n\nsignals:",
    );
    assert_ne!(config, semantic_config());
    let snapshot = compile_str(&config).unwrap();
    let tool = |name: &str, description: &str| {
        serde_json::json!({"type": "function",
            "function": {"name": name, "description": description, "parameters": {"type": "object"}}})
    };
    let request = serde_json::json!({"model": "mom/auto", "tools": [
        tool("translate_text", "Translate a text from one language to another"),
        tool("get_weather", "Get the weather forecast, rain and temperature for a city"),
        tool("send_email", "Send an email message to a recipient"),
        tool("get_stock_price", "Look up the latest share price of a listed company"),
        tool("calculator", "Evaluate an arithmetic expression"),
        tool("create_calendar_event", "Add a meeting to the user's calendar"),
    ], "messages": [
        {"role": "user", "content": "Email Bob that the meeting moved to Friday"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "send_email", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sent"},
        {"role": "user", "content": "Will it rain in Paris tomorrow?"},
    ]});
    let routed = engine::on_request_body(
        &snapshot,
        &mom_router::engine::Services::offline(&snapshot),
        &Headers::default(),
        request.to_string().as_bytes(),
    )
    .await;
    let Action::Forward(forward) = &routed.action else {
        panic!("expected a forward, got {:?}", routed.action);
    };
    let upstream: Value = serde_json::from_slice(&forward.body).unwrap();
    let kept: Vec<&str> = upstream["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    // Two closest to the rain question (the weather tool among them), plus the email tool the
    // conversation already called; the client's order is kept.
    assert!(kept.contains(&"get_weather"), "{kept:?}");
    assert!(kept.contains(&"send_email"), "{kept:?}");
    assert!((2..=3).contains(&kept.len()), "{kept:?}");
    let action = &routed.trace.plugins[0];
    assert_eq!(action.plugin, "tool_selection");
    assert_eq!(action.outcome, mom_router::engine::PluginOutcome::Applied);
    assert_eq!(action.label(), format!("kept {} of 6 tools", kept.len()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paraphrase_is_answered_from_the_cache_within_its_conversation_only() {
    let config = semantic_config().replace(
        "    defaultModel: smollm2-135m\n\nsignals:",
        "    defaultModel: smollm2-135m\n    plugins: [{type: semantic_cache, threshold: 0.9}]\n\nsignals:",
    );
    assert_ne!(config, semantic_config());
    let stack = Stack::start_with_config(&config).await;
    let with_system = |system: &str, text: &str| {
        serde_json::json!({"model": "mom/auto", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": text}]})
    };
    let helpful = "You are a helpful assistant.";
    let first = stack
        .chat(
            &with_system(helpful, "How do I make pancakes?"),
            "paraphrase",
        )
        .await;
    assert_eq!(header(&first, "x-mom-plugins"), "semantic_cache:miss");
    let first: Value = first.json().await.unwrap();

    let paraphrase = stack
        .chat(
            &with_system(helpful, "How can I make pancakes?"),
            "paraphrase",
        )
        .await;
    assert_eq!(header(&paraphrase, "x-mom-cache-hit"), "true");
    let action = header(&paraphrase, "x-mom-plugins");
    let similarity: f64 = action
        .strip_prefix("semantic_cache:hit similar ")
        .unwrap_or_else(|| panic!("{action}"))
        .parse()
        .unwrap();
    assert!((0.9..1.0).contains(&similarity), "{similarity}");
    assert_eq!(paraphrase.json::<Value>().await.unwrap(), first);

    // The same paraphrase under another system prompt is another conversation; an unrelated
    // question in the same conversation is below the threshold.
    let pirate = with_system("You are a pirate.", "How can I make pancakes?");
    let unrelated = with_system(helpful, "What is the boiling point of water?");
    for body in [pirate, unrelated] {
        let response = stack.chat(&body, "paraphrase").await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-mom-plugins"), "semantic_cache:miss");
    }
    assert_eq!(stack.requests_seen(), 3);
}
