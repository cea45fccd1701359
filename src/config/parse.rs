//! YAML text → raw sections, element by element, so one bad entry does not hide the errors in
//! the others. Each error carries the full path (`decisions[2].modelRefs[0]`).

use super::error::Errors;
use super::raw::{
    RawDecision, RawIdentity, RawInference, RawModel, RawProjection, RawServer, RawSessions,
    RawSignal, RawState,
};
use serde::de::DeserializeOwned;
use serde_yaml::Value;

/// The raw document, section by section. Entries that failed to parse are absent.
#[derive(Debug, Default)]
pub struct RawConfig {
    /// Free-form version label.
    pub version: Option<String>,
    /// Server settings.
    pub server: Option<RawServer>,
    /// Neural inference settings.
    pub inference: Option<RawInference>,
    /// Where learned state lives.
    pub state: Option<RawState>,
    /// Session continuity.
    pub sessions: Option<RawSessions>,
    /// Run records.
    pub records: Option<super::raw_selection::RawRecords>,
    /// Span export.
    pub observability: Option<super::raw_selection::RawObservability>,
    /// Tenants and their limits.
    pub tenants: Option<super::raw_tenant::RawTenants>,
    /// Models.
    pub models: Vec<(usize, RawModel)>,
    /// Identities.
    pub identities: Vec<(usize, RawIdentity)>,
    /// Signals.
    pub signals: Vec<(usize, RawSignal)>,
    /// Decisions.
    pub decisions: Vec<(usize, RawDecision)>,
    /// Projections.
    pub projections: Vec<(usize, RawProjection)>,
    /// `(section, name)` of entries that failed to parse but have a readable `name`: references
    /// to them are not reported again as unknown.
    pub broken: Vec<(&'static str, String)>,
    /// The YAML of every named list entry, by `(section, name)`: identity contracts hash it.
    pub sources: std::collections::HashMap<(&'static str, String), Value>,
}

const SECTIONS: &[&str] = &[
    "version",
    "server",
    "inference",
    "state",
    "sessions",
    "records",
    "observability",
    "tenants",
    "models",
    "identities",
    "signals",
    "projections",
    "decisions",
];

/// Parses the document, recording every error in `errors`.
pub fn parse(text: &str, errors: &mut Errors) -> RawConfig {
    let mut raw = RawConfig::default();
    let document: Value = match serde_yaml::from_str(text) {
        Ok(document) => document,
        Err(e) => {
            errors.push("", format!("not valid YAML: {e}"));
            return raw;
        }
    };
    let Value::Mapping(sections) = document else {
        errors.push(
            "",
            "the configuration must be a YAML mapping with keys: version, server, inference, state, sessions, records, observability, tenants, models, identities, signals, projections, decisions",
        );
        return raw;
    };
    for (key, value) in sections {
        let Some(key) = key.as_str() else {
            errors.push("", format!("top-level key {key:?} is not a string"));
            continue;
        };
        match key {
            "version" => raw.version = item(value, "version", errors),
            "server" => raw.server = item(value, "server", errors),
            "inference" => raw.inference = item(value, "inference", errors),
            "state" => raw.state = item(value, "state", errors),
            "sessions" => raw.sessions = item(value, "sessions", errors),
            "records" => raw.records = item(value, "records", errors),
            "observability" => raw.observability = item(value, "observability", errors),
            "tenants" => raw.tenants = item(value, "tenants", errors),
            "models" | "identities" | "signals" | "decisions" | "projections" => {
                let section: &'static str = SECTIONS
                    .iter()
                    .find(|s| **s == key)
                    .copied()
                    .unwrap_or("models");
                remember_sources(&value, section, &mut raw.sources);
                match section {
                    "models" => raw.models = list(value, section, &mut raw.broken, errors),
                    "identities" => {
                        raw.identities = list(value, section, &mut raw.broken, errors);
                    }
                    "signals" => raw.signals = list(value, section, &mut raw.broken, errors),
                    "decisions" => raw.decisions = list(value, section, &mut raw.broken, errors),
                    _ => raw.projections = list(value, section, &mut raw.broken, errors),
                }
            }
            other => errors.push(
                other,
                format!(
                    "unknown top-level key; expected one of: {}",
                    SECTIONS.join(", ")
                ),
            ),
        }
    }
    raw
}

fn remember_sources(
    value: &Value,
    section: &'static str,
    sources: &mut std::collections::HashMap<(&'static str, String), Value>,
) {
    let Value::Sequence(items) = value else {
        return;
    };
    for item in items {
        if let Some(name) = item.get("name").and_then(Value::as_str) {
            sources.insert((section, name.to_owned()), item.clone());
        }
    }
}

fn item<T: DeserializeOwned>(value: Value, path: &str, errors: &mut Errors) -> Option<T> {
    match serde_path_to_error::deserialize(value) {
        Ok(parsed) => Some(parsed),
        Err(e) => {
            let inner = e.path().to_string();
            let full = if inner == "." {
                path.to_owned()
            } else {
                format!("{path}.{inner}")
            };
            errors.push(full, e.into_inner().to_string());
            None
        }
    }
}

fn list<T: DeserializeOwned>(
    value: Value,
    path: &'static str,
    broken: &mut Vec<(&'static str, String)>,
    errors: &mut Errors,
) -> Vec<(usize, T)> {
    match value {
        Value::Sequence(items) => {
            let mut parsed = Vec::new();
            for (i, value) in items.into_iter().enumerate() {
                let name = value.get("name").and_then(Value::as_str).map(str::to_owned);
                match item(value, &format!("{path}[{i}]"), errors) {
                    Some(entry) => parsed.push((i, entry)),
                    None => broken.extend(name.map(|n| (path, n))),
                }
            }
            parsed
        }
        Value::Null => Vec::new(),
        _ => {
            errors.push(path, "must be a list");
            Vec::new()
        }
    }
}
