//! One ext_proc stream on the rule path, driven a fixed number of times in this process, for
//! counting the instructions mom-router spends on it: Envoy's two messages (request headers and
//! body, as `envoy/quickstart.yaml` sends them: the x-mom-* headers from metadata, the failover
//! filter present), answered, each reply encoded as gRPC sends it, and the stream closed, with
//! no network and no other process.
//! Instruction counts do not move with a busy machine, so two commits compare exactly where
//! CPU time per request wanders by a fifth between runs. `scripts/instructions.sh` runs it under
//! callgrind at two counts and prints the difference per stream.
//!
//! `cargo run --release --example stream_instructions -- [COUNT]` (default 2000; prints the
//! wall time per stream, which is not the point).
#![allow(
    clippy::expect_used,
    reason = "a benchmark without its fixture should stop loudly"
)]

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpBody, HttpHeaders, ProcessingRequest,
};
use mom_router::config;
use mom_router::engine;
use mom_router::engine::exchange::{Exchanges, FailoverPart, Proxy};
use mom_router::extproc::stream::StreamState;
use mom_router::observability::Metrics;
use prost::Message;
use std::sync::Arc;
use std::time::Instant;

fn message(request: Request) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(request),
        ..Default::default()
    }
}

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let path = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/rules/config.yaml"
    ));
    let snapshot = config::load(&path).expect("rules config");
    let services = engine::Services::offline(&snapshot);
    let store = Arc::new(config::ConfigStore::from_snapshot(snapshot, path));
    let exchanges = Exchanges::new(store, Arc::new(Metrics::new()), services);
    let proxy = Proxy {
        adds_headers: true,
        failover: FailoverPart::Filter,
    };
    let headers = HttpHeaders {
        headers: Some(HeaderMap {
            headers: [
                (":method", "POST"),
                (":path", "/v1/chat/completions"),
                ("content-type", "application/json"),
                ("x-request-id", "0f3c2a9e-1d2b-4c5e-8f7a-9b0c1d2e3f4a"),
            ]
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
    let body = serde_json::json!({"model": "mom/auto", "temperature": 0.2, "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Write a python function that reverses a linked list, with tests."}]})
    .to_string()
    .into_bytes();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut replies = 0;
    let mut bytes = 0;
    let start = Instant::now();
    for _ in 0..count {
        let mut stream = StreamState::new(exchanges.open(proxy));
        let headers = message(Request::RequestHeaders(headers.clone()));
        let body = message(Request::RequestBody(HttpBody {
            body: body.clone(),
            end_of_stream: true,
            ..Default::default()
        }));
        runtime.block_on(async {
            for message in [headers, body] {
                if let Some(reply) = stream.reply_to(message) {
                    bytes += reply.await.encode_to_vec().len();
                    replies += 1;
                }
            }
        });
    }
    let each = start.elapsed().as_secs_f64() * 1e6 / count.max(1) as f64;
    eprintln!("{count} streams, {replies} replies of {bytes} bytes, {each:.2} µs a stream");
}
