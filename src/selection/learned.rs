//! Algorithms that learn from reported outcomes: `elo` (pairwise preferences), `bandit`
//! (Thompson sampling over rewards) and `automix` (estimated self-verification success). The
//! statistics arrive from the state store; nothing here writes them except through the pure
//! update functions the store calls.

use super::{argmax, Observed, Selection};
use rand::SeedableRng;
use rand_distr::Distribution;

/// Every model's rating before any feedback.
pub const ELO_START: f64 = 1500.0;

/// A Beta posterior over a success probability: `alpha` successes and `beta` failures on top of
/// a uniform prior.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beta {
    /// Pseudo-count of successes (≥ 1).
    pub alpha: f64,
    /// Pseudo-count of failures (≥ 1).
    pub beta: f64,
}

impl Beta {
    /// The uniform prior: nothing observed yet.
    pub const UNIFORM: Self = Self {
        alpha: 1.0,
        beta: 1.0,
    };

    /// The prior plus `successes` and `failures` (fractional rewards count partly as each).
    pub fn observed(successes: f64, failures: f64) -> Self {
        Self {
            alpha: 1.0 + successes.max(0.0),
            beta: 1.0 + failures.max(0.0),
        }
    }

    /// The posterior mean.
    pub fn mean(self) -> f64 {
        self.alpha / (self.alpha + self.beta)
    }
}

/// The ratings after `winner` beat `loser` (or drew, when `draw`), with step size `k`.
pub fn elo_update(winner: f64, loser: f64, k: f64, draw: bool) -> (f64, f64) {
    let expected = 1.0 / (1.0 + 10f64.powf((loser - winner) / 400.0));
    let actual = if draw { 0.5 } else { 1.0 };
    let change = k * (actual - expected);
    (winner + change, loser - change)
}

pub(super) fn elo(observed: &[Observed]) -> Selection {
    let scores: Vec<f64> = observed.iter().map(|o| o.elo).collect();
    let chosen = argmax(&scores);
    Selection {
        chosen,
        reason: format!("highest Elo rating {:.1}", scores[chosen]),
        scores,
    }
}

pub(super) fn bandit(observed: &[Observed], key: u64) -> Selection {
    let mut rng = rand::rngs::StdRng::seed_from_u64(key);
    let scores: Vec<f64> = observed
        .iter()
        .map(
            |o| match rand_distr::Beta::new(o.reward.alpha, o.reward.beta) {
                Ok(posterior) => posterior.sample(&mut rng),
                Err(_) => o.reward.mean(),
            },
        )
        .collect();
    let chosen = argmax(&scores);
    Selection {
        chosen,
        reason: format!(
            "largest Thompson draw {:.3} (posterior mean {:.3} over {:.0} outcomes)",
            scores[chosen],
            observed[chosen].reward.mean(),
            observed[chosen].reward.alpha + observed[chosen].reward.beta - 2.0
        ),
        scores,
    }
}

pub(super) fn automix(observed: &[Observed], threshold: f64) -> Selection {
    let scores: Vec<f64> = observed.iter().map(|o| o.verified.mean()).collect();
    let mut by_cost: Vec<usize> = (0..observed.len()).collect();
    by_cost.sort_by(|&a, &b| {
        observed[a]
            .expected_cost
            .total_cmp(&observed[b].expected_cost)
    });
    let confident = by_cost.iter().copied().find(|&i| scores[i] >= threshold);
    match confident {
        Some(chosen) => Selection {
            chosen,
            reason: format!(
                "cheapest model expected to pass self-verification ({:.3} >= {threshold})",
                scores[chosen]
            ),
            scores,
        },
        None => {
            let chosen = by_cost.last().copied().unwrap_or(0);
            Selection {
                chosen,
                reason: format!(
                    "no model expected to pass self-verification at {threshold}: escalate to the most capable"
                ),
                scores,
            }
        }
    }
}
