//! The benchmarks' floor, `benches/noop_extproc.rs`, is a real ext_proc server: it answers every
//! phase Envoy can send with the phase's own reply, and behind a real Envoy a chat request is
//! routed on the model it names and answered by that model's backend.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

#[path = "../benches/noop_extproc.rs"]
mod noop;

use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::HeaderSendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, processing_request::Request, processing_response::Response, HttpBody,
    HttpHeaders, HttpTrailers,
};
use support::stack::{ask, Stack};

#[test]
fn every_phase_gets_its_own_reply() {
    let phases = [
        Request::RequestHeaders(HttpHeaders::default()),
        Request::RequestBody(HttpBody::default()),
        Request::RequestTrailers(HttpTrailers::default()),
        Request::ResponseHeaders(HttpHeaders::default()),
        Request::ResponseBody(HttpBody::default()),
        Request::ResponseTrailers(HttpTrailers::default()),
    ];
    for phase in phases {
        let name = format!("{phase:?}");
        let answered = match (&phase, noop::reply(phase.clone(), "m", None)) {
            (Request::RequestHeaders(_), Response::RequestHeaders(_))
            | (Request::RequestTrailers(_), Response::RequestTrailers(_))
            | (Request::ResponseHeaders(_), Response::ResponseHeaders(_))
            | (Request::ResponseBody(_), Response::ResponseBody(_))
            | (Request::ResponseTrailers(_), Response::ResponseTrailers(_)) => true,
            (Request::RequestBody(_), Response::RequestBody(body)) => {
                let common = body.response.unwrap();
                let set = &common.header_mutation.unwrap().set_headers[0];
                let header = set.header.as_ref().unwrap();
                common.clear_route_cache
                    && header.key == "x-selected-model"
                    && header.raw_value == b"m"
            }
            _ => false,
        };
        assert!(answered, "{name}");
    }
    let mode = noop::request_only();
    let skip = HeaderSendMode::Skip as i32;
    assert_eq!(
        mode.response_header_mode, skip,
        "response headers skipped: {mode:?}"
    );
}

#[test]
fn the_rewriting_floor_splices_the_model_and_sets_the_length() {
    let body = br#"{"messages":[{"role":"user","content":"a \"model\": trap"}], "model" : "mom/auto","n":1}"#;
    let spliced = noop::with_model(body, "Qwen2.5-Coder-0.5B-Instruct").unwrap();
    let json: serde_json::Value = serde_json::from_slice(&spliced).unwrap();
    assert_eq!(json["model"], "Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(json["messages"][0]["content"], "a \"model\": trap");
    assert_eq!(noop::with_model(br#"{"model": 7, "x": "y"}"#, "m"), None);
    assert_eq!(noop::with_model(br#"{"messages": []}"#, "m"), None);

    let request = Request::RequestBody(HttpBody {
        body: body.to_vec(),
        end_of_stream: true,
        ..Default::default()
    });
    let Response::RequestBody(reply) = noop::reply(request, "m", Some("Served-Name")) else {
        panic!("a body phase gets a body reply");
    };
    let common = reply.response.unwrap();
    let Some(Mutation::Body(new_body)) = common.body_mutation.unwrap().mutation else {
        panic!("the body is replaced");
    };
    let set = common.header_mutation.unwrap().set_headers;
    let length = set
        .iter()
        .find_map(|h| h.header.as_ref().filter(|h| h.key == "content-length"));
    assert_eq!(
        length.unwrap().raw_value,
        new_body.len().to_string().as_bytes()
    );
    assert!(String::from_utf8(new_body)
        .unwrap()
        .contains(r#""model" : "Served-Name""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_envoy_a_request_reaches_the_model_the_floor_names() {
    for rewrite in [None, Some("Qwen2.5-Coder-0.5B-Instruct")] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let floor = noop::Noop {
            model: "qwen2.5-coder-0.5b".to_owned(),
            rewrite: rewrite.map(str::to_owned),
        };
        let server = tokio::spawn(async move { noop::serve(listener, floor).await });
        let stack = Stack::start_with_processor(port).await;
        let response = stack.chat(&ask("hello"), "floor").await;
        assert_eq!(response.status(), 200);
        let _ = response.bytes().await.unwrap();
        let seen = stack.backends["qwen2.5-coder-0.5b"]
            .seen
            .lock()
            .unwrap()
            .clone();
        assert_eq!(seen.len(), 1, "routed on the model the floor set");
        assert_eq!(stack.requests_seen(), 1);
        let body: serde_json::Value = serde_json::from_slice(&seen[0].body).unwrap();
        assert_eq!(
            body["model"],
            rewrite.unwrap_or("mom/auto"),
            "the model upstream"
        );
        server.abort();
    }
}

#[path = "../examples/loadgen.rs"]
#[allow(dead_code, reason = "the load generator's main is not called here")]
mod loadgen;

#[tokio::test]
async fn the_load_generator_gives_no_figure_when_a_request_fails() {
    let backend = support::fake_openai::FakeBackend::new("smollm2-135m");
    let failing = backend.fail_status.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(support::fake_openai::serve(listener, backend));
    let url = format!("model=http://127.0.0.1:{port}/v1/chat/completions");
    let target = loadgen::parse_target(&url).unwrap();
    let client = reqwest::Client::new();
    let body = std::sync::Arc::new(
        r#"{"model":"smollm2-135m","messages":[{"role":"user","content":"hi"}]}"#.to_owned(),
    );

    let latencies = loadgen::run(&client, &target, &body, 8, 2).await.unwrap();
    assert_eq!(latencies.len(), 8);

    failing.store(503, std::sync::atomic::Ordering::Relaxed);
    let error = loadgen::run(&client, &target, &body, 8, 2)
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("status 503"), "{error}");
    server.abort();
}
