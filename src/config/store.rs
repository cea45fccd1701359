//! The live configuration: one `ArcSwap<Snapshot>`, read once per stream, replaced whole on a
//! successful reload. A failed reload keeps the last good snapshot and reports every error; so
//! does a reload that changes an identity's meaning without bumping its version. The source is
//! one YAML file or a bundle with its binding.

use super::{compile_file, hex_sha256, read_file, ConfigErrors, Snapshot};
use arc_swap::ArcSwap;
use std::path::PathBuf;
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
    source: Source,
    last_seen: Mutex<String>,
}

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One YAML file.
    File(PathBuf),
    /// A bundle folder, placed by a binding file (or unbound).
    Bundle {
        /// The bundle folder.
        bundle: PathBuf,
        /// The binding file.
        binding: Option<PathBuf>,
    },
}

impl Source {
    /// The source in words, for `/config` and logs.
    pub fn describe(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Bundle { bundle, binding } => match binding {
                Some(binding) => format!("{} bound by {}", bundle.display(), binding.display()),
                None => format!("{} (unbound)", bundle.display()),
            },
        }
    }

    /// A fingerprint of the inputs (the file's bytes; the bundle manifest and binding bytes)
    /// and, for a file, the bytes to compile.
    fn read(&self) -> Result<(String, Option<Vec<u8>>), ConfigErrors> {
        match self {
            Self::File(path) => {
                let bytes = read_file(path)?;
                Ok((hex_sha256(&bytes), Some(bytes)))
            }
            Self::Bundle { bundle, binding } => {
                let mut seen = read_file(&bundle.join(super::bundle::MANIFEST))?;
                if let Some(binding) = binding {
                    seen.extend(read_file(binding)?);
                }
                Ok((hex_sha256(&seen), None))
            }
        }
    }

    fn compile(&self, bytes: Option<Vec<u8>>) -> Result<Snapshot, ConfigErrors> {
        match self {
            Self::File(path) => compile_file(path, bytes.unwrap_or_default()),
            Self::Bundle { bundle, binding } => {
                super::binding::compile_bound(bundle, binding.as_deref())
            }
        }
    }

    /// Reads and compiles the source once.
    pub fn load(&self) -> Result<Snapshot, ConfigErrors> {
        let (_, bytes) = self.read()?;
        self.compile(bytes)
    }
}

impl ConfigStore {
    /// Loads `source`; fails with every error when it does not compile.
    pub fn open(source: Source) -> Result<Self, ConfigErrors> {
        let (seen, bytes) = source.read()?;
        let snapshot = source.compile(bytes)?;
        Ok(Self {
            current: ArcSwap::from_pointee(snapshot),
            source,
            last_seen: Mutex::new(seen),
        })
    }

    /// Wraps an already compiled snapshot (tests, benches); reloads read `path`.
    pub fn from_snapshot(snapshot: Snapshot, path: PathBuf) -> Self {
        Self {
            current: ArcSwap::from_pointee(snapshot),
            source: Source::File(path),
            last_seen: Mutex::new(String::new()),
        }
    }

    /// The live snapshot. Callers hold the `Arc` for a whole stream.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Where this store reloads from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Re-reads the source; applies it when it changed and compiles.
    pub fn reload(&self) -> ReloadOutcome {
        // A file being replaced can be briefly absent; the next poll sees the new one.
        let Ok((hash, bytes)) = self.source.read() else {
            return ReloadOutcome::Unchanged;
        };
        {
            let Ok(mut seen) = self.last_seen.lock() else {
                return ReloadOutcome::Unchanged;
            };
            if *seen == hash {
                return ReloadOutcome::Unchanged;
            }
            *seen = hash;
        }
        match self.source.compile(bytes) {
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
                ReloadOutcome::Applied {
                    version: version.to_string(),
                }
            }
            Err(errors) => ReloadOutcome::Rejected(errors),
        }
    }
}
