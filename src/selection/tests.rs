//! One test per algorithm: each shows the choice follows the input it reads.

use super::*;

const PAIR: [Candidate; 2] = [
    Candidate {
        model: 7,
        weight: 3.0,
    },
    Candidate {
        model: 9,
        weight: 1.0,
    },
];

fn three() -> Vec<Candidate> {
    (0..3)
        .map(|model| Candidate { model, weight: 1.0 })
        .collect()
}

fn pick(algorithm: Algorithm, observed: &[Observed]) -> usize {
    let candidates: Vec<Candidate> = (0..observed.len())
        .map(|model| Candidate { model, weight: 1.0 })
        .collect();
    select(algorithm, &candidates, observed, 42).chosen
}

fn with(f: impl Fn(usize, &mut Observed)) -> Vec<Observed> {
    (0..3)
        .map(|i| {
            let mut o = Observed::default();
            f(i, &mut o);
            o
        })
        .collect()
}

#[test]
fn static_always_picks_the_first_candidate() {
    let s = select(
        Algorithm::Static,
        &PAIR,
        &[Observed::default(); 2],
        u64::MAX,
    );
    assert_eq!(s.chosen, 0);
    assert_eq!(s.scores, vec![1.0, 0.0]);
}

#[test]
fn weighted_choice_follows_the_key_and_the_weights() {
    let observed = [Observed::default(); 2];
    assert_eq!(select(Algorithm::Weighted, &PAIR, &observed, 0).chosen, 0);
    assert_eq!(
        select(Algorithm::Weighted, &PAIR, &observed, u64::MAX).chosen,
        1
    );
    let second = (0..4000u64)
        .map(|i| {
            select(
                Algorithm::Weighted,
                &PAIR,
                &observed,
                request_key(&i.to_le_bytes()),
            )
            .chosen
        })
        .filter(|c| *c == 1)
        .count();
    assert!((800..1200).contains(&second), "share of second: {second}");
    assert_eq!(
        select(Algorithm::Weighted, &PAIR, &observed, 1).scores,
        vec![0.75, 0.25]
    );
}

#[test]
fn cost_aware_takes_the_cheapest_model_above_the_quality_floor() {
    let algorithm = Algorithm::CostAware { quality_floor: 0.6 };
    // Costs 3, 1, 2; qualities 0.9, 0.5, 0.7: the cheapest (1) is below the floor.
    let observed = with(|i, o| {
        o.expected_cost = [3.0, 1.0, 2.0][i];
        o.quality = [0.9, 0.5, 0.7][i];
    });
    assert_eq!(pick(algorithm, &observed), 2);
    // Lower the floor and the cheapest wins.
    assert_eq!(
        pick(Algorithm::CostAware { quality_floor: 0.4 }, &observed),
        1
    );
    // Raise it above everyone: the highest quality serves.
    let s = select(
        Algorithm::CostAware {
            quality_floor: 0.95,
        },
        &three(),
        &observed,
        0,
    );
    assert_eq!(s.chosen, 0);
    assert!(s.reason.contains("no model reaches"), "{}", s.reason);
}

#[test]
fn latency_aware_measures_cold_models_then_prefers_the_fastest() {
    let algorithm = Algorithm::LatencyAware {
        metric: LatencyMetric::Total,
        percentile: 90.0,
        min_samples: 3,
    };
    let mut observed = with(|i, o| {
        o.latency_ms = Some([300.0, 40.0, 90.0][i]);
        o.latency_samples = 5;
    });
    assert_eq!(pick(algorithm, &observed), 1);
    observed[1].latency_ms = Some(500.0);
    assert_eq!(pick(algorithm, &observed), 2);
    // A model with too few samples is measured first.
    observed[0].latency_samples = 1;
    let s = select(algorithm, &three(), &observed, 0);
    assert_eq!(s.chosen, 0);
    assert!(s.reason.starts_with("cold start"), "{}", s.reason);
}

#[test]
fn quality_budget_takes_the_best_model_that_fits_cost_and_latency() {
    let budget = |max_cost, max_latency_ms| Algorithm::QualityBudget {
        max_cost,
        max_latency_ms,
        metric: LatencyMetric::Total,
        percentile: 90.0,
    };
    let observed = with(|i, o| {
        o.quality = [0.9, 0.6, 0.75][i];
        o.expected_cost = [5.0, 1.0, 2.0][i];
        o.latency_ms = Some([800.0, 100.0, 200.0][i]);
    });
    assert_eq!(pick(budget(None, None), &observed), 0);
    assert_eq!(pick(budget(Some(3.0), None), &observed), 2);
    assert_eq!(pick(budget(Some(3.0), Some(150.0)), &observed), 1);
    // Nothing fits: the cheapest.
    assert_eq!(pick(budget(Some(0.5), None), &observed), 1);
}

#[test]
fn elo_follows_pairwise_feedback() {
    let mut observed = with(|_, _| {});
    assert_eq!(
        pick(Algorithm::Elo, &observed),
        0,
        "ties keep declared order"
    );
    let (winner, loser) = elo_update(observed[2].elo, observed[0].elo, 32.0, false);
    observed[2].elo = winner;
    observed[0].elo = loser;
    assert_eq!(pick(Algorithm::Elo, &observed), 2);
    assert!(
        (winner - 1516.0).abs() < 1e-9,
        "even match moves k/2: {winner}"
    );
    let (a, b) = elo_update(1500.0, 1500.0, 32.0, true);
    assert_eq!(
        (a, b),
        (1500.0, 1500.0),
        "a draw between equals changes nothing"
    );
}

#[test]
fn bandit_draws_follow_the_reward_posteriors() {
    let share_of = |observed: &[Observed], model: usize| {
        (0..1000u64)
            .filter(|k| {
                select(
                    Algorithm::Bandit,
                    &three(),
                    observed,
                    request_key(&k.to_le_bytes()),
                )
                .chosen
                    == model
            })
            .count()
    };
    let uniform = with(|_, _| {});
    let even = share_of(&uniform, 1);
    assert!((250..420).contains(&even), "uninformed share {even}");
    let learned = with(|i, o| {
        o.reward = [
            Beta::observed(2.0, 18.0),
            Beta::observed(18.0, 2.0),
            Beta::observed(5.0, 15.0),
        ][i]
    });
    let favoured = share_of(&learned, 1);
    assert!(favoured > 950, "rewarded model's share {favoured}");
    // Same key, same statistics: same draw.
    assert_eq!(
        select(Algorithm::Bandit, &three(), &learned, 7),
        select(Algorithm::Bandit, &three(), &learned, 7)
    );
}

#[test]
fn knn_votes_for_the_model_of_the_nearest_exemplars() {
    let exemplars = vec![
        KnnExemplar {
            vector: vec![1.0, 0.0],
            candidate: 0,
        },
        KnnExemplar {
            vector: vec![0.9, 0.1],
            candidate: 0,
        },
        KnnExemplar {
            vector: vec![0.0, 1.0],
            candidate: 1,
        },
        KnnExemplar {
            vector: vec![0.1, 0.9],
            candidate: 1,
        },
    ];
    let near_first = knn_votes(&[1.0, 0.05], &exemplars, 2, 2);
    let near_second = knn_votes(&[0.05, 1.0], &exemplars, 2, 2);
    assert!((near_first.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    let observe = |votes: &[f64]| -> Vec<Observed> {
        votes
            .iter()
            .map(|v| Observed {
                knn_vote: *v,
                ..Observed::default()
            })
            .collect()
    };
    assert_eq!(pick(Algorithm::Knn { k: 2 }, &observe(&near_first)), 0);
    assert_eq!(pick(Algorithm::Knn { k: 2 }, &observe(&near_second)), 1);
}

#[test]
fn router_dc_picks_the_description_nearest_the_query() {
    let descriptions = vec![
        vec![1.0, 0.0, 0.0],
        vec![0.0, 1.0, 0.0],
        vec![0.0, 0.0, 1.0],
    ];
    let choose = |query: &[f32]| {
        let observed: Vec<Observed> = router_dc_similarities(query, &descriptions)
            .into_iter()
            .map(|s| Observed {
                description_similarity: s,
                ..Observed::default()
            })
            .collect();
        select(
            Algorithm::RouterDc { temperature: 0.1 },
            &three(),
            &observed,
            0,
        )
    };
    assert_eq!(choose(&[0.1, 0.2, 0.9]).chosen, 2);
    let s = choose(&[0.2, 0.9, 0.1]);
    assert_eq!(s.chosen, 1);
    assert!((s.scores.iter().sum::<f64>() - 1.0).abs() < 1e-9);
}

#[test]
fn automix_escalates_when_the_cheap_model_is_not_expected_to_verify() {
    let algorithm = Algorithm::Automix { threshold: 0.7 };
    let mut observed = with(|i, o| {
        o.expected_cost = [1.0, 10.0, 3.0][i];
        o.verified = Beta::observed(9.0, 1.0);
    });
    assert_eq!(pick(algorithm, &observed), 0, "cheap model verifies");
    observed[0].verified = Beta::observed(2.0, 8.0);
    assert_eq!(pick(algorithm, &observed), 2, "next cheapest");
    observed[2].verified = Beta::observed(1.0, 9.0);
    observed[1].verified = Beta::observed(1.0, 9.0);
    assert_eq!(
        pick(algorithm, &observed),
        1,
        "nobody verifies: most capable"
    );
}

#[test]
fn hybrid_trades_components_by_weight() {
    let observed = with(|i, o| {
        o.quality = [0.9, 0.5, 0.7][i];
        o.expected_cost = [9.0, 1.0, 4.0][i];
    });
    let quality_first = HybridWeights {
        quality: 1.0,
        cost: 0.1,
        ..HybridWeights::default()
    };
    let cost_first = HybridWeights {
        quality: 0.1,
        cost: 1.0,
        ..HybridWeights::default()
    };
    assert_eq!(pick(Algorithm::Hybrid(quality_first), &observed), 0);
    assert_eq!(pick(Algorithm::Hybrid(cost_first), &observed), 1);
    let balanced = HybridWeights {
        quality: 1.0,
        cost: 1.0,
        ..HybridWeights::default()
    };
    // Normalised: quality 1, 0, 0.5; cheapness 0, 1, 0.625 → the middle model wins.
    assert_eq!(pick(Algorithm::Hybrid(balanced), &observed), 2);
}
