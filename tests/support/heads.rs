//! The trained heads' files and data, and a signal scored on labelled data exactly as the router
//! runs it (`eval-signal`).

use mom_router::config::Snapshot;
use mom_router::train::{evaluate_signal, EvalOptions, Report, Split};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

/// `.cache/data/NAME`, built by `./scripts/fetch-models.sh`.
pub fn data(name: &str) -> PathBuf {
    super::encoders::cache(&format!("data/{name}"))
}

/// A hand-written out-of-distribution set, committed in `heads/data/ood/`.
pub fn ood(name: &str) -> PathBuf {
    super::repo().join("heads/data/ood").join(name)
}

/// The metadata `mom-router train` wrote into a head file.
pub fn metadata(head: &str) -> HashMap<String, String> {
    let bytes = std::fs::read(super::repo().join("heads").join(head)).unwrap();
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    metadata.metadata().clone().unwrap()
}

/// The `heldOut` report `mom-router train` wrote into the head file.
pub fn recorded(head: &str) -> Value {
    serde_json::from_str(&metadata(head)["heldOut"]).unwrap()
}

/// `signal` of `snapshot` scored on `data` exactly as the router runs it (`eval-signal`).
pub async fn score(
    snapshot: &Snapshot,
    signal: &str,
    data: PathBuf,
    positive: &[&str],
    split: Split,
) -> Report {
    let options = EvalOptions {
        signal: signal.to_owned(),
        data,
        positive: positive.iter().map(|p| (*p).to_owned()).collect(),
        split,
        concurrency: 32,
    };
    evaluate_signal(snapshot, &options).await.unwrap().0
}

/// `signal` (reading head file `head`) scored on the domain data's held-out share, which must
/// give the accuracy `train` recorded in the head: the same encoder and examples, equal up to
/// float noise flipping an example or two.
pub async fn held_out_as_recorded(snapshot: &Snapshot, signal: &str, head: &str) -> Report {
    let report = score(
        snapshot,
        signal,
        data("domain-train.jsonl"),
        &[],
        Split::HeldOut(20),
    )
    .await;
    let recorded = recorded(head);
    assert_eq!(
        report.examples as u64,
        recorded["examples"].as_u64().unwrap()
    );
    let expected = recorded["accuracy"].as_f64().unwrap();
    assert!(
        (report.accuracy - expected).abs() < 0.002,
        "accuracy {} vs recorded {expected}\n{report}",
        report.accuracy
    );
    report
}
