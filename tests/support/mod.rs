//! Shared test support: free ports, the in-process sidecar, a real Envoy process, and the FAKE
//! OpenAI backends. Each test crate uses part of it.
#![allow(dead_code, reason = "each test crate uses part of the shared support")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

pub mod envoy;
pub mod fake_openai;
pub mod sidecar;
pub mod stack;

use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`.
pub async fn eventually<T>(
    limit: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The repository root.
pub fn repo() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}
