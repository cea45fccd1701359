//! The scorecard's arithmetic, pure: per-target quality, calls, tokens, cost and latency
//! percentiles; the per-item oracle over the fixed models; and for each identity its routing
//! regret against that oracle and its gain over the best fixed model, overall and at matched
//! compute (the best fixed model that costs no more than the identity did).

use serde::{Deserialize, Serialize};

/// One target's answer to one item.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Outcome {
    /// The `model` sent: an identity or a fixed model.
    pub target: String,
    /// The item's id.
    pub item: String,
    /// 1.0 correct, 0.0 not (an error scores 0).
    pub score: f64,
    /// Why it failed.
    pub detail: String,
    /// HTTP status.
    pub status: u16,
    /// Client-side time to the complete answer.
    pub latency_ms: f64,
    /// Client-side time to the first body chunk (with `--stream`, the first token's event;
    /// otherwise the whole JSON body, so about `latency_ms`).
    pub ttft_ms: f64,
    /// Model calls it took (a looper's steps; 0 for a cache hit).
    pub calls: u32,
    /// Prompt tokens over all calls.
    pub prompt_tokens: u64,
    /// Completion tokens over all calls.
    pub completion_tokens: u64,
    /// Cost over all calls, from the configured prices.
    pub cost: f64,
    /// Estimated energy over all calls (declared power × busy time), joules.
    pub energy_joules: f64,
    /// The model that answered (`x-mom-model`).
    pub model: String,
    /// The decision that routed it (`x-mom-decision`).
    pub decision: String,
    /// The configuration that decided (`x-mom-config-version`; for a bundle it names the
    /// bundle's digest).
    pub config_version: String,
    /// A looper's steps (`x-mom-looper-steps`).
    pub steps: String,
    /// Why the (last) model stopped: `stop`, `length`, … (empty when unknown).
    pub finish_reason: String,
    /// The answer's text (the first 4 KiB).
    pub answer: String,
    /// The answer's mean token log-probability (with `logprobs` asked for and returned).
    pub confidence: Option<f64>,
}

/// One target over the suite.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// The target.
    pub target: String,
    /// A fixed model (not an identity).
    pub fixed: bool,
    /// Items answered (or failed).
    pub items: usize,
    /// Mean score.
    pub quality: f64,
    /// Non-2xx answers.
    pub errors: usize,
    /// Calls over the suite.
    pub calls: u64,
    /// Calls per item.
    pub calls_per_item: f64,
    /// Prompt tokens over the suite.
    pub prompt_tokens: u64,
    /// Completion tokens over the suite.
    pub completion_tokens: u64,
    /// Cost over the suite.
    pub cost: f64,
    /// Estimated energy over the suite, joules (0 when no model declares `powerWatts`).
    #[serde(default)]
    pub energy_joules: f64,
    /// Median latency (nearest rank), milliseconds.
    pub latency_p50_ms: f64,
    /// 99th-percentile latency (nearest rank), milliseconds.
    pub latency_p99_ms: f64,
    /// Median time to the first chunk (nearest rank), milliseconds.
    #[serde(default)]
    pub ttft_p50_ms: f64,
    /// Sum of the latencies (compute as the client paid it in time), milliseconds.
    pub latency_total_ms: f64,
}

/// The value at percentile `p` (nearest rank) of `values`; 0 when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Sums `outcomes` (one target's) into a summary.
pub fn summarise(target: &str, fixed: bool, outcomes: &[&Outcome]) -> Summary {
    let items = outcomes.len();
    let per_item = |total: f64| {
        if items == 0 {
            0.0
        } else {
            total / items as f64
        }
    };
    let latencies: Vec<f64> = outcomes.iter().map(|o| o.latency_ms).collect();
    let calls: u64 = outcomes.iter().map(|o| u64::from(o.calls)).sum();
    Summary {
        target: target.to_owned(),
        fixed,
        items,
        quality: per_item(outcomes.iter().map(|o| o.score).sum()),
        errors: outcomes
            .iter()
            .filter(|o| !(200..300).contains(&o.status))
            .count(),
        calls,
        calls_per_item: per_item(calls as f64),
        prompt_tokens: outcomes.iter().map(|o| o.prompt_tokens).sum(),
        completion_tokens: outcomes.iter().map(|o| o.completion_tokens).sum(),
        cost: outcomes.iter().map(|o| o.cost).sum(),
        energy_joules: outcomes.iter().map(|o| o.energy_joules).sum(),
        latency_p50_ms: percentile(&latencies, 50.0),
        latency_p99_ms: percentile(&latencies, 99.0),
        ttft_p50_ms: percentile(
            &outcomes.iter().map(|o| o.ttft_ms).collect::<Vec<_>>(),
            50.0,
        ),
        latency_total_ms: latencies.iter().sum(),
    }
}

/// The per-item oracle over the fixed models: on each item the best score any fixed model
/// reached, paid at the cheapest fixed model that reached it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Oracle {
    /// Mean of the per-item best scores.
    pub quality: f64,
    /// Sum of the cheapest best answers' costs.
    pub cost: f64,
    /// The fixed model the oracle picks, per item id.
    pub picks: Vec<(String, String)>,
}

/// The oracle over `fixed` outcomes for `items` (ids).
pub fn oracle(items: &[String], fixed: &[Outcome]) -> Oracle {
    let mut quality = 0.0;
    let mut cost = 0.0;
    let mut picks = Vec::new();
    for item in items {
        let best = fixed
            .iter()
            .filter(|o| &o.item == item)
            .min_by(|a, b| b.score.total_cmp(&a.score).then(a.cost.total_cmp(&b.cost)));
        if let Some(best) = best {
            quality += best.score;
            cost += best.cost;
            picks.push((item.clone(), best.target.clone()));
        }
    }
    Oracle {
        quality: if items.is_empty() {
            0.0
        } else {
            quality / items.len() as f64
        },
        cost,
        picks,
    }
}

/// A fixed model an identity is compared with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    /// The fixed model.
    pub target: String,
    /// Its quality.
    pub quality: f64,
    /// Its cost over the suite.
    pub cost: f64,
}

/// An identity against the fixed models.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// The identity.
    pub identity: String,
    /// Oracle quality minus the identity's quality.
    pub regret: f64,
    /// The best fixed model (highest quality; the cheaper on a tie).
    pub best_fixed: Option<Baseline>,
    /// The identity's quality minus the best fixed model's.
    pub gain_over_best_fixed: Option<f64>,
    /// The best fixed model costing no more than the identity; the cheapest fixed model when
    /// none does (then `matched_compute` is false).
    pub matched: Option<Baseline>,
    /// Whether `matched` really costs no more than the identity.
    pub matched_compute: bool,
    /// The identity's quality minus `matched`'s.
    pub gain_at_matched_compute: Option<f64>,
}

fn baseline(summary: &Summary) -> Baseline {
    Baseline {
        target: summary.target.clone(),
        quality: summary.quality,
        cost: summary.cost,
    }
}

/// Better quality first, then lower cost.
fn better(a: &&Summary, b: &&Summary) -> std::cmp::Ordering {
    b.quality
        .total_cmp(&a.quality)
        .then(a.cost.total_cmp(&b.cost))
}

/// Compares `identity` with the `fixed` summaries and the oracle.
pub fn compare(identity: &Summary, fixed: &[Summary], oracle: &Oracle) -> Comparison {
    let best = fixed.iter().min_by(better);
    let affordable = fixed
        .iter()
        .filter(|f| f.cost <= identity.cost * (1.0 + 1e-9) + 1e-12)
        .min_by(better);
    let cheapest = fixed.iter().min_by(|a, b| a.cost.total_cmp(&b.cost));
    let matched = affordable.or(cheapest);
    Comparison {
        identity: identity.target.clone(),
        regret: oracle.quality - identity.quality,
        best_fixed: best.map(baseline),
        gain_over_best_fixed: best.map(|b| identity.quality - b.quality),
        matched: matched.map(baseline),
        matched_compute: affordable.is_some(),
        gain_at_matched_compute: matched.map(|m| identity.quality - m.quality),
    }
}

/// Indices of the fixed models on the quality/cost frontier: sorted by cost, each better than
/// every cheaper one.
pub fn frontier(fixed: &[Summary]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..fixed.len()).collect();
    order.sort_by(|&a, &b| {
        fixed[a]
            .cost
            .total_cmp(&fixed[b].cost)
            .then(fixed[b].quality.total_cmp(&fixed[a].quality))
    });
    let mut best = f64::NEG_INFINITY;
    order
        .into_iter()
        .filter(|&i| {
            let keep = fixed[i].quality > best;
            best = best.max(fixed[i].quality);
            keep
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(target: &str, item: &str, score: f64, cost: f64, latency_ms: f64) -> Outcome {
        Outcome {
            target: target.to_owned(),
            item: item.to_owned(),
            score,
            detail: String::new(),
            status: 200,
            latency_ms,
            ttft_ms: latency_ms / 2.0,
            calls: 1,
            prompt_tokens: 10,
            completion_tokens: 5,
            cost,
            energy_joules: latency_ms / 1000.0,
            model: target.to_owned(),
            decision: String::new(),
            config_version: String::new(),
            steps: String::new(),
            finish_reason: "stop".to_owned(),
            answer: String::new(),
            confidence: None,
        }
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn oracle_regret_and_gains_match_a_hand_computation() {
        // Two items. Cheap model: right on a only (cost 1 each). Strong model: right on both
        // (cost 3 each). The identity is right on both, costing 1 + 3 = 4.
        let items = vec!["a".to_owned(), "b".to_owned()];
        let fixed = vec![
            outcome("cheap", "a", 1.0, 1.0, 10.0),
            outcome("cheap", "b", 0.0, 1.0, 12.0),
            outcome("strong", "a", 1.0, 3.0, 30.0),
            outcome("strong", "b", 1.0, 3.0, 31.0),
        ];
        let oracle = oracle(&items, &fixed);
        assert_eq!(oracle.quality, 1.0);
        assert_eq!(oracle.cost, 4.0);
        assert_eq!(
            oracle.picks,
            vec![
                ("a".to_owned(), "cheap".to_owned()),
                ("b".to_owned(), "strong".to_owned())
            ]
        );
        let cheap = summarise("cheap", true, &[&fixed[0], &fixed[1]]);
        let strong = summarise("strong", true, &[&fixed[2], &fixed[3]]);
        assert_eq!(cheap.quality, 0.5);
        assert_eq!(cheap.cost, 2.0);
        assert_eq!(strong.latency_p50_ms, 30.0);
        let routed = [
            outcome("mom/auto", "a", 1.0, 1.0, 11.0),
            outcome("mom/auto", "b", 1.0, 3.0, 33.0),
        ];
        let identity = summarise("mom/auto", false, &[&routed[0], &routed[1]]);
        // Energy sums per outcome (here 1 W: 0.011 J + 0.033 J).
        assert!((identity.energy_joules - 0.044).abs() < 1e-12);
        let fixed_summaries = vec![cheap.clone(), strong.clone()];
        let compared = compare(&identity, &fixed_summaries, &oracle);
        assert_eq!(compared.regret, 0.0);
        assert_eq!(compared.best_fixed.as_ref().unwrap().target, "strong");
        assert_eq!(compared.gain_over_best_fixed, Some(0.0));
        // At a cost of 4 only the cheap model (2) is affordable: +0.5.
        assert_eq!(compared.matched.as_ref().unwrap().target, "cheap");
        assert!(compared.matched_compute);
        assert_eq!(compared.gain_at_matched_compute, Some(0.5));
        // An identity cheaper than every fixed model is compared with the cheapest, flagged.
        let bargain = Summary {
            cost: 0.5,
            quality: 0.25,
            ..identity
        };
        let compared = compare(&bargain, &fixed_summaries, &oracle);
        assert!(!compared.matched_compute);
        assert_eq!(compared.gain_at_matched_compute, Some(-0.25));
        assert_eq!(compared.regret, 0.75);
        assert_eq!(frontier(&fixed_summaries), vec![0, 1]);
    }
}
