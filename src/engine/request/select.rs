//! Selection inputs: what each candidate of the winning decision is known to cost, how fast it
//! has been and what feedback it earned, read from the state store and the request, then handed
//! to the pure algorithms in `selection`.

use super::load::{loads, DEFAULT_SERVICE_MS};
use crate::config::{Bounds, Decision, Snapshot};
use crate::engine::RouteError;
use crate::llm::ChatRequest;
use crate::selection::{
    self, knn_votes, router_dc_similarities, Algorithm, Candidate, LatencyMetric, Observed,
    Predicted, Selection,
};
use crate::signals::estimate_tokens;
use crate::state::StateStore;

/// Completion tokens assumed for a model before any response was observed, when the request
/// sets no cap.
pub const DEFAULT_COMPLETION_TOKENS: f64 = 256.0;

/// Picks one of `decision`'s candidates within the identity's `bounds` and the pool's load.
/// `query` is the last user message's embedding, when the identity computed one. Refused when
/// every candidate's declared queue is full.
pub(in crate::engine) fn choose(
    snapshot: &Snapshot,
    state: &StateStore,
    decision: &Decision,
    bounds: &Bounds,
    request: &ChatRequest,
    query: Option<&[f32]>,
    key: u64,
) -> Result<Selection, RouteError> {
    let algorithm = decision.algorithm;
    let candidates = &decision.candidates;
    if algorithm.needs_embedding() && query.is_none() {
        let mut fallback = selection::select(selection::Algorithm::Static, candidates, &[], key);
        fallback.reason = "query embedding unavailable: first declared model".to_owned();
        return Ok(fallback);
    }
    let loads = loads(snapshot, state, candidates);
    let busy = |i: usize| loads[i].is_some_and(|l| l.busy());
    let bounded = bounds.max_cost.is_some() || bounds.latency_slo_ms.is_some();
    let any_busy = (0..candidates.len()).any(busy);
    if !bounded && !any_busy && matches!(algorithm, Algorithm::Static | Algorithm::Weighted) {
        // These read no statistics: skip gathering them.
        return Ok(selection::select(algorithm, candidates, &[], key));
    }
    let estimated_prompt = estimate_tokens(request) as f64;
    let cap = request.max_tokens().map(|n| n as f64);
    let latency = algorithm.latency();
    let knn = match query {
        Some(query) if !decision.vectors.knn.is_empty() => knn_votes(
            query,
            &decision.vectors.knn,
            decision.vectors.knn_k,
            candidates.len(),
        ),
        _ => vec![0.0; candidates.len()],
    };
    // The router head's predictions (learned): one input per request, one row per candidate;
    // the reason names the request kind its first stage saw.
    let mut kind_seen = None;
    let mut predicted: Vec<Option<Predicted>> = match (query, &decision.vectors.router) {
        (Some(query), Some(head)) => {
            let (input, kinds) = head.input_and_kinds(query, request.last_user_text().trim());
            let (best, p) = crate::inference::argmax(&kinds);
            kind_seen = head
                .kinds
                .get(best)
                .map(|k| format!("request kind {k} ({p:.2})"));
            decision
                .vectors
                .router_models
                .iter()
                .map(|&m| head.predict(m, &input).map(Predicted::from))
                .collect()
        }
        _ => vec![None; candidates.len()],
    };
    let similarities = match query {
        Some(query) if !decision.vectors.descriptions.is_empty() => {
            router_dc_similarities(query, &decision.vectors.descriptions)
        }
        _ => vec![0.0; candidates.len()],
    };
    // Each candidate's service time, then the wait its load adds to it: the learned head's
    // predicted latency, else the observed one, else a default.
    let mut service_ms = vec![DEFAULT_SERVICE_MS; candidates.len()];
    let mut wait_ms = vec![0.0; candidates.len()];
    for (i, candidate) in candidates.iter().enumerate() {
        let Some(load) = loads[i] else { continue };
        let model = &snapshot.models[candidate.model];
        service_ms[i] = match &predicted[i] {
            Some(p) => p.latency_ms,
            None => state
                .view(&decision.name, &model.name, latency)
                .latency_ms
                .unwrap_or(DEFAULT_SERVICE_MS),
        };
        wait_ms[i] = load.wait_ms(service_ms[i]);
        if let Some(p) = &mut predicted[i] {
            p.latency_ms += wait_ms[i];
        }
    }
    if !loads.is_empty() && loads.iter().all(|l| l.is_some_and(|l| l.saturated())) {
        let least = wait_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let detail = (0..candidates.len())
            .filter_map(|i| {
                Some(loads[i]?.describe(&snapshot.models[candidates[i].model], service_ms[i]))
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(RouteError::Saturated {
            detail,
            retry_after_s: (least / 1000.0).ceil().max(1.0) as u64,
        });
    }
    let observed: Vec<Observed> = candidates
        .iter()
        .enumerate()
        .map(|(i, candidate)| {
            let model = &snapshot.models[candidate.model];
            let view = state.view(&decision.name, &model.name, latency);
            let prompt = estimated_prompt * view.prompt_ratio;
            let completion = match (view.completion_tokens, cap) {
                (Some(seen), Some(cap)) => seen.min(cap),
                (Some(seen), None) => seen,
                (None, Some(cap)) => cap,
                (None, None) => DEFAULT_COMPLETION_TOKENS,
            };
            let expected_cost = model.pricing.map_or(0.0, |p| {
                (p.input_per_million * prompt + p.output_per_million * completion) / 1e6
            });
            Observed {
                quality: model.quality.unwrap_or(0.5),
                expected_cost,
                latency_ms: view.latency_ms.map(|l| l + wait_ms[i]),
                latency_samples: view.latency_samples,
                elo: view.elo,
                reward: view.reward,
                verified: view.verified,
                description_similarity: similarities[i],
                knn_vote: knn[i],
                predicted: predicted.get(i).copied().flatten(),
            }
        })
        .collect();
    let within = |i: usize| {
        let o = &observed[i];
        let cost_ok = bounds.max_cost.is_none_or(|max| o.expected_cost <= max);
        let latency_ok = bounds.latency_slo_ms.is_none_or(|slo| {
            let model = &snapshot.models[candidates[i].model].name;
            let view = state.view(&decision.name, model, Some((LatencyMetric::Total, 90.0)));
            view.latency_ms.is_none_or(|p90| p90 <= slo)
        });
        cost_ok && latency_ok
    };
    let allowed: Vec<usize> = (0..candidates.len()).filter(|&i| within(i)).collect();
    let first = pick_within(algorithm, candidates, &observed, &allowed, key);
    let busy_notes: Vec<String> = allowed
        .iter()
        .filter(|&&i| busy(i))
        .filter_map(|&i| {
            Some(loads[i]?.describe(&snapshot.models[candidates[i].model], service_ms[i]))
        })
        .collect();
    // A busy choice is set aside for an adequate allowed candidate with a free slot: any, or
    // under `learned`, one predicted at most `busyMaxLoss` less likely to be right.
    let adequate = |i: usize| match (
        algorithm,
        observed[i].predicted,
        observed[first.chosen].predicted,
    ) {
        (Algorithm::Learned(allocation), Some(free), Some(busy)) => {
            free.correct >= busy.correct - allocation.busy_max_loss
        }
        _ => true,
    };
    let free: Vec<usize> = if busy(first.chosen) {
        allowed
            .iter()
            .copied()
            .filter(|&i| !busy(i) && adequate(i))
            .collect()
    } else {
        Vec::new()
    };
    let mut selection = if free.is_empty() {
        first
    } else {
        let mut kept = pick_among(algorithm, candidates, &observed, &free, key);
        if allowed.len() < candidates.len() {
            kept.reason = outside_bounds(&kept.reason, allowed.len(), candidates.len());
        }
        kept
    };
    if !busy_notes.is_empty() {
        let verdict = if !free.is_empty() || !busy(selection.chosen) {
            "set aside"
        } else if allowed.iter().any(|&i| !busy(i)) {
            "no adequate free slot"
        } else {
            "no free slot anywhere"
        };
        selection.reason = format!("{}; {verdict}: {}", selection.reason, busy_notes.join("; "));
    }
    if let Some(kind) = kind_seen {
        selection.reason = format!("{}; {kind}", selection.reason);
    }
    Ok(selection)
}

/// `algorithm` over the candidates in `allowed` (the others are outside the identity's bounds;
/// when none is inside, the cheapest).
fn pick_within(
    algorithm: Algorithm,
    candidates: &[Candidate],
    observed: &[Observed],
    allowed: &[usize],
    key: u64,
) -> Selection {
    if allowed.len() == candidates.len() {
        return selection::select(algorithm, candidates, observed, key);
    }
    if allowed.is_empty() {
        let cheapest = (0..observed.len())
            .min_by(|&a, &b| {
                observed[a]
                    .expected_cost
                    .total_cmp(&observed[b].expected_cost)
            })
            .unwrap_or(0);
        return Selection {
            chosen: cheapest,
            scores: (0..observed.len())
                .map(|i| if i == cheapest { 1.0 } else { 0.0 })
                .collect(),
            reason: "no model within the identity's bounds: the cheapest".to_owned(),
        };
    }
    let mut inner = pick_among(algorithm, candidates, observed, allowed, key);
    inner.reason = outside_bounds(&inner.reason, allowed.len(), candidates.len());
    inner
}

/// `reason`, saying how many of `total` candidates fell outside the identity's bounds.
fn outside_bounds(reason: &str, allowed: usize, total: usize) -> String {
    format!(
        "{reason}; {} of {total} models outside the identity's bounds",
        total - allowed
    )
}

/// `algorithm` over the candidates in `subset` (not empty); the others score 0.
fn pick_among(
    algorithm: Algorithm,
    candidates: &[Candidate],
    observed: &[Observed],
    subset: &[usize],
    key: u64,
) -> Selection {
    let kept: Vec<Candidate> = subset.iter().map(|&i| candidates[i]).collect();
    let kept_observed: Vec<Observed> = subset.iter().map(|&i| observed[i]).collect();
    let inner = selection::select(algorithm, &kept, &kept_observed, key);
    let mut scores = vec![0.0; candidates.len()];
    for (score, &i) in inner.scores.iter().zip(subset) {
        scores[i] = *score;
    }
    Selection {
        chosen: subset[inner.chosen],
        scores,
        reason: inner.reason,
    }
}
