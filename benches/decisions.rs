//! Signals + decision + selection cost as policy grows: 10, 100 and 1000 keyword rules (each a
//! signal with its own decision) over 3 and 30 models, on one request that matches none of the
//! rules (every rule is evaluated). Issue 4's target: ≤ 50 µs at 100 rules, linear growth.
//! `cargo bench --bench decisions`.
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
use mom_router::llm::Headers;
use std::fmt::Write;
use std::hint::black_box;

/// A policy with `rules` keyword signals and decisions, each decision weighing every model.
fn policy(rules: usize, models: usize) -> String {
    let mut yaml = String::from("version: bench\nmodels:\n");
    for m in 0..models {
        writeln!(yaml, "  - {{ name: model-{m}, providerModel: p-{m} }}").expect("write");
    }
    yaml.push_str("identities:\n  - { name: mom/auto, version: \"1\", defaultModel: model-0 }\n");
    yaml.push_str("signals:\n");
    for r in 0..rules {
        writeln!(
            yaml,
            "  - {{ name: s{r}, type: keyword, keywords: [topic{r}a, topic{r}b], patterns: ['\\bcase{r}-\\d+'] }}"
        )
        .expect("write");
    }
    yaml.push_str("decisions:\n");
    for r in 0..rules {
        let refs: Vec<String> = (0..models)
            .map(|m| format!("{{ model: model-{m}, weight: {} }}", m + 1))
            .collect();
        writeln!(
            yaml,
            "  - {{ name: d{r}, priority: {r}, rules: {{ all: [{{ signal: s{r} }}, {{ not: {{ signal: s{} }} }}] }}, algorithm: {{ type: weighted }}, modelRefs: [{}] }}",
            (r + 1) % rules,
            refs.join(", ")
        )
        .expect("write");
    }
    yaml
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
    for models in [3usize, 30] {
        for rules in [10usize, 100, 1000] {
            let snapshot = compile_str(&policy(rules, models)).expect("generated policy compiles");
            let state = mom_router::state::StateStore::new(snapshot.state.clone());
            group.bench_function(format!("{rules}rules_{models}models"), |b| {
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
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
