//! Requests in another protocol than Chat Completions (Anthropic Messages, OpenAI Responses):
//! translated into it before the pipeline reads them (a body that cannot be is a 400 in the
//! client's protocol), forwarded to the chat path, and owed a translation back — bound to the
//! forwarded request, or done at once on an answer in hand (a recipe's, the cache's, a
//! refusal).

use super::{refusal, route_chat, Action, Reply, RouteError, Routed, Services, CHAT_PATH};
use crate::config::Snapshot;
use crate::llm::{ChatRequest, Headers};
use crate::protocol::{self, messages, Protocol};

/// Routes a body in `protocol`.
pub(super) async fn translated(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
    protocol: Protocol,
) -> Routed {
    let mut routed = match protocol::to_chat(protocol, body, false) {
        Ok(translated) => {
            let mut routed = route_chat(snapshot, services, headers, &translated.body).await;
            routed.trace.translation = Some((protocol, translated.dropped));
            routed
        }
        Err(error) => refusal(snapshot, error.into()),
    };
    match &mut routed.action {
        Action::Forward(forward) => {
            // Backends speak Chat Completions: the translated body goes to the chat path (with
            // the client's query string).
            let query = headers.get(":path").and_then(|p| p.split_once('?'));
            let path = match query {
                Some((_, query)) => format!("{CHAT_PATH}?{query}"),
                None => CHAT_PATH.to_owned(),
            };
            forward.headers.set.push((":path".to_owned(), path));
            forward.obligations.translate = Some(protocol);
        }
        Action::Respond(reply) => in_protocol(reply, protocol),
    }
    routed
}

/// `POST /v1/messages/count_tokens`: mom-router's estimate of the request's input tokens.
pub(super) fn count_tokens(snapshot: &Snapshot, body: &[u8]) -> Routed {
    let counted = messages::to_chat(body, true)
        .map_err(RouteError::from)
        .and_then(|t| ChatRequest::parse(&t.body).map_err(RouteError::from));
    match counted {
        Ok(request) => {
            let tokens = crate::signals::estimate_tokens(&request);
            let body = serde_json::json!({"input_tokens": tokens}).to_string();
            let mut trace = super::Trace::empty(snapshot);
            trace.translation = Some((Protocol::Messages, Vec::new()));
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
