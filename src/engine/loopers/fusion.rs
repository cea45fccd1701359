//! Fusion: a panel answers in parallel (as for ReMoM), a judge compares the answers into a
//! structured analysis — what they agree on, where they contradict each other, what only one of
//! them says — and the finalizer writes the answer from the answers and that analysis, forwarded
//! through Envoy so it streams. Disagreement reaches the finalizer as evidence, not as a vote. A
//! failed judge leaves the finalizer the answers alone; a failed finalizer leaves the client the
//! best panel answer.

use super::calls::{add_usage, Caller, Step};
use super::remom::{evidence, panel, synthesis, Synthesis};
use crate::config::{Decision, FusionLooper, Snapshot};
use crate::engine::RouteError;
use crate::engine::Trace;
use crate::llm::chat::reply_text;
use crate::llm::contract::json_in;
use crate::llm::ChatRequest;
use serde_json::{json, Value};

const JUDGE_BRIEF: &str = "You compare answers to the same question. Reply with one JSON object \
and nothing else: {\"agreement\": [points the answers share], \"contradictions\": [points where \
they disagree, naming who says what], \"unique_insights\": [points only one answer makes]}.";

/// Runs Fusion on `decision` and prepares the finalizer's request.
pub(in crate::engine) async fn fusion(
    snapshot: &Snapshot,
    caller: &Caller<'_>,
    decision: &Decision,
    looper: &FusionLooper,
    request: &ChatRequest,
    trace: &mut Trace,
) -> Result<Synthesis, RouteError> {
    let settings = &looper.panel;
    let (answers, mut record) = panel(
        snapshot, caller, decision, settings, request, "fusion", trace,
    )
    .await?;
    let judge = &snapshot.models[decision.candidates[looper.judge].model];
    let body = json!({
        "model": judge.provider_model, "stream": false, "max_tokens": settings.limits.max_tokens,
        "messages": [
            {"role": "system", "content": JUDGE_BRIEF},
            {"role": "user", "content": format!(
                "Question:\n{}\n\nAnswers:\n{}", request.last_user_text(), evidence(&answers))},
        ],
    });
    let called = caller
        .client
        .chat(
            &judge.name,
            body.to_string().into_bytes(),
            1,
            settings.limits.per_call.min(settings.limits.total),
        )
        .await;
    let (analysis, outcome, latency_ms) = match called {
        Ok(reply) => {
            add_usage(&mut record, judge, &reply.body);
            let text = reply_text(&reply.body);
            let latency_ms = reply.latency.as_secs_f64() * 1000.0;
            match structured(text) {
                Some(rendered) => (Some(rendered), "judged".to_owned(), latency_ms),
                None if !text.trim().is_empty() => (
                    Some(text.trim().to_owned()),
                    "judged (unstructured)".to_owned(),
                    latency_ms,
                ),
                None => (None, "judged (empty)".to_owned(), latency_ms),
            }
        }
        Err(error) => (None, format!("error: {error}"), 0.0),
    };
    record.push_step(Step {
        model: format!("{} (judge)", judge.name),
        outcome,
        confidence: None,
        latency_ms,
    });
    Ok(synthesis(
        snapshot,
        decision,
        settings,
        request,
        answers,
        record,
        analysis.as_deref(),
        trace,
    ))
}

/// The judge's JSON object rendered as labelled lists, when the reply holds one.
fn structured(text: &str) -> Option<String> {
    let object = json_in(text).filter(Value::is_object)?;
    let mut lines = Vec::new();
    for (key, label) in [
        ("agreement", "Agreement"),
        ("contradictions", "Contradictions"),
        ("unique_insights", "Unique insights"),
    ] {
        let items: Vec<String> = object[key]
            .as_array()?
            .iter()
            .map(|item| match item {
                Value::String(s) => format!("- {s}"),
                other => format!("- {other}"),
            })
            .collect();
        let listed = if items.is_empty() {
            "- (none)".to_owned()
        } else {
            items.join("\n")
        };
        lines.push(format!("{label}:\n{listed}"));
    }
    Some(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::structured;

    #[test]
    fn a_judge_reply_is_read_as_structure_or_not_at_all() {
        let reply = "Sure. {\"agreement\": [\"x is 4\"], \"contradictions\": [], \"unique_insights\": [\"A cites a source\"]} done";
        let rendered = structured(reply).unwrap();
        assert!(rendered.contains("Agreement:\n- x is 4"));
        assert!(rendered.contains("Contradictions:\n- (none)"));
        assert!(rendered.contains("Unique insights:\n- A cites a source"));
        assert_eq!(structured("no json here"), None);
        assert_eq!(structured("{\"agreement\": \"not a list\"}"), None);
    }
}
