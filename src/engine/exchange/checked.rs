//! The streamed response body of a forwarded request that mom-router must read, chunk by
//! chunk: personal data masked in the request is restored event by event, the answer is checked
//! against its output contract at its end (only reported: the client has it already), and a
//! complete answer is collected for the semantic cache. Held bodies are settled whole in
//! `settle`.

use super::{Body, BodyMode, Exchange, Step, MAX_COLLECTED};
use crate::engine::answer::contract::ContractOutcome;
use crate::engine::answer::keep::keep_delivered;
use crate::engine::{ResponsePath, RouteError, Trace};
use crate::observability::metrics::ContractLabels;
use std::sync::Arc;

impl Exchange {
    /// The client gets `error` instead of the answer (a response-phase refusal): the trace
    /// carries it and a finished contract check is counted.
    pub(super) fn refuse(&self, mut trace: Trace, error: &RouteError) -> Step {
        trace.error = Some((error.code(), error.fault()));
        self.count_contract(&trace);
        let mut reply = error.reply();
        if let Some(protocol) = self
            .forwarded
            .as_ref()
            .and_then(|f| f.obligations.translate)
        {
            crate::engine::in_protocol(&mut reply, protocol);
        }
        Step::reply(reply, &trace, ResponsePath::Immediate)
    }

    /// The client's protocol's bytes for the (chat) bytes `delivered`, when they differ: a
    /// streamed chunk through the stream's translator, a held body whole (an error as an
    /// error).
    pub(super) fn translate(&mut self, delivered: &[u8], end_of_stream: bool) -> Option<Vec<u8>> {
        let forwarded = self.forwarded.as_mut()?;
        let protocol = forwarded.obligations.translate?;
        if let Some(translator) = &mut forwarded.translator {
            return Some(translator.push(delivered, end_of_stream));
        }
        if forwarded.body_mode != BodyMode::Buffered || !end_of_stream {
            return None;
        }
        let (status, stream) = (forwarded.status, forwarded.stream);
        crate::protocol::translate_whole(protocol, status, stream, delivered)
    }

    /// Counts a finished contract check.
    pub(super) fn count_contract(&self, trace: &Trace) {
        if let Some((contract, outcome)) = &trace.contract {
            self.metrics
                .contract_checks
                .get_or_create(&ContractLabels {
                    contract,
                    outcome: outcome.name(),
                })
                .inc();
        }
    }

    pub(super) fn on_response_body(&mut self, message: &Body) -> Step {
        self.observe_body(message);
        let (mut step, mut replaced) = self.check_body(message);
        self.strip_usage(message, &mut step, &mut replaced);
        let delivered = replaced.as_deref().unwrap_or(&message.bytes);
        self.collect_answer(message.end_of_stream, delivered);
        if let Some(translated) = self.translate(delivered, message.end_of_stream) {
            let held = self
                .forwarded
                .as_ref()
                .is_some_and(|f| f.body_mode == BodyMode::Buffered);
            step.replace_body(translated, held);
        }
        step
    }

    /// Takes the usage chunk the client did not ask for out of the bytes `step` sends on (and
    /// out of the copy the cache keeps).
    fn strip_usage(&mut self, message: &Body, step: &mut Step, copy: &mut Option<Vec<u8>>) {
        let Some(forwarded) = &mut self.forwarded else {
            return;
        };
        let (Some(stripper), Step::PassResponseBody { body, .. }) = (&mut forwarded.stripper, step)
        else {
            return;
        };
        let upstream = body.take();
        let stripped = stripper.push(
            upstream.as_deref().unwrap_or(&message.bytes),
            message.end_of_stream,
        );
        if forwarded.obligations.keep.is_some() {
            *copy = Some(stripped.clone());
        }
        *body = Some(stripped);
    }

    /// Collects what the client receives of an answer the cache may keep, and keeps it once the
    /// response completes (not when it broke its contract or its grounding check, nor past
    /// [`MAX_COLLECTED`]).
    pub(super) fn collect_answer(&mut self, end_of_stream: bool, delivered: &[u8]) {
        let Some(forwarded) = &mut self.forwarded else {
            return;
        };
        if forwarded.obligations.keep.is_none() {
            return;
        }
        if forwarded.answer.len() + delivered.len() > MAX_COLLECTED {
            forwarded.obligations.keep = None;
            forwarded.answer = Vec::new();
            return;
        }
        forwarded.answer.extend_from_slice(delivered);
        if !end_of_stream {
            return;
        }
        let answer = std::mem::take(&mut forwarded.answer);
        if let Some(ticket) = forwarded.obligations.keep.take() {
            let state = &self.services.state;
            let (trace, stream) = (&forwarded.trace, forwarded.stream);
            keep_delivered(state, &ticket, trace, &answer, stream, None);
        }
    }

    /// The reply to a streamed response body chunk, and the bytes the client gets instead of
    /// the upstream's when they differ. (A held body is settled whole: `settle`.)
    fn check_body(&mut self, message: &Body) -> (Step, Option<Vec<u8>>) {
        let Some(forwarded) = &mut self.forwarded else {
            return (Step::pass_response_body(), None);
        };
        let owed = &forwarded.obligations;
        if owed.contract.is_none() && owed.restore.is_none() {
            return (Step::pass_response_body(), None);
        }
        if forwarded.body_mode == BodyMode::Buffered {
            // Envoy sends a buffered body whole; a partial one is passed on unread.
            return (Step::pass_response_body(), None);
        }
        let contracted = forwarded.obligations.contract.is_some();
        if forwarded.collected.len() < MAX_COLLECTED && contracted {
            forwarded.collected.extend_from_slice(&message.bytes);
        }
        // The bytes the client gets for this message, when they differ from the upstream's.
        let replaced = forwarded.restorer.as_mut().map(|restorer| {
            let mut out = restorer.push(&message.bytes);
            if message.end_of_stream {
                out.extend(restorer.finish());
            }
            out
        });
        // What the cache keeps and the translation reads are the bytes the client would get.
        let owed = &forwarded.obligations;
        let copy = (owed.keep.is_some() || owed.translate.is_some())
            .then(|| replaced.clone())
            .flatten();
        let Some(contract) = &forwarded.obligations.contract else {
            return (Step::checked_body(None, replaced, false), copy);
        };
        if !message.end_of_stream {
            return (Step::checked_body(None, replaced, false), copy);
        }
        // The streamed bytes are already with the client: a broken contract is only reported.
        let text = crate::llm::usage::streamed_text(&forwarded.collected);
        let outcome = ContractOutcome::of_check(&contract.shape.check(&text));
        Arc::make_mut(&mut forwarded.trace).contract = Some((contract.shape.name(), outcome));
        forwarded.obligations.contract = None;
        let trace = Arc::clone(&forwarded.trace);
        self.count_contract(&trace);
        (Step::checked_body(Some(&trace), replaced, false), copy)
    }
}
