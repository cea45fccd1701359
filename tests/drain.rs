//! Stopping with streams in flight, through the real Envoy and a real Redis: the sidecar drains
//! (as on SIGTERM) while three answers are still streaming; every stream finishes whole, its
//! record and its Redis write (the latency observation) land before the stop completes, and a
//! request after the stop is not routed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::stack::{streamed, Stack};

const ANSWER: &str = "one two three four five six";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_every_stream_in_flight_finish_and_flushes_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("runs.jsonl");
    let redis = support::redis::Redis::start();
    let policy = format!(
        "version: drain-test\nrecords: {{path: \"{}\"}}\n\
         state: {{backend: redis, redis: {{url: \"{}\", keyPrefix: drain, timeoutMs: 500}}}}\n\
         models: [{{name: smollm2-135m, providerModel: smollm2-135m}}]\n\
         identities: [{{name: mom/auto, objective: latency}}]\n",
        records.display(),
        redis.url()
    );
    let mut stack = Stack::start_with_config(&policy).await;
    let backend = stack.backends["smollm2-135m"].clone();
    backend.queue(&[ANSWER, ANSWER, ANSWER]);
    // Six words, 200 ms apart: each stream takes over a second.
    let body = json!({"model": "mom/auto", "stream": true,
                      "messages": [{"role": "user", "content": "count"}]});
    let streams: Vec<_> = (0..3)
        .map(|i| {
            let request = stack
                .client
                .post(stack.url("/v1/chat/completions", &format!("drain-{i}")))
                .json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.text().await.unwrap_or_default())
            })
        })
        .collect();
    let all_upstream = support::eventually(Duration::from_secs(10), async || {
        (backend.bodies().len() == 3).then_some(())
    })
    .await;
    assert!(
        all_upstream.is_some(),
        "the streams never reached the backend"
    );

    let sidecar = stack.sidecar.take().unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(30), sidecar.shutdown())
        .await
        .expect("the drain is bounded");
    assert!(
        drained,
        "every open stream and task finished within the drain limit"
    );
    for stream in streams {
        let (status, text) = stream.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(streamed(&text).trim(), ANSWER, "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
    // The records were written before the stop returned.
    let lines: Vec<Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines
        .iter()
        .all(|r| r["status"] == 200 && r["model"] == "smollm2-135m"));
    // So were the streams' latency observations (the latency objective reads them), queued for
    // Redis as each stream ended.
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let observed: usize = redis::cmd("LLEN")
        .arg("drain:lat:smollm2-135m")
        .query(&mut connection)
        .unwrap();
    assert_eq!(observed, 3);

    // Stopped: Envoy cannot reach the sidecar, and fails closed rather than route.
    let after = stack
        .chat(&support::stack::ask("anyone there?"), "after")
        .await;
    assert_ne!(after.status(), 200);
    assert_eq!(backend.bodies().len(), 3, "nothing new reached the backend");
}
