//! ReMoM: a panel of the decision's models answers in parallel (`samples` each, at most
//! `maxConcurrent` in flight, bounded by deadlines); when at least `minSuccesses` answered, the
//! client's own request goes to the synthesizer with the panel's answers added as a system
//! message, forwarded through Envoy so the final answer streams to the client. The best panel
//! answer (highest mean token probability) is held as evidence: if the synthesizer's response is
//! not a success, mom-router answers with that evidence instead.

use super::calls::{add_usage, answer, fan_out, sub_request_body, Caller, LooperTrace, Step};
use crate::config::{Decision, Model, RemomLooper, Snapshot};
use crate::engine::Forward;
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::chat::reply_text;
use crate::llm::logprobs::{confidence, Measure};
use crate::llm::ChatRequest;
use serde_json::{json, Value};

/// The synthesis to forward, with the evidence to answer with if it fails.
pub(in crate::engine) struct Synthesis {
    /// The rewritten request for the synthesizer.
    pub forward: Forward,
    /// The best evidence in hand (none when there is nothing to answer with).
    pub fallback: Option<Reply>,
}

/// One panel answer: its mean token probability, the model, the reply.
pub(in crate::engine) type Answer = (f64, String, Value);

/// Runs the panel of `decision` and prepares the synthesis.
pub(in crate::engine) async fn remom(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Synthesis, RouteError> {
    let (answers, record) =
        panel(snapshot, caller, decision, looper, request, "remom", trace).await?;
    Ok(synthesis(
        snapshot, decision, looper, request, answers, record, None, trace,
    ))
}

/// Asks the panel — one round of `samples` calls per model, or the rounds of the breadth
/// schedule — and fails when the first round has fewer than `minSuccesses` answers. A later
/// round sees the previous round's answers; one with too few answers ends the schedule and the
/// previous round's answers stand. Answers come best first.
pub(in crate::engine) async fn panel(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    kind: &'static str,
    trace: &mut Trace,
) -> Result<(Vec<Answer>, LooperTrace), RouteError> {
    let started = std::time::Instant::now();
    let schedule = &looper.rounds;
    let mut record = LooperTrace::new(kind);
    let mut answers: Vec<Answer> = Vec::new();
    for (round, &width) in schedule.iter().enumerate() {
        let left = looper.limits.total.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        let calls = round_calls(snapshot, decision, looper, request, round, width, &answers);
        let results = fan_out(
            caller,
            calls,
            looper.max_concurrent,
            looper.limits.per_call,
            left,
        )
        .await;
        let label = |name: &str| {
            if schedule.len() > 1 {
                format!("{name} (round {})", round + 1)
            } else {
                name.to_owned()
            }
        };
        let mut fresh: Vec<Answer> = Vec::new();
        for (_, call) in results {
            let model = &snapshot.models[call.model];
            match call.result {
                Ok(reply) => {
                    add_usage(&mut record, model, &reply.body);
                    let measured = confidence(&reply.body, Measure::AvgLogprob);
                    let text = reply_text(&reply.body).to_owned();
                    record.push_step(Step {
                        model: label(&model.name),
                        outcome: "answered".to_owned(),
                        confidence: measured,
                        latency_ms: reply.latency.as_secs_f64() * 1000.0,
                    });
                    if !text.trim().is_empty() {
                        fresh.push((
                            measured.map_or(0.5, f64::exp),
                            model.name.to_string(),
                            reply.body,
                        ));
                    }
                }
                Err(error) => record.push_step(Step {
                    model: label(&model.name),
                    outcome: format!("error: {error}"),
                    confidence: None,
                    latency_ms: 0.0,
                }),
            }
        }
        if fresh.len() < looper.min_successes && round > 0 {
            break;
        }
        fresh.sort_by(|a, b| b.0.total_cmp(&a.0));
        answers = fresh;
        if answers.len() < looper.min_successes {
            break;
        }
    }
    record.sort_steps_by_key(|step| step.model.clone());
    if answers.len() < looper.min_successes {
        let needed = looper.min_successes;
        let calls = record.steps.len();
        let answered = answers.len();
        trace.looper = Some(record);
        return Err(RouteError::LooperFailed {
            model: decision.name.to_string(),
            reason: format!("{answered} of {calls} panel calls answered; {needed} needed"),
        });
    }
    Ok((answers, record))
}

/// The calls of one round: `width` calls spread over the panel in turn, each with its own `seed`
/// (round × 1000 + call) when a model is asked more than once or the round is not the first;
/// from the second round on, the previous round's answers are added as a system message.
fn round_calls(
    snapshot: &Snapshot,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    round: usize,
    width: usize,
    previous: &[Answer],
) -> Vec<(usize, usize, Vec<u8>)> {
    let repeated = width > looper.panel.len();
    (0..width)
        .map(|k| {
            let candidate = looper.panel[k % looper.panel.len()];
            let model = &snapshot.models[decision.candidates[candidate].model];
            let mut body: Value = serde_json::from_slice(&sub_request_body(
                request,
                &model.provider_model,
                looper.limits.max_tokens,
                false,
            ))
            .unwrap_or(Value::Null);
            if repeated || round > 0 {
                body["seed"] = json!(round * 1000 + k);
            }
            if round > 0 && !previous.is_empty() {
                let note = format!(
                    "Answers to this request from an earlier round follow, best first. Write a \
                     better answer: keep what is right in them and fix what is wrong.\n\n{}",
                    evidence(previous)
                );
                if let Some(messages) = body["messages"].as_array_mut() {
                    messages.insert(0, json!({"role": "system", "content": note}));
                }
            }
            (
                k,
                decision.candidates[candidate].model,
                body.to_string().into_bytes(),
            )
        })
        .collect()
}

/// The panel's answers, numbered, best first.
pub(in crate::engine) fn evidence(answers: &[Answer]) -> String {
    let listed: Vec<String> = answers
        .iter()
        .enumerate()
        .map(|(i, (_, model, body))| format!("[{}] {model}:\n{}", i + 1, reply_text(body)))
        .collect();
    listed.join("\n\n")
}

/// The client's request for the synthesizer with the panel's answers (and, for Fusion, the
/// judge's analysis) added as a first system message; the best answer held as the fallback.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site per looper, each argument distinct"
)]
pub(in crate::engine) fn synthesis(
    snapshot: &Snapshot,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    mut answers: Vec<Answer>,
    record: LooperTrace,
    analysis: Option<&str>,
    trace: &mut Trace,
) -> Synthesis {
    let synthesizer = &snapshot.models[decision.candidates[looper.synthesizer].model];
    let mut brief = format!(
        "Other models answered the user's last message. Their answers follow, best first. Write \
         the single best final answer: keep what they agree on, resolve or point out where they \
         contradict each other, and do not mention the other models.\n\n{}",
        evidence(&answers)
    );
    if let Some(analysis) = analysis {
        brief.push_str(&format!(
            "\n\nA judge compared them (disagreement is evidence to weigh, not a vote):\n{analysis}"
        ));
    }
    let best = answers.swap_remove(0);
    let fallback = answer(best.2, request.stream, &record);
    trace.looper = Some(record);
    Synthesis {
        forward: briefed(request, synthesizer, &brief),
        fallback: Some(fallback),
    }
}

/// The client's request for `model` with `brief` added as a first system message.
pub(in crate::engine) fn briefed(request: &ChatRequest, model: &Model, brief: &str) -> Forward {
    let mut object = request.object().clone();
    object.insert("model".to_owned(), json!(model.provider_model));
    let mut messages = object
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    messages.insert(0, json!({"role": "system", "content": brief}));
    object.insert("messages".to_owned(), Value::Array(messages));
    Forward {
        estimated_prompt_tokens: crate::signals::estimate_tokens(request),
        model: model.name.clone(),
        provider_model: model.provider_model.clone(),
        body: Value::Object(object).to_string().into_bytes(),
        stream: request.stream,
        fallback: None,
        headers: crate::engine::HeaderEdits::default(),
        obligations: crate::engine::Obligations::default(),
        failover: None,
    }
}
