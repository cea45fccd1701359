//! The bundle: a policy's meaning as one content-addressed artifact. A bundle is a folder with
//! `policy.yaml` (every section that decides: identities, signals, projections, decisions,
//! models, sessions), `assets/` (trained heads, named by their hash) and `bundle.json` (the
//! manifest: every file's SHA-256 and the digest over them). The digest is the bundle's
//! identity: the same spec and assets give the same digest, any change gives another.
//! Deployment sections (server, inference, state, records) never enter a bundle; a binding
//! supplies them (see [`super::binding`]).

use super::{hex_sha256, ConfigError, ConfigErrors};
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};
use std::path::{Component, Path, PathBuf};

/// The manifest's format tag.
pub const FORMAT: &str = "mom-router.bundle/v1";
/// The manifest's file name inside a bundle folder.
pub const MANIFEST: &str = "bundle.json";
/// The policy's file name inside a bundle folder.
pub const POLICY: &str = "policy.yaml";
/// Top-level sections that belong to a deployment, not to the bundle.
pub const DEPLOYMENT_SECTIONS: &[&str] = &["server", "inference", "state", "records"];

/// `bundle.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// `sha256:` and the hex digest over every listed file (see [`digest_of`]).
    pub digest: String,
    /// The spec's `version` label.
    pub version: String,
    /// Every file of the bundle but the manifest, sorted by path.
    pub files: Vec<FileEntry>,
    /// Where each asset is used in the policy.
    pub assets: Vec<AssetEntry>,
    /// Deployment sections the spec carried: what a binding is expected to supply.
    pub binds: Vec<String>,
    /// The evidence a promoted bundle was released on (scorecard, gate, verdicts), each a
    /// listed file, so the digest covers it. Empty for a bundle never promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<AssetEntry>,
}

/// One file and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Path inside the bundle, `/`-separated.
    pub path: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its length.
    pub bytes: u64,
}

/// A semantic asset and the policy value that names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetEntry {
    /// The YAML path naming it, e.g. `signals[4].head`.
    pub role: String,
    /// Path inside the bundle.
    pub path: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// A bundle read from disk and verified.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle folder (absolute).
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// The policy document, asset paths still relative to the bundle.
    pub policy: Mapping,
}

/// The digest over `files` (sorted by path): SHA-256 of the format tag and one
/// `path TAB sha256` line per file.
pub fn digest_of(files: &[FileEntry]) -> String {
    let mut text = format!("{FORMAT}\n");
    for file in files {
        text.push_str(&format!("{}\t{}\n", file.path, file.sha256));
    }
    format!("sha256:{}", hex_sha256(text.as_bytes()))
}

/// What `build` produced.
#[derive(Debug)]
pub struct Built {
    /// The new bundle's manifest.
    pub manifest: Manifest,
    /// The spec's deployment sections: a starting binding for this bundle.
    pub binding: Mapping,
}

/// Builds a bundle from the configuration at `spec` into the empty or absent folder `out`.
/// The spec must compile as it is (so a bundle is never built from a broken policy).
pub fn build(spec: &Path, out: &Path) -> Result<Built, ConfigErrors> {
    let bytes = super::read_file(spec)?;
    super::compile_file(spec, bytes.clone())?;
    let Ok(Value::Mapping(document)) = serde_yaml::from_slice::<Value>(&bytes) else {
        return Err(ConfigErrors::one("", "the spec must be a YAML mapping"));
    };
    let base = spec.parent().unwrap_or(Path::new("."));
    ensure_empty(out)?;
    let (mut policy, mut binding): (Mapping, Mapping) =
        document.into_iter().partition(|(key, _)| {
            !key.as_str()
                .is_some_and(|k| DEPLOYMENT_SECTIONS.contains(&k))
        });
    anchor_paths(&mut binding, base);
    let mut files = Vec::new();
    let mut assets = Vec::new();
    for (role, value) in asset_values(&mut policy) {
        let Some(source) = value.as_str().map(|s| base.join(s)) else {
            continue;
        };
        let bytes = std::fs::read(&source).map_err(|e| {
            ConfigErrors::one(&role, format!("cannot read {}: {e}", source.display()))
        })?;
        let name = source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "asset".to_owned());
        let sha256 = hex_sha256(&bytes);
        let path = format!("assets/{}-{name}", &sha256[..12]);
        let written = write(out, &path, &bytes)?;
        // Two signals may read the same head: one file.
        if !files.contains(&written) {
            files.push(written);
        }
        *value = Value::String(path.clone());
        assets.push(AssetEntry { role, path, sha256 });
    }
    let version = policy
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let policy_text = serde_yaml::to_string(&Value::Mapping(policy))
        .map_err(|e| ConfigErrors::one("", format!("cannot write the policy: {e}")))?;
    files.push(write(out, POLICY, policy_text.as_bytes())?);
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        digest: digest_of(&files),
        version,
        files,
        assets,
        binds: binding
            .keys()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect(),
        evidence: Vec::new(),
    };
    let json = serde_json::to_string_pretty(&manifest)
        .map_err(|e| ConfigErrors::one("", format!("cannot write the manifest: {e}")))?;
    write(out, MANIFEST, format!("{json}\n").as_bytes())?;
    Ok(Built { manifest, binding })
}

/// Every policy value that names an asset file, with its YAML path: each signal's `head` and
/// each `learned` algorithm's `router`.
fn asset_values(policy: &mut Mapping) -> Vec<(String, &mut Value)> {
    let mut found = Vec::new();
    for (key, value) in policy.iter_mut() {
        let (Some(section), Value::Sequence(entries)) = (key.as_str(), value) else {
            continue;
        };
        for (i, entry) in entries.iter_mut().enumerate() {
            match section {
                "signals" => {
                    if let Some(head) = entry.get_mut("head") {
                        found.push((format!("signals[{i}].head"), head));
                    }
                }
                "decisions" => {
                    if let Some(router) = entry
                        .get_mut("algorithm")
                        .and_then(|algorithm| algorithm.get_mut("router"))
                    {
                        found.push((format!("decisions[{i}].algorithm.router"), router));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// Makes the deployment sections' file paths absolute (they were relative to the spec), so
/// the starting binding works wherever it is written.
fn anchor_paths(binding: &mut Mapping, base: &Path) {
    let Ok(base) = std::path::absolute(base) else {
        return;
    };
    let anchor = |value: Option<&mut Value>| {
        if let Some(Value::String(path)) = value {
            *path = base.join(&*path).display().to_string();
        }
    };
    if let Some(inference) = binding.get_mut("inference") {
        for model in ["encoder", "ner"] {
            if let Some(settings) = inference.get_mut(model) {
                for key in ["modelDir", "onnxModel", "adapter", "runtimeLibrary"] {
                    anchor(settings.get_mut(key));
                }
            }
        }
    }
    if let Some(records) = binding.get_mut("records") {
        anchor(records.get_mut("path"));
    }
}

/// Bundles are never overwritten: `out` must be absent or an empty folder.
fn ensure_empty(out: &Path) -> Result<(), ConfigErrors> {
    let occupied = out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true);
    if occupied {
        return Err(ConfigErrors::one(
            "",
            format!(
                "{} exists and is not empty; bundles are never overwritten",
                out.display()
            ),
        ));
    }
    Ok(())
}

/// Writes `bytes` to `relative` inside the bundle folder `out`; returns its manifest entry.
fn write(out: &Path, relative: &str, bytes: &[u8]) -> Result<FileEntry, ConfigErrors> {
    let path = out.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            ConfigErrors::one("", format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    std::fs::write(&path, bytes)
        .map_err(|e| ConfigErrors::one("", format!("cannot write {}: {e}", path.display())))?;
    Ok(FileEntry {
        path: relative.to_owned(),
        sha256: hex_sha256(bytes),
        bytes: bytes.len() as u64,
    })
}

/// A manifest path that stays inside the bundle: relative, no `..`, no root.
fn inside(dir: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    (plain && !path.is_empty()).then(|| dir.join(relative))
}

/// Reads the bundle at `dir` and checks every file against the manifest and the manifest's
/// digest against its files. Any difference is an error naming the file.
pub fn open(dir: &Path) -> Result<Bundle, ConfigErrors> {
    let dir = std::path::absolute(dir)
        .map_err(|e| ConfigErrors::one("bundle", format!("{}: {e}", dir.display())))?;
    let manifest_path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&manifest_path).map_err(|e| {
        ConfigErrors::one(
            "bundle",
            format!(
                "cannot read {}: {e} (is this a bundle folder?)",
                manifest_path.display()
            ),
        )
    })?;
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| ConfigErrors::one(MANIFEST, format!("not a bundle manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(ConfigErrors::one(
            format!("{MANIFEST}.format"),
            format!("{:?} is not {FORMAT:?}", manifest.format),
        ));
    }
    let mut problems = Vec::new();
    for file in &manifest.files {
        let Some(path) = inside(&dir, &file.path) else {
            problems.push(ConfigError::new(
                MANIFEST,
                format!("file path {:?} leaves the bundle", file.path),
            ));
            continue;
        };
        match std::fs::read(&path) {
            Ok(bytes) if hex_sha256(&bytes) == file.sha256 => {}
            Ok(_) => problems.push(ConfigError::new(
                &file.path,
                "content does not match the manifest's sha256 (the bundle was modified)",
            )),
            Err(e) => problems.push(ConfigError::new(&file.path, format!("missing: {e}"))),
        }
    }
    let mut sorted = manifest.files.clone();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    if digest_of(&sorted) != manifest.digest {
        problems.push(ConfigError::new(
            format!("{MANIFEST}.digest"),
            "does not match the listed files (the manifest was modified)",
        ));
    }
    for asset in manifest.assets.iter().chain(&manifest.evidence) {
        if !manifest
            .files
            .iter()
            .any(|f| f.path == asset.path && f.sha256 == asset.sha256)
        {
            problems.push(ConfigError::new(
                format!("{MANIFEST}.assets"),
                format!("{} is not a listed file", asset.path),
            ));
        }
    }
    if !manifest.files.iter().any(|f| f.path == POLICY) {
        problems.push(ConfigError::new(MANIFEST, format!("lists no {POLICY}")));
    }
    if !problems.is_empty() {
        return Err(ConfigErrors(problems));
    }
    let policy_text = std::fs::read_to_string(dir.join(POLICY))
        .map_err(|e| ConfigErrors::one(POLICY, format!("cannot read: {e}")))?;
    let policy = match serde_yaml::from_str::<Value>(&policy_text) {
        Ok(Value::Mapping(policy)) => policy,
        Ok(_) => return Err(ConfigErrors::one(POLICY, "must be a YAML mapping")),
        Err(e) => return Err(ConfigErrors::one(POLICY, format!("not valid YAML: {e}"))),
    };
    Ok(Bundle {
        dir,
        manifest,
        policy,
    })
}

/// Archives larger than this, or with more entries, are refused.
const MAX_ARCHIVE_BYTES: u64 = 1 << 30;
/// See [`MAX_ARCHIVE_BYTES`].
const MAX_ENTRIES: usize = 10_000;

fn error(message: impl Into<String>) -> ConfigErrors {
    ConfigErrors::one("", message)
}

/// Unpacks `archive` into the new folder `out` (plain files with plain relative paths only)
/// and verifies it; on any failure nothing is left at `out`.
pub fn import(archive: &Path, out: &Path) -> Result<Manifest, ConfigErrors> {
    if out.exists() {
        return Err(error(format!(
            "{} exists; import writes a new folder",
            out.display()
        )));
    }
    let unpacked = unpack(archive, out).and_then(|()| open(out));
    match unpacked {
        Ok(opened) => Ok(opened.manifest),
        Err(errors) => {
            let _ = std::fs::remove_dir_all(out);
            Err(errors)
        }
    }
}

fn unpack(archive: &Path, out: &Path) -> Result<(), ConfigErrors> {
    let file = std::fs::File::open(archive)
        .map_err(|e| error(format!("cannot open {}: {e}", archive.display())))?;
    let mut reader = tar::Archive::new(file);
    let entries = reader
        .entries()
        .map_err(|e| error(format!("{} is not a tar archive: {e}", archive.display())))?;
    let (mut total, mut count) = (0u64, 0usize);
    std::fs::create_dir_all(out)
        .map_err(|e| error(format!("cannot create {}: {e}", out.display())))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| error(format!("{}: damaged archive: {e}", archive.display())))?;
        count += 1;
        total += entry.size();
        if count > MAX_ENTRIES || total > MAX_ARCHIVE_BYTES {
            return Err(error(format!(
                "{}: more than {MAX_ENTRIES} entries or {MAX_ARCHIVE_BYTES} bytes",
                archive.display()
            )));
        }
        let path = entry
            .path()
            .map_err(|e| error(format!("{}: unreadable entry name: {e}", archive.display())))?
            .into_owned();
        let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
        if entry.header().entry_type() != tar::EntryType::Regular || !plain {
            return Err(error(format!(
                "{}: entry {} is not a plain file inside the bundle",
                archive.display(),
                path.display()
            )));
        }
        let target = out.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| error(format!("cannot create {}: {e}", parent.display())))?;
        }
        let mut file = std::fs::File::create(&target)
            .map_err(|e| error(format!("cannot create {}: {e}", target.display())))?;
        std::io::copy(&mut entry, &mut file)
            .map_err(|e| error(format!("cannot write {}: {e}", target.display())))?;
    }
    Ok(())
}

impl Bundle {
    /// Writes this bundle, plus `evidence` (role, file name, bytes) under `evidence/`, into the
    /// empty or absent folder `out`: a new bundle, whose digest covers the evidence too. The
    /// policy and assets are copied unchanged; evidence the bundle already carried is replaced
    /// by roles given again and kept otherwise.
    pub fn with_evidence(
        &self,
        evidence: &[(&str, &str, Vec<u8>)],
        out: &Path,
    ) -> Result<Manifest, ConfigErrors> {
        ensure_empty(out)?;
        let replaced: Vec<&str> = evidence.iter().map(|(role, _, _)| *role).collect();
        let kept_evidence: Vec<AssetEntry> = self
            .manifest
            .evidence
            .iter()
            .filter(|e| !replaced.contains(&e.role.as_str()))
            .cloned()
            .collect();
        let mut files = Vec::new();
        for file in &self.manifest.files {
            let dropped = self
                .manifest
                .evidence
                .iter()
                .any(|e| e.path == file.path && !kept_evidence.contains(e));
            if dropped {
                continue;
            }
            let bytes = std::fs::read(self.dir.join(&file.path))
                .map_err(|e| ConfigErrors::one(&file.path, format!("cannot read: {e}")))?;
            files.push(write(out, &file.path, &bytes)?);
        }
        let mut entries = kept_evidence;
        for (role, name, bytes) in evidence {
            let path = format!("evidence/{name}");
            let written = write(out, &path, bytes)?;
            entries.push(AssetEntry {
                role: (*role).to_owned(),
                path,
                sha256: written.sha256.clone(),
            });
            files.retain(|f| f.path != written.path);
            files.push(written);
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        entries.sort_by(|a, b| a.role.cmp(&b.role));
        let manifest = Manifest {
            digest: digest_of(&files),
            files,
            evidence: entries,
            ..self.manifest.clone()
        };
        let json = serde_json::to_string_pretty(&manifest)
            .map_err(|e| ConfigErrors::one("", format!("cannot write the manifest: {e}")))?;
        write(out, MANIFEST, format!("{json}\n").as_bytes())?;
        Ok(manifest)
    }

    /// The policy with every asset path made absolute, ready to merge with a binding.
    pub fn resolved_policy(&self) -> Mapping {
        let mut policy = self.policy.clone();
        for (_, value) in asset_values(&mut policy) {
            if let Some(path) = value.as_str().and_then(|p| inside(&self.dir, p)) {
                *value = Value::String(path.display().to_string());
            }
        }
        policy
    }
}
