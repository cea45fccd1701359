//! A held (BUFFERED) response body that needs more than a synchronous look: an answer that
//! breaks its output contract and can be repaired (a model call), or one the answer guard or the
//! grounding check reads (model calls on the encoder). Envoy is asked for time first; then the
//! body is settled in one place — contract, answer guard, grounding, masked values restored,
//! the answer collected for the cache.

use super::{StreamState, REPAIR_DEADLINE};
use crate::engine::answer::contract::{enforce, ContractOutcome};
use crate::engine::RouteError;
use crate::extproc::convert::{self, BodyMode};
use crate::llm::chat::reply_text;
use crate::observability::metrics::PluginLabels;
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
        if forwarded.obligations.calls_models() {
            return true;
        }
        let Some(contract) = &forwarded.obligations.contract else {
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
        if let Some(masker) = &forwarded.obligations.restore {
            body = masker.restore_body(&body);
            replaced = true;
        }
        let trace = forwarded.trace.clone();
        self.count_contract(&trace);
        self.collect_answer(true, &body);
        if let Some(translated) = self.translate(&body, true) {
            body = translated;
            replaced = true;
        }
        convert::checked_response_body(Some(&trace), replaced.then_some(body), true)
    }

    async fn settle_contract(&mut self, body: &[u8]) -> Settled {
        let Some(forwarded) = &mut self.forwarded else {
            return Settled::Unchanged;
        };
        let Some(contract) = forwarded.obligations.contract.take() else {
            return Settled::Unchanged;
        };
        let request = std::mem::take(&mut forwarded.repair_request);
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
                let outcome = ContractOutcome::of_check(&contract.shape.check(&text));
                forwarded.trace.contract = Some((name, outcome));
                return Settled::Unchanged;
            }
        };
        if contract.shape.check(&text).is_ok() {
            forwarded.trace.contract = Some((name, ContractOutcome::Kept));
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
        forwarded.trace.contract = Some((name, enforced.outcome));
        match (enforced.outcome, enforced.reason, contract.on_violation) {
            (ContractOutcome::Repaired, _, _) => {
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
                let trace = forwarded.trace.clone();
                Settled::Refused(Box::new(self.refuse(trace, &error)))
            }
            _ => Settled::Unchanged,
        }
    }

    /// Runs the response-side jailbreak check on a held answer: a match, or a signal that could
    /// not answer, withholds it (403).
    async fn settle_answer_guard(&mut self, body: &[u8]) -> Option<ProcessingResponse> {
        let forwarded = self.forwarded.as_mut()?;
        let signal = forwarded.obligations.answer_guard.take()?;
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
        let error = RouteError::AnswerWithheld {
            signal: self.snapshot.signals[signal].name.clone(),
        };
        let mut trace = self.forwarded.as_ref()?.trace.clone();
        trace
            .plugins
            .push(("jailbreak_guard", "withheld answer".to_owned()));
        Some(self.refuse(trace, &error))
    }

    /// Runs the grounding check on a held answer; returns the fallback answer that replaces an
    /// unsupported one when the rule fails closed.
    async fn settle_grounding(&mut self, body: &[u8]) -> Option<Vec<u8>> {
        let forwarded = self.forwarded.as_mut()?;
        let check = forwarded.obligations.grounding.take()?;
        let model = forwarded.trace.provider_model.clone().unwrap_or_default();
        let encoder = self.snapshot.encoder.as_deref();
        let settled = check.settle(encoder, body, forwarded.stream, &model).await;
        self.metrics
            .plugin_actions
            .get_or_create(&PluginLabels {
                plugin: "grounding",
                outcome: settled.grounded.outcome(),
            })
            .inc();
        forwarded.trace.grounding = Some(settled.grounded);
        settled.replacement
    }
}
