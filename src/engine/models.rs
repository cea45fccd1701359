//! `GET /v1/models`: identities first (with version and description), then, unless
//! `server.listModels` is false, the concrete models.

use super::Reply;
use crate::config::Snapshot;
use serde_json::json;

pub(super) fn list(snapshot: &Snapshot) -> Reply {
    let identities = snapshot.identities.iter().map(|i| {
        json!({
            "id": i.name, "object": "model", "created": 0, "owned_by": "mom-router",
            "kind": "identity", "version": i.version, "description": i.description,
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
        code: "ok",
    }
}
