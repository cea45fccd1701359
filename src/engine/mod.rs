//! The pipeline for one request, as two short linear functions matching the two request phases:
//! [`on_request_headers`] (path, method, size) and [`on_request_body`]
//! (parse → signals → decision → selection → action). The only await is the shared encoder's
//! answer, when a neural signal needs it; `explain` runs exactly what the sidecar runs.
//!
//! What the engine owns, by folder: [`exchange`] — one HTTP exchange phase by phase, whatever
//! proxy sends it (the routed request forwarded or answered, then its response: status, failover,
//! headers, body checked and settled, run record and spans); [`request`] — the request pipeline after parsing (ingress per
//! protocol, the models signals read, plugins, selection inputs, sessions, the cache's lookup,
//! what happens once decided); [`loopers`] — the collaborations behind one
//! [`loopers::RunLooper`] trait (cascade, ratings ensemble, ReMoM, fusion panel, workflows); [`answer`] — the
//! obligations an answer owes (contract, answer guard, grounding, masked values) and their
//! settling.

mod action;
pub mod answer;
pub(crate) mod decimal;
mod error;
pub mod exchange;
pub mod failover;
pub mod loopers;
mod neural;
pub mod request;
mod trace;

pub use action::{Action, Forward, HeaderEdits, Reply, ReplyCode, Routed};
pub use answer::answer_guard::matches as answer_matches;
pub use answer::obligations::Obligations;
pub use error::{Fault, RouteError, MAX_DEPTH};
pub use loopers::calls::{LooperTrace, Step};
pub use neural::neural_inputs;
pub use request::ingress::in_protocol;
pub use request::select::DEFAULT_COMPLETION_TOKENS;
pub use request::session::SessionTrace;
pub use trace::{PluginAction, PluginOutcome, ResponsePath, Trace};

use crate::config::Snapshot;
pub use crate::llm::Headers;

use crate::llm::LlmClient;
use crate::protocol::{messages, responses, Protocol};
use crate::state::StateStore;
use action::{forward, refusal, refusal_after};
use std::sync::Arc;

/// What the pipeline reads and calls besides the snapshot: learned state, and the client for
/// loopers' sub-requests (absent offline, where loopers are planned but not run).
#[derive(Debug, Clone)]
pub struct Services {
    /// Statistics, run ids, session pins.
    pub state: Arc<StateStore>,
    /// Sub-requests through Envoy's internal listener.
    pub client: Option<LlmClient>,
    /// Model calls give up at their configured `callTimeoutMs` (serving, where Envoy's
    /// message timeout runs); offline tools wait as long as the models take.
    pub model_deadlines: bool,
    /// Forwarded requests waiting in case their upstream fails (failover).
    pub parked: Arc<failover::Parked>,
}

impl Services {
    /// In-process state and no client: `explain`, tests, benchmarks.
    pub fn offline(snapshot: &Snapshot) -> Self {
        Self {
            state: Arc::new(StateStore::new(snapshot.state.clone())),
            client: None,
            model_deadlines: false,
            parked: Arc::default(),
        }
    }
}

/// The chat-completions path.
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// The paths that take a request body (POST), one per protocol.
const BODY_PATHS: [&str; 4] = [
    CHAT_PATH,
    messages::PATH,
    messages::COUNT_TOKENS_PATH,
    responses::PATH,
];
/// The model-list path.
pub const MODELS_PATH: &str = "/v1/models";

/// Decides from the headers alone: answer now (model list, bad path or method, announced
/// oversize body) or wait for the body (`None`).
pub fn on_request_headers(
    snapshot: &Snapshot,
    headers: &Headers,
    end_of_stream: bool,
) -> Option<Routed> {
    let path = headers.path();
    let method = headers.method();
    let refuse = |error: RouteError| Some(refusal(snapshot, error));
    match path {
        MODELS_PATH if method == "GET" => Some(Routed {
            action: Action::Respond(request::models::list(snapshot)),
            trace: Trace::empty(snapshot),
        }),
        MODELS_PATH => refuse(method_not_allowed(method, path, "GET")),
        _ if BODY_PATHS.contains(&path) && method != "POST" => {
            refuse(method_not_allowed(method, path, "POST"))
        }
        _ if BODY_PATHS.contains(&path) && end_of_stream => {
            refuse(RouteError::BadRequest(crate::llm::RequestError::Empty))
        }
        _ if BODY_PATHS.contains(&path) => {
            let limit = snapshot.server.max_body_bytes;
            let announced = headers
                .get("content-length")
                .and_then(|v| v.trim().parse::<u64>().ok());
            match announced {
                Some(size) if size > limit => refuse(RouteError::TooLarge { size, limit }),
                _ => None,
            }
        }
        _ => refuse(RouteError::NotFound {
            path: path.to_owned(),
        }),
    }
}

/// Routes a complete request body in the protocol its path names.
pub async fn on_request_body(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
) -> Routed {
    let limit = snapshot.server.max_body_bytes;
    if body.len() as u64 > limit {
        let size = body.len() as u64;
        return refusal(snapshot, RouteError::TooLarge { size, limit });
    }
    match headers.path() {
        messages::PATH => {
            request::ingress::translated(snapshot, services, headers, body, Protocol::Messages)
                .await
        }
        responses::PATH => {
            request::ingress::translated(snapshot, services, headers, body, Protocol::Responses)
                .await
        }
        messages::COUNT_TOKENS_PATH => request::ingress::count_tokens(snapshot, body),
        _ => request::route::route_chat(snapshot, services, headers, body).await,
    }
}

fn method_not_allowed(method: &str, path: &str, allowed: &'static str) -> RouteError {
    RouteError::MethodNotAllowed {
        method: method.to_owned(),
        path: path.to_owned(),
        allowed,
    }
}

#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
