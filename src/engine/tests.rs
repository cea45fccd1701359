//! Pipeline tests on a small policy: routing by signals, defaults, pass-through, refusals.

use super::*;
use crate::config::compile_str;
use serde_json::Value;

const POLICY: &str = r#"
version: engine-test
server: { maxBodyBytes: 4096 }
models:
  - { name: small, providerModel: small-v1 }
  - { name: coder, providerModel: coder-v3 }
  - { name: canary, providerModel: canary-v0 }
identities:
  - { name: mom/auto, version: "7", defaultModel: small }
  - { name: mom/code-only, defaultModel: small, decisions: [code] }
signals:
  - { name: code, type: keyword, keywords: [python, rust] }
  - { name: math, type: keyword, patterns: ['\d+\s*[+*/-]\s*\d+'] }
  - { name: beta, type: metadata, header: x-beta, present: true }
decisions:
  - { name: code, priority: 10, rules: { signal: code }, modelRefs: [{ model: coder }] }
  - { name: math, priority: 5, rules: { signal: math }, modelRefs: [{ model: coder }] }
  - name: beta_split
    priority: 50
    rules: { all: [{ signal: beta }, { signal: code }] }
    algorithm: { type: weighted }
    modelRefs: [{ model: coder, weight: 1 }, { model: canary, weight: 1 }]
"#;

fn snapshot() -> Snapshot {
    compile_str(POLICY).unwrap()
}

fn chat(model: &str, text: &str) -> Vec<u8> {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]})
        .to_string()
        .into_bytes()
}

fn fresh() -> Services {
    Services::offline(&snapshot())
}

fn post() -> Headers {
    Headers::new([
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), CHAT_PATH.to_owned()),
    ])
}

fn forward_of(routed: &Routed) -> &Forward {
    match &routed.action {
        Action::Forward(forward) => forward,
        Action::Respond(reply) => panic!("expected forward, got {reply:?}"),
    }
}

fn reply_of(routed: &Routed) -> (u16, Value) {
    match &routed.action {
        Action::Respond(reply) => (reply.status, serde_json::from_slice(&reply.body).unwrap()),
        Action::Forward(forward) => panic!("expected reply, got {forward:?}"),
    }
}

#[tokio::test]
async fn code_prompt_routes_to_the_coder_and_rewrites_the_body_model() {
    let s = snapshot();
    let routed = on_request_body(
        &s,
        &fresh(),
        &post(),
        &chat("mom/auto", "fix my python loop"),
    )
    .await;
    let forward = forward_of(&routed);
    assert_eq!(&*forward.model, "coder");
    let body: Value = serde_json::from_slice(&forward.body).unwrap();
    assert_eq!(body["model"], "coder-v3");
    assert_eq!(routed.trace.decision.as_deref(), Some("code"));
    assert_eq!(routed.trace.identity_version.as_deref(), Some("7"));
    assert_eq!(routed.trace.signals.len(), 3);
}

#[tokio::test]
async fn no_matching_decision_uses_the_identity_default() {
    let s = snapshot();
    let routed = on_request_body(&s, &fresh(), &post(), &chat("mom/auto", "hello there")).await;
    assert_eq!(&*forward_of(&routed).model, "small");
    assert_eq!(routed.trace.decision, None);
    assert_eq!(routed.trace.decision_label(), "none");
}

#[tokio::test]
async fn higher_priority_decision_wins_when_several_match() {
    let s = snapshot();
    let routed = on_request_body(
        &s,
        &fresh(),
        &post(),
        &chat("mom/auto", "in rust compute 2 + 2"),
    )
    .await;
    assert_eq!(routed.trace.decision.as_deref(), Some("code"));
}

#[tokio::test]
async fn identity_only_evaluates_its_own_decisions_and_signals() {
    let s = snapshot();
    let routed = on_request_body(
        &s,
        &fresh(),
        &post(),
        &chat("mom/code-only", "compute 2 + 2"),
    )
    .await;
    assert_eq!(&*forward_of(&routed).model, "small");
    let names: Vec<&str> = routed.trace.signals.iter().map(|r| &*r.name).collect();
    assert_eq!(names, vec!["code"]);
}

#[tokio::test]
async fn weighted_split_is_keyed_by_request_id() {
    let s = snapshot();
    let mut picked = std::collections::BTreeSet::new();
    for id in 0..40 {
        let mut headers = post();
        headers = Headers::new(
            headers
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .chain([
                    ("x-beta".to_owned(), "1".to_owned()),
                    ("x-request-id".to_owned(), format!("req-{id}")),
                ]),
        );
        let body = chat("mom/auto", "python please");
        let first = on_request_body(&s, &fresh(), &headers, &body).await;
        let again = on_request_body(&s, &fresh(), &headers, &body).await;
        assert_eq!(forward_of(&first).model, forward_of(&again).model);
        assert_eq!(first.trace.algorithm, "weighted");
        picked.insert(forward_of(&first).model.to_string());
    }
    assert_eq!(
        picked.into_iter().collect::<Vec<_>>(),
        vec!["canary", "coder"]
    );
}

#[tokio::test]
async fn a_concrete_model_passes_through_without_policy() {
    let s = snapshot();
    let routed = on_request_body(&s, &fresh(), &post(), &chat("canary", "python")).await;
    let forward = forward_of(&routed);
    assert_eq!(&*forward.model, "canary");
    assert_eq!(&*forward.provider_model, "canary-v0");
    assert_eq!(routed.trace.algorithm, "passthrough");
    assert!(routed.trace.signals.is_empty());
}

#[tokio::test]
async fn unknown_model_is_a_400_listing_every_valid_name() {
    let s = snapshot();
    let (status, body) =
        reply_of(&on_request_body(&s, &fresh(), &post(), &chat("gpt-9", "hi")).await);
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(
        body["error"]["message"],
        "unknown model \"gpt-9\"; valid models: mom/auto, mom/code-only, small, coder, canary"
    );
}

#[tokio::test]
async fn oversize_bodies_are_refused_from_the_header_or_the_body() {
    let s = snapshot();
    let mut pairs: Vec<(String, String)> = post()
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    pairs.push(("content-length".to_owned(), "5000".to_owned()));
    let routed = on_request_headers(&s, &Headers::new(pairs), false).unwrap();
    assert_eq!(reply_of(&routed).0, 413);
    let big = chat("mom/auto", &"x".repeat(5000));
    let (status, body) = reply_of(&on_request_body(&s, &fresh(), &post(), &big).await);
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "request_too_large");
}

#[tokio::test]
async fn paths_and_methods_are_checked_before_the_body() {
    let s = snapshot();
    let request = |method: &str, path: &str| {
        Headers::new([
            (":method".to_owned(), method.to_owned()),
            (":path".to_owned(), path.to_owned()),
        ])
    };
    let models = on_request_headers(&s, &request("GET", "/v1/models?x=1"), true).unwrap();
    let (status, body) = reply_of(&models);
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["id"], "mom/auto");
    assert_eq!(body["data"][0]["version"], "7");
    assert_eq!(body["data"].as_array().unwrap().len(), 5);
    assert_eq!(
        reply_of(&on_request_headers(&s, &request("GET", "/v2/x"), true).unwrap()).0,
        404
    );
    let wrong_method = on_request_headers(&s, &request("GET", CHAT_PATH), true).unwrap();
    assert_eq!(reply_of(&wrong_method).0, 405);
    let Action::Respond(reply) = &wrong_method.action else {
        unreachable!()
    };
    assert!(reply
        .headers
        .contains(&("allow".to_owned(), "POST".to_owned())));
    assert_eq!(
        reply_of(&on_request_headers(&s, &request("POST", CHAT_PATH), true).unwrap()).0,
        400
    );
    assert!(on_request_headers(&s, &request("POST", CHAT_PATH), false).is_none());
}

#[tokio::test]
async fn malformed_bodies_get_openai_errors_naming_the_problem() {
    let s = snapshot();
    let cases: [(&[u8], &str); 4] = [
        (b"{\"model\":", "invalid_json"),
        (b"{\"model\":\"mom/auto\"}", "missing_field"),
        (b"{\"model\":\"mom/auto\",\"messages\":{}}", "invalid_type"),
        (b"\xff\xfe", "invalid_encoding"),
    ];
    for (body, code) in cases {
        let (status, json) = reply_of(&on_request_body(&s, &fresh(), &post(), body).await);
        assert_eq!(status, 400);
        assert_eq!(json["error"]["code"], code);
        assert_eq!(json["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn cost_aware_reads_observed_completion_lengths() {
    let s = compile_str(
        r#"
models:
  - {name: wordy-cheap-input, providerModel: a, quality: 0.5, pricing: {inputPerMillion: 1, outputPerMillion: 10}}
  - {name: cheap-output, providerModel: b, quality: 0.5, pricing: {inputPerMillion: 5, outputPerMillion: 2}}
identities:
  - {name: mom/auto, defaultModel: cheap-output}
signals:
  - {name: anything, type: context_length, minTokens: 0}
decisions:
  - name: pick
    rules: {signal: anything}
    modelRefs: [{model: wordy-cheap-input}, {model: cheap-output}]
    algorithm: {type: cost_aware, qualityFloor: 0.5}
"#,
    )
    .unwrap();
    let state = Services::offline(&s);
    let body = chat("mom/auto", "summarise this");
    // Unobserved, both are assumed to write 256 tokens: output price decides.
    let cold = on_request_body(&s, &state, &post(), &body).await;
    assert_eq!(&*forward_of(&cold).model, "cheap-output");
    // wordy-cheap-input turns out to answer in two tokens: now its cheap input wins.
    for _ in 0..3 {
        state.state.observe(
            "wordy-cheap-input",
            crate::state::Observation {
                timing: crate::state::Timing {
                    at_ms: crate::state::now_ms(),
                    ttft_ms: 5.0,
                    total_ms: 9.0,
                },
                prompt_tokens: Some(4),
                completion_tokens: Some(2),
                estimated_prompt_tokens: 4,
            },
        );
    }
    let warm = on_request_body(&s, &state, &post(), &body).await;
    assert_eq!(&*forward_of(&warm).model, "wordy-cheap-input");
    assert!(warm
        .trace
        .selection_reason
        .starts_with("cheapest expected cost"));
}

#[tokio::test]
async fn internal_headers_need_the_process_token_and_a_bounded_depth() {
    let s = snapshot();
    let services = Services {
        client: Some(LlmClient::new("http://127.0.0.1:9", "a".repeat(32))),
        ..Services::offline(&s)
    };
    let with = |token: &str, depth: &str| {
        Headers::new(vec![
            (":method".to_owned(), "POST".to_owned()),
            (":path".to_owned(), CHAT_PATH.to_owned()),
            ("x-mom-internal-token".to_owned(), token.to_owned()),
            ("x-mom-depth".to_owned(), depth.to_owned()),
        ])
    };
    let body = chat("mom/auto", "hello there");
    let spoofed = on_request_body(&s, &services, &with(&"b".repeat(32), "1"), &body).await;
    assert_eq!(reply_of(&spoofed).0, 403);
    assert_eq!(
        reply_of(&spoofed).1["error"]["code"],
        "internal_auth_failed"
    );
    let deep = on_request_body(&s, &services, &with(&"a".repeat(32), "3"), &body).await;
    assert_eq!(reply_of(&deep).0, 508);
    let inside = on_request_body(&s, &services, &with(&"a".repeat(32), "1"), &body).await;
    assert_eq!(&*forward_of(&inside).model, "small");
    // Offline (no client, no token) every internal header is refused.
    let offline = on_request_body(&s, &fresh(), &with(&"a".repeat(32), "1"), &body).await;
    assert_eq!(reply_of(&offline).0, 403);
}

#[tokio::test]
async fn latency_aware_adds_each_models_expected_wait_to_its_latency() {
    let s = compile_str(
        r#"
models:
  - {name: fast, providerModel: a, maxConcurrency: 1}
  - {name: slow, providerModel: b, maxConcurrency: 1}
identities:
  - {name: mom/auto, defaultModel: fast}
signals:
  - {name: anything, type: context_length, minTokens: 0}
decisions:
  - name: pick
    rules: {signal: anything}
    modelRefs: [{model: fast}, {model: slow}]
    algorithm: {type: latency_aware}
"#,
    )
    .unwrap();
    let services = Services::offline(&s);
    for (model, total_ms) in [("fast", 100.0), ("slow", 400.0)] {
        for _ in 0..5 {
            let timing = crate::state::Timing {
                at_ms: crate::state::now_ms(),
                ttft_ms: 5.0,
                total_ms,
            };
            let observation = crate::state::Observation {
                timing,
                prompt_tokens: None,
                completion_tokens: None,
                estimated_prompt_tokens: 4,
            };
            services.state.observe(model, observation);
        }
    }
    let body = chat("mom/auto", "hello");
    let idle = on_request_body(&s, &services, &post(), &body).await;
    assert_eq!(&*forward_of(&idle).model, "fast");
    // Ten requests ahead on fast's one slot (~1.1 s with its own) against one on slow's
    // (~0.8 s): both busy, the wait decides.
    let pool = &services.state.pool;
    let _busy: Vec<_> = std::iter::repeat_n("fast", 10)
        .chain(["slow"])
        .map(|m| pool.start(m))
        .collect();
    let loaded = on_request_body(&s, &services, &post(), &body).await;
    assert_eq!(&*forward_of(&loaded).model, "slow");
    let reason = &loaded.trace.selection_reason;
    assert!(reason.contains("no free slot anywhere: fast busy: 10 in flight on 1 slot, wait ~1 s; slow busy: 1 in flight on 1 slot"), "{reason}");
}
