//! In-process harness: the sidecar on port 0 and a scripted fake Envoy that plays ext_proc
//! streams message by message and checks each reply, with no Envoy binary involved.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{
    BodySendMode, HeaderSendMode,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, external_processor_client::ExternalProcessorClient,
    processing_request::Request, processing_response::Response, BodyMutation, HttpBody,
    HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::value::Kind;
use serde_json::{json, Value};
use std::time::Duration;
use support::sidecar::{quickstart_config, Sidecar};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// One scripted ext_proc stream, as Envoy would drive it.
struct FakeEnvoy {
    tx: mpsc::Sender<ProcessingRequest>,
    rx: tonic::Streaming<ProcessingResponse>,
}

impl FakeEnvoy {
    async fn open(port: u16) -> Self {
        let mut client = ExternalProcessorClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .unwrap();
        let (tx, requests) = mpsc::channel(4);
        let rx = client
            .process(ReceiverStream::new(requests))
            .await
            .unwrap()
            .into_inner();
        Self { tx, rx }
    }

    async fn next(&mut self) -> ProcessingResponse {
        tokio::time::timeout(Duration::from_secs(5), self.rx.message())
            .await
            .expect("no reply within 5 s")
            .unwrap()
            .expect("stream closed")
    }

    async fn send(&mut self, request: Request) -> ProcessingResponse {
        self.tx
            .send(ProcessingRequest {
                request: Some(request),
                ..Default::default()
            })
            .await
            .unwrap();
        self.next().await
    }
}

fn headers(pairs: &[(&str, &str)], end_of_stream: bool) -> Request {
    Request::RequestHeaders(HttpHeaders {
        headers: Some(HeaderMap {
            headers: pairs
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: (*k).to_owned(),
                    raw_value: v.as_bytes().to_vec(),
                    ..Default::default()
                })
                .collect(),
        }),
        end_of_stream,
        ..Default::default()
    })
}

fn body(bytes: &[u8], end_of_stream: bool) -> Request {
    Request::RequestBody(HttpBody {
        body: bytes.to_vec(),
        end_of_stream,
        ..Default::default()
    })
}

fn response_headers(status: &str) -> Request {
    match headers(&[(":status", status)], false) {
        Request::RequestHeaders(h) => Request::ResponseHeaders(h),
        _ => unreachable!(),
    }
}

const POST_CHAT: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/chat/completions"),
    ("x-selected-model", "gemma3-270m"),
];

fn set_headers(response: &ProcessingResponse) -> Vec<(String, String)> {
    let common = match &response.response {
        Some(Response::RequestHeaders(h) | Response::ResponseHeaders(h)) => h.response.clone(),
        Some(Response::RequestBody(b) | Response::ResponseBody(b)) => b.response.clone(),
        other => panic!("no common response in {other:?}"),
    };
    common
        .and_then(|c| c.header_mutation)
        .map(|m| {
            m.set_headers
                .into_iter()
                .map(|o| {
                    let h = o.header.unwrap();
                    assert!(h.value.is_empty(), "{} set in value, not raw_value", h.key);
                    (h.key, String::from_utf8(h.raw_value).unwrap())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn get<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_phase_reply_routes_rewrites_and_clears_the_route_cache() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    let first = envoy.send(headers(POST_CHAT, false)).await;
    assert!(matches!(first.response, Some(Response::RequestHeaders(_))));
    let request = json!({"model": "mom/auto", "messages": [{"role": "user", "content": "fix this python bug"}]});
    let reply = envoy.send(body(request.to_string().as_bytes(), true)).await;
    let Some(Response::RequestBody(body_reply)) = &reply.response else {
        panic!("expected a body reply, got {reply:?}");
    };
    let common = body_reply.response.clone().unwrap();
    assert!(common.clear_route_cache);
    let Some(Mutation::Body(new_body)) = common.body_mutation.unwrap().mutation else {
        panic!("body not replaced");
    };
    let rewritten: Value = serde_json::from_slice(&new_body).unwrap();
    assert_eq!(rewritten["model"], "Qwen2.5-Coder-0.5B-Instruct");
    let set = set_headers(&reply);
    assert_eq!(get(&set, "x-selected-model"), Some("qwen2.5-coder-0.5b"));
    assert_eq!(
        get(&set, "content-length"),
        Some(new_body.len().to_string().as_str())
    );
    assert_eq!(get(&set, "accept-encoding"), Some("identity"));
    let metadata = reply.dynamic_metadata.unwrap();
    let Some(Kind::StructValue(ours)) = &metadata.fields["mom_router"].kind else {
        panic!("metadata namespace mom_router missing");
    };
    let field = |k: &str| ours.fields[k].kind.clone();
    assert_eq!(
        field("decision"),
        Some(Kind::StringValue("code".to_owned()))
    );
    assert_eq!(
        field("identity"),
        Some(Kind::StringValue("mom/auto".to_owned()))
    );
    assert_eq!(field("confidence"), Some(Kind::NumberValue(1.0)));
    let after = envoy.send(response_headers("200")).await;
    assert!(
        after.mode_override.is_none(),
        "non-streaming request switched modes"
    );
    let set = set_headers(&after);
    assert_eq!(get(&set, "x-mom-decision"), Some("code"));
    assert_eq!(get(&set, "x-mom-model"), Some("qwen2.5-coder-0.5b"));
    assert_eq!(get(&set, "x-mom-response-path"), Some("upstream"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_mom_router_reads_is_switched_to_streamed_with_a_complete_mode() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    // A plain stream owes nothing: its body is not asked for (no round trip per chunk).
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    envoy.send(headers(POST_CHAT, false)).await;
    let request = json!({"model": "mom/auto", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    envoy.send(body(request.to_string().as_bytes(), true)).await;
    let reply = envoy.send(response_headers("200")).await;
    assert!(reply.mode_override.is_none(), "{reply:?}");
    assert_eq!(
        get(&set_headers(&reply), "x-mom-identity"),
        Some("mom/auto")
    );
    // A masked one has values to restore in every chunk.
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    envoy.send(headers(POST_CHAT, false)).await;
    let text = "Write to jane.doe@example.com to say the meeting moved.";
    let request = json!({"model": "mom/secu", "stream": true, "messages": [{"role": "user", "content": text}]});
    envoy.send(body(request.to_string().as_bytes(), true)).await;
    let reply = envoy.send(response_headers("200")).await;
    let mode = reply
        .mode_override
        .expect("no mode_override for a stream with values to restore");
    assert_eq!(mode.response_body_mode, BodySendMode::Streamed as i32);
    assert_eq!(mode.request_body_mode, BodySendMode::Buffered as i32);
    assert_eq!(mode.response_header_mode, HeaderSendMode::Send as i32);
    for chunk in ["data: {\"a\":1}\n\n", "data: [DONE]\n\n"] {
        let reply = envoy
            .send(Request::ResponseBody(HttpBody {
                body: chunk.as_bytes().to_vec(),
                end_of_stream: chunk.contains("DONE"),
                ..Default::default()
            }))
            .await;
        let Some(Response::ResponseBody(passed)) = reply.response else {
            panic!("expected a response-body reply");
        };
        // No placeholder in the chunk: the client gets it as it came.
        let mutation = passed.response.and_then(|c| c.body_mutation);
        if let Some(BodyMutation {
            mutation: Some(Mutation::Body(sent)),
        }) = mutation
        {
            assert_eq!(sent, chunk.as_bytes());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_response_to_a_streaming_request_is_not_switched_to_streamed() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    envoy.send(headers(POST_CHAT, false)).await;
    // Masked values would be restored in a 2xx stream; an error is passed on as it is.
    let text = "Write to jane.doe@example.com to say the meeting moved.";
    let request = json!({"model": "mom/secu", "stream": true, "messages": [{"role": "user", "content": text}]});
    envoy.send(body(request.to_string().as_bytes(), true)).await;
    let reply = envoy.send(response_headers("503")).await;
    assert!(reply.mode_override.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_request_body_is_refused_instead_of_misrouted() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    envoy.send(headers(POST_CHAT, false)).await;
    let reply = envoy.send(body(b"{\"model\":\"mom/au", false)).await;
    let Some(Response::ImmediateResponse(immediate)) = reply.response else {
        panic!("expected an immediate response, got {reply:?}");
    };
    assert_eq!(immediate.status.unwrap().code, 500);
    let error: Value = serde_json::from_slice(&immediate.body).unwrap();
    assert_eq!(error["error"]["code"], "router_misconfigured");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("BUFFERED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_is_answered_from_the_header_phase() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    let reply = envoy
        .send(headers(
            &[(":method", "GET"), (":path", "/v1/models")],
            true,
        ))
        .await;
    let Some(Response::ImmediateResponse(immediate)) = reply.response else {
        panic!("expected an immediate response");
    };
    assert_eq!(immediate.status.unwrap().code, 200);
    let list: Value = serde_json::from_slice(&immediate.body).unwrap();
    assert_eq!(list["data"][0]["id"], "mom/auto");
    assert_eq!(immediate.details, "mom_router_ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_to_the_next_stream_and_a_stream_keeps_its_snapshot() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut old_stream = FakeEnvoy::open(sidecar.grpc_port()).await;
    old_stream.send(headers(POST_CHAT, false)).await;
    let before = sidecar.version();
    sidecar.rewrite_config(
        &quickstart_config()
            .replace(
                "rules: { signal: code }\n    modelRefs: [{ model: qwen2.5-coder-0.5b }]",
                "rules: { signal: code }\n    modelRefs: [{ model: gemma3-270m }]",
            )
            .replace(
                "name: mom/auto\n    version: \"1\"",
                "name: mom/auto\n    version: \"2\"",
            ),
    );
    let changed = support::eventually(Duration::from_secs(5), async || {
        (sidecar.version() != before).then_some(())
    })
    .await;
    assert!(changed.is_some(), "reload not applied");
    let code_request = json!({"model": "mom/auto",
        "messages": [{"role": "user", "content": "fix this python bug"}]})
    .to_string();
    let old = old_stream.send(body(code_request.as_bytes(), true)).await;
    assert_eq!(
        get(&set_headers(&old), "x-selected-model"),
        Some("qwen2.5-coder-0.5b")
    );
    let mut new_stream = FakeEnvoy::open(sidecar.grpc_port()).await;
    new_stream.send(headers(POST_CHAT, false)).await;
    let new = new_stream.send(body(code_request.as_bytes(), true)).await;
    assert_eq!(
        get(&set_headers(&new), "x-selected-model"),
        Some("gemma3-270m")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_report_liveness_readiness_and_metrics() {
    let sidecar = Sidecar::start(&quickstart_config(), 0).await;
    let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
    envoy.send(headers(POST_CHAT, false)).await;
    envoy.send(body(b"not json", true)).await;
    let admin = sidecar.admin_url();
    let live = reqwest::get(format!("{admin}/live")).await.unwrap();
    assert_eq!(live.status(), 200);
    let ready: Value = reqwest::get(format!("{admin}/ready"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["config_version"], sidecar.version());
    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains("mom_immediate_replies_total{code=\"invalid_json\",status=\"400\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mom_extproc_phase_seconds_count{phase=\"request_body\"} 1"),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_request_headers_need_the_process_token_and_a_bounded_depth() {
    // Sub-requests would go to a closed port: a looper that ran would escalate to `large`.
    let config = r#"
version: depth-guard
server: {internalUrl: "http://127.0.0.1:9"}
models:
  - {name: small, providerModel: s}
  - {name: large, providerModel: l}
identities:
  - {name: mom/auto, defaultModel: small}
signals:
  - {name: anything, type: context_length, minTokens: 0}
decisions:
  - name: cascade
    rules: {signal: anything}
    modelRefs: [{model: small}, {model: large}]
    looper: {type: confidence, threshold: -1, perCallTimeoutMs: 500}
"#;
    let sidecar = Sidecar::start(config, 0).await;
    let token = sidecar.running.internal_token.clone();
    let forged = "0".repeat(32);
    let request = json!({"model": "mom/auto", "messages": [{"role": "user", "content": "hi"}]});
    type Refusal<'a> = Option<(i32, &'a str)>;
    let cases: [(&str, &str, Refusal); 4] = [
        (&token, "1", None),
        (&token, "3", Some((508, "loop_detected"))),
        (&forged, "1", Some((403, "internal_auth_failed"))),
        (&token, "deep", Some((403, "internal_auth_failed"))),
    ];
    for (token, depth, refused) in cases {
        let mut envoy = FakeEnvoy::open(sidecar.grpc_port()).await;
        let mut pairs = POST_CHAT.to_vec();
        pairs.extend([("x-mom-internal-token", token), ("x-mom-depth", depth)]);
        envoy.send(headers(&pairs, false)).await;
        // A policy with loopers first asks Envoy for time, then answers.
        let wait = envoy.send(body(request.to_string().as_bytes(), true)).await;
        assert!(wait.override_message_timeout.is_some(), "{wait:?}");
        let reply = envoy.next().await;
        match (refused, &reply.response) {
            (None, Some(Response::RequestBody(_))) => {
                // A valid sub-request is routed as it is: the decision's plain pick, no looper.
                let set = set_headers(&reply);
                assert_eq!(get(&set, "x-selected-model"), Some("small"));
            }
            (Some((status, code)), Some(Response::ImmediateResponse(immediate))) => {
                assert_eq!(immediate.status.as_ref().unwrap().code, status);
                let error: Value = serde_json::from_slice(&immediate.body).unwrap();
                assert_eq!(error["error"]["code"], code, "depth {depth}");
            }
            (expected, other) => panic!("depth {depth}: expected {expected:?}, got {other:?}"),
        }
    }
}
