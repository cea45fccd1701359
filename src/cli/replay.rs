//! `mom-router replay RECORDS --config C`: re-derives each recorded decision under a
//! configuration and reports the requests that would route differently. Exit status 0 when every
//! replayed decision is the same, 1 when any differs, 2 when the inputs cannot be read.

use crate::config;
use crate::records::replay::{read, replay};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run records (JSONL, as the `records` sink writes them).
    records: PathBuf,
    /// The configuration to replay them under.
    #[arg(long)]
    config: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `replay`.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let snapshot = match config::load(&args.config) {
        Ok(snapshot) => snapshot,
        Err(errors) => {
            eprintln!("{}: {errors}", args.config.display());
            return ExitCode::from(2);
        }
    };
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
        let out = serde_json::json!({"config_version": snapshot.version, "records": records.len(),
            "replayed": report.replayed, "same": report.same,
            "differences": differences, "skipped": skipped});
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
