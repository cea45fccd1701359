//! `mom-router train-router`: the allocation head learned from evaluation traces. Per model, a
//! logistic head predicts whether it answers correctly and a ridge regression predicts its
//! latency and completion tokens, both from the request embedding plus cheap text features
//! ([`RouterHead::input`]). Items are split by a hash of their id; nothing held out is trained
//! on, and the report scores the held-out items only: per-model AUC and Brier score, and the
//! routing policy at each latency weight against the best fixed model and the per-item oracle.

use super::{cache::EmbeddingCache, is_held_out};
use super::{embed_all, encoder_of, fit, load_config, rounded, sha256_file, FitSettings};
use crate::inference::{ModelHeads, RouterHead, PROBE_TEXT};
use crate::records::traces::{self, TracedItem, Traces};
use crate::selection::{Allocation, Predicted};
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
    /// Latency weights the report places on the frontier.
    pub latency_weights: Vec<f64>,
    /// Embedding cache file: reused (for the same encoder) and updated.
    pub cache: Option<PathBuf>,
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
    /// Per model, on the held-out items.
    pub per_model: Vec<ModelReport>,
    /// What cross-validation chose per model.
    pub chosen: Vec<Chosen>,
    /// Fixed models, the oracle and each latency weight's policy, on the held-out items.
    pub held_out_points: Vec<Point>,
    /// The same on the training items with out-of-fold predictions (each item predicted by
    /// heads that never saw it): where operating points are chosen.
    pub training_points: Vec<Point>,
}

/// Candidate regularisation, chosen per model by cross-validation on the training items.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// AdamW weight decays tried for the P(correct) heads.
    pub weight_decays: Vec<f64>,
    /// L2 penalties tried for the cost regressions.
    pub ridges: Vec<f64>,
    /// Folds of the training items.
    pub folds: usize,
}

/// What cross-validation chose for one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Chosen {
    /// The model.
    pub model: String,
    /// Weight decay of its P(correct) head (lowest out-of-fold log loss).
    pub weight_decay: f64,
    /// Out-of-fold log loss at that decay.
    pub log_loss: f64,
    /// Ridge penalty of its cost regression (lowest out-of-fold error of ln latency).
    pub ridge: f64,
}

/// The fitted heads, each training item's out-of-fold predictions (`[item][model]`, in `train`
/// order) and what cross-validation chose.
pub struct Fitted {
    /// One per model of the traces.
    pub heads: Vec<ModelHeads>,
    /// Predictions for each training item by heads that never saw it.
    pub out_of_fold: Vec<Vec<Predicted>>,
    /// The regularisation chosen per model.
    pub chosen: Vec<Chosen>,
}

fn fold_of(id: &str, folds: usize) -> usize {
    let hash = format!("fold:{id}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (hash % folds.max(1) as u64) as usize
}

/// Model `m`'s P(correct) head fitted on `rows` (indices into the items).
fn fit_correct(
    traces: &Traces,
    inputs: &[Vec<f32>],
    rows: &[usize],
    m: usize,
    settings: FitSettings,
) -> anyhow::Result<crate::inference::Dense> {
    let x: Vec<Vec<f32>> = rows.iter().map(|&i| inputs[i].clone()).collect();
    let y: Vec<usize> = rows
        .iter()
        .map(|&i| usize::from(traces.items[i].rows[m].passed))
        .collect();
    let (mut layers, _) = fit(&x, &y, 2, settings, false)
        .with_context(|| format!("fitting P(correct) of {}", traces.models[m]))?;
    layers.pop().context("the fit returned no layer")
}

/// Model `m`'s cost regression (ln latency, ln(1 + completion tokens)) fitted on `rows`.
fn fit_cost(
    traces: &Traces,
    inputs: &[Vec<f32>],
    rows: &[usize],
    m: usize,
    alpha: f64,
) -> anyhow::Result<crate::inference::Dense> {
    let x: Vec<Vec<f32>> = rows.iter().map(|&i| inputs[i].clone()).collect();
    let y: Vec<Vec<f64>> = rows
        .iter()
        .map(|&i| {
            let row = &traces.items[i].rows[m];
            vec![
                row.latency_ms.max(1.0).ln(),
                (row.completion_tokens as f64).ln_1p(),
            ]
        })
        .collect();
    super::ridge::ridge(&x, &y, alpha)
        .with_context(|| format!("fitting the cost of {}", traces.models[m]))
}

fn apply_correct(dense: &crate::inference::Dense, input: &[f32]) -> f64 {
    let logits = dense.apply(input);
    let (wrong, right) = (f64::from(logits[0]), f64::from(logits[1]));
    1.0 / (1.0 + (wrong - right).exp())
}

/// Fits the head from already-embedded items (`inputs[i]` is [`RouterHead::input`] of item
/// `i`) on the `train` items. For each model the weight decay and ridge penalty come from
/// `grid` by cross-validation over `grid.folds` folds of the training items (by a hash of the
/// id), and the out-of-fold predictions at the chosen settings are returned with the heads.
pub fn fit_heads(
    traces: &Traces,
    inputs: &[Vec<f32>],
    train: &[usize],
    settings: FitSettings,
    grid: &Grid,
) -> anyhow::Result<Fitted> {
    if settings.hidden != 0 {
        bail!("router heads are linear: hidden must be 0");
    }
    if grid.weight_decays.is_empty() || grid.ridges.is_empty() || grid.folds < 2 {
        bail!("cross-validation needs at least one setting of each kind and two folds");
    }
    let folds: Vec<usize> = train
        .iter()
        .map(|&i| fold_of(&traces.items[i].id, grid.folds))
        .collect();
    let split = |f: usize| -> (Vec<usize>, Vec<usize>) {
        let fit: Vec<usize> = (0..train.len())
            .filter(|&k| folds[k] != f)
            .map(|k| train[k])
            .collect();
        let out: Vec<usize> = (0..train.len()).filter(|&k| folds[k] == f).collect();
        (fit, out)
    };
    let models = traces.models.len();
    let mut columns: Vec<Vec<Predicted>> = Vec::with_capacity(models);
    let mut heads = Vec::with_capacity(models);
    let mut chosen = Vec::with_capacity(models);
    for m in 0..models {
        let mut best: Option<(f64, f64, Vec<f64>)> = None;
        for &decay in &grid.weight_decays {
            let settings = FitSettings {
                weight_decay: decay,
                ..settings
            };
            let mut probabilities = vec![0.5; train.len()];
            for f in 0..grid.folds {
                let (fit_rows, held) = split(f);
                if fit_rows.is_empty() || held.is_empty() {
                    continue;
                }
                let dense = fit_correct(traces, inputs, &fit_rows, m, settings)?;
                for k in held {
                    probabilities[k] = apply_correct(&dense, &inputs[train[k]]);
                }
            }
            let loss = train
                .iter()
                .zip(&probabilities)
                .map(|(&i, p)| {
                    let p = p.clamp(1e-6, 1.0 - 1e-6);
                    if traces.items[i].rows[m].passed {
                        -p.ln()
                    } else {
                        -(1.0 - p).ln()
                    }
                })
                .sum::<f64>()
                / train.len() as f64;
            if best.as_ref().is_none_or(|(l, _, _)| loss < *l) {
                best = Some((loss, decay, probabilities));
            }
        }
        let Some((log_loss, decay, probabilities)) = best else {
            bail!("no weight decay to try");
        };
        let mut best_cost: Option<(f64, f64, Vec<f64>)> = None;
        for &alpha in &grid.ridges {
            let mut latencies = vec![0.0; train.len()];
            for f in 0..grid.folds {
                let (fit_rows, held) = split(f);
                if fit_rows.is_empty() || held.is_empty() {
                    continue;
                }
                let dense = fit_cost(traces, inputs, &fit_rows, m, alpha)?;
                for k in held {
                    latencies[k] = f64::from(dense.apply(&inputs[train[k]])[0]);
                }
            }
            let error = train
                .iter()
                .zip(&latencies)
                .map(|(&i, ln)| (ln - traces.items[i].rows[m].latency_ms.max(1.0).ln()).abs())
                .sum::<f64>()
                / train.len() as f64;
            if best_cost.as_ref().is_none_or(|(e, _, _)| error < *e) {
                best_cost = Some((error, alpha, latencies));
            }
        }
        let Some((_, alpha, latencies)) = best_cost else {
            bail!("no ridge penalty to try");
        };
        columns.push(
            probabilities
                .iter()
                .zip(&latencies)
                .map(|(&correct, ln)| Predicted {
                    correct,
                    latency_ms: ln.clamp(-5.0, 15.0).exp(),
                })
                .collect(),
        );
        let final_settings = FitSettings {
            weight_decay: decay,
            ..settings
        };
        heads.push(ModelHeads {
            model: traces.models[m].clone(),
            correct: fit_correct(traces, inputs, train, m, final_settings)?,
            cost: fit_cost(traces, inputs, train, m, alpha)?,
        });
        chosen.push(Chosen {
            model: traces.models[m].clone(),
            weight_decay: decay,
            log_loss: rounded(log_loss),
            ridge: alpha,
        });
    }
    let out_of_fold = (0..train.len())
        .map(|k| columns.iter().map(|column| column[k]).collect())
        .collect();
    Ok(Fitted {
        heads,
        out_of_fold,
        chosen,
    })
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
    let probe = encoder.embed_blocking(&[PROBE_TEXT.to_owned()])?;
    let probe = probe
        .first()
        .map(|p| p.as_ref().clone())
        .unwrap_or_default();
    let mut cache = match &options.cache {
        Some(path) => EmbeddingCache::open(path, &probe),
        None => EmbeddingCache::default(),
    };
    let prompts: Vec<String> = traces
        .items
        .iter()
        .map(|i| i.prompt.trim().to_owned())
        .collect();
    let vectors = embed_all(&encoder, &prompts, &mut cache)?;
    if let Some(path) = &options.cache {
        cache.save(path)?;
    }
    let inputs: Vec<Vec<f32>> = vectors
        .iter()
        .zip(&prompts)
        .map(|(v, p)| RouterHead::input(v, p))
        .collect();
    let fitted = fit_heads(&traces, &inputs, &train, options.fit, &options.grid)?;
    let weights = encoder
        .weights_file()
        .context("the encoder does not name its weights file")?;
    let head = RouterHead {
        models: fitted.heads,
        probe,
        encoder: encoder.describe().to_owned(),
        encoder_sha256: sha256_file(weights)?,
    };
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
        per_model,
        chosen: fitted.chosen,
        held_out_points: frontier(&traces, &predictions, &held, &options.latency_weights),
        training_points: frontier(&traces, &out_of_fold, &train, &options.latency_weights),
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
mod tests {
    use super::*;
    use crate::records::traces::TraceRow;

    /// Two models over two kinds of item told apart by the first input: "small" is right on
    /// kind A only, fast on both; "large" is right on both, slow.
    fn synthetic() -> (Traces, Vec<Vec<f32>>) {
        let models = vec!["large".to_owned(), "small".to_owned()];
        let mut items = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..80 {
            let kind_a = i % 2 == 0;
            let row = |model: &str, passed: bool, latency_ms: f64| TraceRow {
                item: format!("{i:03}"),
                kind: "exact".to_owned(),
                model: model.to_owned(),
                prompt: format!("item {i}"),
                passed,
                status: 200,
                prompt_tokens: 10,
                completion_tokens: if model == "large" { 40 } else { 8 },
                latency_ms,
                finish_reason: "stop".to_owned(),
                answer: String::new(),
            };
            items.push(TracedItem {
                id: format!("{i:03}"),
                kind: "exact".to_owned(),
                prompt: format!("item {i}"),
                rows: vec![row("large", true, 4000.0), row("small", kind_a, 500.0)],
            });
            let jitter = (i % 7) as f32 * 0.01;
            inputs.push(vec![if kind_a { 1.0 } else { -1.0 }, jitter, 0.5]);
        }
        (Traces { models, items }, inputs)
    }

    fn settings() -> FitSettings {
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
