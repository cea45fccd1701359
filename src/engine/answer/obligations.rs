//! What an answer owes before the client gets it. The request phase binds the obligations once
//! (output contract, answer guard, grounding check, masked values to restore, where the cache
//! keeps it, the client's protocol); they are settled in one order on an answer already in hand
//! here ([`settle_in_hand`]) and on a forwarded request's held answer in the response phase
//! (the exchange, which streams what it can and holds the rest), both through
//! [`settle_held`] on one parse of the answer ([`Held`]): the contract reads
//! what the model wrote (placeholders included), the answer guard and the grounding check read
//! the answer that would be delivered, the masked values come back, the cache keeps the
//! pipeline's own form (a client of any protocol can be served from it), and the answer is
//! translated into the client's protocol last.

use super::grounding::GroundingCheck;
use super::held::Held;
use super::pii_mask::Masker;
use crate::config::{Contract, Snapshot};
use crate::engine::answer::keep::{self, CacheTicket};
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::{PluginAction, PluginOutcome, Trace};
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

/// What settling a complete answer did, for the response phase's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// The answer guard ran: whether the answer passed it.
    pub guard_passed: Option<bool>,
    /// The grounding check ran: its outcome (`grounded`, `flagged`, …).
    pub grounding: Option<&'static str>,
}

/// Settles the obligations every complete answer owes after its contract, in order, on the one
/// parse of it: the answer guard may withhold it (`Err`: the client gets the refusal), the
/// grounding check flags or replaces it, masked values are restored, and the answer is kept
/// when it kept its contract and passed the grounding check. Each obligation is taken.
pub async fn settle_held(
    snapshot: &Snapshot,
    state: &StateStore,
    obligations: &mut Obligations,
    answer: &mut Held,
    trace: &mut Trace,
) -> Result<Checked, RouteError> {
    let mut checked = Checked::default();
    if let Some(signal) = obligations.answer_guard.take() {
        let passed =
            super::answer_guard::matches(snapshot, signal, answer.text()).await == Ok(false);
        checked.guard_passed = Some(passed);
        if !passed {
            obligations.keep = None;
            let action = PluginAction::new("jailbreak_guard", PluginOutcome::Withheld, "answer");
            trace.plugins.push(action);
            return Err(RouteError::AnswerWithheld {
                signal: snapshot.signals[signal].name.to_string(),
            });
        }
    }
    if let Some(check) = obligations.grounding.take() {
        let model = trace.provider_model.clone().unwrap_or_default();
        let settled = check
            .settle(snapshot.encoder.as_deref(), answer, &model)
            .await;
        if let Some(body) = settled.replacement {
            answer.replace(body);
        }
        checked.grounding = Some(settled.grounded.outcome());
        trace.grounding = Some(settled.grounded);
    }
    if let Some(masker) = obligations.restore.take() {
        answer.restore(&masker);
    }
    if let Some(ticket) = obligations.keep.take() {
        let (body, stream, json) = (answer.body(), answer.stream(), answer.json());
        keep::keep_delivered(state, &ticket, trace, body, stream, json);
    }
    Ok(checked)
}

/// Settles `obligations` on an answer already in hand (a looper's, the cache's) with
/// [`settle_held`]; a withheld answer becomes the refusal. A reply that is not a success owes
/// nothing. The contract of an answer in hand was enforced where it was made.
pub async fn settle_in_hand(
    snapshot: &Snapshot,
    state: &StateStore,
    mut obligations: Obligations,
    reply: &mut Reply,
    trace: &mut Trace,
) {
    if !reply.succeeded() {
        return;
    }
    let mut answer = Held::new(std::mem::take(&mut reply.body), reply.streams());
    match settle_held(snapshot, state, &mut obligations, &mut answer, trace).await {
        Ok(_) => reply.body = answer.into_body(),
        Err(error) => {
            trace.error = Some((error.code(), error.fault()));
            *reply = error.reply();
        }
    }
}
