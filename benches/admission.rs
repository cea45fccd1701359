//! Admission cost per request, in this process and through a real Redis, side by side in one
//! run: the tenant named by its API key (a SHA-256), then three limits drawn at once (requests
//! and tokens a minute, requests in flight), the slot freed at once. Sequential calls on one
//! thread; p50 and p99 in microseconds. Redis is `$MOM_REDIS_BIN` (or `redis-server` on PATH)
//! on a free loopback port; without it only the in-process row is printed.
//! `cargo bench --bench admission`.
#![allow(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark prints its table and stops loudly when its set-up fails"
)]

use mom_router::config::{compile_str, hex_sha256};
use mom_router::engine::request::admission::admit;
use mom_router::llm::{ChatRequest, Headers};
use mom_router::state::StateStore;
use prometheus_client::metrics::family::Family;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "sk-bench-tenant";
const CALLS: usize = 20_000;
const WARM_UP: usize = 1_000;

fn policy(redis: Option<&str>) -> String {
    let state = redis.map_or_else(String::new, |url| {
        format!("state:\n  backend: redis\n  redis: {{ url: \"{url}\", keyPrefix: bench, timeoutMs: 500 }}\n")
    });
    format!(
        r#"
version: admission-bench
{state}models:
  - {{ name: small, providerModel: s }}
identities:
  - {{ name: mom/auto, defaultModel: small }}
tenants:
  identifyBy: apiKey
  list:
    - name: team
      apiKeys: {{ sha256: ["{}"] }}
      limits:
        - {{ requestsPerMinute: 1000000000 }}
        - {{ tokensPerMinute: 1000000000000 }}
        - {{ concurrentRequests: 1000000 }}
"#,
        hex_sha256(KEY.as_bytes())
    )
}

/// p50 and p99 of `CALLS` admissions, in microseconds.
async fn measure(config: &str) -> (f64, f64) {
    let snapshot = compile_str(config).expect("bench policy");
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let (_flush, flush) = tokio::sync::watch::channel(false);
    let (state, _tasks, _writers) =
        StateStore::start(snapshot.state.clone(), Family::default(), stop, flush)
            .expect("state store");
    let headers = Headers::new([("authorization".to_owned(), format!("Bearer {KEY}"))]);
    let body =
        br#"{"model":"mom/auto","messages":[{"role":"user","content":"How do tides work?"}]}"#;
    let mut micros = Vec::with_capacity(CALLS);
    for i in 0..WARM_UP + CALLS {
        let mut request = ChatRequest::parse(body).expect("request");
        let started = Instant::now();
        let admitted = admit(&snapshot, &state, &headers, &mut request).await;
        let elapsed = started.elapsed();
        assert!(matches!(admitted, Ok(Some(_))), "{admitted:?}");
        if i >= WARM_UP {
            micros.push(elapsed.as_secs_f64() * 1e6);
        }
    }
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let binary = std::env::var("MOM_REDIS_BIN").unwrap_or_else(|_| "redis-server".to_owned());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let redis = Command::new(&binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .ok();
    let url = format!("redis://127.0.0.1:{port}");
    let mut rows = vec![("in-process", runtime.block_on(measure(&policy(None))))];
    if let Some(mut child) = redis {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        rows.push(("redis", runtime.block_on(measure(&policy(Some(&url))))));
        let _ = child.kill();
        let _ = child.wait();
    } else {
        println!("({binary} not found: the Redis row is skipped)");
    }
    println!("admission of one request ({CALLS} calls, sequential, 3 limits):");
    println!("| store | p50 us | p99 us |\n|---|---:|---:|");
    for (store, (p50, p99)) in rows {
        println!("| {store} | {p50:.1} | {p99:.1} |");
    }
}
