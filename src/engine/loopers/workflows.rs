//! Workflows: the planner writes a JSON plan of steps, each assigned to one of the allowed
//! workers; the plan is validated (allowed workers only, at most `maxSteps` steps, each step
//! after earlier steps only) and repaired once before anything runs. Steps whose prerequisites
//! are done run together, at most `maxParallel` at once; a verifier may check the results; the
//! finalizer writes the answer from them, forwarded through Envoy so it streams. The last step
//! result is held as the fallback when the finalizer fails.

use super::calls::{add_usage, answer, fan_out, Caller, LooperTrace, Step};
use super::remom::{briefed, Synthesis};
use crate::config::{Decision, Model, OnCallError, Snapshot, WorkflowsLooper};
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::chat::reply_text;
use crate::llm::contract::json_in;
use crate::llm::{ChatRequest, LlmClient};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One validated step of a plan.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::engine) struct PlanStep {
    /// The plan's id for the step.
    pub id: String,
    /// Candidate index of the worker.
    pub worker: usize,
    /// What the worker is asked to do.
    pub task: String,
    /// Indices of earlier steps whose results this step reads.
    pub after: Vec<usize>,
}

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
                model: model_of(looper.planner).name.clone(),
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

/// Asks the planner for a plan, repairing it once when it is not valid.
async fn plan(
    client: &LlmClient,
    planner: &Model,
    looper: &WorkflowsLooper,
    workers: &[(usize, &Model)],
    request: &ChatRequest,
    record: &mut LooperTrace,
    left: Duration,
) -> Result<Vec<PlanStep>, String> {
    let roster: Vec<String> = workers
        .iter()
        .map(|(_, m)| match m.description.as_str() {
            "" => format!("- {}", m.name),
            about => format!("- {}: {about}", m.name),
        })
        .collect();
    let brief = format!(
        "You plan how a team of models answers a request. The workers:\n{}\n\nReply with one \
         JSON object and nothing else: {{\"steps\": [{{\"id\": \"s1\", \"worker\": \"<a worker \
         name>\", \"task\": \"<what this worker does>\", \"after\": [\"<ids of earlier steps \
         whose results it needs>\"]}}]}}. Use at most {} steps; a step may only come after \
         earlier steps.",
        roster.join("\n"),
        looper.max_steps
    );
    let mut messages = vec![
        json!({"role": "system", "content": brief}),
        json!({"role": "user", "content": format!("Request:\n{}", request.last_user_text())}),
    ];
    let started = Instant::now();
    let mut last_reason = String::new();
    for attempt in 0..2 {
        let deadline = looper
            .limits
            .per_call
            .min(left.saturating_sub(started.elapsed()));
        if deadline.is_zero() {
            break;
        }
        let body = json!({"model": planner.provider_model, "stream": false,
                          "max_tokens": looper.limits.max_tokens, "messages": messages});
        let called = client
            .chat(&planner.name, body.to_string().into_bytes(), 1, deadline)
            .await;
        let reply = match called {
            Ok(reply) => reply,
            Err(error) => {
                last_reason = error.to_string();
                record.push_step(step(planner, "planner", format!("error: {error}"), 0.0));
                break;
            }
        };
        add_usage(record, planner, &reply.body);
        let latency_ms = reply.latency.as_secs_f64() * 1000.0;
        let text = reply_text(&reply.body).to_owned();
        match validate(&text, workers, looper.max_steps) {
            Ok(plan) => {
                let outcome = if attempt == 0 {
                    "planned"
                } else {
                    "planned after repair"
                };
                let outcome = format!("{outcome} {} steps", plan.len());
                record.push_step(step(planner, "planner", outcome, latency_ms));
                return Ok(plan);
            }
            Err(reason) => {
                record.push_step(step(
                    planner,
                    "planner",
                    format!("invalid plan: {reason}"),
                    latency_ms,
                ));
                messages.push(json!({"role": "assistant", "content": text}));
                messages.push(json!({"role": "user", "content": format!(
                    "That plan is not valid: {reason}. Reply with the corrected JSON object only.")}));
                last_reason = reason;
            }
        }
    }
    Err(last_reason)
}

/// A plan from the planner's reply: one JSON object with 1..=`max_steps` steps, each naming an
/// allowed worker, a task, and only earlier steps in `after`.
pub(in crate::engine) fn validate(
    text: &str,
    workers: &[(usize, &Model)],
    max_steps: usize,
) -> Result<Vec<PlanStep>, String> {
    let value = json_in(text).ok_or("the reply holds no JSON")?;
    let steps = value["steps"]
        .as_array()
        .ok_or("the JSON has no `steps` list")?;
    if steps.is_empty() {
        return Err("`steps` is empty".to_owned());
    }
    if steps.len() > max_steps {
        return Err(format!(
            "{} steps; at most {max_steps} are allowed",
            steps.len()
        ));
    }
    let mut plan: Vec<PlanStep> = Vec::with_capacity(steps.len());
    for (i, raw) in steps.iter().enumerate() {
        let id = match &raw["id"] {
            Value::String(id) if !id.trim().is_empty() => id.trim().to_owned(),
            Value::Null => format!("s{}", i + 1),
            other => return Err(format!("steps[{i}].id must be a string, got {other}")),
        };
        if plan.iter().any(|s| s.id == id) {
            return Err(format!("steps[{i}].id {id:?} repeats an earlier id"));
        }
        let named = raw["worker"].as_str().unwrap_or_default().trim();
        let Some(&(worker, _)) = workers.iter().find(|(_, m)| m.name == named) else {
            let allowed: Vec<&str> = workers.iter().map(|(_, m)| m.name.as_str()).collect();
            return Err(format!(
                "steps[{i}].worker {named:?} is not an allowed worker ({})",
                allowed.join(", ")
            ));
        };
        let task = raw["task"].as_str().unwrap_or_default().trim();
        if task.is_empty() {
            return Err(format!("steps[{i}].task is missing"));
        }
        let mut after = Vec::new();
        for earlier in raw["after"].as_array().into_iter().flatten() {
            let earlier = earlier.as_str().unwrap_or_default();
            match plan.iter().position(|s| s.id == earlier) {
                Some(index) => after.push(index),
                None => {
                    return Err(format!(
                        "steps[{i}].after names {earlier:?}, which is not an earlier step"
                    ))
                }
            }
        }
        plan.push(PlanStep {
            id,
            worker,
            task: task.to_owned(),
            after,
        });
    }
    Ok(plan)
}

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
                                model: worker.name.clone(),
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

fn step(model: &Model, role: &str, outcome: String, latency_ms: f64) -> Step {
    Step {
        model: format!("{} ({role})", model.name),
        outcome: outcome.replace(['\n', '\r', ','], " "),
        confidence: None,
        latency_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Model {
        Model {
            name: name.to_owned(),
            provider_model: name.to_uppercase(),
            description: String::new(),
            context_window: None,
            pricing: None,
            capabilities: Vec::new(),
            quality: None,
            power_watts: None,
            native: Vec::new(),
            max_concurrency: None,
            max_queue: None,
            queue_metrics: None,
            first_byte_timeout: None,
        }
    }

    #[test]
    fn a_plan_names_allowed_workers_and_earlier_steps_only() {
        let (a, b) = (model("a"), model("b"));
        let workers = [(0, &a), (2, &b)];
        let good = r#"Plan: {"steps": [
            {"id": "s1", "worker": "a", "task": "list facts"},
            {"id": "s2", "worker": "b", "task": "check them", "after": ["s1"]}]}"#;
        let plan = validate(good, &workers, 4).unwrap_or_default();
        assert_eq!(plan.len(), 2);
        assert_eq!((plan[0].worker, plan[1].worker), (0, 2));
        assert_eq!(plan[1].after, vec![0]);
        let cases = [
            ("no json", "the reply holds no JSON"),
            (r#"{"steps": []}"#, "`steps` is empty"),
            (r#"{"plan": 1}"#, "the JSON has no `steps` list"),
            (
                r#"{"steps": [{"worker": "c", "task": "x"}]}"#,
                r#"steps[0].worker "c" is not an allowed worker (a, b)"#,
            ),
            (
                r#"{"steps": [{"worker": "a", "task": "x", "after": ["s2"]},
                              {"worker": "a", "task": "y"}]}"#,
                r#"steps[0].after names "s2", which is not an earlier step"#,
            ),
            (
                r#"{"steps": [{"worker": "a", "task": ""}]}"#,
                "steps[0].task is missing",
            ),
            (
                r#"{"steps": [{"id": "x", "worker": "a", "task": "1"}, {"id": "x", "worker": "b", "task": "2"}]}"#,
                r#"steps[1].id "x" repeats an earlier id"#,
            ),
        ];
        for (text, reason) in cases {
            assert_eq!(
                validate(text, &workers, 4),
                Err(reason.to_owned()),
                "{text}"
            );
        }
        let long = r#"{"steps": [{"worker": "a", "task": "1"}, {"worker": "a", "task": "2"}, {"worker": "a", "task": "3"}]}"#;
        assert_eq!(
            validate(long, &workers, 2),
            Err("3 steps; at most 2 are allowed".to_owned())
        );
    }
}
