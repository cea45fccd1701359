//! Fitting the router head: per model, a logistic P(correct) head (candle-nn) and a ridge
//! regression of ln latency and ln(1 + completion tokens), each with its regularisation chosen
//! by k-fold cross-validation on the training items (folds by a hash of the item id), and the
//! out-of-fold predictions at the chosen settings, where operating points are chosen.

use super::{fit, rounded, FitSettings};
use crate::inference::{Dense, ModelHeads};
use crate::records::traces::Traces;
use crate::selection::Predicted;
use anyhow::{bail, Context};
use serde::Serialize;

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
) -> anyhow::Result<Dense> {
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
) -> anyhow::Result<Dense> {
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

fn apply_correct(dense: &Dense, input: &[f32]) -> f64 {
    let logits = dense.apply(input);
    let (wrong, right) = (f64::from(logits[0]), f64::from(logits[1]));
    1.0 / (1.0 + (wrong - right).exp())
}

/// The training items in folds, for choosing a setting by cross-validation.
struct Folds<'a> {
    /// The training items (indices into the traces).
    train: &'a [usize],
    /// Each training item's fold.
    folds: &'a [usize],
    /// How many folds.
    count: usize,
    /// Every item's head input.
    inputs: &'a [Vec<f32>],
}

impl Folds<'_> {
    /// For each of `settings`: fits on all folds but one (`fit` gets the setting and the item
    /// indices), predicts the left-out fold (`read`), and averages `loss` (training position,
    /// prediction) over every training item; an item no fit could predict (its fold held every
    /// item) keeps `unseen`. Returns the setting with the lowest loss, the loss and its
    /// out-of-fold predictions, in training order.
    fn choose(
        &self,
        settings: &[f64],
        unseen: f64,
        fit: impl Fn(f64, &[usize]) -> anyhow::Result<Dense>,
        read: impl Fn(&Dense, &[f32]) -> f64,
        loss: impl Fn(usize, f64) -> f64,
    ) -> anyhow::Result<(f64, f64, Vec<f64>)> {
        let mut best: Option<(f64, f64, Vec<f64>)> = None;
        for &setting in settings {
            let mut predictions = vec![unseen; self.train.len()];
            for fold in 0..self.count {
                let fit_rows: Vec<usize> = (0..self.train.len())
                    .filter(|&k| self.folds[k] != fold)
                    .map(|k| self.train[k])
                    .collect();
                let held: Vec<usize> = (0..self.train.len())
                    .filter(|&k| self.folds[k] == fold)
                    .collect();
                if fit_rows.is_empty() || held.is_empty() {
                    continue;
                }
                let dense = fit(setting, &fit_rows)?;
                for k in held {
                    predictions[k] = read(&dense, &self.inputs[self.train[k]]);
                }
            }
            let total: f64 = predictions
                .iter()
                .enumerate()
                .map(|(k, p)| loss(k, *p))
                .sum();
            let mean = total / self.train.len().max(1) as f64;
            if best.as_ref().is_none_or(|(_, l, _)| mean < *l) {
                best = Some((setting, mean, predictions));
            }
        }
        best.context("no setting to try")
    }
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
    let cv = Folds {
        train,
        folds: &folds,
        count: grid.folds,
        inputs,
    };
    let models = traces.models.len();
    let mut columns: Vec<Vec<Predicted>> = Vec::with_capacity(models);
    let mut heads = Vec::with_capacity(models);
    let mut chosen = Vec::with_capacity(models);
    for m in 0..models {
        let row = |k: usize| &traces.items[train[k]].rows[m];
        // P(correct): the weight decay with the lowest out-of-fold log loss.
        let (decay, log_loss, probabilities) = cv.choose(
            &grid.weight_decays,
            0.5,
            |decay, rows| {
                let settings = FitSettings {
                    weight_decay: decay,
                    ..settings
                };
                fit_correct(traces, inputs, rows, m, settings)
            },
            apply_correct,
            |k, p| {
                let p = p.clamp(1e-6, 1.0 - 1e-6);
                if row(k).passed {
                    -p.ln()
                } else {
                    -(1.0 - p).ln()
                }
            },
        )?;
        // Cost: the ridge penalty with the lowest out-of-fold error of ln latency.
        let (alpha, _, latencies) = cv.choose(
            &grid.ridges,
            0.0,
            |alpha, rows| fit_cost(traces, inputs, rows, m, alpha),
            |dense, input| f64::from(dense.apply(input)[0]),
            |k, ln| (ln - row(k).latency_ms.max(1.0).ln()).abs(),
        )?;
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
