//! Algorithms that read the query embedding: `knn` (labelled exemplars vote for their model) and
//! `router_dc` (the query against each model's description and capability embedding). The
//! vectors are computed at configuration load; here they only meet the query vector.

use super::{argmax, Observed, Selection};

/// One labelled exemplar: an embedded query and the candidate that served it best.
#[derive(Debug, Clone, PartialEq)]
pub struct KnnExemplar {
    /// Unit-length embedding.
    pub vector: Vec<f32>,
    /// Index into the decision's candidates.
    pub candidate: usize,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    f64::from(dot / (na * nb))
}

/// Each candidate's share of the similarity-weighted vote of the `k` exemplars nearest `query`
/// (negative similarities do not vote).
pub fn knn_votes(
    query: &[f32],
    exemplars: &[KnnExemplar],
    k: usize,
    candidates: usize,
) -> Vec<f64> {
    let mut near: Vec<(f64, usize)> = exemplars
        .iter()
        .map(|e| (cosine(query, &e.vector), e.candidate))
        .collect();
    near.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut votes = vec![0.0; candidates];
    for (similarity, candidate) in near.into_iter().take(k) {
        if let Some(vote) = votes.get_mut(candidate) {
            *vote += similarity.max(0.0);
        }
    }
    let total: f64 = votes.iter().sum();
    if total > 0.0 {
        votes.iter_mut().for_each(|v| *v /= total);
    }
    votes
}

/// Cosine similarity of `query` to each candidate's description vector.
pub fn router_dc_similarities(query: &[f32], descriptions: &[Vec<f32>]) -> Vec<f64> {
    descriptions.iter().map(|d| cosine(query, d)).collect()
}

pub(super) fn router_dc(observed: &[Observed], temperature: f64) -> Selection {
    let logits: Vec<f64> = observed
        .iter()
        .map(|o| o.description_similarity / temperature)
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    let scores: Vec<f64> = exps.iter().map(|e| e / total).collect();
    let chosen = argmax(&scores);
    Selection {
        chosen,
        reason: format!(
            "description nearest the query (cosine {:.3})",
            observed[chosen].description_similarity
        ),
        scores,
    }
}

pub(super) fn by_score(scores: Vec<f64>, reason: &str) -> Selection {
    let chosen = argmax(&scores);
    Selection {
        chosen,
        scores,
        reason: reason.to_owned(),
    }
}
