//! The `learned` algorithm: each candidate's predicted probability of a correct answer and its
//! predicted latency (from the router head) turned into one choice. One rule serves every
//! identity; the identity's settings place it on the frontier:
//!
//! 1. candidates whose predicted latency exceeds `max_latency_ms` are set aside (when none
//!    fits, the fastest serves and the reason says so);
//! 2. with `min_correct` (a quality floor): the fastest candidate whose predicted probability
//!    reaches the floor, else — said plainly — the most probable;
//! 3. otherwise the largest utility `P(correct) − latency_weight × predicted seconds`.
//!
//! Before choosing, outcomes reported for a candidate under this decision (rewards and
//! verifications through `POST /v1/outcomes`) move its predicted P toward their observed rate:
//! a Beta posterior whose prior is the head's P worth `prior_outcomes` outcomes. The evidence
//! counted is capped at `prior_outcomes`, so outcomes can move P at most halfway to their rate:
//! feedback corrects a head that drifted, and a flood of reports cannot replace it.

use super::{argmax, Selection};

/// Where an identity sits on the learned frontier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allocation {
    /// Utility lost per predicted second of latency (0 = the most probable model).
    pub latency_weight: f64,
    /// A quality floor: the fastest model predicted at least this likely to be right.
    pub min_correct: Option<f64>,
    /// A latency budget per request, in milliseconds of predicted latency.
    pub max_latency_ms: Option<f64>,
    /// How many outcomes the head's prediction is worth (0: outcomes never adjust it).
    pub prior_outcomes: f64,
    /// The P(correct) a request may give up to be served by a model with a free slot instead
    /// of waiting for a busy one.
    pub busy_max_loss: f64,
}

/// `busyMaxLoss` when the configuration leaves it out.
pub const DEFAULT_BUSY_MAX_LOSS: f64 = 0.05;

/// Outcomes reported for one candidate under one decision.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    /// Successes (a reward counts its value, a passed verification 1).
    pub successes: f64,
    /// Failures (a reward counts 1 − its value).
    pub failures: f64,
}

impl Evidence {
    /// How many outcomes, in all.
    pub fn count(self) -> f64 {
        self.successes + self.failures
    }
}

/// One candidate's prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// Probability of a correct answer.
    pub correct: f64,
    /// Expected latency, milliseconds.
    pub latency_ms: f64,
}

impl From<crate::inference::Prediction> for Predicted {
    fn from(p: crate::inference::Prediction) -> Self {
        Self {
            correct: p.correct,
            latency_ms: p.latency_ms,
        }
    }
}

impl Allocation {
    /// `head`'s P(correct) moved toward `evidence`'s observed rate (latency unchanged), with
    /// the evidence capped at [`Allocation::prior_outcomes`].
    pub fn adjusted(&self, head: Predicted, evidence: Evidence) -> Predicted {
        let count = evidence.count();
        if self.prior_outcomes <= 0.0 || count <= 0.0 {
            return head;
        }
        let scale = (self.prior_outcomes / count).min(1.0);
        let correct = (self.prior_outcomes * head.correct + scale * evidence.successes)
            / (self.prior_outcomes + scale * count);
        Predicted { correct, ..head }
    }

    /// Picks among the head's predictions, each first adjusted by its candidate's outcomes
    /// (`evidence` in the same order, or empty for none). The reason says when outcomes moved
    /// the chosen candidate's P.
    pub fn choose_with(&self, head: &[Predicted], evidence: &[Evidence]) -> Selection {
        let adjusted: Vec<Predicted> = head
            .iter()
            .enumerate()
            .map(|(i, p)| self.adjusted(*p, evidence.get(i).copied().unwrap_or_default()))
            .collect();
        let mut selection = self.choose(&adjusted);
        let chosen = selection.chosen;
        if let Some(e) = evidence.get(chosen).filter(|e| e.count() > 0.0) {
            if self.prior_outcomes > 0.0 {
                selection.reason.push_str(&format!(
                    " (head {:.2}, moved by {:.0} outcomes at {:.2}, worth at most {:.0})",
                    head[chosen].correct,
                    e.count(),
                    e.successes / e.count(),
                    self.prior_outcomes
                ));
            }
        }
        selection
    }

    /// The utility of one prediction.
    pub fn utility(&self, p: Predicted) -> f64 {
        p.correct - self.latency_weight * p.latency_ms / 1000.0
    }

    /// Picks among `predicted` (one per candidate, never empty). Scores are utilities.
    pub fn choose(&self, predicted: &[Predicted]) -> Selection {
        let scores: Vec<f64> = predicted.iter().map(|p| self.utility(*p)).collect();
        let fits: Vec<usize> = (0..predicted.len())
            .filter(|&i| {
                self.max_latency_ms
                    .is_none_or(|max| predicted[i].latency_ms <= max)
            })
            .collect();
        if fits.is_empty() {
            let chosen = fastest(predicted, 0..predicted.len()).unwrap_or(0);
            return Selection {
                chosen,
                scores,
                reason: format!(
                    "no model predicted within {:.0} ms: the fastest ({:.0} ms, P(correct) {:.2})",
                    self.max_latency_ms.unwrap_or_default(),
                    predicted[chosen].latency_ms,
                    predicted[chosen].correct
                ),
            };
        }
        let budget = match self.max_latency_ms {
            Some(max) if fits.len() < predicted.len() => format!(
                "; {} of {} models predicted over {max:.0} ms",
                predicted.len() - fits.len(),
                predicted.len()
            ),
            _ => String::new(),
        };
        if let Some(floor) = self.min_correct {
            let clearing = fits
                .iter()
                .copied()
                .filter(|&i| predicted[i].correct >= floor);
            if let Some(chosen) = fastest(predicted, clearing) {
                return Selection {
                    chosen,
                    scores,
                    reason: format!(
                        "fastest model predicted to clear the floor {floor}: P(correct) {:.2} in {:.0} ms{budget}",
                        predicted[chosen].correct, predicted[chosen].latency_ms
                    ),
                };
            }
            let chosen = best_of(&fits, |i| predicted[i].correct);
            return Selection {
                chosen,
                scores,
                reason: format!(
                    "no model predicted to clear the floor {floor}: the most probable, P(correct) {:.2}{budget}",
                    predicted[chosen].correct
                ),
            };
        }
        let chosen = best_of(&fits, |i| scores[i]);
        Selection {
            chosen,
            reason: format!(
                "largest utility {:.3} = P(correct) {:.2} − {} × {:.2} s{budget}",
                scores[chosen],
                predicted[chosen].correct,
                self.latency_weight,
                predicted[chosen].latency_ms / 1000.0
            ),
            scores,
        }
    }
}

/// The fastest of `indices` (earliest on ties).
fn fastest(predicted: &[Predicted], indices: impl Iterator<Item = usize>) -> Option<usize> {
    indices.fold(None, |best: Option<usize>, i| match best {
        Some(b) if predicted[b].latency_ms <= predicted[i].latency_ms => Some(b),
        _ => Some(i),
    })
}

/// The member of `indices` (never empty) with the largest `value` (earliest on ties).
fn best_of(indices: &[usize], value: impl Fn(usize) -> f64) -> usize {
    let values: Vec<f64> = indices.iter().map(|&i| value(i)).collect();
    indices[argmax(&values)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: [Predicted; 3] = [
        Predicted {
            correct: 0.40,
            latency_ms: 500.0,
        },
        Predicted {
            correct: 0.70,
            latency_ms: 2_000.0,
        },
        Predicted {
            correct: 0.90,
            latency_ms: 8_000.0,
        },
    ];

    fn at(latency_weight: f64) -> Allocation {
        Allocation {
            latency_weight,
            min_correct: None,
            max_latency_ms: None,
            prior_outcomes: 20.0,
            busy_max_loss: DEFAULT_BUSY_MAX_LOSS,
        }
    }

    #[test]
    fn the_choice_moves_along_the_frontier_as_the_latency_weight_grows() {
        // Utilities by hand: λ = 0 → 0.40, 0.70, 0.90; λ = 0.05 → 0.375, 0.60, 0.50;
        // λ = 0.5 → 0.15, −0.30, −3.10.
        assert_eq!(at(0.0).choose(&POOL).chosen, 2);
        let balanced = at(0.05).choose(&POOL);
        assert_eq!(balanced.chosen, 1, "{}", balanced.reason);
        assert!((balanced.scores[0] - 0.375).abs() < 1e-9);
        assert!((balanced.scores[2] - 0.50).abs() < 1e-9);
        assert_eq!(at(0.5).choose(&POOL).chosen, 0);
    }

    #[test]
    fn a_floor_takes_the_fastest_model_that_clears_it_and_says_when_none_does() {
        let floor = |min| Allocation {
            min_correct: Some(min),
            ..at(0.0)
        };
        assert_eq!(floor(0.35).choose(&POOL).chosen, 0);
        assert_eq!(floor(0.65).choose(&POOL).chosen, 1);
        let none = floor(0.95).choose(&POOL);
        assert_eq!(none.chosen, 2);
        assert!(none
            .reason
            .starts_with("no model predicted to clear the floor 0.95"));
    }

    #[test]
    fn a_budget_sets_slow_models_aside() {
        let budget = |max| Allocation {
            max_latency_ms: Some(max),
            ..at(0.0)
        };
        assert_eq!(budget(10_000.0).choose(&POOL).chosen, 2);
        let within = budget(3_000.0).choose(&POOL);
        assert_eq!(within.chosen, 1);
        assert!(
            within
                .reason
                .ends_with("1 of 3 models predicted over 3000 ms"),
            "{}",
            within.reason
        );
        let none = budget(100.0).choose(&POOL);
        assert_eq!(none.chosen, 0);
        assert!(none.reason.starts_with("no model predicted within 100 ms"));
    }

    #[test]
    fn outcomes_move_p_toward_their_rate_but_never_past_halfway() {
        let head = POOL[2];
        let alloc = at(0.0);
        let none = alloc.adjusted(head, Evidence::default());
        assert_eq!(none, head);
        // 10 failures against a prior worth 20 at 0.9: (18 + 0) / 30 = 0.6.
        let ten = Evidence {
            successes: 0.0,
            failures: 10.0,
        };
        assert!((alloc.adjusted(head, ten).correct - 0.6).abs() < 1e-9);
        // A thousand failures are capped at 20: (18 + 0) / 40 = 0.45, halfway from 0.9 to 0.
        let flood = Evidence {
            successes: 0.0,
            failures: 1_000.0,
        };
        assert!((alloc.adjusted(head, flood).correct - 0.45).abs() < 1e-9);
        assert_eq!(alloc.adjusted(head, flood).latency_ms, head.latency_ms);
        let off = Allocation {
            prior_outcomes: 0.0,
            ..alloc
        };
        assert_eq!(off.adjusted(head, flood), head);
    }

    #[test]
    fn reported_failures_move_the_choice_and_the_reason_says_so() {
        let alloc = at(0.0);
        assert_eq!(alloc.choose_with(&POOL, &[]).chosen, 2);
        let mut evidence = [Evidence::default(); 3];
        evidence[2].failures = 20.0;
        // Model 2: (18 + 0) / 40 = 0.45 < model 1's 0.70.
        let moved = alloc.choose_with(&POOL, &evidence);
        assert_eq!(moved.chosen, 1, "{}", moved.reason);
        assert!(!moved.reason.contains("outcomes"), "{}", moved.reason);
        evidence[1].successes = 5.0;
        let credited = alloc.choose_with(&POOL, &evidence);
        assert_eq!(credited.chosen, 1);
        // (14 + 5) / 25 = 0.76.
        assert!(
            (credited.scores[1] - 0.76).abs() < 1e-9,
            "{:?}",
            credited.scores
        );
        assert!(
            credited
                .reason
                .ends_with("(head 0.70, moved by 5 outcomes at 1.00, worth at most 20)"),
            "{}",
            credited.reason
        );
    }
}
