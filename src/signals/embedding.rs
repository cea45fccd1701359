//! Embedding signal: cosine similarity between the request's embedding (computed once per
//! request by the shared encoder) and candidate phrases embedded when the configuration loads.

use super::{Evidence, SignalError};
use crate::inference::{argmax, cosine, InferenceError};
use std::sync::Arc;

/// How candidate similarities combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// The best candidate.
    Max,
    /// The mean over candidates.
    Mean,
}

/// What a neural signal reports when its model gives no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Not matched; the error is recorded.
    NoMatch,
    /// Matched; the error is recorded.
    Match,
    /// The request is refused with 503.
    Fail,
}

/// A compiled embedding signal.
#[derive(Debug, Clone)]
pub struct EmbeddingSignal {
    candidates: Vec<(String, Arc<Vec<f32>>)>,
    threshold: f32,
    aggregate: Aggregate,
    /// Error policy.
    pub on_error: OnError,
}

impl EmbeddingSignal {
    /// Builds the signal from phrases and their embeddings.
    pub fn new(
        candidates: Vec<(String, Arc<Vec<f32>>)>,
        threshold: f64,
        aggregate: Aggregate,
        on_error: OnError,
    ) -> Result<Self, SignalError> {
        if candidates.is_empty() {
            return Err(SignalError::new("candidates", "list at least one phrase"));
        }
        if !(-1.0..=1.0).contains(&threshold) {
            return Err(SignalError::new(
                "threshold",
                format!("must be a cosine similarity between -1 and 1, got {threshold}"),
            ));
        }
        Ok(Self {
            candidates,
            threshold: threshold as f32,
            aggregate,
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
            .candidates
            .iter()
            .map(|(_, candidate)| cosine(embedding, candidate))
            .collect();
        let (best, best_score) = argmax(&scores);
        let score = match self.aggregate {
            Aggregate::Max => best_score,
            Aggregate::Mean => scores.iter().sum::<f32>() / scores.len() as f32,
        };
        Evidence {
            matched: score >= self.threshold,
            confidence: f64::from(score.clamp(0.0, 1.0)),
            value: Some(f64::from(score)),
            label: Some(self.candidates[best].0.clone()),
            error: None,
        }
    }
}

/// The request embedding, or why there is none.
pub(super) fn request_embedding(
    embedding: Option<&Result<Arc<Vec<f32>>, InferenceError>>,
) -> Result<&Arc<Vec<f32>>, String> {
    match embedding {
        Some(Ok(embedding)) => Ok(embedding),
        Some(Err(error)) => Err(error.to_string()),
        None => Err("no embedding was computed for this request".to_owned()),
    }
}

/// The evidence of a neural signal whose model gave no answer: matched as `on_error` says, with
/// the reason recorded.
pub(super) fn no_answer(on_error: OnError, error: String) -> Evidence {
    Evidence {
        matched: on_error == OnError::Match,
        confidence: 0.0,
        value: None,
        label: None,
        error: Some(error),
    }
}
