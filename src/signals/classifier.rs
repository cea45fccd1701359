//! Classifier signals: a router-owned trained head (see [`crate::inference::Head`]) applied to
//! the request embedding the shared encoder computed once. The `domain` signal is one: fourteen
//! subject areas, trained by `mom-router train`.

use super::embedding::{no_answer, request_embedding, OnError};
use super::{Evidence, SignalError};
use crate::inference::{Head, InferenceError};
use std::sync::Arc;

/// A compiled classifier signal.
#[derive(Debug, Clone)]
pub struct ClassifierSignal {
    /// The signal kind's name (`domain`).
    pub task: &'static str,
    head: Arc<Head>,
    /// Label indices that make the signal match; every label when empty.
    matching: Vec<usize>,
    min_confidence: f64,
    /// Error policy.
    pub on_error: OnError,
}

/// Indices of `wanted` among the head's labels, or an error naming the unknown ones.
pub(super) fn label_indices(
    head: &Head,
    wanted: &[String],
    field: &str,
) -> Result<Vec<usize>, Vec<SignalError>> {
    let mut errors = Vec::new();
    let mut indices = Vec::new();
    for (i, name) in wanted.iter().enumerate() {
        match head.labels.iter().position(|l| l == name) {
            Some(index) => indices.push(index),
            None => errors.push(SignalError::new(
                format!("{field}[{i}]"),
                format!(
                    "the head has no label {name:?}; labels: {}",
                    head.labels.join(", ")
                ),
            )),
        }
    }
    if errors.is_empty() {
        Ok(indices)
    } else {
        Err(errors)
    }
}

impl ClassifierSignal {
    /// Builds the signal; `matching` names the labels that make it match (all when empty).
    pub fn new(
        task: &'static str,
        head: Arc<Head>,
        matching: &[String],
        min_confidence: f64,
        on_error: OnError,
    ) -> Result<Self, Vec<SignalError>> {
        if !(0.0..=1.0).contains(&min_confidence) {
            return Err(vec![SignalError::new(
                "minConfidence",
                format!("must be between 0 and 1, got {min_confidence}"),
            )]);
        }
        let matching = label_indices(&head, matching, "match")?;
        Ok(Self {
            task,
            head,
            matching,
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
        let (best, probability) = self.head.predict(embedding);
        let confidence = f64::from(probability);
        let wanted = self.matching.is_empty() || self.matching.contains(&best);
        Evidence {
            matched: wanted && confidence >= self.min_confidence,
            confidence,
            value: Some(confidence),
            label: Some(self.head.labels[best].clone()),
            error: None,
        }
    }
}
