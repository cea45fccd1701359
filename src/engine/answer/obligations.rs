//! What an answer owes before the client gets it. The request phase binds the obligations once
//! (output contract, answer guard, grounding check, masked values to restore, where the cache
//! keeps it, the client's protocol); they are settled in one order on an answer already in hand
//! here ([`settle_in_hand`]) and on a forwarded request's answer in the response phase
//! (`extproc::stream`, which holds the body when a model call may change it): the contract reads
//! what the model wrote (placeholders included), the answer guard and the grounding check read
//! the answer that would be delivered, the masked values come back, the cache keeps the
//! pipeline's own form (a client of any protocol can be served from it), and the answer is
//! translated into the client's protocol last.

use super::grounding::GroundingCheck;
use super::pii_mask::Masker;
use crate::config::{Contract, Snapshot};
use crate::engine::answer::keep::{self, CacheTicket};
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::protocol::Protocol;
use crate::state::StateStore;
use std::sync::Arc;

/// The obligations of one answer; each is settled once and then taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Obligations {
    /// The output contract the answer is checked against (repaired once when it allows).
    pub contract: Option<Box<Contract>>,
    /// The jailbreak signal the answer is checked with: a match withholds it.
    pub answer_guard: Option<usize>,
    /// The grounding check: an unsupported answer is flagged or replaced.
    pub grounding: Option<Box<GroundingCheck>>,
    /// Personal data masked in the request, restored in the answer.
    pub restore: Option<Arc<Masker>>,
    /// Where the semantic cache keeps a complete 2xx answer.
    pub keep: Option<Arc<CacheTicket>>,
    /// The client's protocol, when the answer must be translated into it (errors included).
    pub translate: Option<Protocol>,
}

impl Obligations {
    /// True when the answer must be read before it is delivered (checked or rewritten).
    pub fn reads_answer(&self) -> bool {
        self.contract.is_some()
            || self.answer_guard.is_some()
            || self.grounding.is_some()
            || self.restore.is_some()
            || self.keep.is_some()
            || self.translate.is_some()
    }

    /// True when settling may need model calls on the whole answer (it must be held).
    pub fn calls_models(&self) -> bool {
        self.answer_guard.is_some() || self.grounding.is_some()
    }

    /// Drops the checks: a failed upstream response is neither checked nor grounded.
    pub fn drop_checks(&mut self) {
        self.contract = None;
        self.answer_guard = None;
        self.grounding = None;
    }
}

/// Settles `obligations` on an answer already in hand (a recipe's, the cache's), in order:
/// the answer guard may withhold it (the reply becomes the refusal), the grounding check flags
/// or replaces it, masked values are restored, and a grounded answer is kept. A reply that is
/// not a success owes nothing. The contract of an answer in hand was enforced where it was made.
pub async fn settle_in_hand(
    snapshot: &Snapshot,
    state: &StateStore,
    obligations: Obligations,
    reply: &mut Reply,
    trace: &mut Trace,
) {
    if reply.code != "ok" {
        return;
    }
    let stream = reply.streams();
    if let Some(signal) = obligations.answer_guard {
        let text = crate::llm::sse::answer_text(&reply.body, stream);
        if super::answer_guard::matches(snapshot, signal, &text).await != Ok(false) {
            let error = RouteError::AnswerWithheld {
                signal: snapshot.signals[signal].name.clone(),
            };
            trace.error = Some((error.code(), error.fault()));
            trace
                .plugins
                .push(("jailbreak_guard", "withheld answer".to_owned()));
            *reply = error.reply();
            return;
        }
    }
    if let Some(check) = obligations.grounding {
        let model = trace.provider_model.clone().unwrap_or_default();
        let encoder = snapshot.encoder.as_deref();
        let settled = check.settle(encoder, &reply.body, stream, &model).await;
        if let Some(body) = settled.replacement {
            reply.body = body;
        }
        trace.grounding = Some(settled.grounded);
    }
    if let Some(masker) = obligations.restore {
        reply.body = masker.restore_body(&reply.body);
    }
    // An answer the grounding check did not pass is not kept.
    let grounded = trace
        .grounding
        .as_ref()
        .is_none_or(super::grounding::Grounded::passed);
    let answer = keep::keepable(&reply.body, stream).filter(|_| grounded);
    if let (Some(ticket), Some(answer)) = (obligations.keep, answer) {
        keep::keep(state, &ticket, answer);
    }
}
