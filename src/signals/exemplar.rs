//! Exemplar signals: the request embedding is compared with labelled example phrases, and the
//! label whose examples it is closest to wins (complexity, preference, fact-check need, user
//! feedback, modality). One encoder forward per request serves all of them.

use super::embedding::{no_answer, request_embedding, OnError};
use super::{Evidence, SignalError};
use crate::inference::{argmax, cosine, softmax, InferenceError};
use std::sync::Arc;

/// Softmax temperature over label similarities: small, because cosine gaps between labels are
/// a few hundredths.
const TEMPERATURE: f32 = 0.05;

/// One label with its example embeddings.
#[derive(Debug, Clone)]
pub struct Label {
    /// Label name, e.g. `hard`.
    pub name: String,
    /// Embeddings of its example phrases.
    pub examples: Vec<Arc<Vec<f32>>>,
}

/// A compiled exemplar signal.
#[derive(Debug, Clone)]
pub struct ExemplarSignal {
    /// The signal kind's name (`complexity`, `preference`, …).
    pub task: &'static str,
    labels: Vec<Label>,
    matching: Vec<String>,
    min_confidence: f64,
    /// Error policy.
    pub on_error: OnError,
}

impl ExemplarSignal {
    /// Builds the signal; `matching` names the labels that make it match.
    pub fn new(
        task: &'static str,
        labels: Vec<Label>,
        matching: &[String],
        min_confidence: f64,
        on_error: OnError,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        if labels.len() < 2 {
            errors.push(SignalError::new(
                "exemplars",
                "give at least two labels to choose between",
            ));
        }
        for label in &labels {
            if label.examples.is_empty() {
                errors.push(SignalError::new(
                    format!("exemplars.{}", label.name),
                    "give at least one example phrase",
                ));
            }
        }
        let names: Vec<&str> = labels.iter().map(|l| l.name.as_str()).collect();
        for (i, wanted) in matching.iter().enumerate() {
            if !names.contains(&wanted.as_str()) {
                errors.push(SignalError::new(
                    format!("match[{i}]"),
                    format!("unknown label {wanted:?}; labels: {}", names.join(", ")),
                ));
            }
        }
        if matching.is_empty() {
            errors.push(SignalError::new(
                "match",
                format!(
                    "list the labels that make the signal match (labels: {})",
                    names.join(", ")
                ),
            ));
        }
        if !(0.0..=1.0).contains(&min_confidence) {
            errors.push(SignalError::new(
                "minConfidence",
                format!("must be between 0 and 1, got {min_confidence}"),
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            task,
            labels,
            matching: matching.to_vec(),
            min_confidence,
            on_error,
        })
    }

    pub(super) fn evaluate(
        &self,
        embedding: Option<&Result<Arc<Vec<f32>>, InferenceError>>,
    ) -> Evidence {
        let embedding = match request_embedding(embedding) {
            Ok(embedding) => embedding,
            Err(error) => return no_answer(self.on_error, error),
        };
        let scores: Vec<f32> = self
            .labels
            .iter()
            .map(|label| {
                label
                    .examples
                    .iter()
                    .map(|e| cosine(embedding, e))
                    .fold(f32::MIN, f32::max)
            })
            .collect();
        let mut weights: Vec<f32> = scores.iter().map(|s| s / TEMPERATURE).collect();
        softmax(&mut weights);
        let (best, probability) = argmax(&weights);
        let confidence = f64::from(probability);
        let label = &self.labels[best].name;
        Evidence {
            matched: self.matching.contains(label) && confidence >= self.min_confidence,
            confidence,
            value: Some(f64::from(scores[best])),
            label: Some(label.clone()),
            error: None,
        }
    }
}
