//! What every looper shares: the record of its calls ([`LooperTrace`], one [`Step`] per call),
//! the sub-request body, the answer in hand, and [`Caller`], which sends the sub-calls through
//! Envoy's internal listener and fails a call over like a forwarded request.

use crate::config::{Failover, Model, Snapshot};
use crate::engine::failover::{self, Handover, SubCall};
use crate::engine::{Reply, Trace};
use crate::llm::{ChatRequest, LlmClient};
use crate::state::StateStore;
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::Duration;

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
    /// The looper (`confidence`).
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
    /// Time the looper took, start to end, in milliseconds.
    pub wall_ms: f64,
    pending: (u64, u64, f64),
}

impl LooperTrace {
    /// An empty record of looper `kind`.
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

/// Sends a looper's sub-calls through Envoy's internal listener. A call to one of the
/// looper's models fails over like a forwarded request ([`failover::sub_call`]) to the
/// identity's failover models the looper does not ask itself; every hand-over is kept for the
/// request's trace.
pub(in crate::engine) struct Caller<'a> {
    /// The internal listener, for the calls that stay on their model (a self-check, a contract
    /// repair, a judge, a planner).
    pub client: &'a LlmClient,
    snapshot: &'a Snapshot,
    state: &'a StateStore,
    policy: Option<&'a Failover>,
    fallbacks: Vec<usize>,
    handed_on: Mutex<(Vec<String>, Vec<Handover>)>,
}

impl<'a> Caller<'a> {
    /// Sub-calls for a looper over `own` models (indices into the snapshot's models) of an
    /// identity with failover `policy`.
    pub fn new(
        snapshot: &'a Snapshot,
        client: &'a LlmClient,
        state: &'a StateStore,
        policy: Option<&'a Failover>,
        own: &[usize],
    ) -> Self {
        let fallbacks = policy.map_or_else(Vec::new, |policy| {
            policy
                .models
                .iter()
                .copied()
                .filter(|m| !own.contains(m))
                .collect()
        });
        Self {
            client,
            snapshot,
            state,
            policy,
            fallbacks,
            handed_on: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// One sub-call to `model` with `body`, answered within `deadline`.
    pub async fn chat(&self, model: usize, body: Vec<u8>, deadline: Duration) -> SubCall {
        let (snapshot, policy) = (self.snapshot, self.policy);
        let call = failover::sub_call(
            snapshot,
            self.client,
            self.state,
            policy.map(|policy| (policy, self.fallbacks.as_slice())),
            model,
            body,
            deadline,
        )
        .await;
        if let (Some(label), Ok(mut kept)) = (call.label(snapshot), self.handed_on.lock()) {
            kept.0.push(label);
            kept.1.extend(call.handovers(snapshot));
        }
        call
    }

    /// Puts the hand-overs into `trace`: `x-mom-fallback` and the run record show each chain
    /// (`;`-separated), `mom_fallback_total` counts each hand-over.
    pub fn settle(self, trace: &mut Trace) {
        let Ok((chains, handovers)) = self.handed_on.into_inner() else {
            return;
        };
        if !chains.is_empty() {
            trace.failover = Some(chains.join("; "));
        }
        trace.handovers.extend(handovers);
    }
}

/// Sends `calls` (key, model index, body) at most `max_concurrent` at a time, each with
/// `per_call` (capped by `total`) to answer; when `total` passes, the answers in hand are
/// returned and the calls still in flight dropped. Results come in completion order, with
/// their keys.
pub(in crate::engine) async fn fan_out(
    caller: &Caller<'_>,
    calls: Vec<(usize, usize, Vec<u8>)>,
    max_concurrent: usize,
    per_call: Duration,
    total: Duration,
) -> Vec<(usize, SubCall)> {
    use futures_util::StreamExt;
    let deadline = per_call.min(total);
    futures_util::stream::iter(calls)
        .map(|(key, model, body)| async move { (key, caller.chat(model, body, deadline).await) })
        .buffer_unordered(max_concurrent)
        .take_until(tokio::time::sleep(total))
        .collect()
        .await
}

/// Adds a reply's token usage to the looper's total.
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
