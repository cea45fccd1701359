//! Mixed-traffic soak client for `scripts/soak.sh`: for SECONDS, CONCURRENCY workers send a
//! rotating mix through Envoy — ordinary requests, bodies near 1 MiB, bodies dense with personal
//! data, long streamed answers, malformed JSON and oversize bodies — and count every answer by
//! kind and status. Prints one JSON line: counts, unexpected statuses, and the p99 latency of
//! ordinary requests.
//!
//! `cargo run --release --example soak -- URL SECONDS CONCURRENCY [mixed|normal]` (`normal`:
//! ordinary requests only, the baseline the soak's latency is compared with).

use anyhow::Context;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum Kind {
    Normal,
    Large,
    PiiDense,
    LongStream,
    BadJson,
    Oversize,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Normal,
        Kind::Large,
        Kind::PiiDense,
        Kind::LongStream,
        Kind::BadJson,
        Kind::Oversize,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Normal => "normal",
            Kind::Large => "large",
            Kind::PiiDense => "pii_dense",
            Kind::LongStream => "long_stream",
            Kind::BadJson => "bad_json",
            Kind::Oversize => "oversize",
        }
    }

    /// The statuses this kind is declared to get.
    fn expected(self, status: u16) -> bool {
        match self {
            Kind::Normal | Kind::Large | Kind::PiiDense | Kind::LongStream => status == 200,
            Kind::BadJson => status == 400,
            Kind::Oversize => status == 413,
        }
    }

    fn body(self) -> Vec<u8> {
        let chat = |text: String, stream: bool| {
            json!({"model": "mom/auto", "stream": stream,
                   "messages": [{"role": "user", "content": text}]})
            .to_string()
            .into_bytes()
        };
        match self {
            Kind::Normal => chat("What is the capital of France?".to_owned(), false),
            // Just under the quickstart's 1 MiB body limit once wrapped in JSON.
            Kind::Large => chat(
                "The tide rose over the harbour wall. ".repeat(27_000),
                false,
            ),
            Kind::PiiDense => chat(
                (0..2_000)
                    .map(|i| format!("user{i}@example.com +44 20 7946 {i:04} "))
                    .collect(),
                false,
            ),
            Kind::LongStream => chat("Write a long story about the sea. ".repeat(20), true),
            Kind::BadJson => br#"{"model": "mom/auto", "messages": [{"role": "user""#.to_vec(),
            Kind::Oversize => chat("x".repeat(2 << 20), false),
        }
    }
}

#[derive(Default)]
struct Tally {
    by_kind: BTreeMap<String, BTreeMap<u16, u64>>,
    unexpected: BTreeMap<String, u64>,
    transport_errors: u64,
    normal_ms: Vec<f64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, seconds, concurrency, mixed) = match args.as_slice() {
        [url, seconds, concurrency] => (url, seconds, concurrency, true),
        [url, seconds, concurrency, mix] => (url, seconds, concurrency, mix != "normal"),
        _ => anyhow::bail!("usage: soak URL SECONDS CONCURRENCY [mixed|normal]"),
    };
    let seconds: u64 = seconds.parse().context("SECONDS")?;
    let concurrency: usize = concurrency.parse().context("CONCURRENCY")?;
    let bodies: Arc<Vec<(Kind, Vec<u8>)>> =
        Arc::new(Kind::ALL.iter().map(|k| (*k, k.body())).collect());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let (client, bodies, tally, url) =
            (client.clone(), bodies.clone(), tally.clone(), url.clone());
        workers.push(tokio::spawn(async move {
            let mut turn = worker;
            while Instant::now() < until {
                // Mostly ordinary traffic, every other kind in rotation.
                let (kind, body) = if !mixed || turn % 2 == 0 {
                    &bodies[0]
                } else {
                    &bodies[1 + (turn / 2) % (bodies.len() - 1)]
                };
                turn += 1;
                let started = Instant::now();
                let sent = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let status = match sent {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        match response.bytes().await {
                            Ok(_) => Some(status),
                            Err(_) => None,
                        }
                    }
                    Err(_) => None,
                };
                let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                let Ok(mut tally) = tally.lock() else { return };
                match status {
                    None => tally.transport_errors += 1,
                    Some(status) => {
                        *tally
                            .by_kind
                            .entry(kind.name().to_owned())
                            .or_default()
                            .entry(status)
                            .or_default() += 1;
                        if !kind.expected(status) {
                            *tally
                                .unexpected
                                .entry(format!("{} {status}", kind.name()))
                                .or_default() += 1;
                        }
                        if matches!(kind, Kind::Normal) && status == 200 {
                            tally.normal_ms.push(elapsed);
                        }
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let tally = tally
        .lock()
        .map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    let mut normal = tally.normal_ms.clone();
    normal.sort_by(f64::total_cmp);
    let at = |p: f64| {
        normal
            .get(((p / 100.0) * normal.len() as f64).ceil().max(1.0) as usize - 1)
            .copied()
            .unwrap_or(0.0)
    };
    let report = json!({
        "seconds": seconds, "concurrency": concurrency,
        "by_kind": tally.by_kind, "unexpected": tally.unexpected,
        "transport_errors": tally.transport_errors,
        "normal_p50_ms": at(50.0), "normal_p99_ms": at(99.0),
    });
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, format!("{report}\n").as_bytes())?;
    Ok(())
}
