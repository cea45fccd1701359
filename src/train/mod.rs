//! `mom-router train` and `mom-router eval-signal`: router-owned heads fitted on frozen sentence
//! embeddings from labelled JSON Lines, and the quality of a configured signal measured on
//! labelled data through exactly the code that routes requests.

mod cache;
mod calibrate;
mod cascade;
mod data;
mod eval;
mod finetune;
mod fit;
mod metrics;
mod ridge;
mod router;
mod router_fit;
mod router_kind;

pub use calibrate::{calibrate, Calibration};
pub use cascade::{Cascade, CascadeSpec};
pub use data::{is_held_out, label_set, read_examples, Example};
pub use eval::{evaluate_signal, EvalOptions, Mistake, Scored, Split};
pub use finetune::{finetune, FinetuneOptions, FinetuneTask, Finetuned, TaskScore};
pub use fit::{fit, FitSettings};
pub use metrics::Report;
pub use router::{auc, frontier, train_router, ModelReport, Point, RouterOptions, RouterReport};
pub use router_fit::{fit_heads, Chosen, Fitted, Grid};

use crate::config::{self, Snapshot};
use crate::inference::{argmax, EncoderHandle, Head, PROBE_TEXT};
use crate::signals::text::windows;
use anyhow::{bail, Context};
use cache::EmbeddingCache;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What `mom-router train` fits.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// A configuration with `inference.encoder`: the encoder the head will read.
    pub config: PathBuf,
    /// Labelled examples (JSON Lines: `text`, `label`).
    pub data: PathBuf,
    /// The head's task (`domain`, `jailbreak`, …), checked when a signal loads it.
    pub task: String,
    /// Where to write the head (safetensors).
    pub out: PathBuf,
    /// Percentage of examples held out for evaluation (by text hash).
    pub holdout: u32,
    /// Train and score on overlapping word windows (as the jailbreak signal scans), not whole
    /// texts.
    pub windows: bool,
    /// Optimiser settings.
    pub fit: FitSettings,
    /// Weigh every label equally in the loss, however many examples it has.
    pub balance: bool,
    /// Embedding cache file: reused (for the same encoder) and updated.
    pub cache: Option<PathBuf>,
    /// Fit a temperature on half of the held-out share (by a second hash) and measure the
    /// calibration error on the other half; whole-text heads only.
    pub calibrate: bool,
}

/// What `train` measured on the held-out share.
#[derive(Debug, Clone)]
pub struct Trained {
    /// Accuracy and F1 (unchanged by calibration: a temperature keeps the top label).
    pub report: Report,
    /// The fitted temperature and the calibration error before and after, when asked for.
    pub calibration: Option<Calibration>,
}

/// True when a held-out example fits the temperature rather than measuring it.
fn fits_temperature(text: &str) -> bool {
    is_held_out(&format!("calibrate {text}"), 50)
}

/// Loads a configuration, turning its errors into one message.
pub fn load_config(path: &Path) -> anyhow::Result<Snapshot> {
    config::load(path).map_err(|errors| {
        let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("{}: {}", path.display(), lines.join("; "))
    })
}

fn encoder_of(snapshot: &Snapshot) -> anyhow::Result<Arc<EncoderHandle>> {
    snapshot
        .encoder
        .clone()
        .context("the configuration has no inference.encoder to embed the examples with")
}

/// Embeds texts in slices, reporting progress on stderr; vectors already in `cache` are not
/// recomputed.
fn embed_all(
    encoder: &EncoderHandle,
    texts: &[String],
    cache: &mut EmbeddingCache,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let missing: Vec<String> = texts
        .iter()
        .filter(|t| cache.get(t).is_none())
        .cloned()
        .collect();
    for (i, slice) in missing.chunks(256).enumerate() {
        let vectors = encoder.embed_blocking(slice)?;
        for (text, vector) in slice.iter().zip(vectors) {
            cache.insert(text, vector.as_ref().clone());
        }
        tracing::info!(
            done = (i * 256 + slice.len()),
            of = missing.len(),
            "embedded"
        );
    }
    texts
        .iter()
        .map(|t| {
            cache
                .get(t)
                .cloned()
                .context("embedding missing after encoding")
        })
        .collect()
}

/// The encoder's probe embedding (what a head records of its encoder) and the embedding cache
/// at `path` for that encoder (empty when there is none or it was written by another encoder).
fn probe_and_cache(
    encoder: &EncoderHandle,
    path: Option<&Path>,
) -> anyhow::Result<(Vec<f32>, EmbeddingCache)> {
    let probe = encoder.embed_blocking(&[PROBE_TEXT.to_owned()])?;
    let probe = probe
        .first()
        .map(|p| p.as_ref().clone())
        .unwrap_or_default();
    let cache = match path {
        Some(path) => EmbeddingCache::open(path, &probe),
        None => EmbeddingCache::default(),
    };
    Ok((probe, cache))
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    crate::config::sha256_file(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Per-example class probabilities: one text, or the element-wise maximum over its windows.
fn example_probabilities(head: &Head, vectors: &[Vec<f32>]) -> Vec<f32> {
    vectors
        .iter()
        .map(|v| head.probabilities(v))
        .reduce(|a, b| a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect())
        .unwrap_or_default()
}

/// Four decimals, as the report prints them.
fn rounded(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Fits a head, scores it on the held-out share (and calibrates it there when asked), writes
/// it, and returns what the held-out share measured.
pub fn train(options: &TrainOptions) -> anyhow::Result<Trained> {
    if options.calibrate && options.windows {
        bail!("--calibrate needs whole-text examples; a windowed head takes the maximum over windows, which one temperature does not calibrate");
    }
    let snapshot = load_config(&options.config)?;
    let encoder = encoder_of(&snapshot)?;
    let examples = read_examples(&options.data)?;
    let labels = label_set(&examples);
    if labels.len() < 2 {
        bail!(
            "{}: a head needs at least two labels",
            options.data.display()
        );
    }
    let index = |label: &str| labels.iter().position(|l| l == label).unwrap_or_default();
    let units = |text: &str| {
        if options.windows {
            windows(text)
        } else {
            vec![text.to_owned()]
        }
    };
    let (held, kept): (Vec<&Example>, Vec<&Example>) = examples
        .iter()
        .partition(|e| is_held_out(&e.text, options.holdout));
    if kept.is_empty() {
        bail!(
            "no training examples left after holding out {}%",
            options.holdout
        );
    }
    let mut texts = Vec::new();
    let mut targets = Vec::new();
    for example in &kept {
        for unit in units(&example.text) {
            texts.push(unit);
            targets.push(index(&example.label));
        }
    }
    tracing::info!(
        examples = kept.len(),
        inputs = texts.len(),
        held_out = held.len(),
        "training"
    );
    let (probe, mut cache) = probe_and_cache(&encoder, options.cache.as_deref())?;
    let inputs = embed_all(&encoder, &texts, &mut cache)?;
    let (layers, loss) = fit(
        &inputs,
        &targets,
        labels.len(),
        options.fit,
        options.balance,
    )?;
    tracing::info!(loss, "fitted");
    let weights = encoder
        .weights_file()
        .context("the encoder does not name its weights file")?;
    let mut head = Head {
        task: options.task.clone(),
        labels: labels.clone(),
        layers,
        probe,
        encoder: encoder.describe().to_owned(),
        encoder_sha256: sha256_file(weights)?,
    };
    let mut held_texts = Vec::new();
    let mut owner = Vec::new();
    for (i, example) in held.iter().enumerate() {
        for unit in units(&example.text) {
            held_texts.push(unit);
            owner.push(i);
        }
    }
    let held_vectors = embed_all(&encoder, &held_texts, &mut cache)?;
    if let Some(path) = &options.cache {
        cache.save(path)?;
    }
    let mut grouped: Vec<Vec<Vec<f32>>> = vec![Vec::new(); held.len()];
    for (vector, i) in held_vectors.into_iter().zip(owner) {
        grouped[i].push(vector);
    }
    let calibration = options
        .calibrate
        .then(|| calibrate_on(&head, &held, &grouped, index))
        .transpose()?;
    if let Some(calibration) = &calibration {
        head.temper(calibration.temperature);
    }
    let pairs: Vec<(usize, usize)> = held
        .iter()
        .zip(&grouped)
        .map(|(example, vectors)| {
            let (predicted, _) = argmax(&example_probabilities(&head, vectors));
            (index(&example.label), predicted)
        })
        .collect();
    let report = Report::new(labels, &pairs);
    let mut provenance = vec![
        ("dataSha256", sha256_file(&options.data)?),
        ("heldOutPercent", options.holdout.to_string()),
        (
            "settings",
            format!("{:?}, balance: {}", options.fit, options.balance),
        ),
        (
            "heldOut",
            serde_json::json!({
                "accuracy": rounded(report.accuracy),
                "macroF1": rounded(report.macro_f1),
                "examples": report.examples,
            })
            .to_string(),
        ),
    ];
    if let Some(c) = &calibration {
        provenance.push((
            "calibration",
            serde_json::json!({
                "temperature": rounded(c.temperature),
                "fittedOn": c.fitted_on,
                "measuredOn": c.measured_on,
                "eceBefore": rounded(c.ece_before),
                "eceAfter": rounded(c.ece_after),
            })
            .to_string(),
        ));
    }
    head.save(&options.out, &provenance)?;
    Ok(Trained {
        report,
        calibration,
    })
}

/// Fits the temperature on one half of the held-out examples and measures it on the other.
fn calibrate_on(
    head: &Head,
    held: &[&Example],
    vectors: &[Vec<Vec<f32>>],
    index: impl Fn(&str) -> usize,
) -> anyhow::Result<Calibration> {
    let mut fit_rows = Vec::new();
    let mut measure_rows = Vec::new();
    for (example, vectors) in held.iter().zip(vectors) {
        let Some(vector) = vectors.first() else {
            continue;
        };
        let row = (head.logits(vector), index(&example.label));
        if fits_temperature(&example.text) {
            fit_rows.push(row);
        } else {
            measure_rows.push(row);
        }
    }
    if fit_rows.len() < 10 || measure_rows.len() < 10 {
        bail!(
            "--calibrate needs at least 10 held-out examples on each side of its split; got {} and {} (raise --holdout)",
            fit_rows.len(),
            measure_rows.len()
        );
    }
    Ok(calibrate(&fit_rows, &measure_rows))
}
