//! Closed-loop HTTP load generator for `scripts/load.sh`: runs the same chat request against
//! several targets in interleaved rounds and prints p50/p99 latency per target and concurrency.
//!
//! `cargo run --release --example loadgen -- COUNT CONCURRENCY NAME=URL[|HEADER:VALUE]...`
//!
//! With `LOADGEN_FLOOR=NAME`, each target's latency added over the first target is also given
//! as a ratio to what target NAME adds (the floor). Any failed request stops the run with an
//! error and no figure: a ratio is never reported over errors.

use anyhow::{bail, Context};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One target: a name for the report, the URL, and headers sent with every request.
pub struct Target {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
}

/// A target from `NAME=URL[|HEADER:VALUE]...`.
pub fn parse_target(arg: &str) -> anyhow::Result<Target> {
    let (name, rest) = arg.split_once('=').context("target must be NAME=URL")?;
    let mut parts = rest.split('|');
    let url = parts.next().context("missing URL")?.to_owned();
    let headers = parts
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .context("header must be NAME:VALUE")
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Target {
        name: name.to_owned(),
        url,
        headers,
    })
}

/// The latencies of `count` requests to `target` from `concurrency` closed-loop workers; an error
/// as soon as one request fails or answers a non-2xx status, so no figure is made over errors.
pub async fn run(
    client: &reqwest::Client,
    target: &Target,
    body: &Arc<String>,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Duration>> {
    let per_worker = count / concurrency;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let url = target.url.clone();
        let headers = target.headers.clone();
        let body = body.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let mut request = client.post(&url).body(body.as_str().to_owned());
                for (k, v) in &headers {
                    request = request.header(k, v);
                }
                let started = Instant::now();
                let response = request.send().await?;
                let status = response.status();
                response.bytes().await?;
                if !status.is_success() {
                    bail!("{url}: status {status}");
                }
                latencies.push(started.elapsed());
            }
            Ok(latencies)
        }));
    }
    let mut all = Vec::with_capacity(count);
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(all)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        bail!("usage: loadgen COUNT CONCURRENCY NAME=URL[|HEADER:VALUE]...");
    }
    let count: usize = args[0].parse()?;
    let concurrency: usize = args[1].parse()?;
    let targets: Vec<Target> = args[2..]
        .iter()
        .map(|a| parse_target(a))
        .collect::<anyhow::Result<_>>()?;
    let body = Arc::new(
        serde_json::json!({"model": "mom/auto", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Hi there! How are you today?"}]})
        .to_string(),
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    for target in &targets {
        run(&client, target, &body, concurrency * 20, concurrency).await?;
    }
    const ROUNDS: usize = 5;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); targets.len()];
    for _ in 0..ROUNDS {
        for (i, target) in targets.iter().enumerate() {
            samples[i].extend(run(&client, target, &body, count / ROUNDS, concurrency).await?);
        }
    }
    let floor_name = std::env::var("LOADGEN_FLOOR")
        .ok()
        .filter(|name| !name.is_empty());
    let mut figures = Vec::with_capacity(targets.len());
    for mut latencies in samples {
        latencies.sort();
        figures.push((
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.len(),
        ));
    }
    let floor_added = floor_name.as_deref().and_then(|name| {
        let at = targets.iter().position(|t| t.name == name)?;
        Some((figures[at].0 - figures[0].0, figures[at].1 - figures[0].1))
    });
    if floor_name.is_some() && floor_added.is_none() {
        bail!("LOADGEN_FLOOR names no target");
    }
    let mut baseline: Option<(f64, f64)> = None;
    let mut previous: Option<(f64, f64)> = None;
    for (target, (p50, p99, n)) in targets.iter().zip(figures) {
        let vs_previous = previous
            .map(|(a, b)| format!("  +{:.3}/+{:.3} ms vs previous", p50 - a, p99 - b))
            .unwrap_or_default();
        let ratio = baseline
            .map(|(a, b)| format!("  ×{:.2}/×{:.2} of first", p50 / a, p99 / b))
            .unwrap_or_default();
        let to_floor = match (baseline, floor_added) {
            (Some((a, b)), Some((fa, fb))) => format!(
                "  added +{:.3}/+{:.3} ms = x{:.2}/x{:.2} the floor's",
                p50 - a,
                p99 - b,
                (p50 - a) / fa,
                (p99 - b) / fb
            ),
            _ => String::new(),
        };
        writeln!(
            std::io::stdout().lock(),
            "c={concurrency:<3} {:<22} n={n:<6} p50 {p50:7.3} ms  p99 {p99:7.3} ms{ratio}{vs_previous}{to_floor}",
            target.name,
        )?;
        baseline.get_or_insert((p50, p99));
        previous = Some((p50, p99));
    }
    Ok(())
}
