//! ReMoM: a panel of the decision's models answers in parallel (`samples` each, at most
//! `maxConcurrent` in flight, bounded by deadlines); when at least `minSuccesses` answered, the
//! client's own request goes to the synthesizer with the panel's answers added as a system
//! message, forwarded through Envoy so the final answer streams to the client. The best panel
//! answer (highest mean token probability) is held as evidence: if the synthesizer's response is
//! not a success, mom-router answers with that evidence instead.

use super::looper::{answer, fan_out, sub_request_body, LooperTrace, Step};
use super::{Forward, Reply, RouteError, Trace};
use crate::config::{Decision, RemomLooper, Snapshot};
use crate::llm::logprobs::{confidence, Measure};
use crate::llm::{ChatRequest, LlmClient};
use serde_json::{json, Value};

/// The synthesis to forward, with the evidence to answer with if it fails.
pub(super) struct Synthesis {
    /// The rewritten request for the synthesizer.
    pub forward: Forward,
    /// The best panel answer.
    pub fallback: Reply,
}

/// One panel answer: its mean token probability, the model, the reply.
pub(super) type Answer = (f64, String, Value);

/// Runs the panel of `decision` and prepares the synthesis.
pub(super) async fn remom(
    snapshot: &Snapshot,
    client: &LlmClient,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Synthesis, RouteError> {
    let (answers, record) =
        panel(snapshot, client, decision, looper, request, "remom", trace).await?;
    Ok(synthesis(
        snapshot, decision, looper, request, answers, record, None, trace,
    ))
}

/// Asks the panel; fails when fewer than `minSuccesses` answered. Answers come best first.
pub(super) async fn panel(
    snapshot: &Snapshot,
    client: &LlmClient,
    decision: &Decision,
    looper: &RemomLooper,
    request: &ChatRequest,
    kind: &'static str,
    trace: &mut Trace,
) -> Result<(Vec<Answer>, LooperTrace), RouteError> {
    let mut calls: Vec<(usize, String, Vec<u8>)> = Vec::new();
    for &candidate in &looper.panel {
        let model = &snapshot.models[decision.candidates[candidate].model];
        for sample in 0..looper.samples {
            let mut body: Value = serde_json::from_slice(&sub_request_body(
                request,
                &model.provider_model,
                looper.max_tokens,
                false,
            ))
            .unwrap_or(Value::Null);
            if looper.samples > 1 {
                body["seed"] = json!(sample);
            }
            calls.push((
                decision.candidates[candidate].model,
                model.name.clone(),
                body.to_string().into_bytes(),
            ));
        }
    }
    let results = fan_out(
        client,
        calls,
        looper.max_concurrent,
        looper.per_call,
        looper.total,
    )
    .await;
    let mut record = LooperTrace {
        kind,
        steps: Vec::new(),
        usage: (0, 0),
    };
    let mut answers: Vec<Answer> = Vec::new();
    for (index, result) in results {
        let model = &snapshot.models[index];
        match result {
            Ok(reply) => {
                let usage = &reply.body["usage"];
                record.usage.0 += usage["prompt_tokens"].as_u64().unwrap_or(0);
                record.usage.1 += usage["completion_tokens"].as_u64().unwrap_or(0);
                let measured = confidence(&reply.body, Measure::AvgLogprob);
                let text = reply.body["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                record.steps.push(Step {
                    model: model.name.clone(),
                    outcome: "answered".to_owned(),
                    confidence: measured,
                    latency_ms: reply.latency.as_secs_f64() * 1000.0,
                });
                if !text.trim().is_empty() {
                    answers.push((
                        measured.map_or(0.5, f64::exp),
                        model.name.clone(),
                        reply.body,
                    ));
                }
            }
            Err(error) => record.steps.push(Step {
                model: model.name.clone(),
                outcome: format!("error: {error}"),
                confidence: None,
                latency_ms: 0.0,
            }),
        }
    }
    record.steps.sort_by(|a, b| a.model.cmp(&b.model));
    if answers.len() < looper.min_successes {
        let needed = looper.min_successes;
        let calls = record.steps.len();
        let answered = answers.len();
        trace.looper = Some(record);
        return Err(RouteError::LooperFailed {
            model: decision.name.clone(),
            reason: format!("{answered} of {calls} panel calls answered; {needed} needed"),
        });
    }
    answers.sort_by(|a, b| b.0.total_cmp(&a.0));
    Ok((answers, record))
}

/// The panel's answers, numbered, best first.
pub(super) fn evidence(answers: &[Answer]) -> String {
    let listed: Vec<String> = answers
        .iter()
        .enumerate()
        .map(|(i, (_, model, body))| {
            format!(
                "[{}] {model}:\n{}",
                i + 1,
                body["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
            )
        })
        .collect();
    listed.join("\n\n")
}

/// The client's request for the synthesizer with the panel's answers (and, for Fusion, the
/// judge's analysis) added as a first system message; the best answer held as the fallback.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site per recipe, each argument distinct"
)]
pub(super) fn synthesis(
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
    let mut object = request.object().clone();
    object.insert("model".to_owned(), json!(synthesizer.provider_model));
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
    let mut messages = object
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    messages.insert(0, json!({"role": "system", "content": brief}));
    object.insert("messages".to_owned(), Value::Array(messages));
    let best = answers.swap_remove(0);
    let fallback = answer(best.2, request.stream, &record);
    trace.looper = Some(record);
    Synthesis {
        forward: Forward {
            estimated_prompt_tokens: crate::signals::estimate_tokens(request),
            model: synthesizer.name.clone(),
            provider_model: synthesizer.provider_model.clone(),
            body: Value::Object(object).to_string().into_bytes(),
            stream: request.stream,
            fallback: None,
        },
        fallback,
    }
}
