//! `mom-router replay RECORDS --bundle B [--binding F]` (or `--config C`): re-derives each
//! recorded decision under a bundle or configuration and reports the requests that would route
//! differently; under the bundle that served them there must be none. Where a `learned`
//! decision kept its prompt, the model its router head picks now is compared too (a retrained
//! head's effect). Exit status 0 when every replayed decision is the same, 1 when any differs,
//! 2 when the inputs cannot be read; a model difference alone does not change it (outcomes and
//! bounds also move the model, so it is a report, not a verdict).

use crate::records::replay::{read, replay};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run records (JSONL, as the `records` sink writes them).
    records: PathBuf,
    /// The configuration or bundle to replay them under (a bundle whose policy reads the
    /// encoder needs its binding).
    #[command(flatten)]
    source: super::SourceArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `replay`.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let source = args.source.source();
    let snapshot = match source.load() {
        Ok(snapshot) => snapshot,
        Err(errors) => {
            eprintln!("{}: {errors}", source.describe());
            return ExitCode::from(2);
        }
    };
    let bundle = snapshot
        .artifact
        .as_ref()
        .map(|a| a.bundle_digest.clone())
        .unwrap_or_default();
    let records = std::fs::read_to_string(&args.records)
        .map_err(|e| e.to_string())
        .and_then(|text| read(&text));
    let records = match records {
        Ok(records) => records,
        Err(error) => {
            eprintln!("{}: {error}", args.records.display());
            return ExitCode::from(2);
        }
    };
    let from_bundle = records
        .iter()
        .filter(|r| !bundle.is_empty() && r.bundle_digest == bundle)
        .count();
    let report = replay(&snapshot, &records);
    let text = if args.json {
        let differences: Vec<serde_json::Value> = report
            .differences
            .iter()
            .map(|d| {
                serde_json::json!({"run_id": d.run_id, "identity": d.identity,
                    "recorded": d.recorded, "replayed": d.replayed})
            })
            .collect();
        let skipped: Vec<serde_json::Value> = report
            .skipped
            .iter()
            .map(|(record, why)| serde_json::json!({"record": record, "why": why}))
            .collect();
        let models: Vec<serde_json::Value> = report
            .model_differences
            .iter()
            .map(|d| {
                serde_json::json!({"run_id": d.run_id, "decision": d.decision,
                    "recorded": d.recorded, "replayed": d.replayed, "reason": d.reason})
            })
            .collect();
        let models_skipped: Vec<serde_json::Value> = report
            .models_skipped
            .iter()
            .map(|(record, why)| serde_json::json!({"record": record, "why": why}))
            .collect();
        let out = serde_json::json!({"config_version": snapshot.version, "records": records.len(),
            "bundle": if bundle.is_empty() { None } else { Some(&bundle) },
            "from_this_bundle": from_bundle,
            "replayed": report.replayed, "same": report.same,
            "differences": differences, "skipped": skipped,
            "models_replayed": report.models_replayed, "model_differences": models,
            "models_skipped": models_skipped});
        format!("{out:#}")
    } else {
        let mut lines: Vec<String> = report
            .differences
            .iter()
            .map(|d| {
                format!(
                    "{} {}: {} -> {}",
                    d.run_id, d.identity, d.recorded, d.replayed
                )
            })
            .collect();
        lines.extend(
            report
                .skipped
                .iter()
                .map(|(record, why)| format!("{record}: not replayed: {why}")),
        );
        lines.extend(report.model_differences.iter().map(|d| {
            format!(
                "{} {}: model {} -> {} ({})",
                d.run_id, d.decision, d.recorded, d.replayed, d.reason
            )
        }));
        lines.extend(
            report
                .models_skipped
                .iter()
                .map(|(record, why)| format!("{record}: model not replayed: {why}")),
        );
        if report.models_replayed > 0 || !report.models_skipped.is_empty() {
            lines.push(format!(
                "learned models: {} replayed, {} different, {} not replayed",
                report.models_replayed,
                report.model_differences.len(),
                report.models_skipped.len()
            ));
        }
        if !bundle.is_empty() {
            lines.push(format!(
                "bundle {bundle}: {from_bundle} of {} records were served by it",
                records.len()
            ));
        }
        lines.push(format!(
            "{} records under {}: {} replayed, {} same, {} different, {} not replayed",
            records.len(),
            snapshot.version,
            report.replayed,
            report.same,
            report.differences.len(),
            report.skipped.len()
        ));
        lines.join("\n")
    };
    if super::write_stdout(&text) != ExitCode::SUCCESS {
        return ExitCode::from(2);
    }
    if report.differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
