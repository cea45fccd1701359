//! The admin HTTP server: `/live`, `/ready`, `/metrics` (Prometheus text) and `/config`.

use crate::config::ConfigStore;
use crate::observability::Metrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::json;
use std::sync::Arc;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// The live configuration.
    pub store: Arc<ConfigStore>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
}

/// The admin routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/live", get(live))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/config", get(config))
        .with_state(state)
}

async fn live() -> &'static str {
    "ok\n"
}

/// Ready once a snapshot is loaded; `serve` refuses to start without one, so a running
/// process with an admin listener is ready. Later model health checks join here.
async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    let snapshot = state.store.snapshot();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json!({
            "ready": true,
            "config_version": snapshot.version,
            "encoder": snapshot.encoder.as_ref().map(|e| e.describe()),
        })
        .to_string(),
    )
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn config(State(state): State<AdminState>) -> impl IntoResponse {
    let snapshot = state.store.snapshot();
    let body = json!({
        "version": snapshot.version,
        "path": state.store.path().display().to_string(),
        "identities": snapshot.identities.iter().map(|i| &i.name).collect::<Vec<_>>(),
        "models": snapshot.models.iter().map(|m| &m.name).collect::<Vec<_>>(),
        "signals": snapshot.signals.iter().map(|s| &s.name).collect::<Vec<_>>(),
        "decisions": snapshot.decisions.iter().map(|d| &d.name).collect::<Vec<_>>(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}
