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
        by_language: false,
    };
    evaluate_signal(snapshot, &options).await.unwrap().report
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

/// The `jailbreak` signal of `snapshot` (reading head file `head`) scored on the jailbreak data's
/// held-out share: like with like, its macro-F1 against the head's recorded one (the signal adds
/// the pattern rules, so it may score a little differently, not much lower). Returns the report
/// and the recorded macro-F1.
pub async fn jailbreak_held_out(snapshot: &Snapshot, head: &str) -> (Report, f64) {
    let report = score(
        snapshot,
        "jailbreak",
        data("jailbreak.jsonl"),
        &["jailbreak"],
        Split::HeldOut(20),
    )
    .await;
    let recorded_f1 = recorded(head)["macroF1"].as_f64().unwrap();
    assert!(
        report.macro_f1 >= recorded_f1 - 0.02,
        "macro-F1 {} vs recorded {recorded_f1}\n{report}",
        report.macro_f1
    );
    (report, recorded_f1)
}

/// The `jailbreak` signal of `snapshot` scored on bastioncorpus (181 prompts, never trained on):
/// the F1 of its `malicious` class, and the report.
pub async fn bastion_f1(snapshot: &Snapshot) -> (f64, Report) {
    let report = score(
        snapshot,
        "jailbreak",
        data("bastion.jsonl"),
        &["malicious"],
        Split::All,
    )
    .await;
    assert_eq!(report.examples, 181);
    (report.f1_of("malicious").unwrap(), report)
}

/// The `stem` signal of `snapshot` scored on the 56 hand-written subject questions
/// (`heads/data/ood/domain.jsonl`) and on the same questions misspelt (`domain-typos.jsonl`).
pub async fn ood_subjects(snapshot: &Snapshot) -> (Report, Report) {
    let mut reports = Vec::new();
    for file in ["domain.jsonl", "domain-typos.jsonl"] {
        let report = score(snapshot, "stem", ood(file), &[], Split::All).await;
        assert_eq!(report.examples, 56, "{file}");
        reports.push(report);
    }
    let typos = reports.pop().unwrap();
    (reports.pop().unwrap(), typos)
}
