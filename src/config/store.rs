//! The live configuration: one `ArcSwap<Snapshot>`, read once per stream, replaced whole on a
//! successful reload. A failed reload keeps the last good snapshot and reports every error; so
//! does a reload that changes an identity's meaning without bumping its version.

use super::{compile_file, hex_sha256, read_file, ConfigErrors, Snapshot};
use arc_swap::ArcSwap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What a reload attempt did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The file is byte-for-byte what was last seen.
    Unchanged,
    /// A new snapshot is live.
    Applied {
        /// The new snapshot's version.
        version: String,
    },
    /// The file changed but does not compile; the previous snapshot stays live.
    Rejected(ConfigErrors),
}

/// Holds the live snapshot and the file it came from.
#[derive(Debug)]
pub struct ConfigStore {
    current: ArcSwap<Snapshot>,
    path: PathBuf,
    last_seen: Mutex<String>,
}

impl ConfigStore {
    /// Loads `path`; fails with every error when it does not compile.
    pub fn open(path: &Path) -> Result<Self, ConfigErrors> {
        let bytes = read_file(path)?;
        let seen = hex_sha256(&bytes);
        let snapshot = compile_file(path, bytes)?;
        Ok(Self {
            current: ArcSwap::from_pointee(snapshot),
            path: path.to_owned(),
            last_seen: Mutex::new(seen),
        })
    }

    /// Wraps an already compiled snapshot (tests, benches); reloads read `path`.
    pub fn from_snapshot(snapshot: Snapshot, path: PathBuf) -> Self {
        Self {
            current: ArcSwap::from_pointee(snapshot),
            path,
            last_seen: Mutex::new(String::new()),
        }
    }

    /// The live snapshot. Callers hold the `Arc` for a whole stream.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The file this store reloads from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Re-reads the file; applies it when it changed and compiles.
    pub fn reload(&self) -> ReloadOutcome {
        let Ok(bytes) = std::fs::read(&self.path) else {
            // A file being replaced can be briefly absent; the next poll sees the new one.
            return ReloadOutcome::Unchanged;
        };
        let hash = hex_sha256(&bytes);
        {
            let Ok(mut seen) = self.last_seen.lock() else {
                return ReloadOutcome::Unchanged;
            };
            if *seen == hash {
                return ReloadOutcome::Unchanged;
            }
            *seen = hash;
        }
        match compile_file(&self.path, bytes) {
            Ok(snapshot) => {
                let changes = super::compile::unversioned_changes(&self.snapshot(), &snapshot);
                if !changes.is_empty() {
                    let errors = changes
                        .into_iter()
                        .map(|(path, message)| super::ConfigError::new(path, message))
                        .collect();
                    return ReloadOutcome::Rejected(ConfigErrors(errors));
                }
                let version = snapshot.version.clone();
                self.current.store(Arc::new(snapshot));
                ReloadOutcome::Applied { version }
            }
            Err(errors) => ReloadOutcome::Rejected(errors),
        }
    }
}
