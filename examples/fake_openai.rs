//! A deterministic FAKE OpenAI-compatible backend (no language model) for the quickstart's
//! `--fake` mode and for load tests: `cargo run --release --example fake_openai -- PORT NAME`
//! (`FAKE_DELAY_MS` delays every answer, `FAKE_CHUNK_PAUSE_MS` paces streamed chunks,
//! `FAKE_FAIL_STATUS` answers every chat request with that status instead).

#[expect(dead_code, reason = "the request log is read by the tests only")]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;

use anyhow::Context;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .context("usage: fake_openai PORT NAME")?
        .parse()
        .context("PORT must be a number")?;
    let name = args.next().context("usage: fake_openai PORT NAME")?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let mut backend = fake_openai::FakeBackend::new(&name);
    backend.chunk_pause = std::time::Duration::from_millis(number("FAKE_CHUNK_PAUSE_MS", 150));
    // FAKE_DELAY_MS: every answer waits this long first (a stand-in for a model's latency).
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    backend.delay_ms.store(number("FAKE_DELAY_MS", 0), relaxed);
    // FAKE_FAIL_STATUS: every chat request fails with this status (a failing model).
    backend
        .fail_status
        .store(number("FAKE_FAIL_STATUS", 0), relaxed);
    fake_openai::serve(listener, backend).await?;
    Ok(())
}

/// The number in environment variable `name`, or `default`.
fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
