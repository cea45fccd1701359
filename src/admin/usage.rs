//! `GET /v1/tenants/{id}/usage`: what a tenant has left under each of its limits (read from the
//! shared store when budgets are shared) and what this replica counted of its requests, tokens,
//! cost and refusals. Guarded like `POST /v1/outcomes`: loopback, or the admin bearer token.

use super::outcomes::{error, refusal};
use super::AdminState;
use crate::observability::metrics::{TenantLabels, TenantRefusalLabels};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The refusal codes a tenant's requests are counted under.
const REFUSALS: [&str; 3] = [
    "rate_limit_exceeded",
    "insufficient_quota",
    "budgets_unavailable",
];

pub(super) async fn get(
    State(state): State<AdminState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refusal(&state.outcomes_auth, &headers) {
        return refused;
    }
    let snapshot = state.store.snapshot();
    let Some(tenants) = snapshot.tenants.as_deref() else {
        return error(
            StatusCode::NOT_FOUND,
            "no tenants are configured",
            "not_found",
        );
    };
    let Some(tenant) = tenants.by_name(&id).map(|i| &tenants.list[i]) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no tenant {id:?}"),
            "not_found",
        );
    };
    let mut limits = Vec::with_capacity(tenant.limits.len());
    for limit in &tenant.limits {
        let window = limit.kind.window();
        let value = state.state.budget(&limit.key, limit.amount, window).await;
        let mut entry = json!({
            "limit": limit.kind.name(),
            "amount": limit.amount,
            "model": limit.model,
        });
        match window {
            Some(_) => entry["remaining"] = json!(value),
            None => entry["in_flight"] = json!(value),
        }
        limits.push(entry);
    }
    let labels = TenantLabels {
        tenant: tenant.name.clone(),
    };
    let metrics = &state.metrics;
    let refusals: u64 = REFUSALS
        .into_iter()
        .map(|code| {
            let labels = TenantRefusalLabels {
                tenant: tenant.name.clone(),
                code,
            };
            metrics.tenant_refusals.get_or_create(&labels).get()
        })
        .sum();
    let body = json!({
        "tenant": tenant.name,
        "limits": limits,
        "this_replica": {
            "requests": metrics.tenant_requests.get_or_create(&labels).get(),
            "tokens": metrics.tenant_tokens.get_or_create(&labels).get(),
            "cost": metrics.tenant_cost.get_or_create(&labels).get(),
            "refusals": refusals,
        },
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
