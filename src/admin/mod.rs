//! The admin HTTP server: `/live`, `/ready`, `/metrics` (Prometheus text), `/config`, `/lock`
//! (the resolution lock), `POST /v1/outcomes` (feedback for the learning algorithms) and
//! `GET /v1/tenants/{id}/usage` (what a tenant has left).

mod outcomes;
mod usage;

pub use outcomes::{parse as parse_outcomes, MAX_OUTCOMES};

use crate::config::ConfigStore;
use crate::inference::EncoderStats;
use crate::observability::Metrics;
use crate::state::StateStore;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// The live configuration.
    pub store: Arc<ConfigStore>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Learned statistics and remembered runs.
    pub state: Arc<StateStore>,
    /// The resolution lock, once resolved.
    pub lock: crate::lock::LockSlot,
    /// Where reported outcomes are recorded, when run records are on.
    pub records: Option<crate::records::RecordSink>,
    /// Who may post outcomes.
    pub outcomes_auth: OutcomesAuth,
    /// Set once the process is stopping: `/ready` answers 503.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

/// The environment variable holding the bearer token `POST /v1/outcomes` requires.
pub const OUTCOMES_TOKEN_ENV: &str = "MOM_OUTCOMES_TOKEN";

/// Who may post outcomes: anyone who reaches a loopback admin listener; on any other address,
/// only a caller presenting the bearer token from [`OUTCOMES_TOKEN_ENV`] (refused to everyone
/// when it is unset), since outcomes steer the learning algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomesAuth {
    /// The admin listener is on loopback and no token is set.
    Loopback,
    /// Callers must send `authorization: Bearer TOKEN`.
    Token(String),
    /// Exposed with no token set: refused.
    Refused,
}

impl OutcomesAuth {
    /// The rule for an admin listener on loopback or not, with the token from the environment.
    pub fn from_env(loopback: bool) -> Self {
        let token = std::env::var(OUTCOMES_TOKEN_ENV)
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        match (token, loopback) {
            (Some(token), _) => Self::Token(token),
            (None, true) => Self::Loopback,
            (None, false) => Self::Refused,
        }
    }
}

/// The admin routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/live", get(live))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/config", get(config))
        .route("/lock", get(lock))
        .route("/v1/outcomes", post(outcomes::post))
        .route("/v1/tenants/{id}/usage", get(usage::get))
        .with_state(state)
}

async fn live() -> &'static str {
    "ok\n"
}

/// Ready while a snapshot is loaded (`serve` refuses to start without one), every model worker
/// it uses is running and no stop has begun; 503 saying which otherwise.
async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    let snapshot = state.store.snapshot();
    let stopped: Vec<&str> = [
        ("encoder", snapshot.encoder.as_ref().map(|e| e.stats())),
        ("ner", snapshot.ner.as_ref().map(|n| n.stats())),
    ]
    .into_iter()
    .filter(|(_, stats)| stats.is_some_and(|s| s.stopped.load(Ordering::SeqCst)))
    .map(|(name, _)| name)
    .collect();
    let draining = state.draining.load(Ordering::SeqCst);
    let ready = stopped.is_empty() && !draining;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({
            "ready": ready,
            "draining": draining,
            "stopped_models": stopped,
            "config_version": snapshot.version,
            "encoder": snapshot.encoder.as_ref().map(|e| e.describe()),
            "ner": snapshot.ner.as_ref().map(|n| n.describe()),
        })
        .to_string(),
    )
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let snapshot = state.store.snapshot();
    let mut workers: Vec<(&str, &EncoderStats)> = Vec::new();
    if let Some(encoder) = &snapshot.encoder {
        workers.push(("encoder", encoder.stats()));
    }
    if let Some(ner) = &snapshot.ner {
        workers.push(("ner", ner.stats()));
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        with_model_workers(state.metrics.encode(), &workers),
    )
}

/// A counter family read from a worker's stats: name, help, reader.
type CounterFamily = (&'static str, &'static str, fn(&EncoderStats) -> u64);

/// Appends the model workers' counters (kept by the workers themselves) to the exposition,
/// before its `# EOF` line.
fn with_model_workers(mut text: String, workers: &[(&str, &EncoderStats)]) -> String {
    if workers.is_empty() {
        return text;
    }
    if text.ends_with("# EOF\n") {
        text.truncate(text.len() - "# EOF\n".len());
    }
    let families: [CounterFamily; 7] = [
        (
            "mom_model_batches",
            "Forward passes run by a model worker",
            |s| s.batches.load(Ordering::Relaxed),
        ),
        (
            "mom_model_items",
            "Texts processed by a model worker's forward passes",
            |s| s.items.load(Ordering::Relaxed),
        ),
        (
            "mom_model_overloaded",
            "Calls refused because a model worker's queue was full",
            |s| s.overloaded.load(Ordering::Relaxed),
        ),
        (
            "mom_model_timed_out",
            "Calls that gave up waiting for a model worker past its deadline",
            |s| s.timed_out.load(Ordering::Relaxed),
        ),
        (
            "mom_model_cache_hits",
            "Calls answered from a model worker's cache",
            |s| s.cache_hits.load(Ordering::Relaxed),
        ),
        (
            "mom_model_restarts",
            "Times a model worker reloaded its model after a panic",
            |s| s.restarts.load(Ordering::Relaxed),
        ),
        (
            "mom_model_abandoned",
            "Queued texts a model worker skipped because their caller had gone",
            |s| s.abandoned.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, read) in families {
        text.push_str(&format!("# HELP {name} {help}.\n# TYPE {name} counter\n"));
        for (worker, stats) in workers {
            text.push_str(&format!(
                "{name}_total{{worker=\"{worker}\"}} {}\n",
                read(stats)
            ));
        }
    }
    text.push_str("# EOF\n");
    text
}

async fn config(State(state): State<AdminState>) -> impl IntoResponse {
    let snapshot = state.store.snapshot();
    let body = json!({
        "version": snapshot.version,
        "source": state.store.source().describe(),
        "bundle": snapshot.artifact.as_ref().map(|a| &a.bundle_digest),
        "binding": snapshot.artifact.as_ref().map(|a| &a.binding_digest),
        "identities": snapshot.identities.iter().map(|i| json!({
            "name": i.name, "version": i.version, "contract": i.contract,
        })).collect::<Vec<_>>(),
        "models": snapshot.models.iter().map(|m| &m.name).collect::<Vec<_>>(),
        "signals": snapshot.signals.iter().map(|s| &s.name).collect::<Vec<_>>(),
        "decisions": snapshot.decisions.iter().map(|d| &d.name).collect::<Vec<_>>(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

/// The resolution lock of the live configuration; 503 while it is being resolved.
async fn lock(State(state): State<AdminState>) -> impl IntoResponse {
    let version = state.store.snapshot().version.clone();
    match state.lock.load_full() {
        Some(lock) if *lock.config_version == *version => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            lock.document.to_string(),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/json")],
            json!({"error": "the resolution lock for the live configuration is being resolved", "configVersion": version}).to_string(),
        ),
    }
}
