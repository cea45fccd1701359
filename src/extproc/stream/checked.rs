//! The response body of a forwarded request that mom-router must read: personal data masked in
//! the request is restored (a JSON body whole, a stream event by event), and the answer is
//! checked against the decision's output contract — a buffered one repaired once when broken, a
//! streamed one reported — and a complete answer is collected for the semantic cache.

use super::{StreamState, MAX_COLLECTED, REPAIR_DEADLINE};
use crate::engine::contract::enforce;
use crate::engine::{RouteError, Trace};
use crate::extproc::convert::{self, BodyMode};
use crate::llm::chat::reply_text;
use crate::observability::metrics::{ContractLabels, PluginLabels};
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, ProcessingResponse};
use serde_json::Value;

/// What the contract step of a held body settled.
enum Settled {
    /// The body stays as it is.
    Unchanged,
    /// The repaired answer replaces it.
    Replaced(Vec<u8>),
    /// The client gets this instead (the contract says `fail`).
    Refused(Box<ProcessingResponse>),
}

impl StreamState {
    /// True for a complete buffered body mom-router must settle asynchronously: an answer that
    /// breaks its contract (when a repair can be asked for), or one the grounding check reads.
    pub(super) fn must_settle(&self, message: &HttpBody) -> bool {
        let Some(forwarded) = &self.forwarded else {
            return false;
        };
        if forwarded.body_mode != BodyMode::Buffered || !message.end_of_stream {
            return false;
        }
        if forwarded.grounding.is_some() || forwarded.answer_guard.is_some() {
            return true;
        }
        let Some((contract, _)) = &forwarded.contract else {
            return false;
        };
        if forwarded.stream || self.services.client.is_none() || !contract.repair {
            return false;
        }
        // Placeholders stand in for masked values: the check reads what the model wrote.
        let body: Value = serde_json::from_slice(&message.body).unwrap_or_default();
        contract.shape.check(reply_text(&body)).is_err()
    }

    /// Settles a held body: the contract checked (a broken JSON answer repaired once through the
    /// same model, with the masked conversation, or refused when the contract says `fail`), the
    /// grounding check (an unsupported answer flagged or replaced by the fallback), masked values
    /// restored last, and the answer collected for the cache.
    pub(super) async fn settle(&mut self, message: HttpBody) -> ProcessingResponse {
        self.observe_body(&message);
        let mut body = message.body;
        let mut replaced = false;
        match self.settle_contract(&body).await {
            Settled::Unchanged => {}
            Settled::Replaced(repaired) => {
                body = repaired;
                replaced = true;
            }
            Settled::Refused(response) => return *response,
        }
        if let Some(refused) = self.settle_answer_guard(&body).await {
            return refused;
        }
        if let Some(fallback) = self.settle_grounding(&body).await {
            body = fallback;
            replaced = true;
        }
        let Some(forwarded) = &mut self.forwarded else {
            return convert::continue_response_body();
        };
        if let Some(masker) = &forwarded.masker {
            body = masker.restore_body(&body);
            replaced = true;
        }
        let trace = forwarded.trace.clone();
        self.count_contract(&trace);
        self.collect_answer(true, &body);
        convert::checked_response_body(Some(&trace), replaced.then_some(body), true)
    }

    async fn settle_contract(&mut self, body: &[u8]) -> Settled {
        let Some(forwarded) = &mut self.forwarded else {
            return Settled::Unchanged;
        };
        let Some((contract, request)) = forwarded.contract.take() else {
            return Settled::Unchanged;
        };
        let parsed: Value = serde_json::from_slice(body).unwrap_or_default();
        let text = if forwarded.stream {
            crate::llm::usage::streamed_text(body)
        } else {
            reply_text(&parsed).to_owned()
        };
        let name = contract.shape.name();
        let model = self
            .snapshot
            .model_index(&forwarded.model)
            .map(|i| &self.snapshot.models[i]);
        let (client, model) = match (&self.services.client, model) {
            (Some(client), Some(model)) if !forwarded.stream && contract.repair => (client, model),
            _ => {
                let outcome = match contract.shape.check(&text) {
                    Ok(()) => "kept",
                    Err(_) => "violated",
                };
                forwarded.trace.contract = Some((name, outcome.to_owned()));
                return Settled::Unchanged;
            }
        };
        if contract.shape.check(&text).is_ok() {
            forwarded.trace.contract = Some((name, "kept".to_owned()));
            return Settled::Unchanged;
        }
        let request: Value = serde_json::from_slice(&request).unwrap_or_default();
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let max_tokens = request["max_tokens"].as_u64().unwrap_or(1024);
        let mut enforced = enforce(
            client,
            &contract.shape,
            model,
            &messages,
            parsed,
            max_tokens,
            REPAIR_DEADLINE,
        )
        .await;
        forwarded.trace.contract = Some((name, enforced.outcome.to_owned()));
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
                Settled::Replaced(enforced.body.to_string().into_bytes())
            }
            (_, Some(reason), crate::config::OnViolation::Fail) => {
                let error = RouteError::ContractViolated {
                    contract: name,
                    reason,
                };
                let mut trace = forwarded.trace.clone();
                trace.error = Some((error.code(), error.fault()));
                self.count_contract(&trace);
                Settled::Refused(Box::new(convert::immediate(&error.reply(), &trace)))
            }
            _ => Settled::Unchanged,
        }
    }

    /// Runs the response-side jailbreak check on a held answer: a match, or a signal that could
    /// not answer, withholds it (403).
    async fn settle_answer_guard(&mut self, body: &[u8]) -> Option<ProcessingResponse> {
        let forwarded = self.forwarded.as_mut()?;
        let signal = forwarded.answer_guard.take()?;
        let text = crate::llm::sse::answer_text(body, forwarded.stream);
        let matched = crate::engine::answer_matches(&self.snapshot, signal, &text).await;
        let passed = matched == Ok(false);
        let outcome = if passed { "passed" } else { "withheld" };
        self.metrics
            .plugin_actions
            .get_or_create(&PluginLabels {
                plugin: "jailbreak_guard",
                outcome,
            })
            .inc();
        if passed {
            return None;
        }
        let forwarded = self.forwarded.as_mut()?;
        let error = RouteError::AnswerWithheld {
            signal: self.snapshot.signals[signal].name.clone(),
        };
        let mut trace = forwarded.trace.clone();
        trace.error = Some((error.code(), error.fault()));
        trace
            .plugins
            .push(("jailbreak_guard", "withheld answer".to_owned()));
        Some(convert::immediate(&error.reply(), &trace))
    }

    /// Runs the grounding check on a held answer; returns the fallback answer that replaces an
    /// unsupported one when the rule fails closed.
    async fn settle_grounding(&mut self, body: &[u8]) -> Option<Vec<u8>> {
        let forwarded = self.forwarded.as_mut()?;
        let check = forwarded.grounding.take()?;
        let text = crate::llm::sse::answer_text(body, forwarded.stream);
        let verdict = check.judge(self.snapshot.encoder.as_deref(), &text).await;
        let fallback = match (&check.rule.fallback, verdict.grounded) {
            (Some(fallback), false) => Some(fallback),
            _ => None,
        };
        let outcome = match (&verdict.error, verdict.grounded, fallback.is_some()) {
            (Some(_), _, _) => "unchecked",
            (None, true, _) => "grounded",
            (None, false, true) => "replaced",
            (None, false, false) => "ungrounded",
        };
        let mut label = verdict.label();
        if fallback.is_some() {
            label.push_str(";fallback");
        }
        forwarded.trace.grounding = Some(label);
        let provider_model = forwarded.trace.provider_model.clone().unwrap_or_default();
        let stream = forwarded.stream;
        self.metrics
            .plugin_actions
            .get_or_create(&PluginLabels {
                plugin: "grounding",
                outcome,
            })
            .inc();
        let fallback = fallback?;
        let completion = crate::engine::grounding::fallback_completion(fallback, &provider_model);
        Some(crate::engine::Reply::completion(&completion, stream).body)
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
            .is_some_and(|(_, outcome)| outcome == "violated")
            || forwarded
                .trace
                .grounding
                .as_ref()
                .is_some_and(|label| !label.starts_with("grounded"));
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
        let copy = forwarded
            .cache
            .is_some()
            .then(|| replaced.clone())
            .flatten();
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
        // Kept, or broken with no repair asked for: streamed bytes are already with the client,
        // a held answer can still be refused.
        let checked = contract.shape.check(&text);
        let outcome = if checked.is_ok() { "kept" } else { "violated" };
        let name = contract.shape.name();
        let refuse = held && contract.on_violation == crate::config::OnViolation::Fail;
        forwarded.trace.contract = Some((name, outcome.to_owned()));
        forwarded.contract = None;
        let mut trace = forwarded.trace.clone();
        if let (Err(reason), true) = (checked, refuse) {
            let error = RouteError::ContractViolated {
                contract: name,
                reason,
            };
            trace.error = Some((error.code(), error.fault()));
            self.count_contract(&trace);
            return (convert::immediate(&error.reply(), &trace), None);
        }
        self.count_contract(&trace);
        (
            convert::checked_response_body(Some(&trace), replaced, held),
            copy,
        )
    }
}
