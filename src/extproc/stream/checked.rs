//! The response body of a forwarded request that mom-router must read: personal data masked in
//! the request is restored (a JSON body whole, a stream event by event), and the answer is
//! checked against the decision's output contract — a buffered one repaired once when broken, a
//! streamed one reported — and a complete answer is collected for the semantic cache.

use super::{StreamState, MAX_COLLECTED, REPAIR_DEADLINE};
use crate::engine::contract::enforce;
use crate::engine::{RouteError, Trace};
use crate::extproc::convert::{self, BodyMode};
use crate::llm::chat::reply_text;
use crate::observability::metrics::ContractLabels;
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, ProcessingResponse};
use serde_json::Value;
use std::sync::Arc;

impl StreamState {
    /// True for the complete buffered body of an answer that breaks its contract, when a
    /// repair can be asked for.
    pub(super) fn needs_repair(&self, message: &HttpBody) -> bool {
        let Some(forwarded) = &self.forwarded else {
            return false;
        };
        let Some((contract, _)) = &forwarded.contract else {
            return false;
        };
        if forwarded.body_mode != BodyMode::Buffered
            || !message.end_of_stream
            || self.services.client.is_none()
        {
            return false;
        }
        // Placeholders stand in for masked values: the check reads what the model wrote.
        let body: Value = serde_json::from_slice(&message.body).unwrap_or_default();
        contract.shape.check(reply_text(&body)).is_err()
    }

    /// Repairs a buffered answer that broke its contract: one call to the same model through
    /// Envoy (with the masked conversation and answer, so no masked value leaves); the repaired
    /// answer replaces the body, or the original stays (marked violated), or the client gets a
    /// 502 when the contract says `fail`. Masked values are restored last.
    pub(super) async fn repair(&mut self, message: HttpBody) -> ProcessingResponse {
        self.observe_body(&message);
        let snapshot = Arc::clone(&self.snapshot);
        let (Some(forwarded), Some(client)) = (&mut self.forwarded, &self.services.client) else {
            return convert::continue_response_body();
        };
        let Some((contract, request)) = forwarded.contract.take() else {
            return convert::continue_response_body();
        };
        let Some(model) = snapshot
            .model_index(&forwarded.model)
            .map(|i| &snapshot.models[i])
        else {
            return convert::continue_response_body();
        };
        let request: Value = serde_json::from_slice(&request).unwrap_or_default();
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let max_tokens = request["max_tokens"].as_u64().unwrap_or(1024);
        let body: Value = serde_json::from_slice(&message.body).unwrap_or_default();
        let mut enforced = enforce(
            client,
            &contract.shape,
            model,
            &messages,
            body,
            max_tokens,
            REPAIR_DEADLINE,
        )
        .await;
        forwarded.trace.contract = Some((contract.shape.name(), enforced.outcome.to_owned()));
        let trace = forwarded.trace.clone();
        let masker = forwarded.masker.clone();
        self.count_contract(&trace);
        let restored = |body: &[u8]| match &masker {
            Some(masker) => masker.restore_body(body),
            None => body.to_vec(),
        };
        match (enforced.outcome, enforced.reason, contract.on_violation) {
            ("repaired", _, _) => {
                let usage = &mut enforced.body["usage"];
                if usage.is_object() {
                    for (field, added) in [
                        ("prompt_tokens", enforced.usage.0),
                        ("completion_tokens", enforced.usage.1),
                        ("total_tokens", enforced.usage.0 + enforced.usage.1),
                    ] {
                        let before = usage[field].as_u64().unwrap_or(0);
                        usage[field] = serde_json::json!(before + added);
                    }
                }
                let body = restored(enforced.body.to_string().as_bytes());
                self.collect_answer(true, &body);
                convert::checked_response_body(Some(&trace), Some(body), true)
            }
            (_, Some(reason), crate::config::OnViolation::Fail) => {
                let error = RouteError::ContractViolated {
                    contract: contract.shape.name(),
                    reason,
                };
                let mut trace = trace;
                trace.error = Some((error.code(), error.fault()));
                convert::immediate(&error.reply(), &trace)
            }
            _ => {
                let body = masker.is_some().then(|| restored(&message.body));
                convert::checked_response_body(Some(&trace), body, true)
            }
        }
    }

    /// Counts a finished contract check.
    pub(super) fn count_contract(&self, trace: &Trace) {
        if let Some((contract, outcome)) = &trace.contract {
            self.metrics
                .contract_checks
                .get_or_create(&ContractLabels {
                    contract,
                    outcome: outcome.clone(),
                })
                .inc();
        }
    }

    pub(super) fn on_response_body(&mut self, message: &HttpBody) -> ProcessingResponse {
        self.observe_body(message);
        let (response, replaced) = self.check_body(message);
        let delivered = replaced.as_deref().unwrap_or(&message.body);
        self.collect_answer(message.end_of_stream, delivered);
        response
    }

    /// Collects what the client receives of an answer the cache may keep, and keeps it once the
    /// response completes (not when it broke its contract, nor past [`MAX_COLLECTED`]).
    fn collect_answer(&mut self, end_of_stream: bool, delivered: &[u8]) {
        let Some(forwarded) = &mut self.forwarded else {
            return;
        };
        if forwarded.cache.is_none() {
            return;
        }
        if forwarded.answer.len() + delivered.len() > MAX_COLLECTED {
            forwarded.cache = None;
            forwarded.answer = Vec::new();
            return;
        }
        forwarded.answer.extend_from_slice(delivered);
        if !end_of_stream {
            return;
        }
        let ticket = forwarded.cache.take();
        let answer = std::mem::take(&mut forwarded.answer);
        let violated = forwarded
            .trace
            .contract
            .as_ref()
            .is_some_and(|(_, outcome)| outcome == "violated");
        let keepable = crate::engine::cache::keepable(&answer, forwarded.stream);
        if let (Some(ticket), Some(body), false) = (ticket, keepable, violated) {
            crate::engine::cache::keep(&self.services.state, &ticket, body);
        }
    }

    /// The reply to a response body chunk, and the bytes the client gets instead of the
    /// upstream's when they differ.
    fn check_body(&mut self, message: &HttpBody) -> (ProcessingResponse, Option<Vec<u8>>) {
        let Some(forwarded) = &mut self.forwarded else {
            return (convert::continue_response_body(), None);
        };
        if forwarded.contract.is_none() && forwarded.masker.is_none() {
            return (convert::continue_response_body(), None);
        }
        let held = forwarded.body_mode == BodyMode::Buffered;
        if !held && forwarded.collected.len() < MAX_COLLECTED && forwarded.contract.is_some() {
            forwarded.collected.extend_from_slice(&message.body);
        }
        // The bytes the client gets for this message, when they differ from the upstream's.
        let replaced = match (&forwarded.masker, &mut forwarded.restorer) {
            (Some(_), Some(restorer)) => {
                let mut out = restorer.push(&message.body);
                if message.end_of_stream {
                    out.extend(restorer.finish());
                }
                Some(out)
            }
            (Some(masker), None) if held && message.end_of_stream => {
                Some(masker.restore_body(&message.body))
            }
            _ => None,
        };
        let copy = forwarded.cache.is_some().then(|| replaced.clone()).flatten();
        let Some((contract, _)) = &forwarded.contract else {
            return (convert::checked_response_body(None, replaced, held), copy);
        };
        if !message.end_of_stream {
            return (convert::checked_response_body(None, replaced, false), copy);
        }
        let text = if held {
            let body: Value = serde_json::from_slice(&message.body).unwrap_or_default();
            reply_text(&body).to_owned()
        } else {
            crate::llm::usage::streamed_text(&forwarded.collected)
        };
        // Kept, or broken with no way to repair: streamed bytes are already with the client.
        let outcome = match contract.shape.check(&text) {
            Ok(()) => "kept",
            Err(_) => "violated",
        };
        forwarded.trace.contract = Some((contract.shape.name(), outcome.to_owned()));
        forwarded.contract = None;
        let trace = forwarded.trace.clone();
        self.count_contract(&trace);
        (convert::checked_response_body(Some(&trace), replaced, held), copy)
    }
}
