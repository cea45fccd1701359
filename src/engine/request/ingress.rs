//! Requests in another protocol than Chat Completions (Anthropic Messages, OpenAI Responses):
//! translated into it before the pipeline reads them (a body that cannot be is a 400 in the
//! client's protocol). A forwarded request goes to a backend that answers the protocol itself
//! as the client sent it, when nothing in the pipeline rewrote it or reads its answer;
//! otherwise to the chat path, owed a translation back. An answer in hand (a looper's, the
//! cache's, a refusal) is translated at once.

use super::route::route_chat;
use crate::config::Snapshot;
use crate::engine::refusal;
use crate::engine::Action;
use crate::engine::Forward;
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Routed;
use crate::engine::Services;
use crate::engine::CHAT_PATH;
use crate::llm::{ChatRequest, Headers};
use crate::protocol::{self, messages, Protocol, Translation};
use serde_json::Value;

/// Routes a body in `protocol`.
pub(in crate::engine) async fn translated(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
    protocol: Protocol,
) -> Routed {
    let translated = match protocol::to_chat(protocol, body, false) {
        Ok(translated) => translated,
        Err(error) => {
            let mut refused = refusal(snapshot, error.into());
            if let Action::Respond(reply) = &mut refused.action {
                in_protocol(reply, protocol);
            }
            return refused;
        }
    };
    let mut routed = route_chat(snapshot, services, headers, &translated.body).await;
    let mut translation = Translation::to_chat(protocol, translated.dropped);
    match &mut routed.action {
        Action::Forward(forward) => {
            if let Some(plan) = &mut forward.failover {
                // A fallback answers on the chat path, translated back.
                plan.protocol = Some(protocol);
            }
            match native_body(snapshot, forward, protocol, body, &translated.body) {
                Some(native) => {
                    forward.body = native;
                    translation.dropped.clear();
                    translation.native = true;
                }
                None => {
                    // The translated body goes to the chat path (with the client's query).
                    let query = headers.get(":path").and_then(|p| p.split_once('?'));
                    let path = match query {
                        Some((_, query)) => format!("{CHAT_PATH}?{query}"),
                        None => CHAT_PATH.to_owned(),
                    };
                    forward.headers.set.push((":path".to_owned(), path));
                    forward.obligations.translate = Some(protocol);
                }
            }
        }
        Action::Respond(reply) => in_protocol(reply, protocol),
    }
    routed.trace.translation = Some(translation);
    routed
}

/// The client's own body, `model` rewritten, when the chosen model's backend answers
/// `protocol` and the pipeline owes the request nothing but routing: the forwarded chat body is
/// the translation with only `model` replaced (no plugin rewrote it) and no obligation reads
/// the answer (contract, guards, grounding, restore, cache).
fn native_body(
    snapshot: &Snapshot,
    forward: &Forward,
    protocol: Protocol,
    client: &[u8],
    translated: &[u8],
) -> Option<Vec<u8>> {
    let model = snapshot.model(&forward.model)?;
    if !model.native.contains(&protocol)
        || forward.obligations.reads_answer()
        || forward.fallback.is_some()
    {
        return None;
    }
    let provider_model = Value::String(forward.provider_model.to_string());
    let mut expected: Value = serde_json::from_slice(translated).ok()?;
    expected["model"] = provider_model.clone();
    if serde_json::from_slice::<Value>(&forward.body).ok()? != expected {
        return None;
    }
    let mut own: Value = serde_json::from_slice(client).ok()?;
    own["model"] = provider_model;
    Some(own.to_string().into_bytes())
}

/// `POST /v1/messages/count_tokens`: mom-router's estimate of the request's input tokens.
pub(in crate::engine) fn count_tokens(snapshot: &Snapshot, body: &[u8]) -> Routed {
    let counted = messages::to_chat(body, true)
        .map_err(RouteError::from)
        .and_then(|t| ChatRequest::parse(&t.body).map_err(RouteError::from));
    match counted {
        Ok(request) => {
            let tokens = crate::signals::estimate_tokens(&request);
            let body = serde_json::json!({"input_tokens": tokens}).to_string();
            let mut trace = crate::engine::Trace::empty(snapshot);
            trace.translation = Some(Translation::to_chat(Protocol::Messages, Vec::new()));
            Routed {
                action: Action::Respond(Reply::json(body.into_bytes())),
                trace,
            }
        }
        Err(error) => {
            let mut refused = refusal(snapshot, error);
            if let Action::Respond(reply) = &mut refused.action {
                in_protocol(reply, Protocol::Messages);
            }
            refused
        }
    }
}

/// A reply mom-router gives itself, in the client's protocol: a completion (JSON or a stream)
/// as the protocol's answer, an error in its error shape.
pub fn in_protocol(reply: &mut Reply, protocol: Protocol) {
    let stream = reply.streams();
    if let Some(body) = protocol::translate_whole(protocol, reply.status, stream, &reply.body) {
        reply.body = body;
    }
}
