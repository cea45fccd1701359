//! `mom-router bundle promote`: a candidate bundle becomes a release only when the scorecard
//! measured on it meets the gate. The scorecard must have been served by this very bundle
//! (every configuration version that answered names its digest); every criterion must hold.
//! The promoted bundle is a new bundle: the same policy and assets plus `evidence/` — the
//! scorecard, the gate and the verdicts — listed in the manifest, so its digest covers the
//! evidence it was released on. Exit 0 promoted, 1 a criterion failed or the scorecard is of
//! another bundle, 2 unusable input.

use crate::config::binding::bundle_tag;
use crate::config::bundle;
use crate::eval::gate;
use crate::eval::report::Scorecard;
use std::path::Path;
use std::process::ExitCode;

fn unusable(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mom-router bundle promote: {message}");
    ExitCode::from(2)
}

fn refused(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mom-router bundle promote: not promoted: {message}");
    ExitCode::FAILURE
}

/// Promotes `candidate` into `out` when `scorecard` (measured on it) passes `gate_path`.
pub(super) fn run(candidate: &Path, scorecard: &Path, gate_path: &Path, out: &Path) -> ExitCode {
    let opened = match bundle::open(candidate) {
        Ok(opened) => opened,
        Err(errors) => {
            let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
            return unusable(format!("{}: {}", candidate.display(), lines.join("; ")));
        }
    };
    let card_bytes = match std::fs::read(scorecard) {
        Ok(bytes) => bytes,
        Err(e) => return unusable(format!("cannot read {}: {e}", scorecard.display())),
    };
    let card: Scorecard = match serde_json::from_slice(&card_bytes) {
        Ok(card) => card,
        Err(e) => {
            return unusable(format!(
                "{} is not an eval scorecard: {e}",
                scorecard.display()
            ))
        }
    };
    let gate_text = match std::fs::read_to_string(gate_path) {
        Ok(text) => text,
        Err(e) => return unusable(format!("cannot read {}: {e}", gate_path.display())),
    };
    let gate = match gate::parse(&gate_text) {
        Ok(gate) => gate,
        Err(e) => return unusable(format!("{}: {e}", gate_path.display())),
    };
    let digest = &opened.manifest.digest;
    let tag = format!("+bundle.{}", bundle_tag(digest));
    if card.served_versions.is_empty() {
        return refused(format!(
            "{} records no configuration version that answered (measure it with this eval)",
            scorecard.display()
        ));
    }
    if let Some(other) = card.served_versions.iter().find(|v| !v.ends_with(&tag)) {
        return refused(format!(
            "{} was measured on {other:?}, not on bundle {digest} (versions served from it end in {tag:?})",
            scorecard.display()
        ));
    }
    let verdicts = gate::check(&gate, &card);
    eprint!("{}", gate::render(&verdicts));
    if let Some(failed) = verdicts.iter().find(|v| !v.passed) {
        return refused(format!("{} failed: {}", failed.path, failed.detail));
    }
    let verdicts_json = match serde_json::to_vec_pretty(&verdicts) {
        Ok(json) => json,
        Err(e) => return unusable(format!("cannot write the verdicts: {e}")),
    };
    let evidence = [
        ("scorecard", "scorecard.json", card_bytes),
        ("gate", "gate.yaml", gate_text.into_bytes()),
        ("verdicts", "gate.json", verdicts_json),
    ];
    match opened.with_evidence(&evidence, out) {
        Ok(manifest) => super::write_stdout(&format!(
            "{}: promoted {digest} as bundle {} ({} bounds held; evidence: {})",
            out.display(),
            manifest.digest,
            verdicts.len(),
            manifest
                .evidence
                .iter()
                .map(|e| e.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Err(errors) => {
            let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
            unusable(lines.join("; "))
        }
    }
}
