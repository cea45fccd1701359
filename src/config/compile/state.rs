//! The `state` section → [`Settings`], `sessions` → [`Sessions`], `records` and
//! `observability`.

use crate::config::error::Errors;
use crate::config::raw::{RawRecords, RawSessions, RawState, RawStateBackend};
use crate::config::raw_selection::{RawObservability, RawOtlpProtocol};
use crate::config::snapshot::{RecordSettings, Sessions};
use crate::observability::otlp::{OtlpProtocol, OtlpSettings};
use crate::state::{Backend, RedisSettings, Settings};
use std::time::Duration;

pub(super) fn compile_state(raw: Option<&RawState>, errors: &mut Errors) -> Option<Settings> {
    let defaults = Settings::default();
    let Some(raw) = raw else {
        return Some(defaults);
    };
    let mut ok = true;
    let mut positive = |path: &str, value: Option<u64>| {
        if value == Some(0) {
            errors.push(format!("state.{path}"), "must be greater than 0");
            ok = false;
        }
    };
    positive("latencyWindow", raw.latency_window.map(|v| v as u64));
    positive("latencyMaxAgeSeconds", raw.latency_max_age_seconds);
    positive("runTtlSeconds", raw.run_ttl_seconds);
    positive("maxRuns", raw.max_runs);
    positive("sessionTtlSeconds", raw.session_ttl_seconds);
    positive("cacheEntries", raw.cache_entries);
    if let Some(redis) = &raw.redis {
        positive("redis.refreshMs", redis.refresh_ms);
        positive("redis.timeoutMs", redis.timeout_ms);
    }
    if let Some(k) = raw.elo_k {
        if !k.is_finite() || k <= 0.0 {
            errors.push("state.eloK", format!("must be a positive number, got {k}"));
            ok = false;
        }
    }
    let backend = match (raw.backend, &raw.redis) {
        (RawStateBackend::Memory, None) => Some(Backend::Memory),
        (RawStateBackend::Memory, Some(_)) => {
            errors.push(
                "state.redis",
                "is read only with `backend: redis`; set the backend or remove this section",
            );
            None
        }
        (RawStateBackend::Redis, None) => {
            errors.push(
                "state.redis",
                "`backend: redis` needs `redis: {url: redis://HOST:PORT}`",
            );
            None
        }
        (RawStateBackend::Redis, Some(redis)) => {
            let named_ok = redis.password_env.as_deref().is_none_or(|name| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            if !named_ok {
                errors.push(
                    "state.redis.passwordEnv",
                    "must name an environment variable (letters, digits, `_`)",
                );
                None
            } else if redis.url.starts_with("redis://") || redis.url.starts_with("rediss://") {
                Some(Backend::Redis(RedisSettings {
                    url: redis.url.clone(),
                    key_prefix: redis.key_prefix.clone().unwrap_or_else(|| "mom".to_owned()),
                    refresh: Duration::from_millis(redis.refresh_ms.unwrap_or(250)),
                    timeout: Duration::from_millis(redis.timeout_ms.unwrap_or(100)),
                    password_env: redis.password_env.clone(),
                }))
            } else {
                errors.push(
                    "state.redis.url",
                    format!("{:?} is not a redis:// or rediss:// URL", redis.url),
                );
                None
            }
        }
    };
    let backend = backend?;
    ok.then(|| Settings {
        backend,
        latency_window: raw.latency_window.unwrap_or(defaults.latency_window),
        latency_max_age: raw
            .latency_max_age_seconds
            .map_or(defaults.latency_max_age, Duration::from_secs),
        elo_k: raw.elo_k.unwrap_or(defaults.elo_k),
        run_ttl: raw
            .run_ttl_seconds
            .map_or(defaults.run_ttl, Duration::from_secs),
        max_runs: raw.max_runs.unwrap_or(defaults.max_runs),
        session_ttl: raw
            .session_ttl_seconds
            .map_or(defaults.session_ttl, Duration::from_secs),
        cache_entries: raw.cache_entries.unwrap_or(defaults.cache_entries),
    })
}

/// The `records` section → [`RecordSettings`]; relative paths resolve against `base`.
pub(super) fn compile_records(
    raw: Option<&RawRecords>,
    state: Option<&RawState>,
    base: &std::path::Path,
    errors: &mut Errors,
) -> Option<Option<RecordSettings>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let mut ok = true;
    let path = raw.path.as_deref().map(str::trim);
    let stream = raw.redis_stream.as_deref().map(str::trim);
    match (path, stream) {
        (None, None) => {
            errors.push(
                "records",
                "name where records go: path (a JSONL file) and/or redisStream",
            );
            ok = false;
        }
        (Some(""), _) => {
            errors.push("records.path", "name the JSONL file records are written to");
            ok = false;
        }
        (_, Some("")) => {
            errors.push("records.redisStream", "name the Redis stream");
            ok = false;
        }
        _ => {}
    }
    let redis = state.is_some_and(|s| s.backend == RawStateBackend::Redis);
    if stream.is_some() && !redis {
        errors.push(
            "records.redisStream",
            "records reach Redis through the shared state; set state.backend: redis",
        );
        ok = false;
    }
    if raw.stream_max_len == Some(0) {
        errors.push("records.streamMaxLen", "must be greater than 0");
        ok = false;
    }
    if raw.max_bytes.is_some_and(|b| b < 1024) {
        errors.push("records.maxBytes", "must be at least 1024");
        ok = false;
    }
    if raw.redact == Some(false) && !raw.include_prompts {
        errors.push(
            "records.redact",
            "only recorded prompts are redacted; set includePrompts",
        );
        ok = false;
    }
    ok.then(|| {
        Some(RecordSettings {
            path: path.map(|p| base.join(p)),
            redis_stream: stream.map(|s| (s.to_owned(), raw.stream_max_len.unwrap_or(100_000))),
            max_bytes: raw.max_bytes.unwrap_or(64 << 20),
            max_files: raw.max_files.unwrap_or(5),
            include_prompts: raw.include_prompts,
            redact: raw.redact.unwrap_or(true),
        })
    })
}

pub(super) fn compile_sessions(raw: Option<&RawSessions>, errors: &mut Errors) -> Option<Sessions> {
    let raw = raw?;
    let headers: Vec<String> = raw
        .headers
        .clone()
        .unwrap_or_else(|| vec!["x-session-id".to_owned(), "x-conversation-id".to_owned()])
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    let mut ok = true;
    if headers.is_empty() {
        errors.push(
            "sessions.headers",
            "list at least one header, e.g. x-session-id",
        );
        ok = false;
    }
    for (i, header) in headers.iter().enumerate() {
        let valid = !header.is_empty()
            && header
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            errors.push(
                format!("sessions.headers[{i}]"),
                format!("{header:?} is not an HTTP header name"),
            );
            ok = false;
        }
    }
    let switch_margin = raw.switch_margin.unwrap_or(0.1);
    if !switch_margin.is_finite() || switch_margin < 0.0 {
        errors.push(
            "sessions.switchMargin",
            format!("must be a non-negative number, got {switch_margin}"),
        );
        ok = false;
    }
    ok.then(|| Sessions {
        headers,
        min_turns: raw.min_turns.unwrap_or(2),
        switch_margin,
    })
}

/// The `observability` section → the OTLP export settings, when configured.
pub(super) fn compile_observability(
    raw: Option<&RawObservability>,
    errors: &mut Errors,
) -> Option<Option<OtlpSettings>> {
    let Some(otlp) = raw.and_then(|r| r.otlp.as_ref()) else {
        return Some(None);
    };
    let mut ok = true;
    let endpoint = otlp.endpoint.trim();
    let valid = reqwest::Url::parse(endpoint)
        .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some());
    if !valid {
        errors.push(
            "observability.otlp.endpoint",
            format!("{endpoint:?} is not an http:// or https:// URL of the collector"),
        );
        ok = false;
    }
    if otlp.timeout_ms == Some(0) {
        errors.push("observability.otlp.timeoutMs", "must be greater than 0");
        ok = false;
    }
    let service_name = otlp.service_name.as_deref().map(str::trim);
    if service_name == Some("") {
        errors.push("observability.otlp.serviceName", "must not be empty");
        ok = false;
    }
    ok.then(|| {
        Some(OtlpSettings {
            endpoint: endpoint.to_owned(),
            protocol: match otlp.protocol {
                Some(RawOtlpProtocol::Http) => OtlpProtocol::Http,
                Some(RawOtlpProtocol::Grpc) | None => OtlpProtocol::Grpc,
            },
            service_name: service_name.unwrap_or("mom-router").to_owned(),
            timeout: std::time::Duration::from_millis(otlp.timeout_ms.unwrap_or(5000)),
        })
    })
}

/// A cache plugin shared through Redis needs the Redis state backend (its connection).
pub(super) fn check_shared_caches(raw: &crate::config::parse::RawConfig, errors: &mut Errors) {
    let redis = raw
        .state
        .as_ref()
        .is_some_and(|s| s.backend == RawStateBackend::Redis);
    if redis {
        return;
    }
    let plugins = raw
        .decisions
        .iter()
        .map(|(i, d)| (format!("decisions[{i}]"), &d.plugins))
        .chain(
            raw.identities
                .iter()
                .map(|(i, d)| (format!("identities[{i}]"), &d.plugins)),
        );
    for (path, plugins) in plugins {
        for (j, plugin) in plugins.iter().enumerate() {
            if let crate::config::raw::RawPlugin::SemanticCache(cache) = plugin {
                if !cache.shared {
                    continue;
                }
                errors.push(
                    format!("{path}.plugins[{j}].shared"),
                    "a shared cache keeps answers in Redis; set state.backend: redis with state.redis.url",
                );
            }
        }
    }
}
