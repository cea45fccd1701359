//! Raw algorithm settings → [`Algorithm`] plus the vectors the embedding algorithms read: `knn`
//! exemplars and `router_dc` model descriptions are embedded here, once per load, with the
//! configured encoder. Each algorithm's requirements are checked against its models (quality
//! for the quality readers, pricing for the cost readers) so a decision never ranks on a
//! number nobody declared.

use crate::config::error::Errors;
use crate::config::raw::{RawAlgorithm, RawHybridWeights, RawKnnExemplar, RawLatencyMetric};
use crate::config::snapshot::{DecisionVectors, Model};
use crate::inference::{EncoderHandle, RouterHead};
use crate::selection::{
    Algorithm, Allocation, Candidate, HybridWeights, KnnExemplar, LatencyMetric,
};
use std::path::Path;
use std::sync::Arc;

/// What an algorithm reads about its candidates.
struct Reads {
    quality: bool,
    pricing: bool,
}

/// Compiles the algorithm of the decision at `path` whose model references resolved to
/// `candidates` (`names[i]` is candidate `i`'s model name).
pub(super) fn compile_algorithm(
    raw: &RawAlgorithm,
    path: &str,
    candidates: &[Candidate],
    models: &[Option<Model>],
    encoder: Option<&Arc<EncoderHandle>>,
    base: &Path,
    errors: &mut Errors,
) -> Option<(Algorithm, DecisionVectors)> {
    let path = format!("{path}.algorithm");
    if candidates
        .iter()
        .any(|c| models.get(c.model).is_none_or(Option::is_none))
    {
        // A model reference is broken and already reported; checking the algorithm against
        // it would only add misleading errors.
        return None;
    }
    let unit = |field: &str, value: f64, errors: &mut Errors| {
        let ok = (0.0..=1.0).contains(&value);
        if !ok {
            errors.push(
                format!("{path}.{field}"),
                format!("must be between 0 and 1, got {value}"),
            );
        }
        ok
    };
    let percentile_ok = |value: f64, errors: &mut Errors| {
        let ok = value > 0.0 && value <= 100.0;
        if !ok {
            errors.push(
                format!("{path}.percentile"),
                format!("must be in (0, 100], got {value}"),
            );
        }
        ok
    };
    let positive = |field: &str, value: Option<f64>, errors: &mut Errors| {
        let ok = value.is_none_or(|v| v.is_finite() && v > 0.0);
        if !ok {
            errors.push(format!("{path}.{field}"), "must be a positive number");
        }
        ok
    };
    let mut vectors = DecisionVectors::default();
    let (algorithm, reads, ok) = match raw {
        RawAlgorithm::Static => (Algorithm::Static, Reads::NOTHING, true),
        RawAlgorithm::Weighted => (Algorithm::Weighted, Reads::NOTHING, true),
        RawAlgorithm::CostAware { quality_floor } => (
            Algorithm::CostAware {
                quality_floor: *quality_floor,
            },
            Reads::BOTH,
            unit("qualityFloor", *quality_floor, errors),
        ),
        RawAlgorithm::LatencyAware {
            metric,
            percentile,
            min_samples,
        } => (
            Algorithm::LatencyAware {
                metric: latency_metric(*metric),
                percentile: *percentile,
                min_samples: *min_samples,
            },
            Reads::NOTHING,
            percentile_ok(*percentile, errors),
        ),
        RawAlgorithm::QualityBudget {
            max_cost,
            max_latency_ms,
            metric,
            percentile,
        } => {
            let mut ok = percentile_ok(*percentile, errors);
            ok &= positive("maxCost", *max_cost, errors);
            ok &= positive("maxLatencyMs", *max_latency_ms, errors);
            (
                Algorithm::QualityBudget {
                    max_cost: *max_cost,
                    max_latency_ms: *max_latency_ms,
                    metric: latency_metric(*metric),
                    percentile: *percentile,
                },
                Reads {
                    quality: true,
                    pricing: max_cost.is_some(),
                },
                ok,
            )
        }
        RawAlgorithm::Elo => (Algorithm::Elo, Reads::NOTHING, true),
        RawAlgorithm::Bandit => (Algorithm::Bandit, Reads::NOTHING, true),
        RawAlgorithm::Knn { k, exemplars } => {
            let ok = k_ok(*k, &path, errors)
                && knn(
                    exemplars,
                    &path,
                    candidates,
                    models,
                    encoder,
                    &mut vectors,
                    errors,
                );
            (Algorithm::Knn { k: *k }, Reads::NOTHING, ok)
        }
        RawAlgorithm::RouterDc { temperature } => {
            let mut ok = positive("temperature", Some(*temperature), errors);
            ok &= descriptions(&path, candidates, models, encoder, &mut vectors, errors);
            (
                Algorithm::RouterDc {
                    temperature: *temperature,
                },
                Reads::NOTHING,
                ok,
            )
        }
        RawAlgorithm::Automix { threshold } => (
            Algorithm::Automix {
                threshold: *threshold,
            },
            Reads::NOTHING,
            unit("threshold", *threshold, errors),
        ),
        RawAlgorithm::Hybrid {
            weights,
            k,
            exemplars,
        } => {
            let weights = hybrid_weights(weights);
            let mut ok = weights_ok(&weights, &path, errors);
            if weights.knn > 0.0 {
                ok &= k_ok(*k, &path, errors)
                    && knn(
                        exemplars,
                        &path,
                        candidates,
                        models,
                        encoder,
                        &mut vectors,
                        errors,
                    );
            } else if !exemplars.is_empty() {
                errors.push(
                    format!("{path}.exemplars"),
                    "exemplars are read only by the knn component; give weights.knn a positive weight or remove them",
                );
                ok = false;
            }
            if weights.router_dc > 0.0 {
                ok &= descriptions(&path, candidates, models, encoder, &mut vectors, errors);
            }
            let reads = Reads {
                quality: weights.quality > 0.0,
                pricing: weights.cost > 0.0,
            };
            let algorithm = Algorithm::Hybrid(weights);
            vectors.knn_k = *k;
            (algorithm, reads, ok)
        }
        RawAlgorithm::Learned {
            router,
            latency_weight,
            min_correct,
            max_latency_ms,
            prior_outcomes,
            busy_max_loss,
        } => {
            let mut ok = latency_weight.is_finite() && *latency_weight >= 0.0;
            if !(prior_outcomes.is_finite() && *prior_outcomes >= 0.0) {
                errors.push(
                    format!("{path}.priorOutcomes"),
                    format!("must be a number ≥ 0, got {prior_outcomes}"),
                );
                ok = false;
            }
            if !ok {
                errors.push(
                    format!("{path}.latencyWeight"),
                    format!("must be a number ≥ 0, got {latency_weight}"),
                );
            }
            ok &= min_correct.is_none_or(|floor| unit("minCorrect", floor, errors));
            ok &= unit("busyMaxLoss", *busy_max_loss, errors);
            ok &= positive("maxLatencyMs", *max_latency_ms, errors);
            ok &= router_head(
                &base.join(router),
                &path,
                candidates,
                models,
                encoder,
                &mut vectors,
                errors,
            );
            let allocation = Allocation {
                latency_weight: *latency_weight,
                min_correct: *min_correct,
                max_latency_ms: *max_latency_ms,
                prior_outcomes: *prior_outcomes,
                busy_max_loss: *busy_max_loss,
            };
            (Algorithm::Learned(allocation), Reads::NOTHING, ok)
        }
    };
    if let Algorithm::Knn { k } = algorithm {
        vectors.knn_k = k;
    }
    let declared = reads.check(&path, algorithm.name(), candidates, models, errors);
    (ok && declared).then_some((algorithm, vectors))
}

impl Reads {
    const NOTHING: Self = Self {
        quality: false,
        pricing: false,
    };
    const BOTH: Self = Self {
        quality: true,
        pricing: true,
    };

    fn check(
        &self,
        path: &str,
        name: &str,
        candidates: &[Candidate],
        models: &[Option<Model>],
        errors: &mut Errors,
    ) -> bool {
        let mut ok = true;
        for model in candidates
            .iter()
            .filter_map(|c| models.get(c.model)?.as_ref())
        {
            if self.quality && model.quality.is_none() {
                errors.push(
                    path.to_owned(),
                    format!(
                        "{name} reads model quality; declare `quality` (0..1) on model {:?}",
                        model.name
                    ),
                );
                ok = false;
            }
            if self.pricing && model.pricing.is_none() {
                errors.push(
                    path.to_owned(),
                    format!(
                        "{name} reads model cost; declare `pricing` on model {:?}",
                        model.name
                    ),
                );
                ok = false;
            }
        }
        ok
    }
}

fn latency_metric(raw: RawLatencyMetric) -> LatencyMetric {
    match raw {
        RawLatencyMetric::Ttft => LatencyMetric::Ttft,
        RawLatencyMetric::Total => LatencyMetric::Total,
    }
}

fn hybrid_weights(raw: &RawHybridWeights) -> HybridWeights {
    let RawHybridWeights {
        quality,
        cost,
        latency,
        elo,
        bandit,
        router_dc,
        knn,
    } = *raw;
    HybridWeights {
        quality,
        cost,
        latency,
        elo,
        bandit,
        router_dc,
        knn,
    }
}

fn weights_ok(w: &HybridWeights, path: &str, errors: &mut Errors) -> bool {
    let all = [
        w.quality,
        w.cost,
        w.latency,
        w.elo,
        w.bandit,
        w.router_dc,
        w.knn,
    ];
    if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
        errors.push(
            format!("{path}.weights"),
            "weights must be non-negative numbers",
        );
        return false;
    }
    if all.iter().sum::<f64>() <= 0.0 {
        errors.push(
            format!("{path}.weights"),
            "give at least one component (quality, cost, latency, elo, bandit, routerDc, knn) a positive weight",
        );
        return false;
    }
    true
}

fn k_ok(k: usize, path: &str, errors: &mut Errors) -> bool {
    if k == 0 {
        errors.push(format!("{path}.k"), "must be at least 1");
    }
    k > 0
}

fn needs_encoder<'a>(
    encoder: Option<&'a Arc<EncoderHandle>>,
    path: &str,
    what: &str,
    errors: &mut Errors,
) -> Option<&'a Arc<EncoderHandle>> {
    if encoder.is_none() {
        errors.push(
            path.to_owned(),
            format!("{what} are compared in embedding space; configure inference.encoder"),
        );
    }
    encoder
}

fn embed(
    encoder: &EncoderHandle,
    texts: &[String],
    path: &str,
    errors: &mut Errors,
) -> Option<Vec<Vec<f32>>> {
    match encoder.embed_blocking(texts) {
        Ok(vectors) => Some(vectors.iter().map(|v| v.as_ref().clone()).collect()),
        Err(e) => {
            errors.push(path.to_owned(), format!("cannot embed: {e}"));
            None
        }
    }
}

fn knn(
    exemplars: &[RawKnnExemplar],
    path: &str,
    candidates: &[Candidate],
    models: &[Option<Model>],
    encoder: Option<&Arc<EncoderHandle>>,
    vectors: &mut DecisionVectors,
    errors: &mut Errors,
) -> bool {
    if exemplars.is_empty() {
        errors.push(
            format!("{path}.exemplars"),
            "list at least one labelled query",
        );
        return false;
    }
    let Some(encoder) = needs_encoder(encoder, &format!("{path}.exemplars"), "exemplars", errors)
    else {
        return false;
    };
    let name_of = |c: &Candidate| {
        models
            .get(c.model)
            .and_then(Option::as_ref)
            .map(|m| &*m.name)
    };
    let mut labels = Vec::new();
    let mut ok = true;
    for (i, exemplar) in exemplars.iter().enumerate() {
        match candidates
            .iter()
            .position(|c| name_of(c) == Some(exemplar.model.as_str()))
        {
            Some(candidate) => labels.push(candidate),
            None => {
                let known: Vec<&str> = candidates.iter().filter_map(name_of).collect();
                errors.push(
                    format!("{path}.exemplars[{i}].model"),
                    format!(
                        "{:?} is not one of this decision's modelRefs ({})",
                        exemplar.model,
                        known.join(", ")
                    ),
                );
                ok = false;
            }
        }
        if exemplar.text.trim().is_empty() {
            errors.push(format!("{path}.exemplars[{i}].text"), "must not be empty");
            ok = false;
        }
    }
    if !ok {
        return false;
    }
    let texts: Vec<String> = exemplars.iter().map(|e| e.text.trim().to_owned()).collect();
    let Some(embedded) = embed(encoder, &texts, &format!("{path}.exemplars"), errors) else {
        return false;
    };
    vectors.knn = embedded
        .into_iter()
        .zip(labels)
        .map(|(vector, candidate)| KnnExemplar { vector, candidate })
        .collect();
    true
}

fn descriptions(
    path: &str,
    candidates: &[Candidate],
    models: &[Option<Model>],
    encoder: Option<&Arc<EncoderHandle>>,
    vectors: &mut DecisionVectors,
    errors: &mut Errors,
) -> bool {
    let Some(encoder) = needs_encoder(encoder, path, "model descriptions", errors) else {
        return false;
    };
    let mut texts = Vec::new();
    for model in candidates
        .iter()
        .filter_map(|c| models.get(c.model)?.as_ref())
    {
        if model.description.trim().is_empty() && model.capabilities.is_empty() {
            errors.push(
                path.to_owned(),
                format!(
                    "router_dc compares the query with model descriptions; give model {:?} a description or capabilities",
                    model.name
                ),
            );
            return false;
        }
        texts.push(format!(
            "{}. Capabilities: {}.",
            model.description.trim(),
            model.capabilities.join(", ")
        ));
    }
    match embed(encoder, &texts, path, errors) {
        Some(embedded) => {
            vectors.descriptions = embedded;
            true
        }
        None => false,
    }
}

/// Loads the `learned` algorithm's router head, checks it reads this encoder's embeddings and
/// predicts for every candidate, and keeps it with each candidate's index in the head.
fn router_head(
    file: &Path,
    path: &str,
    candidates: &[Candidate],
    models: &[Option<Model>],
    encoder: Option<&Arc<EncoderHandle>>,
    vectors: &mut DecisionVectors,
    errors: &mut Errors,
) -> bool {
    let at = format!("{path}.router");
    let Some(encoder) = encoder else {
        errors.push(
            at,
            "the router head reads the request embedding; configure inference.encoder",
        );
        return false;
    };
    let head = match RouterHead::load(file) {
        Ok(head) => head,
        Err(e) => {
            errors.push(at, e.to_string());
            return false;
        }
    };
    let shown = file.display().to_string();
    if let Err(message) =
        super::heads::check_probe(&shown, &head.probe, &head.encoder, encoder, "train-router")
    {
        errors.push(at, message);
        return false;
    }
    let mut positions = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let Some(model) = models.get(candidate.model).and_then(Option::as_ref) else {
            return false;
        };
        match head.position(&model.name) {
            Some(i) => positions.push(i),
            None => {
                errors.push(
                    at,
                    format!(
                        "{shown} predicts for models {}, not for {:?}; retrain it with \
                         `mom-router train-router` on traces of this decision's models",
                        head.model_names().join(", "),
                        model.name
                    ),
                );
                return false;
            }
        }
    }
    vectors.router = Some(Arc::new(head));
    vectors.router_models = positions;
    true
}
