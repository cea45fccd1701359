//! `GET /v1/models`: identities first (with their contract: version, description, objective,
//! models, bounds, required policies), then, unless
//! `server.listModels` is false, the concrete models.

use crate::config::Snapshot;
use crate::engine::Reply;
use serde_json::json;

pub(in crate::engine) fn list(snapshot: &Snapshot) -> Reply {
    let identities = snapshot.identities.iter().map(|i| {
        let eligible: Vec<&str> = i
            .eligible
            .iter()
            .map(|&m| &*snapshot.models[m].name)
            .collect();
        json!({
            "id": i.name, "object": "model", "created": 0, "owned_by": "mom-router",
            "kind": "identity", "version": i.version, "description": i.description,
            "objective": i.objective.name(), "models": eligible,
            "bounds": {
                "max_cost_per_request": i.bounds.max_cost,
                "latency_slo_ms": i.bounds.latency_slo_ms,
                "min_quality": i.bounds.min_quality,
            },
            "requires": i.requires.iter().map(|p| p.name()).collect::<Vec<_>>(),
        })
    });
    let listed = if snapshot.server.list_models {
        snapshot.models.as_slice()
    } else {
        &[]
    };
    let models = listed.iter().map(|m| {
        json!({
            "id": m.name, "object": "model", "created": 0, "owned_by": "mom-router",
            "kind": "model", "provider_model": m.provider_model, "description": m.description,
            "context_window": m.context_window, "capabilities": m.capabilities,
        })
    });
    let data: Vec<_> = identities.chain(models).collect();
    Reply {
        status: 200,
        body: json!({"object": "list", "data": data})
            .to_string()
            .into_bytes(),
        headers: Vec::new(),
        code: crate::engine::ReplyCode::Answer,
    }
}
