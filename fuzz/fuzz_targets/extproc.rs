//! Any sequence of ext_proc messages into one stream's state, as Envoy could send them in any
//! order (headers, bodies, trailers, the response phases, duplicated or missing): the input is
//! split into frames (a two-byte length, then the bytes of one `ProcessingRequest`), each
//! decoded and handled in turn. Never a panic, whatever the order.
#![no_main]

use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
use libfuzzer_sys::fuzz_target;
use mom_router::engine::exchange::Exchange;
use mom_router::extproc::stream::StreamState;
use mom_router::observability::Metrics;
use prost::Message;
use std::sync::{Arc, OnceLock};

#[path = "fixture.rs"]
mod fixture;
use fixture::fixture;

/// Most messages one input feeds.
const MAX_FRAMES: usize = 16;

fn shared() -> &'static (Arc<mom_router::config::Snapshot>, Arc<Metrics>) {
    static SHARED: OnceLock<(Arc<mom_router::config::Snapshot>, Arc<Metrics>)> = OnceLock::new();
    SHARED.get_or_init(|| (Arc::new(fixture().0.clone()), Arc::new(Metrics::new())))
}

fuzz_target!(|input: &[u8]| {
    let (_, services, runtime) = fixture();
    let (snapshot, metrics) = shared();
    let mut frames = Vec::new();
    let mut rest = input;
    while frames.len() < MAX_FRAMES && rest.len() >= 2 {
        let length = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (frame, after) = rest[2..].split_at(length);
        rest = after;
        if let Ok(message) = ProcessingRequest::decode(frame) {
            frames.push(message);
        }
    }
    let mut state = StreamState::new(Exchange::new(
        snapshot.clone(),
        metrics.clone(),
        services.clone(),
    ));
    runtime.block_on(async {
        for message in frames {
            let _ = state.handle(message).await;
            let _ = state.resume().await;
        }
    });
});
