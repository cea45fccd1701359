//! Identities as versioned contracts: objective, eligible models, bounds and required policies
//! are checked against the decisions the identity evaluates, and everything that gives the
//! identity its meaning is hashed into [`Identity::contract`] so a change without a version
//! bump can be refused.

use super::algorithms::compile_algorithm;
use super::known_names;
use super::projection_needs;
use crate::config::error::Errors;
use crate::config::raw::{RawAlgorithm, RawIdentity, RawLatencyMetric, RawObjective, RawPolicy};
use crate::config::snapshot::NameIndex;
use crate::config::snapshot::{
    Bounds, Decision, DecisionVectors, Fallback, Identity, Model, Objective, Policy,
};
use crate::config::{hex_sha256, Plugin, Snapshot};
use crate::decision::Rule;
use crate::inference::EncoderHandle;
use crate::selection::Candidate;
use crate::signals::{Needs, Signal, SignalKind};
use serde_json::Value as Json;
use serde_yaml::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The tables an identity is compiled against.
pub(super) struct Tables<'a> {
    pub models: &'a NameIndex,
    pub compiled_models: &'a [Option<Model>],
    pub decision_index: &'a NameIndex,
    pub decisions: &'a [Option<Decision>],
    pub signals: &'a [Option<Signal>],
    pub signal_index: &'a NameIndex,
    pub sources: &'a HashMap<(&'static str, String), Value>,
    pub encoder: Option<&'a Arc<EncoderHandle>>,
    /// Directory relative paths are resolved against.
    pub base: &'a std::path::Path,
}

pub(super) fn compile_identities(
    raw: &[(usize, RawIdentity)],
    tables: &Tables<'_>,
    errors: &mut Errors,
) -> Vec<(usize, Identity)> {
    raw.iter()
        .filter_map(|(i, identity)| {
            compile_identity(identity, &format!("identities[{i}]"), tables, errors)
                .map(|compiled| (*i, compiled))
        })
        .collect()
}

pub(super) fn model_ref(
    name: &str,
    path: String,
    tables: &Tables<'_>,
    errors: &mut Errors,
) -> Option<usize> {
    let found = tables.models.get(name).copied();
    if found.is_none() {
        errors.push(
            path,
            format!(
                "unknown model {name:?}; known models: {}",
                known_names(tables.models)
            ),
        );
    }
    found
}

fn compile_identity(
    identity: &RawIdentity,
    path: &str,
    tables: &Tables<'_>,
    errors: &mut Errors,
) -> Option<Identity> {
    let mut ok = true;
    if !super::is_route_name(&identity.name) {
        errors.push(
            format!("{path}.name"),
            format!(
                "{:?} is not a valid identity name; use letters, digits and . _ - : / (e.g. mom/auto)",
                identity.name
            ),
        );
        ok = false;
    }
    let eligible: Vec<usize> = match &identity.models {
        None => (0..tables.compiled_models.len()).collect(),
        Some(names) => {
            if names.is_empty() {
                errors.push(format!("{path}.models"), "list at least one model");
                ok = false;
            }
            let mut found = Vec::new();
            for (j, name) in names.iter().enumerate() {
                match model_ref(name, format!("{path}.models[{j}]"), tables, errors) {
                    Some(index) => found.push(index),
                    None => ok = false,
                }
            }
            found
        }
    };
    let objective = match identity.objective {
        RawObjective::Auto => Objective::Auto,
        RawObjective::Latency => Objective::Latency,
        RawObjective::Cost => Objective::Cost,
        RawObjective::Quality => Objective::Quality,
    };
    let bounds = bounds(identity, path, errors, &mut ok);
    let default_model = match &identity.default_model {
        Some(name) => {
            let found = model_ref(name, format!("{path}.defaultModel"), tables, errors);
            if found.is_some_and(|m| m != super::BROKEN && !eligible.contains(&m)) {
                errors.push(
                    format!("{path}.defaultModel"),
                    format!("{name:?} is not one of the identity's models"),
                );
                ok = false;
            }
            ok &= found.is_some();
            found
        }
        None if objective == Objective::Auto => {
            errors.push(
                format!("{path}.defaultModel"),
                "name the model that serves when no decision matches (or set an objective: latency, cost, quality)",
            );
            ok = false;
            None
        }
        None => None,
    };
    let selected = selected_decisions(identity, path, tables, errors, &mut ok);
    for &d in &selected {
        let Some(decision) = tables.decisions.get(d).and_then(Option::as_ref) else {
            continue;
        };
        for candidate in &decision.candidates {
            if !eligible.contains(&candidate.model) {
                let model = tables.compiled_models[candidate.model]
                    .as_ref()
                    .map_or("?", |m| &*m.name);
                errors.push(
                    format!("{path}.decisions"),
                    format!(
                        "decision {:?} routes to {model:?}, which is not one of the identity's models; add it to models or drop the decision",
                        decision.name
                    ),
                );
                ok = false;
            }
        }
    }
    let plugins = super::plugins::compile_plugins(
        &identity.plugins,
        &format!("{path}.plugins"),
        &super::plugins::PluginTables {
            signal_index: tables.signal_index,
            signals: tables.signals,
            models: tables.models,
            encoder: tables.encoder.is_some(),
        },
        errors,
    );
    ok &= plugins.is_some();
    let plugins = plugins.unwrap_or_default();
    let mut signals = Vec::new();
    for decision in selected
        .iter()
        .filter_map(|&d| tables.decisions.get(d)?.as_ref())
    {
        decision.rule.collect_signals(&mut signals);
        signals.extend(decision.plugins.iter().filter_map(Plugin::signal));
    }
    signals.extend(plugins.iter().filter_map(Plugin::signal));
    signals.extend(projection_needs(&signals, tables.signals));
    signals.sort_unstable();
    signals.dedup();
    let requires = policies(identity, path, &signals, tables, errors, &mut ok);
    if objective != Objective::Auto && identity.default_model.is_some() {
        errors.push(
            format!("{path}.defaultModel"),
            format!(
                "the {} objective chooses among the identity's models; remove defaultModel or use objective: auto",
                objective.name()
            ),
        );
        ok = false;
    }
    let fallback = if objective == Objective::Auto {
        default_model.map(Fallback::Default)
    } else if ok {
        objective_decision(
            identity, objective, &bounds, &eligible, path, tables, errors,
        )
        .map(|d| Fallback::Objective(Box::new(d)))
    } else {
        None
    };
    let mut needs = Needs::of(
        signals
            .iter()
            .filter_map(|&s| tables.signals.get(s).and_then(Option::as_ref))
            .map(|signal| &signal.kind),
    );
    let fallback_decision = match &fallback {
        Some(Fallback::Objective(decision)) => Some(decision.as_ref()),
        _ => None,
    };
    needs.embedding |= selected
        .iter()
        .filter_map(|&d| tables.decisions.get(d)?.as_ref())
        .chain(fallback_decision)
        .any(|d| d.algorithm.needs_embedding());
    // Tool selection and a semantic cache lookup compare with the last user message's
    // embedding.
    let reads_query = |plugins: &[Plugin]| {
        plugins.iter().any(|p| match p {
            Plugin::ToolSelection { .. } => true,
            Plugin::SemanticCache(rule) => rule.threshold.is_some(),
            _ => false,
        })
    };
    needs.embedding |= reads_query(&plugins)
        || selected
            .iter()
            .filter_map(|&d| tables.decisions.get(d)?.as_ref())
            .any(|d| reads_query(&d.plugins));
    let contract = contract_hash(identity, &selected, &signals, &eligible, tables);
    let failover = identity.failover.as_ref().map(|raw| {
        let path = format!("{path}.failover");
        super::failover::compile_failover(raw, &path, &eligible, &selected, tables, errors)
    });
    let failover = match failover {
        Some(Some(failover)) => Some(Arc::new(failover)),
        Some(None) => return None,
        None => None,
    };
    let fallback = fallback?;
    ok.then(|| Identity {
        name: identity.name.as_str().into(),
        version: identity.version.as_str().into(),
        description: identity.description.clone(),
        objective,
        eligible,
        bounds,
        requires,
        fallback,
        decisions: selected,
        signals,
        needs,
        failover,
        contract,
        plugins,
    })
}

fn bounds(identity: &RawIdentity, path: &str, errors: &mut Errors, ok: &mut bool) -> Bounds {
    let raw = identity.bounds;
    for (field, value) in [
        ("maxCostPerRequest", raw.max_cost_per_request),
        ("latencySloMs", raw.latency_slo_ms),
    ] {
        if value.is_some_and(|v| !v.is_finite() || v <= 0.0) {
            errors.push(
                format!("{path}.bounds.{field}"),
                "must be a positive number",
            );
            *ok = false;
        }
    }
    if raw.min_quality.is_some_and(|q| !(0.0..=1.0).contains(&q)) {
        errors.push(
            format!("{path}.bounds.minQuality"),
            "must be between 0 and 1",
        );
        *ok = false;
    }
    Bounds {
        max_cost: raw.max_cost_per_request,
        latency_slo_ms: raw.latency_slo_ms,
        min_quality: raw.min_quality,
    }
}

fn selected_decisions(
    identity: &RawIdentity,
    path: &str,
    tables: &Tables<'_>,
    errors: &mut Errors,
    ok: &mut bool,
) -> Vec<usize> {
    match &identity.decisions {
        None => (0..tables.decisions.len()).collect(),
        Some(names) => names
            .iter()
            .enumerate()
            .filter_map(|(j, name)| {
                let found = tables.decision_index.get(name).copied();
                if found.is_none() {
                    *ok = false;
                    errors.push(
                        format!("{path}.decisions[{j}]"),
                        format!(
                            "unknown decision {name:?}; known decisions: {}",
                            known_names(tables.decision_index)
                        ),
                    );
                }
                found
            })
            .collect(),
    }
}

fn policies(
    identity: &RawIdentity,
    path: &str,
    signals: &[usize],
    tables: &Tables<'_>,
    errors: &mut Errors,
    ok: &mut bool,
) -> Vec<Policy> {
    let evaluates = |wanted: fn(&SignalKind) -> bool| {
        signals
            .iter()
            .filter_map(|&s| tables.signals.get(s)?.as_ref())
            .any(|signal| wanted(&signal.kind))
    };
    let mut requires = Vec::new();
    for (j, policy) in identity.requires.iter().enumerate() {
        let (policy, present) = match policy {
            RawPolicy::Jailbreak => (
                Policy::Jailbreak,
                evaluates(|k| matches!(k, SignalKind::Jailbreak(_))),
            ),
            RawPolicy::Pii => (Policy::Pii, evaluates(|k| matches!(k, SignalKind::Pii(_)))),
            RawPolicy::Grounding => (
                Policy::Grounding,
                identity
                    .plugins
                    .iter()
                    .any(|p| matches!(p, crate::config::raw::RawPlugin::Grounding(_))),
            ),
        };
        if !present {
            let missing = match policy {
                Policy::Grounding => {
                    "has no grounding plugin (plugins: [{type: grounding, …}])".to_owned()
                }
                _ => format!("none of its decisions reads a {} signal", policy.name()),
            };
            errors.push(
                format!("{path}.requires[{j}]"),
                format!("the identity requires {} but {missing}", policy.name()),
            );
            *ok = false;
        }
        if !requires.contains(&policy) {
            requires.push(policy);
        }
    }
    requires
}

/// The decision standing for an objective: its algorithm over the eligible models.
fn objective_decision(
    identity: &RawIdentity,
    objective: Objective,
    bounds: &Bounds,
    eligible: &[usize],
    path: &str,
    tables: &Tables<'_>,
    errors: &mut Errors,
) -> Option<Decision> {
    let raw = match objective {
        Objective::Auto => return None,
        Objective::Latency => RawAlgorithm::LatencyAware {
            metric: RawLatencyMetric::Total,
            percentile: 90.0,
            min_samples: 3,
        },
        Objective::Cost => RawAlgorithm::CostAware {
            quality_floor: bounds.min_quality.unwrap_or(0.0),
        },
        Objective::Quality => RawAlgorithm::QualityBudget {
            max_cost: bounds.max_cost,
            max_latency_ms: bounds.latency_slo_ms,
            metric: RawLatencyMetric::Total,
            percentile: 90.0,
        },
    };
    let candidates: Vec<Candidate> = eligible
        .iter()
        .map(|&model| Candidate { model, weight: 1.0 })
        .collect();
    let objective_path = format!("{path}.objective");
    let (algorithm, vectors): (_, DecisionVectors) = compile_algorithm(
        &raw,
        &objective_path,
        &candidates,
        tables.compiled_models,
        tables.encoder,
        tables.base,
        errors,
    )?;
    Some(Decision {
        name: format!("objective:{}", objective.name()).into(),
        description: format!("{}'s {} objective", identity.name, objective.name()),
        priority: i32::MIN,
        rule: Rule::All(Vec::new()),
        candidates,
        algorithm,
        vectors,
        looper: None,
        contract: None,
        plugins: Vec::new(),
    })
}

/// Hex SHA-256 over the canonical JSON of what gives the identity its meaning.
fn contract_hash(
    identity: &RawIdentity,
    decisions: &[usize],
    signals: &[usize],
    eligible: &[usize],
    tables: &Tables<'_>,
) -> String {
    let source = |section: &'static str, name: &str| -> Json {
        tables
            .sources
            .get(&(section, name.to_owned()))
            .and_then(|v| serde_json::to_value(v).ok())
            .map(canonical)
            .unwrap_or(Json::Null)
    };
    let without = |mut value: Json, fields: &[&str]| {
        if let Json::Object(map) = &mut value {
            for field in fields {
                map.remove(*field);
            }
        }
        value
    };
    let decision_names: Vec<&str> = decisions
        .iter()
        .filter_map(|&d| tables.decisions.get(d)?.as_ref())
        .map(|d| &*d.name)
        .collect();
    let signal_sources: Vec<Json> = signals
        .iter()
        .filter_map(|&s| tables.signals.get(s)?.as_ref())
        .map(|signal| match source("signals", &signal.name) {
            Json::Null => signal
                .name
                .rsplit_once('.')
                .map_or(Json::Null, |(projection, _)| {
                    source("projections", projection)
                }),
            found => found,
        })
        .collect();
    let mut models: Vec<usize> = eligible.to_vec();
    models.sort_unstable();
    let document = serde_json::json!({
        // Failover and capacity are operational: they change who serves, not what the
        // identity promises.
        "identity": without(source("identities", &identity.name), &["version", "description", "failover"]),
        "decisions": decision_names.iter().map(|d| without(source("decisions", d), &["description"])).collect::<Vec<_>>(),
        "signals": signal_sources,
        "models": models.iter().filter_map(|&m| tables.compiled_models.get(m)?.as_ref()).map(|m| without(source("models", &m.name), &["description", "maxConcurrency"])).collect::<Vec<_>>(),
    });
    hex_sha256(document.to_string().as_bytes())
}

/// Objects with their keys sorted, recursively, so key order in the YAML does not matter.
fn canonical(value: Json) -> Json {
    match value {
        Json::Object(map) => {
            let mut entries: Vec<(String, Json)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Json::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Json::Array(items) => Json::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// Identities whose contract changed between `previous` and `next` without a version bump.
pub fn unversioned_changes(previous: &Snapshot, next: &Snapshot) -> Vec<(String, String)> {
    let mut changes = Vec::new();
    for (i, identity) in next.identities.iter().enumerate() {
        let Some(before) = previous.identity(&identity.name) else {
            continue;
        };
        if before.version == identity.version && before.contract != identity.contract {
            changes.push((
                format!("identities[{i}].version"),
                format!(
                    "{} changed meaning (contract {} → {}) but kept version {:?}; bump the version",
                    identity.name,
                    &before.contract[..12],
                    &identity.contract[..12],
                    identity.version
                ),
            ));
        }
    }
    changes
}
