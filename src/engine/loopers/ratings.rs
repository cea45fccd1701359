//! The ratings ensemble: the decision's models answer in parallel (at most `maxConcurrent` in
//! flight, each call and the whole bounded by deadlines), and the answer with the best
//! rating-weighted confidence is returned: weight `10^((elo − 1500) / 400)` from the Elo
//! ratings outcomes taught this decision, times the answer's mean token probability
//! (`exp(avg logprob)`, 0.5 without log-probabilities). Fewer than `minSuccesses` answers fail
//! the request (502).

use super::calls::{add_usage, answer, fan_out, sub_request_body, Caller, LooperTrace, Step};
use crate::config::{Decision, OnViolation, RatingsLooper, Snapshot};
use crate::engine::answer::contract::enforce;
use crate::engine::Reply;
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::chat::reply_text;
use crate::llm::logprobs::{confidence, Measure};
use crate::llm::ChatRequest;
use crate::selection::ELO_START;
use crate::state::StateStore;

/// Runs the ensemble of `decision`; returns the reply to send.
pub(in crate::engine) async fn ratings_ensemble(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    state: &StateStore,
    decision: &Decision,
    looper: &RatingsLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Reply, RouteError> {
    // Owned inputs, so the concurrent calls borrow nothing from this frame.
    let calls: Vec<(usize, usize, Vec<u8>)> = decision
        .candidates
        .iter()
        .map(|candidate| {
            let model = &snapshot.models[candidate.model];
            let body = sub_request_body(
                request,
                &model.provider_model,
                looper.limits.max_tokens,
                false,
            );
            (candidate.model, candidate.model, body)
        })
        .collect();
    let results = fan_out(
        caller,
        calls,
        looper.max_concurrent,
        looper.limits.per_call,
        looper.limits.total,
    )
    .await;
    let results = results
        .into_iter()
        .map(|(_, call)| (&snapshot.models[call.model], call.result));
    let mut record = LooperTrace::new("ratings");
    let mut answers: Vec<(f64, &crate::config::Model, serde_json::Value)> = Vec::new();
    for (model, result) in results {
        match result {
            Ok(reply) => {
                add_usage(&mut record, model, &reply.body);
                let measured = confidence(&reply.body, Measure::AvgLogprob);
                let probability = measured.map_or(0.5, f64::exp);
                let elo = state.view(&decision.name, &model.name, None).elo;
                let score = 10f64.powf((elo - ELO_START) / 400.0) * probability;
                record.push_step(Step {
                    model: model.name.to_string(),
                    outcome: format!("answered (score {score:.3})"),
                    confidence: measured,
                    latency_ms: reply.latency.as_secs_f64() * 1000.0,
                });
                answers.push((score, model, reply.body));
            }
            Err(error) => record.push_step(Step {
                model: model.name.to_string(),
                outcome: format!("error: {error}"),
                confidence: None,
                latency_ms: 0.0,
            }),
        }
    }
    // Steps in declared order, whatever order the answers came in.
    record.sort_steps_by_key(|step| {
        decision
            .candidates
            .iter()
            .position(|c| *snapshot.models[c.model].name == *step.model)
    });
    let answered = record
        .steps
        .iter()
        .filter(|s| s.outcome.starts_with("answered"))
        .count();
    if answered < looper.min_successes {
        trace.looper = Some(record);
        return Err(RouteError::LooperFailed {
            model: decision.name.to_string(),
            reason: format!(
                "{answered} of {} models answered; {} needed",
                decision.candidates.len(),
                looper.min_successes
            ),
        });
    }
    // Best score first; with an output contract, answers that keep it come before those that
    // do not, and a best answer that breaks it gets its one repair.
    answers.sort_by(|a, b| b.0.total_cmp(&a.0));
    if let Some(contract) = &decision.contract {
        let keeps = |body: &serde_json::Value| contract.shape.check(reply_text(body)).is_ok();
        answers.sort_by_key(|(_, _, body)| !keeps(body));
    }
    let Some((_, model, mut body)) = answers.into_iter().next() else {
        trace.looper = Some(record);
        return Err(RouteError::LooperFailed {
            model: decision.name.to_string(),
            reason: "no model answered".to_owned(),
        });
    };
    if let Some(contract) = &decision.contract {
        let enforced = enforce(
            caller.client,
            &contract.shape,
            model,
            &request.messages_json(),
            body,
            looper.limits.max_tokens,
            looper.limits.per_call,
        )
        .await;
        record.add(model, enforced.usage);
        body = enforced.body;
        trace.contract = Some((contract.shape.name(), enforced.outcome));
        if let (Some(reason), OnViolation::Fail) = (enforced.reason, contract.on_violation) {
            trace.looper = Some(record);
            return Err(RouteError::ContractViolated {
                contract: contract.shape.name(),
                reason,
            });
        }
    }
    trace.model = Some(model.name.clone());
    trace.provider_model = Some(model.provider_model.clone());
    let reply = answer(body, request.stream, &record);
    trace.looper = Some(record);
    Ok(reply)
}
