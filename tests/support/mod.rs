//! Shared test support: free ports, the in-process sidecar, a real Envoy process, and the FAKE
//! OpenAI backends. Each test crate uses part of it.
#![allow(dead_code, reason = "each test crate uses part of the shared support")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

pub mod encoders;
pub mod envoy;
pub mod fake_openai;
pub mod heads;
pub mod jwt;
pub mod llm;
pub mod redis;
pub mod sidecar;
pub mod stack;

use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago, for a process started later (Envoy, Redis).
/// Drawn at random from 20000–32767, below Linux's ephemeral range (32768–60999 by default), so
/// the many outbound connections tests open cannot take it before the process binds it.
/// A port is handed out once per test process, so tests starting Envoys in parallel never draw
/// the same one between the check and the bind.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..500 {
        let port = rand::random_range(20_000..32_768);
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port in 20000-32767");
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

/// The repository root, read when the test runs: a build shared between checkouts (one
/// persistent target folder) must not carry the path of the checkout that compiled it.
pub fn repo() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

/// `explain`'s document for one chat body, run offline on `config` as the sidecar would run it.
pub fn explain_offline(config: &str, body: &serde_json::Value) -> serde_json::Value {
    explain_offline_with(config, body, &[])
}

/// [`explain_offline`] with extra request headers.
pub fn explain_offline_with(
    config: &str,
    body: &serde_json::Value,
    extra: &[(&str, &str)],
) -> serde_json::Value {
    let snapshot = mom_router::config::compile_str(config).unwrap();
    let mut pairs = vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
    ];
    pairs.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let headers = mom_router::llm::Headers::new(pairs);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let body = body.to_string();
    let routed = runtime.block_on(mom_router::cli::run_offline(
        &snapshot,
        &headers,
        body.as_bytes(),
    ));
    mom_router::cli::explain_json(&routed)
}

/// The named signal in an `explain` document.
pub fn signal<'a>(explained: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    explained["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no signal {name} in {explained:#}"))
}
