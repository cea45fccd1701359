//! Selection: how a matched decision picks one of its models. Pure and synchronous: the engine
//! hands each algorithm what it reads (declared quality, expected cost, observed latency,
//! ratings, posteriors, embedding similarities) as one [`Observed`] per candidate, and every
//! choice comes back with a score per candidate and a one-line reason for `explain`, headers
//! and metadata.

mod allocation;
mod learned;
mod objective;
mod semantic;

pub use allocation::{Allocation, Evidence, Predicted, DEFAULT_BUSY_MAX_LOSS};
pub use learned::{elo_update, Beta, ELO_START};
pub use semantic::{knn_votes, router_dc_similarities, KnnExemplar};

/// Which latency an algorithm reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyMetric {
    /// Time to the first response byte (first streamed chunk).
    Ttft,
    /// Time to the end of the response.
    Total,
}

/// How [`Algorithm::Hybrid`] weighs each component score (each normalised to 0..=1 across the
/// candidates, higher is better; cost and latency are inverted).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HybridWeights {
    /// Declared quality.
    pub quality: f64,
    /// Expected cost (cheaper scores higher).
    pub cost: f64,
    /// Observed latency (faster scores higher).
    pub latency: f64,
    /// Elo rating.
    pub elo: f64,
    /// Bandit posterior mean reward.
    pub bandit: f64,
    /// Query-to-description similarity.
    pub router_dc: f64,
    /// Nearest-exemplar vote.
    pub knn: f64,
}

/// The closed set of selection algorithms with their parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Algorithm {
    /// The first candidate.
    Static,
    /// A deterministic weighted split keyed by the request (its id, else its body).
    Weighted,
    /// The cheapest expected cost among candidates whose declared quality reaches the floor;
    /// the highest quality when none does.
    CostAware {
        /// Minimum declared quality, 0..=1.
        quality_floor: f64,
    },
    /// The lowest observed latency percentile. A candidate with fewer than `min_samples`
    /// recent observations is tried first (cold start), so every model gets measured.
    LatencyAware {
        /// Which latency.
        metric: LatencyMetric,
        /// Percentile, 0..=100.
        percentile: f64,
        /// Observations needed before a candidate's latency counts.
        min_samples: u32,
    },
    /// The highest declared quality whose expected cost and observed latency fit the budget
    /// (an unmeasured latency fits); the cheapest candidate when none fits.
    QualityBudget {
        /// Largest expected cost per request.
        max_cost: Option<f64>,
        /// Largest latency percentile in milliseconds.
        max_latency_ms: Option<f64>,
        /// Which latency the bound reads.
        metric: LatencyMetric,
        /// Percentile of that latency.
        percentile: f64,
    },
    /// The highest Elo rating from pairwise feedback (ties: declared order).
    Elo,
    /// Thompson sampling: one draw from each candidate's Beta posterior over rewards.
    Bandit,
    /// The model whose labelled exemplars sit nearest the query (similarity-weighted vote).
    Knn {
        /// Neighbours that vote.
        k: usize,
    },
    /// The model whose description and capabilities embed nearest the query.
    RouterDc {
        /// Softmax temperature over cosine similarities.
        temperature: f64,
    },
    /// Cheapest first: the cheapest candidate whose estimated self-verification success
    /// reaches `threshold`, else the most expensive (the escalation target).
    Automix {
        /// Minimum estimated verification probability.
        threshold: f64,
    },
    /// A weighted combination of the component scores.
    Hybrid(HybridWeights),
    /// The router head's predicted P(correct) and latency per candidate, placed on the learned
    /// frontier by the identity's operating point.
    Learned(Allocation),
}

impl Algorithm {
    /// The name shown in headers, metadata and access logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::Weighted => "weighted",
            Self::CostAware { .. } => "cost_aware",
            Self::LatencyAware { .. } => "latency_aware",
            Self::QualityBudget { .. } => "quality_budget",
            Self::Elo => "elo",
            Self::Bandit => "bandit",
            Self::Knn { .. } => "knn",
            Self::RouterDc { .. } => "router_dc",
            Self::Automix { .. } => "automix",
            Self::Hybrid(_) => "hybrid",
            Self::Learned(_) => "learned",
        }
    }

    /// Whether the algorithm reads the query embedding.
    pub fn needs_embedding(self) -> bool {
        match self {
            Self::Knn { .. } | Self::RouterDc { .. } | Self::Learned(_) => true,
            Self::Hybrid(w) => w.router_dc > 0.0 || w.knn > 0.0,
            _ => false,
        }
    }

    /// Whether the algorithm reads what responses show (latency, token counts), so forwarded
    /// responses must be observed to the end.
    pub fn observes_responses(self) -> bool {
        match self {
            Self::CostAware { .. }
            | Self::LatencyAware { .. }
            | Self::QualityBudget { .. }
            | Self::Automix { .. } => true,
            Self::Hybrid(w) => w.cost > 0.0 || w.latency > 0.0,
            Self::Static
            | Self::Weighted
            | Self::Elo
            | Self::Bandit
            | Self::Knn { .. }
            | Self::RouterDc { .. }
            | Self::Learned(_) => false,
        }
    }

    /// The latency an algorithm reads, when it reads one.
    pub fn latency(self) -> Option<(LatencyMetric, f64)> {
        match self {
            Self::LatencyAware {
                metric, percentile, ..
            }
            | Self::QualityBudget {
                metric, percentile, ..
            } => Some((metric, percentile)),
            Self::Hybrid(w) if w.latency > 0.0 => Some((LatencyMetric::Total, 90.0)),
            _ => None,
        }
    }
}

/// A candidate model with its configured weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Index into the snapshot's model table.
    pub model: usize,
    /// Relative share (weighted) or ignored.
    pub weight: f64,
}

/// What is known about one candidate when a request arrives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    /// Declared quality, 0..=1 (0.5 when the model declares none).
    pub quality: f64,
    /// Expected cost of this request on this model.
    pub expected_cost: f64,
    /// Observed latency percentile in milliseconds, `None` until measured.
    pub latency_ms: Option<f64>,
    /// Recent latency observations.
    pub latency_samples: u32,
    /// Elo rating.
    pub elo: f64,
    /// Posterior over outcome rewards.
    pub reward: Beta,
    /// Posterior over self-verification success.
    pub verified: Beta,
    /// Query-to-description similarity (router_dc), 0 when not computed.
    pub description_similarity: f64,
    /// Nearest-exemplar vote share (knn), 0 when not computed.
    pub knn_vote: f64,
    /// The router head's prediction (learned), `None` when not computed.
    pub predicted: Option<Predicted>,
}

impl Observed {
    /// The outcomes reported for this candidate: rewards and verifications together.
    pub fn evidence(&self) -> Evidence {
        Evidence {
            successes: (self.reward.alpha - 1.0) + (self.verified.alpha - 1.0),
            failures: (self.reward.beta - 1.0) + (self.verified.beta - 1.0),
        }
    }
}

impl Default for Observed {
    fn default() -> Self {
        Self {
            quality: 0.5,
            expected_cost: 0.0,
            latency_ms: None,
            latency_samples: 0,
            elo: ELO_START,
            reward: Beta::UNIFORM,
            verified: Beta::UNIFORM,
            description_similarity: 0.0,
            knn_vote: 0.0,
            predicted: None,
        }
    }
}

/// The choice and the evidence behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Index into the candidate list.
    pub chosen: usize,
    /// One score per candidate, in candidate order.
    pub scores: Vec<f64>,
    /// Why, in one line.
    pub reason: String,
}

/// Picks one candidate. `observed` has one entry per candidate; `key` places the request on the
/// weighted wheel and seeds the bandit's draw, so equal keys and equal statistics pick alike.
/// `candidates` is never empty (configuration compilation guarantees it).
pub fn select(
    algorithm: Algorithm,
    candidates: &[Candidate],
    observed: &[Observed],
    key: u64,
) -> Selection {
    match algorithm {
        Algorithm::Static => Selection {
            chosen: 0,
            scores: (0..candidates.len())
                .map(|i| if i == 0 { 1.0 } else { 0.0 })
                .collect(),
            reason: "first declared model".to_owned(),
        },
        Algorithm::Weighted => weighted(candidates, key),
        Algorithm::CostAware { quality_floor } => objective::cost_aware(observed, quality_floor),
        Algorithm::LatencyAware { min_samples, .. } => {
            objective::latency_aware(observed, min_samples)
        }
        Algorithm::QualityBudget {
            max_cost,
            max_latency_ms,
            ..
        } => objective::quality_budget(observed, max_cost, max_latency_ms),
        Algorithm::Elo => learned::elo(observed),
        Algorithm::Bandit => learned::bandit(observed, key),
        Algorithm::Automix { threshold } => learned::automix(observed, threshold),
        Algorithm::Knn { k } => semantic::by_score(
            observed.iter().map(|o| o.knn_vote).collect(),
            &format!("largest similarity-weighted vote of the {k} nearest exemplars"),
        ),
        Algorithm::RouterDc { temperature } => semantic::router_dc(observed, temperature),
        Algorithm::Hybrid(weights) => objective::hybrid(observed, weights),
        Algorithm::Learned(allocation) => {
            let predicted: Option<Vec<Predicted>> = observed.iter().map(|o| o.predicted).collect();
            match predicted {
                Some(predicted) if predicted.len() == candidates.len() => {
                    let evidence: Vec<Evidence> = observed.iter().map(Observed::evidence).collect();
                    allocation.choose_with(&predicted, &evidence)
                }
                _ => Selection {
                    chosen: 0,
                    scores: vec![0.0; candidates.len()],
                    reason: "no router prediction: first declared model".to_owned(),
                },
            }
        }
    }
}

fn weighted(candidates: &[Candidate], key: u64) -> Selection {
    let total: f64 = candidates.iter().map(|c| c.weight).sum();
    let scores: Vec<f64> = candidates.iter().map(|c| c.weight / total).collect();
    let point = (key as f64 / u64::MAX as f64).min(1.0);
    let mut cumulative = 0.0;
    let chosen = scores
        .iter()
        .position(|share| {
            cumulative += share;
            point < cumulative
        })
        .unwrap_or(candidates.len().saturating_sub(1));
    Selection {
        chosen,
        scores,
        reason: format!("weighted split, request at {point:.3} of the wheel"),
    }
}

/// The index of the largest score; the earliest wins ties.
pub(crate) fn argmax(scores: &[f64]) -> usize {
    let mut best = 0;
    for (i, score) in scores.iter().enumerate() {
        if *score > scores[best] {
            best = i;
        }
    }
    best
}

/// A stable 64-bit FNV-1a hash, used to key weighted selection and the bandit's draw.
pub fn request_key(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests;
