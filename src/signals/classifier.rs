//! Classifier signals: a router-owned trained head (see [`crate::inference::Head`]) applied to
//! the request embedding the shared encoder computed once. The `domain` signal is one: fourteen
//! subject areas, trained by `mom-router train`. Below `abstainBelow` the signal reports the
//! label [`ABSTAIN`] instead of a guess, so a policy can route uncertainty on purpose.

use super::embedding::{no_answer, request_embedding, OnError};
use super::{Evidence, SignalError};
use crate::inference::{Head, InferenceError};
use std::sync::Arc;

/// The label a classifier reports when its top probability is below `abstainBelow`.
pub const ABSTAIN: &str = "abstain";

/// When a classifier abstains and whether abstaining makes it match.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Abstain {
    /// Top probabilities below this are reported as [`ABSTAIN`]; 0 never abstains.
    pub below: f64,
    /// `match` names [`ABSTAIN`].
    pub matches: bool,
}

/// A compiled classifier signal.
#[derive(Debug, Clone)]
pub struct ClassifierSignal {
    /// The signal kind's name (`domain`).
    pub task: &'static str,
    head: Arc<Head>,
    /// Label indices that make the signal match.
    matching: Vec<usize>,
    /// Every label matches (`match` was empty).
    any_label: bool,
    min_confidence: f64,
    abstain: Abstain,
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
    /// Builds the signal; `matching` names the labels that make it match (all when empty) and
    /// may name [`ABSTAIN`] when `abstain_below` is above 0.
    pub fn new(
        task: &'static str,
        head: Arc<Head>,
        matching: &[String],
        min_confidence: f64,
        abstain_below: f64,
        on_error: OnError,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        for (field, value) in [
            ("minConfidence", min_confidence),
            ("abstainBelow", abstain_below),
        ] {
            if !(0.0..=1.0).contains(&value) {
                errors.push(SignalError::new(
                    field,
                    format!("must be between 0 and 1, got {value}"),
                ));
            }
        }
        if head.labels.iter().any(|l| l == ABSTAIN) {
            errors.push(SignalError::new(
                "head",
                format!("the head has a label {ABSTAIN:?}, which the signal reserves for its own uncertainty"),
            ));
        }
        let abstain = Abstain {
            below: abstain_below,
            matches: matching.iter().any(|l| l == ABSTAIN),
        };
        if abstain.matches && abstain_below <= 0.0 {
            errors.push(SignalError::new(
                "match",
                format!("{ABSTAIN:?} can match only when abstainBelow is above 0"),
            ));
        }
        let labels: Vec<String> = matching.iter().filter(|l| *l != ABSTAIN).cloned().collect();
        let matching = match label_indices(&head, &labels, "match") {
            Ok(indices) => indices,
            Err(more) => {
                errors.extend(more);
                Vec::new()
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            task,
            head,
            // An empty `match` matches any label; `match: [abstain]` alone matches none.
            any_label: labels.is_empty() && !abstain.matches,
            matching,
            min_confidence,
            abstain,
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
        if confidence < self.abstain.below {
            return Evidence {
                matched: self.abstain.matches,
                confidence,
                value: Some(confidence),
                label: Some(ABSTAIN.to_owned()),
                error: None,
            };
        }
        let wanted = self.any_label || self.matching.contains(&best);
        Evidence {
            matched: wanted && confidence >= self.min_confidence,
            confidence,
            value: Some(confidence),
            label: Some(self.head.labels[best].clone()),
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::Dense;

    /// Two labels over a 2-wide embedding: logits are the embedding itself.
    fn head() -> Arc<Head> {
        Arc::new(Head {
            task: "domain".to_owned(),
            labels: vec!["math".to_owned(), "law".to_owned()],
            layers: vec![Dense {
                weight: vec![1.0, 0.0, 0.0, 1.0],
                bias: vec![0.0, 0.0],
                inputs: 2,
            }],
            probe: vec![0.0, 0.0],
            encoder: String::new(),
            encoder_sha256: String::new(),
        })
    }

    fn signal(matching: &[&str], abstain_below: f64) -> Result<ClassifierSignal, Vec<SignalError>> {
        let matching: Vec<String> = matching.iter().map(|m| (*m).to_owned()).collect();
        ClassifierSignal::new(
            "domain",
            head(),
            &matching,
            0.0,
            abstain_below,
            OnError::NoMatch,
        )
    }

    fn run(signal: &ClassifierSignal, embedding: [f32; 2]) -> Evidence {
        signal.evaluate(Some(&Ok(Arc::new(embedding.to_vec()))))
    }

    #[test]
    fn below_the_threshold_the_label_is_abstain_and_only_abstain_matches() {
        let uncertain = [0.2, 0.0]; // P(math) ≈ 0.55
        let sure = [3.0, 0.0]; // P(math) ≈ 0.95
        let math = signal(&["math"], 0.6).unwrap();
        let evidence = run(&math, uncertain);
        assert_eq!(evidence.label.as_deref(), Some(ABSTAIN));
        assert!(!evidence.matched);
        assert!((evidence.confidence - 0.5498).abs() < 1e-3, "{evidence:?}");
        assert!(run(&math, sure).matched);

        let unsure = signal(&[ABSTAIN], 0.6).unwrap();
        assert!(run(&unsure, uncertain).matched);
        let evidence = run(&unsure, sure);
        assert_eq!(evidence.label.as_deref(), Some("math"));
        assert!(!evidence.matched, "no real label is in match");

        let either = signal(&["law", ABSTAIN], 0.6).unwrap();
        assert!(run(&either, uncertain).matched);
        assert!(run(&either, [0.0, 3.0]).matched);
        assert!(!run(&either, sure).matched);
    }

    #[test]
    fn without_a_threshold_it_never_abstains() {
        let any = signal(&[], 0.0).unwrap();
        let evidence = run(&any, [0.01, 0.0]);
        assert_eq!(evidence.label.as_deref(), Some("math"));
        assert!(evidence.matched);
    }

    #[test]
    fn abstain_in_match_needs_a_threshold_and_bad_values_are_named() {
        let text = |errors: Vec<SignalError>| -> Vec<String> {
            errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect()
        };
        let errors = text(signal(&[ABSTAIN], 0.0).unwrap_err());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("match: "), "{errors:?}");
        assert!(errors[0].contains("abstainBelow"), "{errors:?}");
        let errors = text(signal(&["poetry"], 1.5).unwrap_err());
        assert!(
            errors.iter().any(|t| t.starts_with("abstainBelow: ")),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|t| t.contains("\"poetry\"")),
            "{errors:?}"
        );
    }
}
