//! Algorithms that read declared quality, expected cost and observed latency: `cost_aware`,
//! `latency_aware`, `quality_budget`, and `hybrid`, which weighs every component.

use super::{argmax, HybridWeights, Observed, Selection};

pub(super) fn cost_aware(observed: &[Observed], quality_floor: f64) -> Selection {
    let scores: Vec<f64> = observed.iter().map(|o| -o.expected_cost).collect();
    let eligible: Vec<usize> = (0..observed.len())
        .filter(|&i| observed[i].quality >= quality_floor)
        .collect();
    match cheapest(observed, &eligible) {
        Some(chosen) => Selection {
            chosen,
            scores,
            reason: format!(
                "cheapest expected cost {:.6} among {} of {} models with quality >= {quality_floor}",
                observed[chosen].expected_cost,
                eligible.len(),
                observed.len()
            ),
        },
        None => {
            let qualities: Vec<f64> = observed.iter().map(|o| o.quality).collect();
            let chosen = argmax(&qualities);
            Selection {
                chosen,
                scores,
                reason: format!(
                    "no model reaches quality {quality_floor}: highest quality {:.2}",
                    qualities[chosen]
                ),
            }
        }
    }
}

pub(super) fn latency_aware(observed: &[Observed], min_samples: u32) -> Selection {
    let scores: Vec<f64> = observed
        .iter()
        .map(|o| o.latency_ms.map_or(0.0, |ms| -ms))
        .collect();
    if let Some(cold) = observed
        .iter()
        .position(|o| o.latency_samples < min_samples || o.latency_ms.is_none())
    {
        return Selection {
            chosen: cold,
            scores,
            reason: format!(
                "cold start: measuring candidate {cold} ({} of {min_samples} samples)",
                observed[cold].latency_samples
            ),
        };
    }
    let chosen = argmax(&scores);
    Selection {
        chosen,
        reason: format!(
            "lowest observed latency {:.1} ms",
            observed[chosen].latency_ms.unwrap_or_default()
        ),
        scores,
    }
}

pub(super) fn quality_budget(
    observed: &[Observed],
    max_cost: Option<f64>,
    max_latency_ms: Option<f64>,
) -> Selection {
    let fits = |o: &Observed| {
        max_cost.is_none_or(|limit| o.expected_cost <= limit)
            && max_latency_ms.is_none_or(|limit| o.latency_ms.is_none_or(|ms| ms <= limit))
    };
    let scores: Vec<f64> = observed
        .iter()
        .map(|o| if fits(o) { o.quality } else { 0.0 })
        .collect();
    let within: Vec<usize> = (0..observed.len())
        .filter(|&i| fits(&observed[i]))
        .collect();
    if within.is_empty() {
        let all: Vec<usize> = (0..observed.len()).collect();
        let chosen = cheapest(observed, &all).unwrap_or(0);
        return Selection {
            chosen,
            scores,
            reason: "no model fits the budget: cheapest".to_owned(),
        };
    }
    let mut chosen = within[0];
    for &i in &within {
        if observed[i].quality > observed[chosen].quality {
            chosen = i;
        }
    }
    Selection {
        chosen,
        scores,
        reason: format!(
            "highest quality {:.2} among {} of {} models within budget",
            observed[chosen].quality,
            within.len(),
            observed.len()
        ),
    }
}

pub(super) fn hybrid(observed: &[Observed], w: HybridWeights) -> Selection {
    let component = |read: fn(&Observed) -> f64| -> Vec<f64> {
        normalise(&observed.iter().map(read).collect::<Vec<_>>())
    };
    let parts: [(f64, Vec<f64>); 7] = [
        (w.quality, component(|o| o.quality)),
        (w.cost, component(|o| -o.expected_cost)),
        // An unmeasured latency scores as the best measured one: it deserves a measurement.
        (w.latency, {
            let best = observed
                .iter()
                .filter_map(|o| o.latency_ms)
                .fold(f64::INFINITY, f64::min);
            let best = if best.is_finite() { best } else { 0.0 };
            normalise(
                &observed
                    .iter()
                    .map(|o| -o.latency_ms.unwrap_or(best))
                    .collect::<Vec<_>>(),
            )
        }),
        (w.elo, component(|o| o.elo)),
        (w.bandit, component(|o| o.reward.mean())),
        (w.router_dc, component(|o| o.description_similarity)),
        (w.knn, component(|o| o.knn_vote)),
    ];
    let total: f64 = parts.iter().map(|(weight, _)| weight).sum();
    let scores: Vec<f64> = (0..observed.len())
        .map(|i| {
            parts
                .iter()
                .map(|(weight, values)| weight * values[i])
                .sum::<f64>()
                / total
        })
        .collect();
    let chosen = argmax(&scores);
    Selection {
        chosen,
        reason: format!("highest weighted score {:.3}", scores[chosen]),
        scores,
    }
}

/// Min-max scaling to 0..=1; all-equal values all score 1.
fn normalise(values: &[f64]) -> Vec<f64> {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max - min <= f64::EPSILON {
        return vec![1.0; values.len()];
    }
    values.iter().map(|v| (v - min) / (max - min)).collect()
}

/// The cheapest among `indices` (earliest on ties).
fn cheapest(observed: &[Observed], indices: &[usize]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for &i in indices {
        if best.is_none_or(|b| observed[i].expected_cost < observed[b].expected_cost) {
            best = Some(i);
        }
    }
    best
}
