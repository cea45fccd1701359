//! Configuration: one YAML document parsed into raw types, compiled into an immutable
//! [`Snapshot`], and held in a [`ConfigStore`] that hot-reloads it. `check-config` and `serve`
//! run exactly the same [`load`].

pub mod binding;
pub mod bundle;
pub mod compile;
mod error;
mod parse;
mod plugin;
pub mod raw;
mod raw_contract;
mod raw_identity;
mod raw_inference;
mod raw_model;
mod raw_plugin;
mod raw_selection;
mod raw_tenant;
mod snapshot;
mod store;
pub mod tenants;

pub use binding::Artifact;
pub use error::{ConfigError, ConfigErrors, Errors};
pub use plugin::{CacheRule, GroundingRule, Plugin};
pub use snapshot::{
    Bounds, CallLimits, ConfidenceLooper, Decision, DecisionVectors, Failover, Fallback,
    FusionLooper, Identity, Listen, Looper, Model, Objective, OnCallError, Policy, Pricing,
    RatingsLooper, RecordSettings, RemomLooper, Server, Sessions, Snapshot, WorkflowsLooper,
};
pub use snapshot::{Contract, Name, OnViolation};
pub use store::{ConfigStore, ReloadOutcome, Source};

use sha2::{Digest, Sha256};
use std::path::Path;

/// Parses and compiles a configuration document; relative paths resolve against the current
/// directory.
pub fn compile_str(text: &str) -> Result<Snapshot, ConfigErrors> {
    compile_in(text, Path::new("."))
}

/// Parses and compiles a configuration document whose relative paths resolve against `base`.
pub fn compile_in(text: &str, base: &Path) -> Result<Snapshot, ConfigErrors> {
    let hash = hex_sha256(text.as_bytes());
    let mut errors = Errors::default();
    let raw = parse::parse(text, &mut errors);
    let snapshot = compile::compile(raw, &hash, base, &mut errors);
    match snapshot {
        Some(snapshot) => errors.finish(snapshot),
        None => Err(errors
            .finish(())
            .err()
            .unwrap_or_else(|| ConfigErrors::one("", "configuration is invalid"))),
    }
}

/// Reads and compiles the configuration file at `path`.
pub fn load(path: &Path) -> Result<Snapshot, ConfigErrors> {
    compile_file(path, read_file(path)?)
}

/// The configuration file's bytes, or an error naming it.
fn read_file(path: &Path) -> Result<Vec<u8>, ConfigErrors> {
    std::fs::read(path)
        .map_err(|e| ConfigErrors::one("", format!("cannot read {}: {e}", path.display())))
}

/// Compiles `bytes`, already read from the file at `path` (whose directory anchors relative
/// paths).
pub fn compile_file(path: &Path, bytes: Vec<u8>) -> Result<Snapshot, ConfigErrors> {
    let text = String::from_utf8(bytes).map_err(|e| {
        ConfigErrors::one(
            "",
            format!(
                "{} is not UTF-8 (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    compile_in(&text, path.parent().unwrap_or(Path::new(".")))
}

/// Lower-case hex SHA-256 of the file at `path`.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    std::fs::read(path).map(|bytes| hex_sha256(&bytes))
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests;
