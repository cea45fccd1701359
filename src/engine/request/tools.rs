//! Tool selection: when a request carries more tools than a route keeps, the tools closest in
//! meaning to the last user message stay (each embedded as `name: description` by the shared
//! encoder), together with every tool the conversation already called and the one `tool_choice`
//! names, in the client's order.

use crate::config::Snapshot;
use crate::inference::cosine;
use crate::llm::ChatRequest;
use serde_json::Value;

/// Keeps at most `top_k` tools of `request` (plus the ones it must keep); says what it did.
pub(in crate::engine) async fn select(
    snapshot: &Snapshot,
    request: &mut ChatRequest,
    query: Option<&[f32]>,
    top_k: usize,
) -> String {
    let Some(Value::Array(tools)) = request.object().get("tools").cloned() else {
        return "no tools".to_owned();
    };
    let total = tools.len();
    if total <= top_k {
        return format!("kept all {total} tools");
    }
    let (Some(query), Some(encoder)) = (query, &snapshot.encoder) else {
        return format!("kept all {total} tools (no embedding of the request)");
    };
    let name = |tool: &Value| {
        tool["function"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let texts: Vec<String> = tools
        .iter()
        .map(|t| {
            let about = t["function"]["description"].as_str().unwrap_or_default();
            format!("{}: {about}", name(t))
        })
        .collect();
    let vectors = match encoder.embed_many(&texts, None).await {
        Ok(vectors) => vectors,
        Err(error) => return format!("kept all {total} tools (encoder: {error})"),
    };
    let mut ranked: Vec<(usize, f32)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (i, cosine(query, v)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut keep = vec![false; total];
    for (i, _) in ranked.iter().take(top_k) {
        keep[*i] = true;
    }
    let required = required_tools(request.object());
    for (i, tool) in tools.iter().enumerate() {
        if required.contains(&name(tool)) {
            keep[i] = true;
        }
    }
    let kept: Vec<Value> = tools
        .into_iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(t, _)| t)
        .collect();
    let action = format!("kept {} of {total} tools", kept.len());
    request
        .object_mut()
        .insert("tools".to_owned(), Value::Array(kept));
    action
}

/// Tools the request must keep: every one an assistant turn called, and `tool_choice`'s.
fn required_tools(object: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut names: Vec<String> = object
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|call| call["function"]["name"].as_str().map(str::to_owned))
        .collect();
    if let Some(chosen) = object
        .get("tool_choice")
        .and_then(|c| c["function"]["name"].as_str())
    {
        names.push(chosen.to_owned());
    }
    names
}
