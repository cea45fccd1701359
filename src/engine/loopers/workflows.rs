//! Workflows: the planner writes a JSON plan of steps, each assigned to one of the allowed
//! workers; the plan is validated (allowed workers only, at most `maxSteps` steps, each step
//! after earlier steps only) and repaired once before anything runs. Steps whose prerequisites
//! are done run together, at most `maxParallel` at once; a verifier may check the results; the
//! finalizer writes the answer from them, forwarded through Envoy so it streams. The last step
//! result is held as the fallback when the finalizer fails.

use super::calls::{add_usage, answer, fan_out, Caller, LooperTrace, Step};
use super::plan::{plan, PlanStep};
use super::remom::{briefed, Synthesis};
use crate::config::{Decision, Model, OnCallError, Snapshot, WorkflowsLooper};
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::chat::reply_text;
use crate::llm::contract::json_in;
use crate::llm::{ChatRequest, LlmClient};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Runs the workflow of `decision` and prepares the finalizer's request.
pub(in crate::engine) async fn workflows(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &WorkflowsLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Synthesis, RouteError> {
    let started = Instant::now();
    let left = || looper.limits.total.saturating_sub(started.elapsed());
    let model_of = |candidate: usize| &snapshot.models[decision.candidates[candidate].model];
    let workers: Vec<(usize, &Model)> = looper.workers.iter().map(|&w| (w, model_of(w))).collect();
    let mut record = LooperTrace::new("workflows");
    let finalizer = model_of(looper.finalizer);
    let plan = plan(
        caller.client,
        model_of(looper.planner),
        looper,
        &workers,
        request,
        &mut record,
        left(),
    )
    .await;
    let plan = match plan {
        Ok(plan) => plan,
        Err(reason) if looper.on_error == OnCallError::Fail => {
            trace.looper = Some(record);
            return Err(RouteError::LooperFailed {
                model: model_of(looper.planner).name.to_string(),
                reason: format!("no valid plan: {reason}"),
            });
        }
        Err(_) => {
            // No plan to run: the finalizer answers the request alone.
            trace.looper = Some(record);
            return Ok(Synthesis {
                forward: briefed(request, finalizer, FINALIZER_ALONE),
                fallback: None,
            });
        }
    };
    let results = run_steps(
        snapshot,
        caller,
        decision,
        looper,
        &plan,
        request,
        &mut record,
        started,
    )
    .await?;
    let verdict = match (looper.verifier, left().is_zero()) {
        (Some(verifier), false) if results.iter().any(Option::is_some) => {
            verify(
                caller.client,
                model_of(verifier),
                looper,
                &plan,
                &results,
                request,
                &mut record,
                left(),
            )
            .await
        }
        _ => None,
    };
    let mut brief = format!(
        "A team of models worked on the user's last message, step by step. Their results \
         follow. Write the final answer to the user from them; do not mention the plan, the \
         steps or the other models.\n\n{}",
        listed(snapshot, decision, &plan, &results)
    );
    if let Some(verdict) = verdict {
        brief.push_str(&format!("\n\nA verifier checked the results:\n{verdict}"));
    }
    let fallback = plan.iter().zip(&results).rev().find_map(|(step, result)| {
        let text = result.as_ref()?;
        let body = json!({
            "id": "chatcmpl-mom-workflow", "object": "chat.completion", "created": 0,
            "model": model_of(step.worker).provider_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
        });
        Some(answer(body, request.stream, &record))
    });
    trace.looper = Some(record);
    Ok(Synthesis {
        forward: briefed(request, finalizer, &brief),
        fallback,
    })
}

const FINALIZER_ALONE: &str = "Answer the user's last message.";

/// Runs the plan wave by wave: every step whose prerequisites are settled, at most
/// `maxParallel` at once. A step's result is `None` when it failed or did not run.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument distinct"
)]
async fn run_steps(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &WorkflowsLooper,
    plan: &[PlanStep],
    request: &ChatRequest,
    record: &mut LooperTrace,
    started: Instant,
) -> Result<Vec<Option<String>>, RouteError> {
    let left = || looper.limits.total.saturating_sub(started.elapsed());
    let model_of = |candidate: usize| &snapshot.models[decision.candidates[candidate].model];
    let mut results: Vec<Option<String>> = vec![None; plan.len()];
    let mut settled = vec![false; plan.len()];
    let mut stopped = false;
    // Every wave settles at least one step (`after` only names earlier steps).
    for _wave in 0..plan.len() {
        let ready: Vec<usize> = (0..plan.len())
            .filter(|&i| !settled[i] && plan[i].after.iter().all(|&a| settled[a]))
            .collect();
        if ready.is_empty() {
            break;
        }
        if stopped || left().is_zero() {
            for &i in &ready {
                settled[i] = true;
                let why = if stopped {
                    "skipped: an earlier step failed"
                } else {
                    "skipped: total deadline spent"
                };
                record.push_step(step(
                    model_of(plan[i].worker),
                    &plan[i].id,
                    why.to_owned(),
                    0.0,
                ));
            }
            continue;
        }
        let calls = ready
            .iter()
            .map(|&i| {
                let worker = model_of(plan[i].worker);
                let body = worker_request(worker, looper, plan, &results, i, request);
                (i, decision.candidates[plan[i].worker].model, body)
            })
            .collect();
        let answered = fan_out(
            caller,
            calls,
            looper.max_parallel,
            looper.limits.per_call,
            left(),
        )
        .await;
        for &i in &ready {
            settled[i] = true;
        }
        let mut in_order: Vec<_> = answered.into_iter().collect();
        in_order.sort_by_key(|(i, _)| *i);
        let mut seen = vec![false; plan.len()];
        for (i, call) in in_order {
            seen[i] = true;
            let worker = &snapshot.models[call.model];
            match call.result {
                Ok(reply) => {
                    add_usage(record, worker, &reply.body);
                    let text = reply_text(&reply.body).to_owned();
                    let latency_ms = reply.latency.as_secs_f64() * 1000.0;
                    record.push_step(step(worker, &plan[i].id, "done".to_owned(), latency_ms));
                    results[i] = Some(text);
                }
                Err(error) => {
                    record.push_step(step(worker, &plan[i].id, format!("error: {error}"), 0.0));
                    match looper.on_error {
                        OnCallError::Skip => {}
                        OnCallError::Fallback => stopped = true,
                        OnCallError::Fail => {
                            return Err(RouteError::LooperFailed {
                                model: worker.name.to_string(),
                                reason: format!("step {}: {error}", plan[i].id),
                            })
                        }
                    }
                }
            }
        }
        for &i in ready.iter().filter(|&&i| !seen[i]) {
            let worker = model_of(plan[i].worker);
            record.push_step(step(
                worker,
                &plan[i].id,
                "skipped: total deadline spent".to_owned(),
                0.0,
            ));
        }
    }
    Ok(results)
}

/// One worker's request: its task, the user's request and the results of the steps it reads.
fn worker_request(
    worker: &Model,
    looper: &WorkflowsLooper,
    plan: &[PlanStep],
    results: &[Option<String>],
    index: usize,
    request: &ChatRequest,
) -> Vec<u8> {
    let step = &plan[index];
    let mut brief = "You carry out one step of a plan that answers a user's request. Do only \
                     your step and reply with its result."
        .to_owned();
    for &earlier in &step.after {
        let result = results[earlier].as_deref().unwrap_or("(this step failed)");
        brief.push_str(&format!(
            "\n\nResult of step {}:\n{result}",
            plan[earlier].id
        ));
    }
    json!({
        "model": worker.provider_model, "stream": false, "max_tokens": looper.limits.max_tokens,
        "messages": [
            {"role": "system", "content": brief},
            {"role": "user", "content": format!(
                "Request:\n{}\n\nYour step ({}): {}", request.last_user_text(), step.id, step.task)},
        ],
    })
    .to_string()
    .into_bytes()
}

/// The verifier's view of the results, as the finalizer reads it.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument distinct"
)]
async fn verify(
    client: &LlmClient,
    verifier: &Model,
    looper: &WorkflowsLooper,
    plan: &[PlanStep],
    results: &[Option<String>],
    request: &ChatRequest,
    record: &mut LooperTrace,
    left: Duration,
) -> Option<String> {
    let steps: Vec<String> = plan
        .iter()
        .zip(results)
        .map(|(s, r)| {
            format!(
                "[{}] {}\n{}",
                s.id,
                s.task,
                r.as_deref().unwrap_or("(failed)")
            )
        })
        .collect();
    let body = json!({
        "model": verifier.provider_model, "stream": false, "max_tokens": looper.limits.max_tokens,
        "messages": [
            {"role": "system", "content": "You check the work of others. Reply with one JSON \
              object and nothing else: {\"ok\": true or false, \"issues\": [what is wrong or \
              missing]}."},
            {"role": "user", "content": format!(
                "Request:\n{}\n\nStep results:\n{}", request.last_user_text(), steps.join("\n\n"))},
        ],
    });
    let called = client
        .chat(
            &verifier.name,
            body.to_string().into_bytes(),
            1,
            looper.limits.per_call.min(left),
        )
        .await;
    let reply = match called {
        Ok(reply) => reply,
        Err(error) => {
            record.push_step(step(verifier, "verifier", format!("error: {error}"), 0.0));
            return None;
        }
    };
    add_usage(record, verifier, &reply.body);
    let latency_ms = reply.latency.as_secs_f64() * 1000.0;
    let text = reply_text(&reply.body).trim().to_owned();
    let structured = json_in(&text).filter(|v| v["ok"].is_boolean());
    let (outcome, verdict) = match structured {
        Some(v) => {
            let issues: Vec<String> = v["issues"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| match i {
                    Value::String(s) => format!("- {s}"),
                    other => format!("- {other}"),
                })
                .collect();
            let ok = v["ok"].as_bool() == Some(true);
            let outcome = format!(
                "verified: {} ({} issues)",
                if ok { "ok" } else { "not ok" },
                issues.len()
            );
            let verdict = if issues.is_empty() {
                format!("Correct: {ok}.")
            } else {
                format!("Correct: {ok}. Issues:\n{}", issues.join("\n"))
            };
            (outcome, Some(verdict))
        }
        None if text.is_empty() => ("verified: empty".to_owned(), None),
        None => ("verified: unstructured".to_owned(), Some(text)),
    };
    record.push_step(step(verifier, "verifier", outcome, latency_ms));
    verdict
}

/// The step results, numbered by id, for the finalizer.
fn listed(
    snapshot: &Snapshot,
    decision: &Decision,
    plan: &[PlanStep],
    results: &[Option<String>],
) -> String {
    let entries: Vec<String> = plan
        .iter()
        .zip(results)
        .map(|(s, r)| {
            let worker = &snapshot.models[decision.candidates[s.worker].model].name;
            format!(
                "[{}] {} ({worker}):\n{}",
                s.id,
                s.task,
                r.as_deref().unwrap_or("(this step failed)")
            )
        })
        .collect();
    entries.join("\n\n")
}

/// A step of the workflow's record: the model and its role, the outcome on one line.
pub(super) fn step(model: &Model, role: &str, outcome: String, latency_ms: f64) -> Step {
    Step {
        model: format!("{} ({role})", model.name),
        outcome: outcome.replace(['\n', '\r', ','], " "),
        confidence: None,
        latency_ms,
    }
}
