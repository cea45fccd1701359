//! The response side of a jailbreak guard: the guard's signal run on the answer's text, as if it
//! were a message the next reader receives. An answer carrying injected instructions (a tool
//! result echoed back, a model talked into relaying an attack) is withheld.

use crate::config::Snapshot;
use crate::engine::neural_inputs;
use crate::llm::{ChatRequest, Headers};
use crate::signals::Needs;

/// Whether signal `signal` matches `answer`; the signal's error when it could not run.
pub async fn matches(snapshot: &Snapshot, signal: usize, answer: &str) -> Result<bool, String> {
    let Some(definition) = snapshot.signals.get(signal) else {
        return Err(format!("signal {signal} is not configured"));
    };
    if answer.trim().is_empty() {
        return Ok(false);
    }
    let body = serde_json::json!({"model": "answer",
        "messages": [{"role": "user", "content": answer}]});
    let request = ChatRequest::parse(body.to_string().as_bytes()).map_err(|e| e.to_string())?;
    // The answer is held under its own repair deadline, which Envoy was asked for.
    let neural = neural_inputs(snapshot, Needs::of([&definition.kind]), &request, false).await;
    let result = definition.evaluate(&request, &Headers::default(), &neural, &|_| None);
    match result.error {
        Some(reason) => Err(reason),
        None => Ok(result.matched),
    }
}
