//! In-process cost of the request-body phase: parse, rule signals, decision, selection, body
//! rewrite, and the ext_proc reply, on the rule-only policy (`examples/rules`).
//! `cargo bench --bench pipeline`.
#![allow(
    clippy::expect_used,
    reason = "a benchmark without its fixture should stop loudly"
)]
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpBody, HttpHeaders, ProcessingRequest,
};
use mom_router::config;
use mom_router::engine;
use mom_router::engine::exchange::{Exchange, Exchanges, FailoverPart, Proxy};
use mom_router::extproc::stream::StreamState;
use mom_router::llm::Headers;
use mom_router::observability::Metrics;
use std::hint::black_box;
use std::sync::Arc;

fn body(text: &str) -> Vec<u8> {
    serde_json::json!({"model": "mom/auto", "temperature": 0.2,
        "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]})
    .to_string()
    .into_bytes()
}

fn message(request: Request) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(request),
        ..Default::default()
    }
}

fn pipeline(c: &mut Criterion) {
    let root: std::path::PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into);
    let path = root.join("examples/rules/config.yaml");
    let snapshot = Arc::new(config::load(&path).expect("rules config"));
    let headers = Headers::new([
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
        ("x-request-id".to_owned(), "bench-1".to_owned()),
    ]);
    let prompts = [
        ("small_talk", body("Hi there! How are you today?")),
        (
            "code",
            body("Write a python function that reverses a linked list, with tests."),
        ),
        (
            "long",
            body(&"The tide rose over the harbour wall. ".repeat(200)),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let state = engine::Services::offline(&snapshot);
    let mut group = c.benchmark_group("engine_on_request_body");
    for (name, bytes) in &prompts {
        group.bench_function(*name, |b| {
            b.iter(|| {
                runtime.block_on(engine::on_request_body(
                    &snapshot,
                    &state,
                    &headers,
                    black_box(bytes),
                ))
            })
        });
    }
    group.finish();

    let metrics = Arc::new(Metrics::new());
    let envoy_headers = HttpHeaders {
        headers: Some(HeaderMap {
            headers: [(":method", "POST"), (":path", "/v1/chat/completions")]
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: (*k).to_owned(),
                    raw_value: v.as_bytes().to_vec(),
                    ..Default::default()
                })
                .collect(),
        }),
        ..Default::default()
    };
    c.bench_function("extproc_stream_headers_and_body/code", |b| {
        b.iter_batched(
            || {
                (
                    StreamState::new(Exchange::new(
                        snapshot.clone(),
                        metrics.clone(),
                        state.clone(),
                    )),
                    message(Request::RequestHeaders(envoy_headers.clone())),
                    message(Request::RequestBody(HttpBody {
                        body: prompts[1].1.clone(),
                        end_of_stream: true,
                        ..Default::default()
                    })),
                )
            },
            |(mut stream, headers, body)| {
                runtime.block_on(async {
                    black_box(stream.handle(headers).await);
                    black_box(stream.handle(body).await)
                })
            },
            BatchSize::SmallInput,
        )
    });

    // A whole stream as envoy/quickstart.yaml drives it on the rule path: Envoy adds the x-mom-*
    // headers from the metadata (the response phases are skipped) and runs the failover filter
    // (the request is parked for it); opened, both request phases answered, and closed.
    let store = Arc::new(config::ConfigStore::from_snapshot(
        (*snapshot).clone(),
        path.clone(),
    ));
    let exchanges = Exchanges::new(store, metrics.clone(), state.clone());
    let proxy = Proxy {
        adds_headers: true,
        failover: FailoverPart::Filter,
    };
    c.bench_function("extproc_stream_whole/code", |b| {
        b.iter_batched(
            || {
                (
                    message(Request::RequestHeaders(envoy_headers.clone())),
                    message(Request::RequestBody(HttpBody {
                        body: prompts[1].1.clone(),
                        end_of_stream: true,
                        ..Default::default()
                    })),
                )
            },
            |(headers, body)| {
                let mut stream = StreamState::new(exchanges.open(proxy));
                runtime.block_on(async {
                    black_box(stream.handle(headers).await);
                    black_box(stream.handle(body).await);
                });
                drop(stream);
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
