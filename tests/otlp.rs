//! OTLP spans through the real Envoy: a collector built here from the OTLP protobuf definitions
//! (gRPC `TraceService/Export`, and HTTP `POST /v1/traces`) receives one request's spans. The
//! request span continues the client's `traceparent`; the cascade's sub-requests and the
//! forwarded call are its children, each backend receiving a `traceparent` that names the span
//! of the call that reached it; the GenAI attributes describe identity, model and usage.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::observability::spans::hex;
use opentelemetry_proto::tonic::collector::trace::v1::{
    trace_service_server::{TraceService, TraceServiceServer},
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::stack::{header, Stack};

/// What a collector received.
type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

struct Collector(Received);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A gRPC collector on a free loopback port: its URL and what it receives.
async fn grpc_collector() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Received::default();
    let service = TraceServiceServer::new(Collector(received.clone()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (url, received)
}

/// An HTTP collector (protobuf bodies at `/v1/traces`) on a free loopback port.
async fn http_collector() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Received::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let request: ExportTraceServiceRequest = prost::Message::decode(body).unwrap();
                kept.lock().unwrap().push(request);
                axum::http::StatusCode::OK
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

fn policy(endpoint: &str, protocol: &str) -> String {
    format!(
        r#"
version: otlp-test
server: {{internalUrl: "http://127.0.0.1:10001"}}
observability:
  otlp: {{endpoint: "{endpoint}", protocol: {protocol}, serviceName: mom-router-test}}
models:
  - {{name: smollm2-135m, providerModel: SmolLM2-135M-Instruct}}
  - {{name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}}
  - {{name: gemma3-270m, providerModel: gemma-3-270m}}
identities:
  - {{name: mom/auto, defaultModel: smollm2-135m}}
signals:
  - {{name: anything, type: context_length, minTokens: 0}}
decisions:
  - name: cascade
    rules: {{signal: anything}}
    modelRefs: [{{model: smollm2-135m}}, {{model: qwen2.5-coder-0.5b}}, {{model: gemma3-270m}}]
    looper: {{type: confidence, threshold: -0.5, maxTokens: 64, perCallTimeoutMs: 2000, onError: skip}}
"#
    )
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(span: &Span, key: &str) -> String {
    match attribute(span, key) {
        Some(Any::StringValue(s)) => s.clone(),
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attribute(span, key) {
        Some(Any::IntValue(i)) => *i,
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

/// The `traceparent` each backend received, by model.
fn traceparents(stack: &Stack, model: &str) -> Vec<String> {
    stack.backends[model]
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| {
            s.headers
                .iter()
                .find(|(k, _)| k == "traceparent")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

/// Sends a request the cascade escalates through both tentative models to the last one, with
/// the client's trace context and a session.
async fn escalate(stack: &Stack, stream: bool) -> reqwest::Response {
    stack.backends["smollm2-135m"].set_logprob(-2.0);
    stack.backends["qwen2.5-coder-0.5b"].set_logprob(-1.5);
    let body = json!({"model": "mom/auto", "stream": stream, "max_tokens": 300,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "prove the theorem"}]});
    let response = stack
        .client
        .post(stack.url("/v1/chat/completions", "otlp"))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .header("x-session-id", "conversation-7")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper-calls"), "2");
    response
}

/// Sends one escalating cascade request and waits for its spans at the collector.
async fn traced_cascade(stack: &Stack, received: &Received, stream: bool) -> Vec<Span> {
    let response = escalate(stack, stream).await;
    let run_id = header(&response, "x-mom-run-id");
    let _ = response.bytes().await.unwrap();
    support::eventually(Duration::from_secs(10), async || {
        let spans: Vec<Span> = received
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect();
        let root = spans.iter().any(
            |s| matches!(attribute(s, "mom.run_id"), Some(Any::StringValue(id)) if *id == run_id),
        );
        root.then_some(spans)
    })
    .await
    .expect("the request's spans reach the collector")
}

fn check_structure(stack: &Stack, spans: &[Span]) {
    let root = spans
        .iter()
        .find(|s| s.kind == SpanKind::Server as i32)
        .expect("a server span for the request");
    assert_eq!(root.name, "chat mom/auto");
    assert_eq!(hex(&root.trace_id), CLIENT_TRACE);
    assert_eq!(
        hex(&root.parent_span_id),
        CLIENT_SPAN,
        "continues the client's span"
    );
    assert_eq!(text(root, "gen_ai.operation.name"), "chat");
    assert_eq!(text(root, "gen_ai.request.model"), "mom/auto");
    assert_eq!(text(root, "gen_ai.response.model"), "gemma3-270m");
    assert_eq!(text(root, "gen_ai.conversation.id"), "conversation-7");
    assert_eq!(text(root, "mom.decision"), "cascade");
    assert_eq!(text(root, "mom.recipe"), "confidence");
    assert_eq!(int(root, "mom.recipe.calls"), 2);
    assert_eq!(int(root, "http.response.status_code"), 200);
    assert!(int(root, "gen_ai.usage.output_tokens") > 0);
    assert!(root.end_time_unix_nano >= root.start_time_unix_nano);

    let children: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_id)
        .collect();
    assert!(children.iter().all(|s| s.trace_id == root.trace_id));
    let named = |name: &str| -> Vec<&Span> {
        children
            .iter()
            .copied()
            .filter(|s| s.name == name && s.kind == SpanKind::Client as i32)
            .collect()
    };
    // The two tentative sub-requests, then the call Envoy makes with the client's request.
    let tentative = [
        ("chat smollm2-135m", "smollm2-135m"),
        ("chat qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),
    ];
    for (name, model) in tentative {
        let calls = named(name);
        assert_eq!(
            calls.len(),
            1,
            "{name} in {:?}",
            children.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        let call = calls[0];
        assert_eq!(text(call, "gen_ai.request.model"), model);
        assert_eq!(int(call, "mom.depth"), 1);
        assert!(int(call, "gen_ai.usage.output_tokens") > 0);
        assert!(call.start_time_unix_nano >= root.start_time_unix_nano);
        assert!(call.end_time_unix_nano <= root.end_time_unix_nano);
        let carried = format!("00-{CLIENT_TRACE}-{}-01", hex(&call.span_id));
        assert_eq!(traceparents(stack, model), vec![carried]);
    }
    let forwarded = named("chat gemma-3-270m");
    assert_eq!(forwarded.len(), 1);
    assert_eq!(text(forwarded[0], "mom.model"), "gemma3-270m");
    assert_eq!(int(forwarded[0], "http.response.status_code"), 200);
    let carried = format!("00-{CLIENT_TRACE}-{}-01", hex(&forwarded[0].span_id));
    assert_eq!(traceparents(stack, "gemma3-270m"), vec![carried]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_exports_its_request_span_and_every_call_as_a_child_over_grpc() {
    let (endpoint, received) = grpc_collector().await;
    let stack = Stack::start_with_config(&policy(&endpoint, "grpc")).await;
    let spans = traced_cascade(&stack, &received, true).await;
    check_structure(&stack, &spans);
    let request = received.lock().unwrap()[0].clone();
    let resource = request.resource_spans[0].resource.clone().unwrap();
    let service = resource
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value);
    assert_eq!(
        service,
        Some(Any::StringValue("mom-router-test".to_owned()))
    );
    let forwarded = spans
        .iter()
        .find(|s| s.name == "chat gemma-3-270m")
        .unwrap();
    // The stream's last chunk says why it ended.
    assert!(
        attribute(forwarded, "gen_ai.response.finish_reasons").is_some(),
        "{:?}",
        forwarded.attributes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_over_http_too_and_a_missing_collector_only_counts_them() {
    let (endpoint, received) = http_collector().await;
    let stack = Stack::start_with_config(&policy(&endpoint, "http")).await;
    let spans = traced_cascade(&stack, &received, false).await;
    check_structure(&stack, &spans);

    // No collector listening: requests are served as before, the spans are counted as dropped.
    let closed = format!("http://127.0.0.1:{}", support::free_port());
    let stack = Stack::start_with_config(&policy(&closed, "grpc")).await;
    let response = stack
        .chat(
            &json!({"model": "mom/auto", "messages": [{"role": "user", "content": "hi"}]}),
            "down",
        )
        .await;
    assert_eq!(response.status(), 200);
    let sidecar = stack.sidecar.as_ref().unwrap();
    let dropped = support::eventually(Duration::from_secs(15), async || {
        let metrics = sidecar.metrics().await;
        metrics
            .lines()
            .find(|l| l.starts_with("mom_spans_dropped_total "))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(
        dropped.is_some(),
        "spans for a missing collector are counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_export_the_clients_trace_context_reaches_every_call_unchanged() {
    let unexported = policy("http://127.0.0.1:4317", "grpc")
        .lines()
        .filter(|line| !line.contains("observability") && !line.contains("otlp:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!unexported.contains("observability"));
    let stack = Stack::start_with_config(&unexported).await;
    let _ = escalate(&stack, false).await.bytes().await.unwrap();
    let sent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    for model in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        assert_eq!(traceparents(&stack, model), vec![sent.clone()], "{model}");
    }
}
