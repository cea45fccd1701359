//! The statistics themselves: plain maps, updated by pure functions.

use super::outcome::Outcome;
use super::window::{Timing, Window};
use super::Run;
use crate::selection::{elo_update, Beta, LatencyMetric, ELO_START};
use std::collections::HashMap;

/// One finished response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Its timings.
    pub timing: Timing,
    /// Prompt tokens the upstream reported.
    pub prompt_tokens: Option<u64>,
    /// Completion tokens the upstream reported (or counted from the stream).
    pub completion_tokens: Option<u64>,
    /// mom-router's own prompt-token estimate for the same request.
    pub estimated_prompt_tokens: u64,
}

/// What is known about one model under one decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelView {
    /// The asked latency percentile in milliseconds, once measured.
    pub latency_ms: Option<f64>,
    /// Recent timings.
    pub latency_samples: u32,
    /// Reported prompt tokens per estimated prompt token (1 until observed).
    pub prompt_ratio: f64,
    /// Mean completion tokens, once observed.
    pub completion_tokens: Option<f64>,
    /// Elo rating.
    pub elo: f64,
    /// Reward posterior.
    pub reward: Beta,
    /// Verification posterior.
    pub verified: Beta,
}

#[derive(Debug, Clone, Default)]
struct ModelStats {
    window: Window,
    prompt_ratio_sum: f64,
    prompt_ratio_count: u64,
    completion_sum: f64,
    completion_count: u64,
}

#[derive(Debug, Clone, Copy)]
struct PairStats {
    elo: f64,
    rewards: (f64, f64),
    verified: (f64, f64),
}

impl Default for PairStats {
    fn default() -> Self {
        Self {
            elo: ELO_START,
            rewards: (0.0, 0.0),
            verified: (0.0, 0.0),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Stats {
    models: HashMap<String, ModelStats>,
    /// Decision → model → statistics.
    pairs: HashMap<String, HashMap<String, PairStats>>,
}

/// Token sums of one model, as shared state stores them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct TokenSums {
    pub prompt_ratio_sum: f64,
    pub prompt_ratio_count: u64,
    pub completion_sum: f64,
    pub completion_count: u64,
}

/// Which posterior of a decision × model pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Posterior {
    Reward,
    Verified,
}

impl Stats {
    /// Replaces one model's timings (from shared state).
    pub(super) fn set_timings(&mut self, model: &str, timings: Vec<Timing>, capacity: usize) {
        let stats = self.models.entry(model.to_owned()).or_default();
        stats.window = Window::default();
        for timing in timings {
            stats.window.push(timing, capacity);
        }
    }

    /// Replaces one model's token sums (from shared state).
    pub(super) fn set_tokens(&mut self, model: &str, sums: TokenSums) {
        let stats = self.models.entry(model.to_owned()).or_default();
        stats.prompt_ratio_sum = sums.prompt_ratio_sum;
        stats.prompt_ratio_count = sums.prompt_ratio_count;
        stats.completion_sum = sums.completion_sum;
        stats.completion_count = sums.completion_count;
    }

    /// Replaces one pair's rating (from shared state).
    pub(super) fn set_elo(&mut self, decision: &str, model: &str, elo: f64) {
        self.pair(decision, model).elo = elo;
    }

    /// Replaces one pair's posterior counts (from shared state).
    pub(super) fn set_posterior(
        &mut self,
        decision: &str,
        model: &str,
        which: Posterior,
        counts: (f64, f64),
    ) {
        let pair = self.pair(decision, model);
        match which {
            Posterior::Reward => pair.rewards = counts,
            Posterior::Verified => pair.verified = counts,
        }
    }

    fn pair(&mut self, decision: &str, model: &str) -> &mut PairStats {
        self.pairs
            .entry(decision.to_owned())
            .or_default()
            .entry(model.to_owned())
            .or_default()
    }

    pub(super) fn view(
        &mut self,
        decision: &str,
        model: &str,
        latency: Option<(LatencyMetric, f64)>,
        now_ms: u64,
        since_ms: u64,
    ) -> ModelView {
        let pair = self
            .pairs
            .get(decision)
            .and_then(|models| models.get(model))
            .copied()
            .unwrap_or_default();
        let stats = self.models.get_mut(model);
        let (latency_ms, latency_samples) = match (stats, latency) {
            (Some(s), Some((metric, percentile))) => s
                .window
                .percentile_cached(now_ms, since_ms, percentile, metric),
            (Some(s), None) => (None, s.window.count(since_ms)),
            (None, _) => (None, 0),
        };
        let stats = self.models.get(model);
        ModelView {
            latency_ms,
            latency_samples,
            prompt_ratio: stats
                .filter(|s| s.prompt_ratio_count > 0)
                .map_or(1.0, |s| s.prompt_ratio_sum / s.prompt_ratio_count as f64),
            completion_tokens: stats
                .filter(|s| s.completion_count > 0)
                .map(|s| s.completion_sum / s.completion_count as f64),
            elo: pair.elo,
            reward: Beta::observed(pair.rewards.0, pair.rewards.1),
            verified: Beta::observed(pair.verified.0, pair.verified.1),
        }
    }

    pub(super) fn observe(&mut self, model: &str, o: Observation, capacity: usize) {
        let stats = self.models.entry(model.to_owned()).or_default();
        stats.window.push(o.timing, capacity);
        if let (Some(reported), true) = (o.prompt_tokens, o.estimated_prompt_tokens > 0) {
            stats.prompt_ratio_sum += reported as f64 / o.estimated_prompt_tokens as f64;
            stats.prompt_ratio_count += 1;
        }
        if let Some(completion) = o.completion_tokens {
            stats.completion_sum += completion as f64;
            stats.completion_count += 1;
        }
    }

    pub(super) fn apply(&mut self, run: &Run, other: Option<&Run>, outcome: &Outcome, k: f64) {
        match outcome {
            Outcome::Reward(reward) => {
                let pair = self.pair(&run.decision, &run.model);
                pair.rewards.0 += reward;
                pair.rewards.1 += 1.0 - reward;
            }
            Outcome::Verified(passed) => {
                let pair = self.pair(&run.decision, &run.model);
                if *passed {
                    pair.verified.0 += 1.0;
                } else {
                    pair.verified.1 += 1.0;
                }
            }
            Outcome::Preference { draw, .. } => {
                let Some(other) = other else { return };
                if other.model == run.model {
                    return;
                }
                let winner = self.pair(&run.decision, &run.model).elo;
                let loser = self.pair(&run.decision, &other.model).elo;
                let (winner, loser) = elo_update(winner, loser, k, *draw);
                self.pair(&run.decision, &run.model).elo = winner;
                self.pair(&run.decision, &other.model).elo = loser;
            }
        }
    }
}
