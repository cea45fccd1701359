//! `mom-router train-router`: the allocation head learned from evaluation traces. A softmax
//! classifier tells the request's kind from its embedding plus cheap text features; per model,
//! a logistic head predicts whether it answers correctly and a ridge regression predicts its
//! latency and completion tokens, both from the kind probabilities crossed with the cheap
//! features ([`RouterHead::input`]). Items are split by a hash of their id; nothing held out is
//! trained on, and the report scores the held-out items only: per-model AUC and Brier score, and
//! the routing policy at each latency weight against the best fixed model and the per-item
//! oracle. The kind classifier is fitted once on every training item; the out-of-fold
//! predictions where operating points are chosen refit the per-model heads only.

use super::cascade::{with_cascade, Cascade, CascadeSpec};
use super::router_fit::{fit_heads, Chosen, Grid};
use super::router_kind::fit_kinds;
use super::{embed_all, encoder_of, is_held_out, load_config, probe_and_cache, rounded};
use super::{sha256_file, FitSettings};
use crate::inference::{kind_input, RouterHead};
use crate::records::traces::{self, TracedItem, Traces};
use crate::selection::{Allocation, Predicted, DEFAULT_BUSY_MAX_LOSS};
use anyhow::{bail, Context};
use serde::Serialize;
use std::path::PathBuf;

/// What `train-router` fits.
#[derive(Debug, Clone)]
pub struct RouterOptions {
    /// A configuration with `inference.encoder`: the encoder the head will read.
    pub config: PathBuf,
    /// Traces written by `mom-router eval --traces`.
    pub traces: PathBuf,
    /// Where to write the head.
    pub out: PathBuf,
    /// Percentage of items held out (by a hash of the id).
    pub holdout: u32,
    /// Settings of the logistic heads (`hidden` must be 0; the weight decay comes from `grid`).
    pub fit: FitSettings,
    /// Regularisation tried by cross-validation.
    pub grid: Grid,
    /// AdamW weight decay of the request-kind classifier.
    pub kind_weight_decay: f64,
    /// Latency weights the report places on the frontier.
    pub latency_weights: Vec<f64>,
    /// Embedding cache file: reused (for the same encoder) and updated.
    pub cache: Option<PathBuf>,
    /// A confidence cascade to learn as one more candidate (its threshold given, or chosen on
    /// the training items).
    pub cascade: Option<CascadeSpec>,
}

/// How well one model's predictions did on the held-out items.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelReport {
    /// The model.
    pub model: String,
    /// Its actual accuracy on the held-out items.
    pub accuracy: f64,
    /// Area under the ROC curve of P(correct) (0.5 when one class is absent).
    pub auc: f64,
    /// Mean squared error of P(correct).
    pub brier: f64,
    /// Mean absolute error of the predicted latency, relative to the actual one.
    pub latency_relative_error: f64,
}

/// A policy or a fixed model on a split: accuracy and compute (sum of actual latencies).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    /// What was placed: `fixed MODEL`, `oracle`, `learned λ=…`.
    pub name: String,
    /// Share of items answered correctly.
    pub accuracy: f64,
    /// Sum of the actual latencies of the chosen models, milliseconds.
    pub compute_ms: f64,
    /// Items sent to each model, in model order.
    pub choices: Vec<usize>,
}

/// What `train-router` measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouterReport {
    /// The models, in head order.
    pub models: Vec<String>,
    /// Items trained on.
    pub trained: usize,
    /// Items held out.
    pub held_out: usize,
    /// The request kinds the head tells apart (the training items' grading kinds).
    pub kinds: Vec<String>,
    /// Share of the held-out items whose predicted kind is their own.
    pub kind_accuracy: f64,
    /// Per model, on the held-out items.
    pub per_model: Vec<ModelReport>,
    /// What cross-validation chose per model.
    pub chosen: Vec<Chosen>,
    /// Fixed models, the oracle and each latency weight's policy, on the held-out items.
    pub held_out_points: Vec<Point>,
    /// The same on the training items with out-of-fold predictions (each item predicted by
    /// heads that never saw it): where operating points are chosen.
    pub training_points: Vec<Point>,
    /// The cascade learned as a candidate, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cascade: Option<Cascade>,
}

/// Area under the ROC curve of `scores` against `truth` (ties count half).
pub fn auc(scores: &[f64], truth: &[bool]) -> f64 {
    let positives: Vec<f64> = scores
        .iter()
        .zip(truth)
        .filter(|(_, t)| **t)
        .map(|(s, _)| *s)
        .collect();
    let negatives: Vec<f64> = scores
        .iter()
        .zip(truth)
        .filter(|(_, t)| !**t)
        .map(|(s, _)| *s)
        .collect();
    if positives.is_empty() || negatives.is_empty() {
        return 0.5;
    }
    let mut wins = 0.0;
    for p in &positives {
        for n in &negatives {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (positives.len() * negatives.len()) as f64
}

/// Each model's predictions for each item: `predictions[i][m]`.
fn predict_all(head: &RouterHead, inputs: &[Vec<f32>]) -> Vec<Vec<Predicted>> {
    inputs
        .iter()
        .map(|input| {
            (0..head.models.len())
                .filter_map(|m| head.predict(m, input).map(Predicted::from))
                .collect()
        })
        .collect()
}

/// Accuracy and compute of sending item `i` of `split` to `choose(i)`.
fn place(
    name: String,
    items: &[TracedItem],
    split: &[usize],
    models: usize,
    choose: impl Fn(usize) -> usize,
) -> Point {
    let mut choices = vec![0usize; models];
    let (mut right, mut compute) = (0usize, 0.0f64);
    for &i in split {
        let m = choose(i);
        choices[m] += 1;
        let row = &items[i].rows[m];
        right += usize::from(row.passed);
        compute += row.latency_ms;
    }
    Point {
        name,
        accuracy: rounded(right as f64 / split.len().max(1) as f64),
        compute_ms: compute.round(),
        choices,
    }
}

/// The fixed models, the oracle (the fastest model that was right, else the fastest) and the
/// learned policy at each latency weight, on `split`.
pub fn frontier(
    traces: &Traces,
    predictions: &[Vec<Predicted>],
    split: &[usize],
    latency_weights: &[f64],
) -> Vec<Point> {
    let n = traces.models.len();
    let items = &traces.items;
    let mut points: Vec<Point> = (0..n)
        .map(|m| {
            place(
                format!("fixed {}", traces.models[m]),
                items,
                split,
                n,
                |_| m,
            )
        })
        .collect();
    points.push(place("oracle".to_owned(), items, split, n, |i| {
        let rows = &items[i].rows;
        let fastest = |pool: &mut dyn Iterator<Item = usize>| {
            pool.min_by(|&a, &b| rows[a].latency_ms.total_cmp(&rows[b].latency_ms))
        };
        fastest(&mut (0..n).filter(|&m| rows[m].passed))
            .or_else(|| fastest(&mut (0..n)))
            .unwrap_or(0)
    }));
    for &weight in latency_weights {
        let allocation = Allocation {
            latency_weight: weight,
            min_correct: None,
            max_latency_ms: None,
            prior_outcomes: 0.0,
            busy_max_loss: DEFAULT_BUSY_MAX_LOSS,
        };
        points.push(place(
            format!("learned λ={weight}"),
            items,
            split,
            n,
            |i| allocation.choose(&predictions[i]).chosen,
        ));
    }
    points
}

/// Trains the router head from traces, writes it, and reports on the held-out items.
pub fn train_router(options: &RouterOptions) -> anyhow::Result<RouterReport> {
    let snapshot = load_config(&options.config)?;
    let encoder = encoder_of(&snapshot)?;
    let text = std::fs::read_to_string(&options.traces)
        .with_context(|| format!("cannot read {}", options.traces.display()))?;
    let traces =
        traces::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", options.traces.display()))?;
    let (held, train): (Vec<usize>, Vec<usize>) =
        (0..traces.items.len()).partition(|&i| is_held_out(&traces.items[i].id, options.holdout));
    if train.is_empty() || held.is_empty() {
        bail!(
            "{} items split {}/{} by holding out {}%: both sides need items",
            traces.items.len(),
            train.len(),
            held.len(),
            options.holdout
        );
    }
    let (traces, cascade) = match &options.cascade {
        Some(spec) => {
            let (extended, cascade) = with_cascade(&traces, spec, &train)?;
            (extended, Some(cascade))
        }
        None => (traces, None),
    };
    let (probe, mut cache) = probe_and_cache(&encoder, options.cache.as_deref())?;
    let prompts: Vec<String> = traces
        .items
        .iter()
        .map(|i| i.prompt.trim().to_owned())
        .collect();
    let vectors = embed_all(&encoder, &prompts, &mut cache)?;
    if let Some(path) = &options.cache {
        cache.save(path)?;
    }
    let kind_inputs: Vec<Vec<f32>> = vectors
        .iter()
        .zip(&prompts)
        .map(|(v, p)| kind_input(v, p))
        .collect();
    let kind_settings = FitSettings {
        weight_decay: options.kind_weight_decay,
        ..options.fit
    };
    let kinds = fit_kinds(&traces, &kind_inputs, &train, kind_settings)?;
    let kind_accuracy = kinds.accuracy(&traces, &kind_inputs, &held);
    let weights = encoder
        .weights_file()
        .context("the encoder does not name its weights file")?;
    let mut head = RouterHead {
        kinds: kinds.names,
        kind: kinds.classifier,
        models: Vec::new(),
        probe,
        encoder: encoder.describe().to_owned(),
        encoder_sha256: sha256_file(weights)?,
    };
    let inputs: Vec<Vec<f32>> = vectors
        .iter()
        .zip(&prompts)
        .map(|(v, p)| head.input(v, p))
        .collect();
    let fitted = fit_heads(&traces, &inputs, &train, options.fit, &options.grid)?;
    head.models = fitted.heads;
    let predictions = predict_all(&head, &inputs);
    // The training items' out-of-fold predictions, placed at their item indices.
    let mut out_of_fold = predictions.clone();
    for (k, &i) in train.iter().enumerate() {
        out_of_fold[i].clone_from(&fitted.out_of_fold[k]);
    }
    let per_model = traces
        .models
        .iter()
        .enumerate()
        .map(|(m, model)| {
            let scores: Vec<f64> = held.iter().map(|&i| predictions[i][m].correct).collect();
            let truth: Vec<bool> = held
                .iter()
                .map(|&i| traces.items[i].rows[m].passed)
                .collect();
            let brier = scores
                .iter()
                .zip(&truth)
                .map(|(p, t)| (p - f64::from(u8::from(*t))).powi(2))
                .sum::<f64>()
                / held.len() as f64;
            let latency_error = held
                .iter()
                .map(|&i| {
                    let actual = traces.items[i].rows[m].latency_ms.max(1.0);
                    (predictions[i][m].latency_ms - actual).abs() / actual
                })
                .sum::<f64>()
                / held.len() as f64;
            ModelReport {
                model: model.clone(),
                accuracy: rounded(truth.iter().filter(|t| **t).count() as f64 / held.len() as f64),
                auc: rounded(auc(&scores, &truth)),
                brier: rounded(brier),
                latency_relative_error: rounded(latency_error),
            }
        })
        .collect();
    let report = RouterReport {
        models: traces.models.clone(),
        trained: train.len(),
        held_out: held.len(),
        kinds: head.kinds.clone(),
        kind_accuracy: rounded(kind_accuracy),
        per_model,
        chosen: fitted.chosen,
        held_out_points: frontier(&traces, &predictions, &held, &options.latency_weights),
        training_points: frontier(&traces, &out_of_fold, &train, &options.latency_weights),
        cascade,
    };
    let provenance = [
        ("tracesSha256", sha256_file(&options.traces)?),
        ("heldOutPercent", options.holdout.to_string()),
        ("settings", format!("{:?}, {:?}", options.fit, options.grid)),
        ("report", serde_json::to_string(&report)?),
    ];
    head.save(&options.out, &provenance)?;
    Ok(report)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::records::traces::TraceRow;

    /// One trace row of item `i`, answered by `model` with the prompt `item {i}`.
    pub(in crate::train) fn row(
        i: usize,
        kind: &str,
        model: &str,
        passed: bool,
        latency_ms: f64,
        completion_tokens: u64,
    ) -> TraceRow {
        TraceRow {
            item: format!("{i:03}"),
            kind: kind.to_owned(),
            model: model.to_owned(),
            prompt: format!("item {i}"),
            passed,
            status: 200,
            prompt_tokens: 10,
            completion_tokens,
            latency_ms,
            ttft_ms: 0.0,
            finish_reason: "stop".to_owned(),
            answer: String::new(),
            max_tokens: None,
            confidence: None,
        }
    }

    /// Item `i` of `kind` with its rows.
    pub(in crate::train) fn item(i: usize, kind: &str, rows: Vec<TraceRow>) -> TracedItem {
        TracedItem {
            id: format!("{i:03}"),
            kind: kind.to_owned(),
            prompt: format!("item {i}"),
            rows,
        }
    }

    /// Two models over two kinds of item told apart by the first input: "small" is right on
    /// kind A only, fast on both; "large" is right on both, slow.
    fn synthetic() -> (Traces, Vec<Vec<f32>>) {
        let models = vec!["large".to_owned(), "small".to_owned()];
        let mut items = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..80 {
            let kind_a = i % 2 == 0;
            items.push(item(
                i,
                "exact",
                vec![
                    row(i, "exact", "large", true, 4000.0, 40),
                    row(i, "exact", "small", kind_a, 500.0, 8),
                ],
            ));
            let jitter = (i % 7) as f32 * 0.01;
            inputs.push(vec![if kind_a { 1.0 } else { -1.0 }, jitter, 0.5]);
        }
        (Traces { models, items }, inputs)
    }

    /// A linear fit, seeded.
    pub(in crate::train) fn settings() -> FitSettings {
        FitSettings {
            hidden: 0,
            epochs: 400,
            learning_rate: 0.05,
            weight_decay: 0.0,
            batch_size: 0,
            seed: 7,
        }
    }

    #[test]
    fn choices_follow_the_utilities_the_traces_imply() {
        let (traces, inputs) = synthetic();
        let train: Vec<usize> = (0..traces.items.len()).collect();
        let grid = Grid {
            weight_decays: vec![0.0, 0.5],
            ridges: vec![1e-3, 10.0],
            folds: 4,
        };
        let fitted = fit_heads(&traces, &inputs, &train, settings(), &grid).unwrap();
        // Exact data: the weakest penalties fit it best out of fold.
        assert_eq!(fitted.chosen[0].ridge, 1e-3);
        assert_eq!(fitted.chosen[1].weight_decay, 0.0);
        assert!(
            fitted.out_of_fold[0][1].correct > 0.9,
            "{:?}",
            fitted.out_of_fold[0]
        );
        let head = RouterHead {
            kinds: vec!["exact".to_owned()],
            kind: crate::inference::Dense {
                weight: vec![0.0; 3],
                bias: vec![0.0],
                inputs: 3,
            },
            models: fitted.heads,
            probe: vec![0.0; 3],
            encoder: String::new(),
            encoder_sha256: String::new(),
        };
        let predictions = predict_all(&head, &inputs);
        // Kind A: small ≈ P 1 in 0.5 s, large ≈ P 1 in 4 s. Kind B: small ≈ P 0.
        let a = &predictions[0];
        let b = &predictions[1];
        assert!(a[1].correct > 0.9 && b[1].correct < 0.1, "{a:?} {b:?}");
        assert!(a[0].correct > 0.9 && b[0].correct > 0.9, "{a:?} {b:?}");
        assert!((a[1].latency_ms - 500.0).abs() < 5.0, "{a:?}");
        assert!((b[0].latency_ms - 4000.0).abs() < 40.0, "{b:?}");
        // By hand at λ = 0.1/s: kind A: large ≈ 1 − 0.4 = 0.6, small ≈ 1 − 0.05 = 0.95 → small;
        // kind B: large ≈ 0.6, small ≈ 0 − 0.05 → large. At λ = 1/s: kind B's large ≈ 1 − 4 =
        // −3 < small's −0.5 → small everywhere.
        let at = |weight: f64, p: &[Predicted]| {
            Allocation {
                latency_weight: weight,
                min_correct: None,
                max_latency_ms: None,
                prior_outcomes: 0.0,
                busy_max_loss: DEFAULT_BUSY_MAX_LOSS,
            }
            .choose(p)
            .chosen
        };
        assert_eq!((at(0.1, a), at(0.1, b)), (1, 0));
        assert_eq!((at(1.0, a), at(1.0, b)), (1, 1));
        let points = frontier(&traces, &predictions, &train, &[0.1]);
        let names: Vec<&str> = points.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["fixed large", "fixed small", "oracle", "learned λ=0.1"]
        );
        // The learned point matches the oracle: every item right, small on the 40 kind-A items.
        assert_eq!(points[3].accuracy, 1.0);
        assert_eq!(points[3].choices, vec![40, 40]);
        assert_eq!(points[3].compute_ms, points[2].compute_ms);
        assert_eq!(points[0].compute_ms, 80.0 * 4000.0);
        assert_eq!(points[1].accuracy, 0.5);
    }

    #[test]
    fn auc_ranks_and_counts_ties_half() {
        assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &[true, true, false, false]), 1.0);
        assert_eq!(auc(&[0.1, 0.9], &[true, false]), 0.0);
        assert_eq!(auc(&[0.5, 0.5], &[true, false]), 0.5);
        assert_eq!(auc(&[0.3], &[true]), 0.5);
    }
}
