//! Loopers: bounded multi-model recipes a decision runs instead of one pick. The confidence
//! cascade asks its models in escalation order through Envoy's internal listener and returns the
//! first answer whose confidence reaches the threshold; when none does, it forwards the client's
//! own request to the last model, so Envoy streams that answer to the client (with its retries
//! and access log) rather than mom-router buffering it.

use crate::config::{ConfidenceLooper, Decision, Model, OnCallError, Snapshot};
use crate::engine::answer::contract::{self, ContractOutcome};
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::logprobs::{confidence, yes_probability, Measure};
use crate::llm::{CallError, ChatRequest, LlmClient};
use serde_json::{json, Value};
use std::time::Instant;

/// One tentative call, as `explain`, headers and metadata show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Logical model asked.
    pub model: String,
    /// `confident`, `unconfident`, `no_logprobs` or the error.
    pub outcome: String,
    /// Measured confidence, when the reply carried log-probabilities.
    pub confidence: Option<f64>,
    /// Call latency in milliseconds.
    pub latency_ms: f64,
}

/// What a looper did.
#[derive(Debug, Clone, PartialEq)]
pub struct LooperTrace {
    /// The recipe (`confidence`).
    pub kind: &'static str,
    /// Its tentative calls, in order.
    pub steps: Vec<Step>,
    /// Prompt and completion tokens of its calls.
    pub usage: (u64, u64),
    /// Cost of its calls from the models' declared pricing (0 for models without pricing).
    pub cost: f64,
    /// Prompt tokens, completion tokens and cost of each step's call (and its repair), in step
    /// order: the usage added since the step before.
    pub step_usage: Vec<(u64, u64, f64)>,
    /// Estimated energy of its calls in joules: each model's declared power × the call's
    /// latency (0 for models that declare none).
    pub energy_joules: f64,
    /// The same estimate for each step, in step order.
    pub step_energy: Vec<f64>,
    /// Time the recipe took, start to end, in milliseconds.
    pub wall_ms: f64,
    pending: (u64, u64, f64),
}

impl LooperTrace {
    /// An empty record of recipe `kind`.
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            steps: Vec::new(),
            usage: (0, 0),
            cost: 0.0,
            step_usage: Vec::new(),
            energy_joules: 0.0,
            step_energy: Vec::new(),
            wall_ms: 0.0,
            pending: (0, 0, 0.0),
        }
    }

    /// Reorders the steps (and their usage with them) by `key`, stably.
    pub fn sort_steps_by_key<K: Ord>(&mut self, mut key: impl FnMut(&Step) -> K) {
        let mut paired: Vec<(Step, (u64, u64, f64))> = std::mem::take(&mut self.steps)
            .into_iter()
            .zip(std::mem::take(&mut self.step_usage))
            .collect();
        paired.sort_by_key(|(step, _)| key(step));
        (self.steps, self.step_usage) = paired.into_iter().unzip();
    }

    /// Records a step, with the usage added since the previous one.
    pub fn push_step(&mut self, step: Step) {
        self.steps.push(step);
        self.step_usage.push(std::mem::take(&mut self.pending));
    }

    /// Adds one call's tokens and their cost on `model`.
    pub fn add(&mut self, model: &Model, (prompt, completion): (u64, u64)) {
        self.usage.0 += prompt;
        self.usage.1 += completion;
        let cost = model.pricing.map_or(0.0, |pricing| {
            (prompt as f64 * pricing.input_per_million
                + completion as f64 * pricing.output_per_million)
                / 1e6
        });
        self.cost += cost;
        self.pending.0 += prompt;
        self.pending.1 += completion;
        self.pending.2 += cost;
    }
}

/// How the recipe ended.
pub(in crate::engine) enum Ending {
    /// A tentative answer is returned as it is.
    Answer(Reply),
    /// The client's request goes to this model (candidate's model index).
    Forward(usize),
}

/// A sub-request: the client's request, non-streaming, with log-probabilities asked (and the
/// best alternatives when `alternatives`) and `max_tokens` capped at `max_tokens`.
pub(in crate::engine) fn sub_request_body(
    request: &ChatRequest,
    provider_model: &str,
    max_tokens: u64,
    alternatives: bool,
) -> Vec<u8> {
    let mut object = request.object().clone();
    object.insert("model".to_owned(), json!(provider_model));
    object.insert("stream".to_owned(), json!(false));
    object.remove("stream_options");
    object.insert("logprobs".to_owned(), json!(true));
    if alternatives {
        object.insert("top_logprobs".to_owned(), json!(2));
    }
    let cap = request
        .max_tokens()
        .map_or(max_tokens, |asked| asked.min(max_tokens));
    object.remove("max_completion_tokens");
    object.insert("max_tokens".to_owned(), json!(cap));
    Value::Object(object).to_string().into_bytes()
}

/// Sends `calls` (model index, logical name, body) at most `max_concurrent` at a time, each with
/// `per_call` (capped by `total`) to answer; when `total` passes, the answers in hand are
/// returned and the calls still in flight dropped. Results come in completion order.
pub(in crate::engine) async fn fan_out(
    client: &LlmClient,
    calls: Vec<(usize, String, Vec<u8>)>,
    max_concurrent: usize,
    per_call: std::time::Duration,
    total: std::time::Duration,
) -> Vec<(usize, Result<crate::llm::SubReply, CallError>)> {
    use futures_util::StreamExt;
    let deadline = per_call.min(total);
    futures_util::stream::iter(calls)
        .map(|(index, name, body)| {
            let client = client.clone();
            async move { (index, client.chat(&name, body, 1, deadline).await) }
        })
        .buffer_unordered(max_concurrent)
        .take_until(tokio::time::sleep(total))
        .collect()
        .await
}

/// Runs the confidence cascade of `decision`.
pub(in crate::engine) async fn confidence_cascade(
    snapshot: &Snapshot,
    client: &LlmClient,
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
        let left = looper.total.saturating_sub(started.elapsed());
        if left.is_zero() {
            record.push_step(Step {
                model: model.name.clone(),
                outcome: "skipped: total deadline spent".to_owned(),
                confidence: None,
                latency_ms: 0.0,
            });
            break;
        }
        let margin = looper.measure == Measure::Margin;
        let body = sub_request_body(request, &model.provider_model, looper.max_tokens, margin);
        let result = client
            .chat(&model.name, body, 1, looper.per_call.min(left))
            .await;
        match result {
            Ok(reply) => {
                add_usage(&mut record, model, &reply.body);
                let latency_ms = reply.latency.as_secs_f64() * 1000.0;
                let measured = match looper.measure {
                    Measure::SelfVerify => {
                        let deadline = looper
                            .per_call
                            .min(looper.total.saturating_sub(started.elapsed()));
                        self_verify(
                            client,
                            model,
                            looper.max_tokens,
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
                        .per_call
                        .min(looper.total.saturating_sub(started.elapsed()));
                    let enforced = contract::enforce(
                        client,
                        &contract.shape,
                        model,
                        &messages,
                        body,
                        looper.max_tokens,
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
                    model: model.name.clone(),
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
                    model: model.name.clone(),
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
                            model: model.name.clone(),
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

/// Adds a reply's token usage to the recipe's total.
pub(in crate::engine) fn add_usage(record: &mut LooperTrace, model: &Model, body: &Value) {
    record.add(model, crate::llm::usage::usage_of(body).counted());
}

/// The confident tentative answer as the client's reply: JSON, or server-sent events when the
/// client asked to stream, with the cascade's summed usage.
pub(in crate::engine) fn answer(mut body: Value, stream: bool, record: &LooperTrace) -> Reply {
    let usage = json!({
        "prompt_tokens": record.usage.0,
        "completion_tokens": record.usage.1,
        "total_tokens": record.usage.0 + record.usage.1,
    });
    body["usage"] = usage;
    Reply::completion(&body, stream)
}
