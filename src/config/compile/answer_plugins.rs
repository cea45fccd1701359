//! The plugins that act on the answer rather than the request — the semantic cache and the
//! grounding check — checked and compiled.

use super::plugins::{is_header_name, PluginTables};
use crate::config::error::Errors;
use crate::config::plugin::{CacheRule, GroundingRule, Plugin};
use crate::config::raw::{RawCache, RawGrounding, RawGroundingAction};

/// Longest answer lifetime accepted (a week).
const MAX_CACHE_TTL_SECONDS: u64 = 7 * 24 * 3600;

/// A `semantic_cache` plugin: threshold a cosine (and an encoder to compute it), lifetime and
/// wait bounded, scope headers valid names.
pub(super) fn compile_cache(
    raw: &RawCache,
    path: &str,
    tables: &PluginTables<'_>,
    errors: &mut Errors,
) -> Option<Plugin> {
    let mut ok = true;
    if let Some(threshold) = raw.threshold {
        if !(threshold > 0.0 && threshold <= 1.0) {
            errors.push(
                format!("{path}.threshold"),
                format!("{threshold} is not a cosine in (0, 1]"),
            );
            ok = false;
        } else if !tables.encoder {
            errors.push(
                format!("{path}.threshold"),
                "a semantic lookup compares requests by meaning; configure inference.encoder or drop threshold for exact matches only",
            );
            ok = false;
        }
    }
    let ttl = raw.ttl_seconds.unwrap_or(600);
    if ttl == 0 || ttl > MAX_CACHE_TTL_SECONDS {
        errors.push(
            format!("{path}.ttlSeconds"),
            format!("{ttl} is outside 1..={MAX_CACHE_TTL_SECONDS}"),
        );
        ok = false;
    }
    let wait = raw.wait_ms.unwrap_or(1000);
    if wait > 60_000 {
        errors.push(
            format!("{path}.waitMs"),
            format!("{wait} is longer than Envoy's longest message timeout (60000)"),
        );
        ok = false;
    }
    let scope_headers: Vec<String> = match &raw.scope_headers {
        Some(names) => names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        None => vec!["x-tenant-id".to_owned(), "x-user-id".to_owned()],
    };
    for name in &scope_headers {
        if !is_header_name(name) {
            errors.push(
                format!("{path}.scopeHeaders"),
                format!("{name:?} is not a header name (letters, digits, '-', '_')"),
            );
            ok = false;
        }
    }
    ok.then(|| {
        Plugin::SemanticCache(CacheRule {
            threshold: raw.threshold.map(|t| t as f32),
            ttl: std::time::Duration::from_secs(ttl),
            shared: raw.shared,
            scope_headers,
            wait: std::time::Duration::from_millis(wait),
        })
    })
}

/// A `grounding` plugin: shares in [0, 1], a fallback exactly when it fails closed, an encoder.
pub(super) fn compile_grounding(
    raw: &RawGrounding,
    path: &str,
    tables: &PluginTables<'_>,
    errors: &mut Errors,
) -> Option<Plugin> {
    let mut ok = true;
    let mut share = |field: &str, value: Option<f64>, default: f64| {
        let value = value.unwrap_or(default);
        if !(0.0..=1.0).contains(&value) {
            errors.push(
                format!("{path}.{field}"),
                format!("{value} is outside [0, 1]"),
            );
            ok = false;
        }
        value as f32
    };
    let threshold = share("threshold", raw.threshold, 0.65);
    let lexical_weight = share("lexicalWeight", raw.lexical_weight, 0.4);
    let min_supported = share("minSupported", raw.min_supported, 1.0);
    let fallback = match (raw.on_fail, &raw.fallback) {
        (RawGroundingAction::Fail, Some(text)) if !text.trim().is_empty() => Some(text.clone()),
        (RawGroundingAction::Fail, _) => {
            errors.push(
                format!("{path}.fallback"),
                "onFail: fail answers with the declared fallback; write it",
            );
            ok = false;
            None
        }
        (RawGroundingAction::Warn, Some(_)) => {
            errors.push(
                format!("{path}.fallback"),
                "only onFail: fail answers with a fallback",
            );
            ok = false;
            None
        }
        (RawGroundingAction::Warn, None) => None,
    };
    if !tables.encoder {
        errors.push(
                path.to_owned(),
                "grounding compares the answer with the context by meaning; configure inference.encoder",
            );
        ok = false;
    }
    ok.then_some(Plugin::Grounding(GroundingRule {
        threshold,
        lexical_weight,
        min_supported,
        fallback,
    }))
}
