//! Protocol translation cost: a Messages request (2 KB prompt, a tool) into Chat Completions, a
//! 2 KB chat answer into a Messages message and a Responses response, and a 500-event chat
//! stream (2 KB cut every 4 characters) into Messages and Responses events, chunk by chunk.
//! `cargo bench --bench translation`.
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use mom_router::protocol::{messages, responses, Protocol, StreamTranslator};
use serde_json::json;
use std::hint::black_box;

fn text() -> String {
    "The quarterly report covers revenue, churn and the roadmap for next year. "
        .repeat(28)
        .chars()
        .take(2048)
        .collect()
}

fn stream() -> Vec<Vec<u8>> {
    let text: Vec<char> = text().chars().collect();
    let mut events: Vec<Vec<u8>> = text
        .chunks(4)
        .map(|part| {
            let part: String = part.iter().collect();
            let chunk = json!({"id": "c1", "model": "m",
                "choices": [{"index": 0, "delta": {"content": part}, "finish_reason": null}]});
            format!("data: {chunk}\n\n").into_bytes()
        })
        .collect();
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

fn translation(c: &mut Criterion) {
    let mut group = c.benchmark_group("translation");
    let request = json!({"model": "mom/auto", "max_tokens": 256, "system": "Be brief.",
        "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": text()}]})
    .to_string();
    group.bench_function("messages_request_2kb", |b| {
        b.iter(|| messages::to_chat(black_box(request.as_bytes()), false))
    });
    let answer = json!({"id": "c1", "model": "m", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": text()}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 500, "completion_tokens": 500}})
    .to_string();
    group.bench_function("messages_answer_2kb", |b| {
        b.iter(|| messages::from_chat(black_box(answer.as_bytes())))
    });
    group.bench_function("responses_answer_2kb", |b| {
        b.iter(|| responses::from_chat(black_box(answer.as_bytes())))
    });
    let events = stream();
    for (name, protocol) in [
        ("messages_stream_500_events", Protocol::Messages),
        ("responses_stream_500_events", Protocol::Responses),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let Some(mut translator) = StreamTranslator::new(protocol) else {
                    return 0;
                };
                let last = events.len() - 1;
                events
                    .iter()
                    .enumerate()
                    .map(|(i, event)| translator.push(black_box(event), i == last).len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, translation);
criterion_main!(benches);
