//! A workflow's plan: the planner's JSON steps, each assigned to one of the allowed workers,
//! validated (allowed workers only, at most `maxSteps` steps, each after earlier steps only) and
//! repaired once before anything runs.

use super::calls::{add_usage, LooperTrace};
use super::workflows::step;
use crate::config::{Model, WorkflowsLooper};
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

/// Asks the planner for a plan, repairing it once when it is not valid.
pub(super) async fn plan(
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
        let Some(&(worker, _)) = workers.iter().find(|(_, m)| &*m.name == named) else {
            let allowed: Vec<&str> = workers.iter().map(|(_, m)| &*m.name).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Model {
        Model {
            name: name.into(),
            provider_model: name.to_uppercase().into(),
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
