//! Raw sections → [`Snapshot`]. Checks every cross-reference and every value, collecting all
//! errors; each names its path and says what would fix it. Signals and decisions compile in
//! [`signals`], the models they use in [`models`].

mod algorithms;
mod answer_plugins;
mod contracts;
mod failover;
mod heads;
mod identities;
mod loopers;
mod models;
mod plugins;
mod projections;
mod signals;
mod state;
mod tenants;

use self::models::{compile_encoder, compile_ner};
use self::signals::{compile_decisions, compile_signals, signal_name, Models};
use crate::config::error::Errors;
use crate::config::parse::RawConfig;
use crate::config::raw::RawModel;
use crate::config::snapshot::NameIndex;
use crate::config::snapshot::{
    CallDeadlines, Decision, Fallback, Listen, Model, Pricing, Server, Snapshot,
};
use crate::protocol::Protocol;
use crate::signals::text::FencedCode;
use crate::signals::{Signal, SignalKind};
use std::path::Path;
use std::sync::Arc;

/// Default ext_proc address.
pub const DEFAULT_GRPC_LISTEN: &str = "127.0.0.1:50051";
/// Default admin address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9190";
/// Default address of Envoy's internal listener.
pub const DEFAULT_INTERNAL_URL: &str = "http://127.0.0.1:10001";
/// Default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Compiles the raw document. `hash` is the hex SHA-256 of the source text; relative paths are
/// resolved against `base`. Loads (or reuses) the encoder when `inference.encoder` is set.
pub fn compile(raw: RawConfig, hash: &str, base: &Path, errors: &mut Errors) -> Option<Snapshot> {
    let server = compile_server(&raw, errors);
    let state = state::compile_state(raw.state.as_ref(), errors);
    let sessions = state::compile_sessions(raw.sessions.as_ref(), errors);
    let records = state::compile_records(raw.records.as_ref(), raw.state.as_ref(), base, errors);
    let otlp = state::compile_observability(raw.observability.as_ref(), errors);
    let encoder = raw
        .inference
        .as_ref()
        .and_then(|inference| inference.encoder.as_ref())
        .and_then(|encoder| compile_encoder(encoder, base, errors));
    let ner = raw
        .inference
        .as_ref()
        .and_then(|inference| inference.ner.as_ref())
        .and_then(|ner| compile_ner(ner, base, errors));
    let neural_models = Models {
        encoder: encoder.as_ref(),
        ner: ner.as_ref(),
        base,
    };
    // Names index every parsed entry, valid or not, so one bad entry does not turn each
    // reference to it into a second, misleading "unknown" error.
    let model_index = index_by_name(
        raw.models.iter().map(|(i, m)| (*i, m.name.as_str())),
        "models",
        &raw.broken,
        errors,
    );
    let models = compile_models(&raw.models, errors);
    let signal_index = index_by_name(
        raw.signals.iter().map(|(i, s)| (*i, signal_name(s))),
        "signals",
        &raw.broken,
        errors,
    );
    let mut signal_index = signal_index;
    let mut signals = compile_signals(&raw.signals, &neural_models, errors);
    // Projection outputs join the table after the ordinary signals they read.
    for output in projections::compile_projections(&raw.projections, &signal_index, errors) {
        if signal_index
            .insert(output.name.to_string(), signals.len())
            .is_some()
        {
            errors.push(
                "projections",
                format!(
                    "{:?} is both a signal and a projection output; rename one",
                    output.name
                ),
            );
        }
        signals.push(Some(output));
    }
    let decision_index = index_by_name(
        raw.decisions.iter().map(|(i, d)| (*i, d.name.as_str())),
        "decisions",
        &raw.broken,
        errors,
    );
    let decisions = compile_decisions(
        &raw.decisions,
        &model_index,
        &models,
        &signal_index,
        &signals,
        &neural_models,
        errors,
    );
    let identities = identities::compile_identities(
        &raw.identities,
        &identities::Tables {
            models: &model_index,
            compiled_models: &models,
            decision_index: &decision_index,
            decisions: &decisions,
            signals: &signals,
            signal_index: &signal_index,
            sources: &raw.sources,
            encoder: encoder.as_ref(),
            base,
        },
        errors,
    );
    state::check_shared_caches(&raw, errors);
    if raw.identities.is_empty() && errors.is_empty() {
        errors.push(
            "identities",
            "declare at least one identity (e.g. mom/auto) with a defaultModel",
        );
    }
    let identity_index = index_by_name(
        identities.iter().map(|(i, d)| (*i, &*d.name)),
        "identities",
        &raw.broken,
        errors,
    );
    for (i, identity) in &identities {
        if model_index.contains_key(&*identity.name) {
            errors.push(
                format!("identities[{i}].name"),
                format!(
                    "{:?} is also a model name; an identity and a model cannot share a name",
                    identity.name
                ),
            );
        }
    }
    let callable = |name: &str| identity_index.contains_key(name) || model_index.contains_key(name);
    let tenants = raw
        .tenants
        .as_ref()
        .map(|t| tenants::compile_tenants(t, &callable, errors));
    let label = raw.version.unwrap_or_else(|| "unversioned".to_owned());
    let server = server?;
    let state = state?;
    let records = records?;
    let otlp = otlp?;
    if !errors.is_empty() {
        return None;
    }
    let decisions: Vec<Decision> = decisions.into_iter().collect::<Option<_>>()?;
    let tenants = match tenants {
        Some(compiled) => Some(Arc::new(compiled?)),
        None => None,
    };
    // Identities' objectives and latency or cost bounds read observations too.
    let identities_observe = identities.iter().any(|(_, identity)| {
        identity.bounds.latency_slo_ms.is_some()
            || identity.bounds.max_cost.is_some()
            || matches!(&identity.fallback, Fallback::Objective(d) if d.algorithm.observes_responses())
    });
    // A cache wait longer than Envoy's default message timeout allows asks for time too.
    let cache_waits = decisions
        .iter()
        .flat_map(|d| &d.plugins)
        .chain(identities.iter().flat_map(|(_, i)| &i.plugins))
        .filter_map(|p| match p {
            crate::config::Plugin::SemanticCache(rule)
                if rule.wait > crate::config::CacheRule::UNEXTENDED_WAIT =>
            {
                Some(rule.wait)
            }
            _ => None,
        });
    let looper_budget = decisions
        .iter()
        .filter_map(|d| d.looper.as_ref().map(crate::config::Looper::total))
        .chain(cache_waits)
        .max();
    let models: Vec<Model> = models.into_iter().collect::<Option<_>>()?;
    // A recorded energy estimate needs each forwarded call's total time.
    let energy_recorded = records.is_some() && models.iter().any(|m| m.power_watts.is_some());
    let mut signals: Vec<Signal> = signals.into_iter().collect::<Option<_>>()?;
    let keywords = match keyword_index(&mut signals) {
        Ok(index) => Arc::new(index),
        Err(reason) => {
            errors.push(
                "signals",
                format!("cannot combine the keyword signals: {reason}"),
            );
            return None;
        }
    };
    let observe_responses = identities_observe
        || tenants.as_ref().is_some_and(|t| t.counts_usage())
        || energy_recorded
        || otlp.is_some()
        || decisions.iter().any(|d| d.algorithm.observes_responses());
    let answer_work = |d: &Decision| {
        d.looper.is_some()
            || d.contract.is_some()
            || d.plugins.iter().any(crate::config::Plugin::reads_answer)
    };
    // Every answer to a tenant's request carries its x-ratelimit-* headers.
    let response_work = observe_responses
        || tenants.is_some()
        || records.is_some()
        || decisions.iter().any(answer_work)
        || identities.iter().any(|(_, identity)| {
            identity
                .plugins
                .iter()
                .any(crate::config::Plugin::reads_answer)
                || matches!(&identity.fallback, Fallback::Objective(d) if answer_work(d))
        });
    let fails_over = identities.iter().any(|(_, i)| i.failover.is_some());
    Some(Snapshot {
        looper_budget,
        observe_responses,
        response_work,
        fails_over,
        version: format!("{label}@{}", &hash[..12.min(hash.len())]).into(),
        server,
        state,
        records,
        otlp,
        sessions,
        tenants,
        models,
        identities: identities.into_iter().map(|(_, i)| i).collect(),
        keywords,
        signals,
        decisions,
        encoder,
        ner_fenced_code: ner.as_ref().map_or(FencedCode::Read, |n| n.fenced_code),
        ner: ner.map(|n| n.handle),
        call_deadlines: call_deadlines(raw.inference.as_ref()),
        model_index,
        identity_index,
        artifact: None,
    })
}

/// The configured `callTimeoutMs` of each model (at least 1 ms).
fn call_deadlines(inference: Option<&crate::config::raw::RawInference>) -> CallDeadlines {
    let deadline = |ms: Option<u64>| ms.map(|ms| std::time::Duration::from_millis(ms.max(1)));
    CallDeadlines {
        encoder: deadline(inference.and_then(|i| i.encoder.as_ref()?.call_timeout_ms)),
        ner: deadline(inference.and_then(|i| i.ner.as_ref()?.call_timeout_ms)),
    }
}

/// What referenced projection outputs add to an identity's signals: the signals each projection
/// reads (evaluated before it, as their indices are lower) and its other outputs (so `explain`
/// shows every band, not only the referenced one).
pub(super) fn projection_needs(referenced: &[usize], compiled: &[Option<Signal>]) -> Vec<usize> {
    let projection_of = |index: usize| match &compiled.get(index)?.as_ref()?.kind {
        SignalKind::Projection(output) => Some(output.projection.clone()),
        _ => None,
    };
    let mut needs = Vec::new();
    for projection in referenced.iter().filter_map(|&s| projection_of(s)) {
        needs.extend(projection.inputs());
        needs.extend((0..compiled.len()).filter(|&i| {
            projection_of(i).is_some_and(|other| std::sync::Arc::ptr_eq(&other, &projection))
        }));
    }
    needs
}

/// Names of entries that failed to parse map to this position, which no list holds.
pub(super) const BROKEN: usize = usize::MAX;

/// Maps names to positions in the compiled list; duplicates are errors.
fn index_by_name<'a>(
    names: impl Iterator<Item = (usize, &'a str)>,
    section: &'static str,
    broken: &[(&'static str, String)],
    errors: &mut Errors,
) -> NameIndex {
    let mut index = NameIndex::default();
    for (position, (raw_index, name)) in names.enumerate() {
        if index.insert(name.to_owned(), position).is_some() {
            errors.push(
                format!("{section}[{raw_index}].name"),
                format!("duplicate name {name:?}; names in {section} must be unique"),
            );
        }
    }
    for (_, name) in broken.iter().filter(|(s, _)| *s == section) {
        index.entry(name.clone()).or_insert(BROKEN);
    }
    index
}

fn compile_server(raw: &RawConfig, errors: &mut Errors) -> Option<Server> {
    let server = raw.server.as_ref();
    let grpc = server
        .and_then(|s| s.grpc_listen.clone())
        .unwrap_or_else(|| DEFAULT_GRPC_LISTEN.to_owned());
    let admin = server
        .and_then(|s| s.admin_listen.clone())
        .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.to_owned());
    let max_body_bytes = server
        .and_then(|s| s.max_body_bytes)
        .unwrap_or(DEFAULT_MAX_BODY_BYTES);
    let grpc_listen = match grpc.strip_prefix("unix:") {
        Some(path) if !path.is_empty() => Some(Listen::Unix(path.into())),
        Some(_) => {
            errors.push("server.grpcListen", "give a socket path after `unix:`");
            None
        }
        None => parse_addr(&grpc, "server.grpcListen", errors).map(Listen::Tcp),
    };
    let admin_listen = parse_addr(&admin, "server.adminListen", errors);
    if let Some(url) = server.and_then(|s| s.internal_url.as_deref()) {
        let host = url.strip_prefix("http://").unwrap_or("");
        if host.is_empty() || host.contains('/') && !host.ends_with('/') {
            errors.push(
                "server.internalUrl",
                format!("{url:?} is not an http://HOST:PORT address of Envoy's internal listener"),
            );
        }
    }
    let envoy_admin = server.and_then(|s| s.envoy_admin.clone());
    if let Some(url) = &envoy_admin {
        if url
            .strip_prefix("http://")
            .is_none_or(|host| host.is_empty())
        {
            errors.push(
                "server.envoyAdmin",
                format!("{url:?} is not an http://HOST:PORT address of Envoy's admin listener"),
            );
        }
    }
    if max_body_bytes == 0 {
        errors.push("server.maxBodyBytes", "must be greater than 0");
    }
    Some(Server {
        envoy_admin,
        grpc_listen: grpc_listen?,
        admin_listen: admin_listen?,
        max_body_bytes,
        list_models: server.and_then(|s| s.list_models).unwrap_or(true),
        internal_url: server
            .and_then(|s| s.internal_url.clone())
            .unwrap_or_else(|| DEFAULT_INTERNAL_URL.to_owned()),
    })
}

fn parse_addr(text: &str, path: &str, errors: &mut Errors) -> Option<std::net::SocketAddr> {
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            errors.push(
                path,
                format!("{text:?} is not an IP:PORT address (e.g. 127.0.0.1:50051)"),
            );
            None
        }
    }
}

pub(super) fn is_route_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/'))
}

/// One entry per parsed model, `None` where the model is invalid.
fn compile_models(raw: &[(usize, RawModel)], errors: &mut Errors) -> Vec<Option<Model>> {
    let mut models = Vec::new();
    for (i, model) in raw {
        let path = format!("models[{i}]");
        let mut ok = true;
        if !is_route_name(&model.name) {
            errors.push(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid route name; use letters, digits and . _ - : /",
                    model.name
                ),
            );
            ok = false;
        } else if model.name.starts_with("mom/") {
            errors.push(
                format!("{path}.name"),
                "names starting with mom/ are reserved for identities; rename the model",
            );
            ok = false;
        }
        if model.provider_model.trim().is_empty() {
            errors.push(
                format!("{path}.providerModel"),
                "give the model id the upstream server expects",
            );
            ok = false;
        }
        if let Some(q) = model.quality {
            if !(0.0..=1.0).contains(&q) {
                errors.push(
                    format!("{path}.quality"),
                    format!("must be between 0 and 1, got {q}"),
                );
                ok = false;
            }
        }
        if let Some(p) = &model.pricing {
            for (field, value) in [
                ("inputPerMillion", p.input_per_million),
                ("outputPerMillion", p.output_per_million),
            ] {
                if !value.is_finite() || value < 0.0 {
                    errors.push(
                        format!("{path}.pricing.{field}"),
                        format!("must be a non-negative number, got {value}"),
                    );
                    ok = false;
                }
            }
        }
        if let Some(watts) = model.power_watts {
            if !watts.is_finite() || watts <= 0.0 {
                errors.push(
                    format!("{path}.powerWatts"),
                    format!("must be a positive number of watts, got {watts}"),
                );
                ok = false;
            }
        }
        if !model.protocols.is_empty() && !model.protocols.contains(&Protocol::Chat) {
            errors.push(
                format!("{path}.protocols"),
                "must include chat: translated requests and mom-router's own sub-requests \
                 speak Chat Completions"
                    .to_owned(),
            );
            ok = false;
        }
        let mut count = |field: &str, value: Option<i64>, least: i64, unit: &str| {
            let value = value?;
            match u32::try_from(value) {
                Ok(n) if value >= least => Some(n),
                _ => {
                    errors.push(
                        format!("{path}.{field}"),
                        format!("must be at least {least} {unit}, not {value}"),
                    );
                    ok = false;
                    None
                }
            }
        };
        let max_concurrency = count(
            "maxConcurrency",
            model.max_concurrency,
            1,
            "request at a time",
        );
        let max_queue = count("maxQueue", model.max_queue, 0, "waiting requests");
        let queue_metrics = model.queue_metrics.as_ref().and_then(|raw| {
            let interval = raw.interval_ms.unwrap_or(1000);
            if model.max_concurrency.is_none() {
                errors.push(
                    format!("{path}.queueMetrics"),
                    "a backend's queue counts against maxConcurrency: declare it too",
                );
                ok = false;
            }
            if interval < 100 {
                errors.push(
                    format!("{path}.queueMetrics.intervalMs"),
                    format!("must be at least 100 milliseconds, not {interval}"),
                );
                ok = false;
            }
            let interval = std::time::Duration::from_millis(u64::try_from(interval).ok()?);
            Some((raw.format, interval))
        });
        let first_byte_timeout = match model.first_byte_timeout_ms {
            Some(ms) if ms <= 0 => {
                errors.push(
                    format!("{path}.firstByteTimeoutMs"),
                    format!("must be a positive number of milliseconds, not {ms}"),
                );
                ok = false;
                None
            }
            Some(ms) => Some(std::time::Duration::from_millis(ms.unsigned_abs())),
            None => None,
        };
        if max_queue.is_some() && model.max_concurrency.is_none() {
            errors.push(
                format!("{path}.maxQueue"),
                "a queue bound needs maxConcurrency (the slots it waits for)",
            );
            ok = false;
        }
        let mut native: Vec<Protocol> = Vec::new();
        for protocol in &model.protocols {
            if *protocol != Protocol::Chat && !native.contains(protocol) {
                native.push(*protocol);
            }
        }
        models.push(ok.then(|| Model {
            name: model.name.as_str().into(),
            provider_model: model.provider_model.as_str().into(),
            description: model.description.clone(),
            context_window: model.context_window,
            pricing: model.pricing.as_ref().map(|p| Pricing {
                input_per_million: p.input_per_million,
                output_per_million: p.output_per_million,
            }),
            capabilities: model.capabilities.clone(),
            quality: model.quality,
            power_watts: model.power_watts,
            native,
            max_concurrency,
            max_queue,
            queue_metrics,
            first_byte_timeout,
        }));
    }
    models
}

pub(super) fn known_names(index: &NameIndex) -> String {
    let mut names: Vec<(&usize, &str)> = index.iter().map(|(n, i)| (i, n.as_str())).collect();
    names.sort_unstable();
    let names: Vec<&str> = names.into_iter().map(|(_, n)| n).collect();
    if names.is_empty() {
        "(none declared)".to_owned()
    } else {
        names.join(", ")
    }
}

pub use identities::unversioned_changes;

/// Gives every keyword signal its slot and builds the policy's combined keyword matcher.
fn keyword_index(
    signals: &mut [Signal],
) -> Result<crate::signals::keyword_index::KeywordIndex, String> {
    let mut slot = 0;
    for signal in signals.iter_mut() {
        if let SignalKind::Keyword(keyword) = &mut signal.kind {
            keyword.slot = Some(slot);
            slot += 1;
        }
    }
    let keyword_signals: Vec<&crate::signals::KeywordSignal> = signals
        .iter()
        .filter_map(|s| match &s.kind {
            SignalKind::Keyword(keyword) => Some(keyword),
            _ => None,
        })
        .collect();
    crate::signals::keyword_index::KeywordIndex::new(&keyword_signals)
}
