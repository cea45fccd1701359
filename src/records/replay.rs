//! Replay: each recorded request's decision re-derived from the signals it recorded, under a
//! configuration — the one that served it (every decision must come out the same) or a new one
//! (which requests would have routed differently). Projections are recomputed from their
//! recorded inputs, so a changed projection shows; a signal the record lacks (added since)
//! makes the record unreplayable, named as such rather than guessed.
//!
//! Model selection is replayed only where the policy alone decides it: a `learned` decision,
//! on a record that kept its prompt (`records.includePrompts`). The prompt is embedded again
//! and the configuration's router head predicts for every candidate, so a retrained head shows
//! which requests it would send elsewhere. Reported outcomes, identity bounds and sessions are
//! not replayed (they move with traffic, not with policy), and a redacted prompt is embedded as
//! recorded, placeholders included.

use super::RunRecord;
use crate::config::{Decision, Fallback, Snapshot};
use crate::decision::{self, Fact};
use crate::llm::{ChatRequest, Headers};
use crate::selection::{Algorithm, Predicted};
use crate::signals::{Input, Neural, SignalKind};

/// A record whose decision comes out differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The record's run id.
    pub run_id: String,
    /// The identity called.
    pub identity: String,
    /// The decision recorded.
    pub recorded: String,
    /// The decision the configuration makes now.
    pub replayed: String,
}

/// A record whose `learned` decision would pick another model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDifference {
    /// The record's run id.
    pub run_id: String,
    /// The decision (the same recorded and replayed).
    pub decision: String,
    /// The model that served.
    pub recorded: String,
    /// The model the configuration's head picks now.
    pub replayed: String,
    /// Why, as the selection explains it.
    pub reason: String,
}

/// What a replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Records whose decision was re-derived.
    pub replayed: usize,
    /// Those that came out the same.
    pub same: usize,
    /// Those that did not.
    pub differences: Vec<Difference>,
    /// Records that could not be replayed, with why (by run id or position).
    pub skipped: Vec<(String, String)>,
    /// Records of a `learned` decision whose model choice was re-derived.
    pub models_replayed: usize,
    /// Those whose model comes out differently.
    pub model_differences: Vec<ModelDifference>,
    /// Records of a `learned` decision whose model could not be re-derived, with why.
    pub models_skipped: Vec<(String, String)>,
}

/// Replays `records` under `snapshot`.
pub fn replay(snapshot: &Snapshot, records: &[RunRecord]) -> Report {
    let mut report = Report::default();
    for (position, record) in records.iter().enumerate() {
        let name = if record.run_id.is_empty() {
            format!("record {}", position + 1)
        } else {
            record.run_id.clone()
        };
        match decide(snapshot, record) {
            Ok(replayed) => {
                report.replayed += 1;
                if replayed == record.decision {
                    report.same += 1;
                    if let Some(decision) = snapshot.decisions.iter().find(|d| *d.name == *replayed)
                    {
                        replay_model(snapshot, decision, record, &name, &mut report);
                    }
                } else {
                    report.differences.push(Difference {
                        run_id: record.run_id.clone(),
                        identity: record.identity.clone(),
                        recorded: record.decision.clone(),
                        replayed,
                    });
                }
            }
            Err(why) => report.skipped.push((name, why)),
        }
    }
    report
}

/// Re-derives the model of `record` when `decision` is `learned`: embeds the recorded prompt
/// and lets the configuration's router head choose among the candidates.
fn replay_model(
    snapshot: &Snapshot,
    decision: &Decision,
    record: &RunRecord,
    name: &str,
    report: &mut Report,
) {
    let (Algorithm::Learned(allocation), Some(head)) =
        (decision.algorithm, decision.vectors.router.as_ref())
    else {
        return;
    };
    let mut skip = |why: &str| {
        report
            .models_skipped
            .push((name.to_owned(), why.to_owned()))
    };
    let Some(prompt) = record.prompt.as_deref() else {
        return skip("no prompt recorded (records.includePrompts is off)");
    };
    let Some(encoder) = snapshot.encoder.as_ref() else {
        return skip("the configuration has no encoder");
    };
    let embedding = match encoder.embed_blocking(&[prompt.to_owned()]) {
        Ok(mut embeddings) if !embeddings.is_empty() => embeddings.swap_remove(0),
        Ok(_) => return skip("the encoder returned nothing"),
        Err(e) => return skip(&format!("the encoder failed: {e}")),
    };
    let input = head.input(&embedding, prompt.trim());
    let predicted: Option<Vec<Predicted>> = decision
        .vectors
        .router_models
        .iter()
        .map(|&m| head.predict(m, &input).map(Predicted::from))
        .collect();
    let Some(predicted) = predicted.filter(|p| p.len() == decision.candidates.len()) else {
        return skip("the router head does not cover the decision's models");
    };
    let selection = allocation.choose(&predicted);
    let model = &snapshot.models[decision.candidates[selection.chosen].model].name;
    report.models_replayed += 1;
    if **model != *record.model {
        report.model_differences.push(ModelDifference {
            run_id: record.run_id.clone(),
            decision: decision.name.to_string(),
            recorded: record.model.clone(),
            replayed: model.to_string(),
            reason: selection.reason,
        });
    }
}

/// The decision `snapshot` makes from `record`'s signals (`none`: the identity's default).
fn decide(snapshot: &Snapshot, record: &RunRecord) -> Result<String, String> {
    let Some(identity) = snapshot.identity(&record.identity) else {
        return Err(if record.signals.is_empty() {
            "refused before a decision".to_owned()
        } else {
            format!(
                "{:?} is not an identity of this configuration",
                record.identity
            )
        });
    };
    // Projections read only their inputs; the request itself is not needed.
    let blank =
        ChatRequest::parse(br#"{"model":"replay","messages":[{"role":"user","content":"."}]}"#)
            .map_err(|e| e.to_string())?;
    let mut facts: Vec<Option<Fact>> = vec![None; snapshot.signals.len()];
    let mut values: Vec<Option<f64>> = vec![None; snapshot.signals.len()];
    for &index in &identity.signals {
        let signal = &snapshot.signals[index];
        let (matched, confidence, value) = if let SignalKind::Projection(_) = signal.kind {
            let earlier = |i: usize| {
                facts.get(i).copied().flatten().map(|fact| Input {
                    matched: fact.matched,
                    confidence: fact.confidence,
                    value: values.get(i).copied().flatten(),
                })
            };
            let result = signal.evaluate(&blank, &Headers::default(), &Neural::default(), &earlier);
            (result.matched, result.confidence, result.value)
        } else {
            let recorded = record
                .signals
                .iter()
                .find(|s| *s.name == *signal.name)
                .ok_or_else(|| format!("signal {:?} was not recorded", signal.name))?;
            (recorded.matched, recorded.confidence, recorded.value)
        };
        facts[index] = Some(Fact {
            matched,
            confidence,
        });
        values[index] = value;
    }
    let winner = decision::pick(&snapshot.decisions, &identity.decisions, &facts);
    Ok(match (winner, &identity.fallback) {
        (Some((index, _)), _) => snapshot.decisions[index].name.to_string(),
        (None, Fallback::Objective(decision)) => decision.name.to_string(),
        (None, Fallback::Default(_)) => "none".to_owned(),
    })
}

/// Reads JSONL run records; a line that is not a record is an error naming its line.
pub fn read(text: &str) -> Result<Vec<RunRecord>, String> {
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: RunRecord = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not a run record: {e}", i + 1))?;
        // Outcome reports carry no decision to re-derive.
        if record.outcome.is_none() {
            records.push(record);
        }
    }
    Ok(records)
}
