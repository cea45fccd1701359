//! The confidence cascade: asks its models in escalation order through Envoy's internal
//! listener and returns the first answer whose confidence reaches the threshold; when none does,
//! it forwards the client's own request to the last model, so Envoy streams that answer to the
//! client (with its retries and access log) rather than mom-router buffering it.

use super::calls::{add_usage, answer, sub_request_body, Caller, LooperTrace, Step};
use crate::config::{ConfidenceLooper, Decision, Model, OnCallError, Snapshot};
use crate::engine::answer::contract::{self, ContractOutcome};
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::logprobs::{confidence, yes_probability, Measure};
use crate::llm::{ChatRequest, LlmClient};
use serde_json::{json, Value};
use std::time::Instant;

/// How the cascade ended.
pub(in crate::engine) enum Ending {
    /// A tentative answer is returned as it is.
    Answer(Reply),
    /// The client's request goes to this model (candidate's model index).
    Forward(usize),
}

/// Runs the confidence cascade of `decision`.
pub(in crate::engine) async fn confidence_cascade(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &ConfidenceLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Ending, RouteError> {
    let started = Instant::now();
    let mut record = LooperTrace::new("confidence");
    let (tentative, last) = looper.order.split_at(looper.order.len() - 1);
    let escalate_to = decision.candidates[last[0]].model;
    let mut ending = Ending::Forward(escalate_to);
    for &candidate in tentative {
        let model = &snapshot.models[decision.candidates[candidate].model];
        let left = looper.limits.total.saturating_sub(started.elapsed());
        if left.is_zero() {
            record.push_step(Step {
                model: model.name.to_string(),
                outcome: "skipped: total deadline spent".to_owned(),
                confidence: None,
                latency_ms: 0.0,
            });
            break;
        }
        let margin = looper.measure == Measure::Margin;
        let body = sub_request_body(
            request,
            &model.provider_model,
            looper.limits.max_tokens,
            margin,
        );
        let call = caller
            .chat(
                decision.candidates[candidate].model,
                body,
                looper.limits.per_call.min(left),
            )
            .await;
        // The model that answered: the candidate, or the failover model it handed the call to.
        let model = &snapshot.models[call.model];
        match call.result {
            Ok(reply) => {
                add_usage(&mut record, model, &reply.body);
                let latency_ms = reply.latency.as_secs_f64() * 1000.0;
                let measured = match looper.measure {
                    Measure::SelfVerify => {
                        let deadline = looper
                            .limits
                            .per_call
                            .min(looper.limits.total.saturating_sub(started.elapsed()));
                        self_verify(
                            caller.client,
                            model,
                            looper.limits.max_tokens,
                            request,
                            &reply.body,
                            deadline,
                            &mut record,
                        )
                        .await
                    }
                    measure => confidence(&reply.body, measure),
                };
                let confident = measured.is_some_and(|c| c >= looper.threshold);
                let mut outcome = match (measured, confident, looper.measure) {
                    (None, _, Measure::SelfVerify) => "unverified",
                    (None, _, _) => "no_logprobs",
                    (Some(_), true, _) => "confident",
                    (Some(_), false, _) => "unconfident",
                }
                .to_owned();
                let mut body = reply.body;
                let mut kept = confident;
                if let (true, Some(contract)) = (confident, &decision.contract) {
                    let messages = request.messages_json();
                    let deadline = looper
                        .limits
                        .per_call
                        .min(looper.limits.total.saturating_sub(started.elapsed()));
                    let enforced = contract::enforce(
                        caller.client,
                        &contract.shape,
                        model,
                        &messages,
                        body,
                        looper.limits.max_tokens,
                        deadline,
                    )
                    .await;
                    record.add(model, enforced.usage);
                    body = enforced.body;
                    trace.contract = Some((contract.shape.name(), enforced.outcome));
                    if enforced.outcome == ContractOutcome::Violated {
                        // A confident answer in the wrong shape escalates like an unconfident one.
                        outcome = "confident but contract violated".to_owned();
                        kept = false;
                    } else if enforced.outcome == ContractOutcome::Repaired {
                        outcome = "confident (repaired)".to_owned();
                    }
                }
                record.push_step(Step {
                    model: model.name.to_string(),
                    outcome,
                    confidence: measured,
                    latency_ms,
                });
                if kept {
                    let reply = answer(body, request.stream, &record);
                    ending = Ending::Answer(reply);
                    trace.model = Some(model.name.clone());
                    trace.provider_model = Some(model.provider_model.clone());
                    break;
                }
                trace.contract = None;
            }
            Err(error) => {
                record.push_step(Step {
                    model: model.name.to_string(),
                    outcome: format!("error: {error}"),
                    confidence: None,
                    latency_ms: 0.0,
                });
                match looper.on_error {
                    OnCallError::Skip => {}
                    OnCallError::Fallback => break,
                    OnCallError::Fail => {
                        trace.looper = Some(record);
                        return Err(RouteError::LooperFailed {
                            model: model.name.to_string(),
                            reason: error.to_string(),
                        });
                    }
                }
            }
        }
    }
    trace.looper = Some(record);
    Ok(ending)
}

/// The model's own probability that `answer` (its reply to `request`) is correct: one more call
/// asking YES or NO, read with [`yes_probability`].
async fn self_verify(
    client: &LlmClient,
    model: &Model,
    max_tokens: u64,
    request: &ChatRequest,
    answer: &Value,
    deadline: std::time::Duration,
    record: &mut LooperTrace,
) -> Option<f64> {
    if deadline.is_zero() {
        return None;
    }
    let text = crate::llm::chat::reply_text(answer);
    let body = json!({
        "model": model.provider_model, "stream": false, "max_tokens": max_tokens.min(4),
        "logprobs": true, "top_logprobs": 5,
        "messages": [
            {"role": "system", "content": "You check answers. Reply with one word: YES if the \
              answer is correct and complete, NO if it is not."},
            {"role": "user", "content": format!(
                "Question:\n{}\n\nAnswer:\n{text}\n\nIs the answer correct?", request.last_user_text())},
        ],
    });
    let reply = client
        .chat(&model.name, body.to_string().into_bytes(), 1, deadline)
        .await
        .ok()?;
    add_usage(record, model, &reply.body);
    yes_probability(&reply.body)
}
