//! A held (BUFFERED) response body, parsed once and settled in one place: its contract (a
//! broken answer repaired through a model call when the contract asks for it), then what every
//! complete answer owes — answer guard, grounding, masked values restored, the cache's copy —
//! and its translation into the client's protocol. When settling may call models (a repair,
//! the guard's or the grounding check's encoder passes) Envoy is asked for time first.

use super::{Body, BodyMode, Exchange, Step, REPAIR_DEADLINE};
use crate::engine::answer::contract::{enforce, ContractOutcome};
use crate::engine::answer::held::Held;
use crate::engine::answer::obligations::{settle_held, Checked};
use crate::engine::RouteError;
use crate::observability::metrics::PluginLabels;
use serde_json::Value;
use std::sync::Arc;

impl Exchange {
    /// The complete answer of a held (BUFFERED) body, observed (timing, usage) and parsed once;
    /// a streamed chunk comes back as it is.
    pub(super) fn held(&mut self, message: Body) -> Result<Held, Body> {
        let stream = match &self.forwarded {
            Some(f) if f.body_mode == BodyMode::Buffered && message.end_of_stream => f.stream,
            _ => return Err(message),
        };
        self.observe_body(&message);
        Ok(Held::new(message.bytes, stream))
    }

    /// True when settling `answer` may call models — the answer guard, the grounding check, or
    /// a contract repair (the answer breaks a contract that asks for one): Envoy is asked for
    /// time first.
    pub(super) fn must_wait(&self, answer: &Held) -> bool {
        let Some(forwarded) = &self.forwarded else {
            return false;
        };
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
        contract.shape.check(answer.text()).is_err()
    }

    /// Settles a held answer: the contract checked (a broken JSON answer repaired once through
    /// the same model, with the masked conversation, or refused when the contract says `fail`),
    /// then what every complete answer owes ([`settle_held`]: answer guard, grounding, masked
    /// values restored, the cache's copy), and the answer translated into the client's protocol.
    /// Boxed, as every rarely taken path that awaits calls: the future of one message, which
    /// every request moves, stays small.
    pub(super) fn settle(&mut self, answer: Held) -> futures_util::future::BoxFuture<'_, Step> {
        Box::pin(self.settle_held_answer(answer))
    }

    async fn settle_held_answer(&mut self, mut answer: Held) -> Step {
        if let Some(refused) = self.settle_contract(&mut answer).await {
            return refused;
        }
        let Some(forwarded) = &mut self.forwarded else {
            return Step::pass_response_body();
        };
        let (snapshot, state) = (&self.snapshot, &self.services.state);
        let owed = &mut forwarded.obligations;
        let shown = Arc::make_mut(&mut forwarded.trace);
        let settled = settle_held(snapshot, state, owed, &mut answer, shown).await;
        let trace = Arc::clone(&forwarded.trace);
        let checked = match settled {
            Ok(checked) => checked,
            Err(error) => {
                self.count_checks(Checked {
                    guard_passed: Some(false),
                    grounding: None,
                });
                return self.refuse(Arc::unwrap_or_clone(trace), &error);
            }
        };
        self.count_checks(checked);
        self.count_contract(&trace);
        let mut replaced = answer.changed();
        let mut body = answer.into_body();
        if let Some(translated) = self.translate(&body, true) {
            body = translated;
            replaced = true;
        }
        Step::checked_body(Some(&trace), replaced.then_some(body), true)
    }

    /// Counts what the answer guard and the grounding check found.
    fn count_checks(&self, checked: Checked) {
        let guard = checked.guard_passed.map(|passed| {
            (
                "jailbreak_guard",
                if passed { "passed" } else { "withheld" },
            )
        });
        let grounding = checked.grounding.map(|outcome| ("grounding", outcome));
        for (plugin, outcome) in guard.into_iter().chain(grounding) {
            self.metrics
                .plugin_actions
                .get_or_create(&PluginLabels { plugin, outcome })
                .inc();
        }
    }

    /// Checks the answer against its contract, repairing it when it may (the repaired answer
    /// replaces it); the refusal when it breaks a contract that says `fail`.
    async fn settle_contract(&mut self, answer: &mut Held) -> Option<Step> {
        let forwarded = self.forwarded.as_mut()?;
        let contract = forwarded.obligations.contract.take()?;
        let request = std::mem::take(&mut forwarded.repair_request);
        let text = answer.text();
        let name = contract.shape.name();
        let model = self
            .snapshot
            .model_index(&forwarded.model)
            .map(|i| &self.snapshot.models[i]);
        let (client, model) = match (&self.services.client, model) {
            (Some(client), Some(model)) if !forwarded.stream && contract.repair => (client, model),
            _ => {
                // Kept, or broken with no repair: a held answer can still be refused.
                let checked = contract.shape.check(text);
                Arc::make_mut(&mut forwarded.trace).contract =
                    Some((name, ContractOutcome::of_check(&checked)));
                let fail = contract.on_violation == crate::config::OnViolation::Fail;
                return match checked {
                    Err(reason) if fail => Some(self.violated(name, reason)),
                    _ => None,
                };
            }
        };
        if contract.shape.check(text).is_ok() {
            Arc::make_mut(&mut forwarded.trace).contract = Some((name, ContractOutcome::Kept));
            return None;
        }
        let request: Value = serde_json::from_slice(&request).unwrap_or_default();
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let max_tokens = request["max_tokens"].as_u64().unwrap_or(1024);
        let mut enforced = enforce(
            client,
            &contract.shape,
            model,
            &messages,
            answer.json().cloned().unwrap_or_default(),
            max_tokens,
            REPAIR_DEADLINE,
        )
        .await;
        Arc::make_mut(&mut forwarded.trace).contract = Some((name, enforced.outcome));
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
                answer.replace(enforced.body.to_string().into_bytes());
                None
            }
            (_, Some(reason), crate::config::OnViolation::Fail) => {
                Some(self.violated(name, reason))
            }
            _ => None,
        }
    }

    /// The refusal of an answer that broke contract `name` for `reason`.
    fn violated(&self, contract: &'static str, reason: String) -> Step {
        let error = RouteError::ContractViolated { contract, reason };
        let trace = self
            .forwarded
            .as_ref()
            .map(|f| crate::engine::Trace::clone(&f.trace));
        let trace = trace.unwrap_or_else(|| crate::engine::Trace::empty(&self.snapshot));
        self.refuse(trace, &error)
    }
}
