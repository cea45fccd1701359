//! PII masking cost: masking a 2 KB prompt holding six personal-data values (and the same
//! prompt with none, the price every request under a mask plugin pays), restoring a JSON answer,
//! and restoring a streamed answer of 2 KB cut every 4 characters (≈500 SSE events, placeholders
//! split across events) — one dense with placeholders, one with four. `cargo bench --bench
//! masking`.
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use mom_router::engine::answer::pii_mask::{Masker, SseRestorer};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::sync::Arc;

const VALUES: &str = "Contact jane.doe@example.com or bob@example.org, call +44 20 7946 0958, \
card 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32, server 10.0.0.1. ";

fn prompt(with_values: bool) -> Map<String, Value> {
    let filler = "The quarterly report covers revenue, churn and the roadmap for next year. ";
    let mut text = String::new();
    if with_values {
        text.push_str(VALUES);
    }
    while text.len() < 2048 {
        text.push_str(filler);
    }
    json!({"model": "m", "messages": [{"role": "user", "content": text}]})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn masking(c: &mut Criterion) {
    let mut group = c.benchmark_group("masking");
    for (name, with_values) in [("mask_2kb_six_values", true), ("mask_2kb_no_values", false)] {
        let object = prompt(with_values);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut copy = object.clone();
                black_box(Masker::mask(&mut copy, |_| true))
            })
        });
    }
    let mut object = prompt(true);
    let masker = Arc::new(Masker::mask(&mut object, |_| true));
    let mut answer = String::new();
    while answer.len() < 2048 {
        answer.push_str(
            "I emailed [EMAIL_1] and [EMAIL_2], called [PHONE_1] about card [CREDIT_CARD_1]. ",
        );
    }
    let reply =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]})
            .to_string()
            .into_bytes();
    group.bench_function("restore_json_2kb", |b| {
        b.iter(|| black_box(masker.restore_body(&reply)))
    });
    let mut sparse = "I emailed [EMAIL_1] and called [PHONE_1]. ".to_owned();
    while sparse.len() < 2048 {
        sparse.push_str("The roadmap keeps the churn target and moves the launch to spring. ");
    }
    sparse.push_str("Card [CREDIT_CARD_1] and [EMAIL_2] are on file.");
    for (name, text) in [
        ("restore_sse_2kb_4char_events_dense", &answer),
        ("restore_sse_2kb_4char_events_four_placeholders", &sparse),
    ] {
        let events = sse_events(text);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut restorer = SseRestorer::new(Arc::clone(&masker));
                let mut out = 0usize;
                for event in &events {
                    out += restorer.push(event).len();
                }
                out += restorer.finish().len();
                black_box(out)
            })
        });
    }
    group.finish();
}

/// `text` as server-sent events of 4 characters each, then `[DONE]`.
fn sse_events(text: &str) -> Vec<Vec<u8>> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(4)
        .map(|piece| {
            let piece: String = piece.iter().collect();
            let chunk = json!({"id": "x", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            format!("data: {chunk}\n\n").into_bytes()
        })
        .chain(std::iter::once(b"data: [DONE]\n\n".to_vec()))
        .collect()
}

criterion_group!(benches, masking);
criterion_main!(benches);
