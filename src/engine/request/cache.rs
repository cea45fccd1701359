//! The semantic cache plugin in the request phase: the request's keys, the lookup (exact, then by
//! meaning within the partition), the wait for an identical request already upstream, and the
//! ticket a miss carries to the response phase, where a complete 2xx answer is kept
//! ([`crate::engine::answer::keep`]).
//!
//! The partition digest covers everything a reused answer must share with the request that
//! earned it: the identity and its version, the decision, the model, the scope headers' values,
//! every message but the last user message, and every body field but `model`, `stream` and
//! `stream_options` (tools, response format, sampling parameters…). The exact digest adds the
//! last user message. `x-mom-cache-control: no-cache` skips the lookup, `no-store` the keeping.

use crate::config::CacheRule;
use crate::engine::answer::keep::CacheTicket;
use crate::engine::PluginOutcome::{Bypassed, Hit, Miss};
use crate::engine::Trace;
use crate::engine::{PluginAction, Reply};
use crate::llm::{ChatRequest, Headers};
use crate::state::{CacheKey, Flight, Found, StateStore};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The plugin's name in `x-mom-plugins`.
pub const PLUGIN: &str = "semantic_cache";
/// The request header a client steers the cache with.
pub const CONTROL_HEADER: &str = "x-mom-cache-control";
/// The response header on answers served from the cache.
pub const HIT_HEADER: &str = "x-mom-cache-hit";

/// What the lookup settled.
pub(in crate::engine) enum Consulted {
    /// Answered from the cache.
    Hit(Reply, PluginAction),
    /// Go upstream; keep the answer when there is a ticket.
    Miss(Option<Arc<CacheTicket>>, PluginAction),
}

/// The request's partition and exact keys, computed before any plugin rewrites it.
pub(in crate::engine) fn key(
    rule: &CacheRule,
    trace: &Trace,
    model: &str,
    headers: &Headers,
    request: &ChatRequest,
) -> CacheKey {
    let mut messages = request.messages_json();
    let last_user = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map(|i| messages.remove(i))
        .unwrap_or(Value::Null);
    let mut partition = Sha256::new();
    let mut field = |name: &str, value: &[u8]| {
        partition.update((name.len() as u64).to_le_bytes());
        partition.update(name.as_bytes());
        partition.update((value.len() as u64).to_le_bytes());
        partition.update(value);
    };
    field(
        "identity",
        trace.identity.as_deref().unwrap_or_default().as_bytes(),
    );
    let version = trace.identity_version.as_deref().unwrap_or_default();
    field("identity_version", version.as_bytes());
    field("decision", trace.decision_label().as_bytes());
    field("model", model.as_bytes());
    for name in &rule.scope_headers {
        field(name, headers.get(name).unwrap_or_default().as_bytes());
    }
    field("history", Value::Array(messages).to_string().as_bytes());
    for (name, value) in request.object() {
        if !matches!(
            name.as_str(),
            "model" | "messages" | "stream" | "stream_options"
        ) {
            field(name, value.to_string().as_bytes());
        }
    }
    let partition = hex(&partition.finalize());
    let mut exact = Sha256::new();
    exact.update(partition.as_bytes());
    exact.update(last_user.to_string().as_bytes());
    CacheKey {
        partition,
        exact: hex(&exact.finalize()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Looks the request up (unless `no-cache`), waiting up to the rule's wait for an identical
/// request already upstream; on a miss, the ticket to keep the answer (unless `no-store`).
pub(in crate::engine) async fn consult(
    state: &StateStore,
    rule: &CacheRule,
    key: CacheKey,
    query: Option<Arc<Vec<f32>>>,
    headers: &Headers,
    stream: bool,
) -> Consulted {
    let control = headers.get(CONTROL_HEADER).unwrap_or_default();
    let says = |word: &str| {
        control
            .split(',')
            .any(|d| d.trim().eq_ignore_ascii_case(word))
    };
    let (no_cache, no_store) = (says("no-cache"), says("no-store"));
    let vector = query.as_deref().map(Vec::as_slice);
    let find = || state.find_answer(&key, vector, rule.threshold, rule.shared);
    let mut flight = None;
    let mut waited = "";
    if !no_cache {
        if let Some(reply) = hit(find().await, stream, "") {
            return reply;
        }
        match state.answer_flight(&key.exact) {
            Flight::Lead(guard) => flight = Some(guard),
            Flight::Follow(mut waiting) => {
                // Woken when the leader's answer is kept, or it failed; either way look again.
                let _ = tokio::time::timeout(rule.wait, waiting.changed()).await;
                if let Some(reply) = hit(find().await, stream, " after waiting") {
                    return reply;
                }
                waited = " after waiting";
            }
        }
    }
    let (outcome, detail) = match (no_cache, no_store) {
        (true, true) => (Bypassed, "no-cache,no-store".to_owned()),
        (true, false) => (Bypassed, "no-cache".to_owned()),
        (false, true) => (Miss, format!("{waited} (no-store)").trim_start().to_owned()),
        (false, false) => (Miss, waited.trim_start().to_owned()),
    };
    let action = PluginAction::new(PLUGIN, outcome, detail);
    if no_store {
        return Consulted::Miss(None, action);
    }
    let ticket = CacheTicket {
        key,
        embedding: rule.threshold.and(query),
        ttl: rule.ttl,
        shared: rule.shared,
        _flight: flight,
    };
    Consulted::Miss(Some(Arc::new(ticket)), action)
}

/// The kept answer as this client's reply (JSON, or events when it streams).
fn hit(found: Option<Found>, stream: bool, note: &str) -> Option<Consulted> {
    let found = found?;
    // Kept answers are JSON completions: a JSON client gets the bytes as kept.
    let mut reply = if stream {
        Reply::completion(&serde_json::from_slice::<Value>(found.body()).ok()?, true)
    } else {
        Reply::json(found.body().to_vec())
    };
    reply
        .headers
        .push((HIT_HEADER.to_owned(), "true".to_owned()));
    let detail = match found {
        Found::Exact(_) => format!("exact{note}"),
        Found::Similar(_, similarity) => format!("similar {similarity:.3}{note}"),
    };
    let action = PluginAction::new(PLUGIN, Hit, detail);
    Some(Consulted::Hit(reply, action))
}
