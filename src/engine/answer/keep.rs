//! The cache ticket a miss carries to the response phase, and the keeping of a complete 2xx
//! answer under it (the lookup is the request pipeline's `cache`).

use super::contract::ContractOutcome;
use crate::engine::Trace;
use crate::state::{CacheKey, FlightGuard, StateStore};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What a miss carries to the response phase: where to keep the answer. While the request that
/// went upstream holds it, identical requests on this replica wait for its answer.
#[derive(Debug)]
pub struct CacheTicket {
    /// Where the answer goes.
    pub key: CacheKey,
    /// The last user message's embedding, kept for lookups by meaning.
    pub embedding: Option<Arc<Vec<f32>>>,
    /// How long it is kept.
    pub ttl: Duration,
    /// Kept in Redis too.
    pub shared: bool,
    /// Held while the request is upstream: identical requests wait for its answer.
    pub(in crate::engine) _flight: Option<FlightGuard>,
}

impl PartialEq for CacheTicket {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for CacheTicket {}

/// Keeps the answer a client received under `ticket`, unless it broke its output contract or
/// failed its grounding check: a JSON body as it is (`json`: its parse, when already made), an
/// event stream assembled (only when it completed). Anything else is not kept.
pub fn keep_delivered(
    state: &StateStore,
    ticket: &CacheTicket,
    trace: &Trace,
    body: &[u8],
    stream: bool,
    json: Option<&Value>,
) {
    let broken = trace
        .contract
        .as_ref()
        .is_some_and(|(_, outcome)| *outcome == ContractOutcome::Violated);
    let ungrounded = trace.grounding.as_ref().is_some_and(|g| !g.passed());
    if broken || ungrounded {
        return;
    }
    let answered = |completion: &Value| {
        completion["choices"]
            .as_array()
            .is_some_and(|choices| !choices.is_empty())
    };
    let kept = if stream {
        crate::llm::sse::assemble(body)
            .filter(|completion| answered(completion))
            .map(|completion| completion.to_string().into_bytes())
    } else {
        let parsed;
        let completion = match json {
            Some(completion) => Some(completion),
            None => {
                parsed = serde_json::from_slice::<Value>(body).ok();
                parsed.as_ref()
            }
        };
        completion
            .filter(|completion| answered(completion))
            .map(|_| body.to_vec())
    };
    if let Some(body) = kept {
        let kept = crate::state::Kept {
            body: Arc::new(body),
            embedding: ticket.embedding.clone(),
            ttl: ticket.ttl,
        };
        state.keep_answer(&ticket.key, kept, ticket.shared);
    }
}
