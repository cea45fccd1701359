//! The cache ticket a miss carries to the response phase, and the keeping of a complete 2xx
//! answer under it (the lookup is the request pipeline's `cache`).

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

/// The answer a client received, as the JSON completion to keep: a JSON body as it is, an event
/// stream assembled (only when it completed). `None` for anything else.
pub fn keepable(body: &[u8], stream: bool) -> Option<Vec<u8>> {
    let answered = |completion: &Value| {
        completion["choices"]
            .as_array()
            .is_some_and(|choices| !choices.is_empty())
    };
    if stream {
        let completion = crate::llm::sse::assemble(body)?;
        answered(&completion).then(|| completion.to_string().into_bytes())
    } else {
        let completion: Value = serde_json::from_slice(body).ok()?;
        answered(&completion).then(|| body.to_vec())
    }
}

/// Keeps the answer of a request that held `ticket`.
pub fn keep(state: &StateStore, ticket: &CacheTicket, body: Vec<u8>) {
    let kept = crate::state::Kept {
        body: Arc::new(body),
        embedding: ticket.embedding.clone(),
        ttl: ticket.ttl,
    };
    state.keep_answer(&ticket.key, kept, ticket.shared);
}
