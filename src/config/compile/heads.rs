//! Signals that read a trained head: the head file is loaded, and the configured encoder must
//! embed the head's probe sentence the way the training encoder did (the same model, in any
//! backend or precision), so a head is never applied to embeddings it was not trained on.

use super::signals::{guard_on_error, on_error_of, Models};
use crate::config::raw::{RawClassifier, RawJailbreak};
use crate::inference::{cosine, EncoderHandle, Head, PROBE_TEXT};
use crate::signals::{ClassifierSignal, JailbreakSignal, SignalError, SignalKind};
use std::path::Path;
use std::sync::Arc;

/// Lowest probe cosine accepted between the training encoder and the configured one. The same
/// model in fp32 and int8 agrees at about 0.9997; a different model falls far below.
pub const MIN_PROBE_COSINE: f32 = 0.99;

fn needs_encoder<'a>(
    models: &'a Models,
    task: &str,
) -> Result<&'a Arc<EncoderHandle>, Vec<SignalError>> {
    models.encoder.ok_or_else(|| {
        vec![SignalError::new(
            "head",
            format!("a {task} head reads sentence embeddings; configure inference.encoder"),
        )]
    })
}

/// Loads `path` and checks it against the configured encoder.
fn load_head(path: &Path, encoder: &EncoderHandle, task: &str) -> Result<Arc<Head>, SignalError> {
    let head = Head::load(path).map_err(|e| SignalError::new("head", e.to_string()))?;
    let path = path.display();
    if head.task != task {
        return Err(SignalError::new(
            "head",
            format!("{path} is a {:?} head, not a {task:?} head", head.task),
        ));
    }
    check_probe(
        &path.to_string(),
        &head.probe,
        &head.encoder,
        encoder,
        "train",
    )
    .map_err(|m| SignalError::new("head", m))?;
    Ok(Arc::new(head))
}

/// Checks that `encoder` embeds the probe sentence as the head's training encoder did
/// (`probe`, described as `trained_on`); `command` is what retrains it.
pub(super) fn check_probe(
    path: &str,
    probe: &[f32],
    trained_on: &str,
    encoder: &EncoderHandle,
    command: &str,
) -> Result<(), String> {
    let running = encoder
        .embed_blocking(&[PROBE_TEXT.to_owned()])
        .map_err(|e| format!("cannot embed the probe: {e}"))?;
    let running = running.first().map(|p| p.as_slice()).unwrap_or_default();
    if running.len() != probe.len() {
        return Err(format!(
            "{path} takes {}-dimensional embeddings; the encoder gives {}",
            probe.len(),
            running.len()
        ));
    }
    let agreement = cosine(running, probe);
    if agreement < MIN_PROBE_COSINE {
        return Err(format!(
            "{path} was trained on another encoder ({trained_on}; probe cosine {agreement:.3} < \
             {MIN_PROBE_COSINE}) than the configured one ({}); retrain it with `mom-router {command}` on this encoder",
            encoder.describe()
        ));
    }
    Ok(())
}

pub(super) fn domain<'a>(
    raw: &'a RawClassifier,
    models: &Models,
) -> Result<(&'a String, SignalKind), Vec<SignalError>> {
    let encoder = needs_encoder(models, "domain")?;
    let head = load_head(&models.base.join(&raw.head), encoder, "domain").map_err(|e| vec![e])?;
    let signal = ClassifierSignal::new(
        "domain",
        head,
        &raw.matching,
        raw.min_confidence,
        raw.abstain_below,
        on_error_of(raw.on_error),
    )?;
    Ok((&raw.name, SignalKind::Classifier(signal)))
}

pub(super) fn jailbreak<'a>(
    raw: &'a RawJailbreak,
    models: &Models,
) -> Result<(&'a String, SignalKind), Vec<SignalError>> {
    let head = match &raw.head {
        Some(file) => {
            let encoder = needs_encoder(models, "jailbreak")?;
            let path = models.base.join(file);
            Some(load_head(&path, encoder, "jailbreak").map_err(|e| vec![e])?)
        }
        None => None,
    };
    let extra: Vec<(String, String)> = raw
        .patterns
        .iter()
        .map(|p| (p.name.clone(), p.regex.clone()))
        .collect();
    let signal = JailbreakSignal::new(
        head.map(|h| (h, raw.attack_labels.as_slice())),
        raw.threshold,
        raw.builtin_patterns,
        &extra,
        guard_on_error(raw.on_error),
    )?;
    Ok((&raw.name, SignalKind::Jailbreak(signal)))
}
