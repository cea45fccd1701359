//! Replay: each recorded request's decision re-derived from the signals it recorded, under a
//! configuration — the one that served it (every decision must come out the same) or a new one
//! (which requests would have routed differently). Projections are recomputed from their
//! recorded inputs, so a changed projection shows; a signal the record lacks (added since)
//! makes the record unreplayable, named as such rather than guessed. Model selection is not
//! replayed: learned statistics, sessions and guards move it independently of policy.

use super::RunRecord;
use crate::config::{Fallback, Snapshot};
use crate::decision::{self, Fact};
use crate::llm::{ChatRequest, Headers};
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
                .find(|s| s.name == signal.name)
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
        (Some((index, _)), _) => snapshot.decisions[index].name.clone(),
        (None, Fallback::Objective(decision)) => decision.name.clone(),
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
