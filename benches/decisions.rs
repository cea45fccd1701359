//! Signals + decision + selection cost as policy grows: 10, 100 and 1000 keyword rules (each a
//! signal with its own decision) over 3 and 30 models, on one request that matches none of the
//! keyword rules (every rule is evaluated) and falls to a catch-all decision whose algorithm
//! picks among every model: `static`, or `hybrid` weighing quality, cost, observed latency, Elo
//! and the bandit posterior, with 256 latency observations per model in the state store.
//! Issue 4's target: ≤ 50 µs at 100 rules, linear growth. `cargo bench --bench decisions`.
#![allow(
    clippy::expect_used,
    reason = "a benchmark whose generated policy does not compile should stop loudly"
)]
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use mom_router::config::compile_str;
use mom_router::engine;
use mom_router::engine::Services;
use mom_router::llm::Headers;
use mom_router::state::{now_ms, Observation, Timing};
use std::fmt::Write;
use std::hint::black_box;

const HYBRID: &str =
    "{ type: hybrid, weights: { quality: 1, cost: 1, latency: 1, elo: 0.5, bandit: 0.5 } }";

/// A policy with `rules` keyword signals and decisions over `models` models, and a catch-all
/// decision using `algorithm`.
fn policy(rules: usize, models: usize, algorithm: &str) -> String {
    let mut yaml = String::from("version: bench\nmodels:\n");
    for m in 0..models {
        writeln!(
            yaml,
            "  - {{ name: model-{m}, providerModel: p-{m}, quality: {}, pricing: {{ inputPerMillion: {m}, outputPerMillion: {} }} }}",
            (m as f64 + 1.0) / (models as f64 + 1.0),
            2 * m + 1
        )
        .expect("write");
    }
    yaml.push_str("identities:\n  - { name: mom/auto, version: \"1\", defaultModel: model-0 }\n");
    yaml.push_str("signals:\n  - { name: anything, type: context_length, minTokens: 0 }\n");
    for r in 0..rules {
        writeln!(
            yaml,
            "  - {{ name: s{r}, type: keyword, keywords: [topic{r}a, topic{r}b], patterns: ['\\bcase{r}-\\d+'] }}"
        )
        .expect("write");
    }
    let refs: Vec<String> = (0..models)
        .map(|m| format!("{{ model: model-{m}, weight: {} }}", m + 1))
        .collect();
    let refs = refs.join(", ");
    yaml.push_str("decisions:\n");
    writeln!(
        yaml,
        "  - {{ name: everything, priority: -1, rules: {{ signal: anything }}, algorithm: {algorithm}, modelRefs: [{refs}] }}"
    )
    .expect("write");
    for r in 0..rules {
        writeln!(
            yaml,
            "  - {{ name: d{r}, priority: {r}, rules: {{ all: [{{ signal: s{r} }}, {{ not: {{ signal: s{} }} }}] }}, algorithm: {{ type: weighted }}, modelRefs: [{refs}] }}",
            (r + 1) % rules
        )
        .expect("write");
    }
    yaml
}

/// A store holding a full latency window for every model.
fn warm_state(snapshot: &mom_router::config::Snapshot) -> Services {
    let services = Services::offline(snapshot);
    let state = &services.state;
    for (m, model) in snapshot.models.iter().enumerate() {
        for i in 0..snapshot.state.latency_window {
            state.observe(
                &model.name,
                Observation {
                    timing: Timing {
                        at_ms: now_ms(),
                        ttft_ms: 10.0 + (i % 17) as f64,
                        total_ms: 100.0 + (m * 7 + i % 31) as f64,
                    },
                    prompt_tokens: Some(20),
                    completion_tokens: Some(50 + m as u64),
                    estimated_prompt_tokens: 18,
                },
            );
        }
    }
    services
}

fn decisions(c: &mut Criterion) {
    let headers = Headers::new([
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
        ("x-request-id".to_owned(), "bench-1".to_owned()),
    ]);
    let body = serde_json::json!({"model": "mom/auto", "messages": [
        {"role": "user", "content": "Please summarise the quarterly report in three short bullet points."}]})
    .to_string()
    .into_bytes();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("decisions");
    for (name, algorithm) in [("static", "{ type: static }"), ("hybrid", HYBRID)] {
        for models in [3usize, 30] {
            for rules in [10usize, 100, 1000] {
                let snapshot = compile_str(&policy(rules, models, algorithm))
                    .expect("generated policy compiles");
                let state = warm_state(&snapshot);
                group.bench_function(format!("{rules}rules_{models}models_{name}"), |b| {
                    b.iter(|| {
                        runtime.block_on(engine::on_request_body(
                            black_box(&snapshot),
                            &state,
                            &headers,
                            black_box(&body),
                        ))
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
