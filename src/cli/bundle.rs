//! `mom-router bundle build|inspect|check|export|import|promote`: the policy as a
//! content-addressed artifact. `export` packs a verified bundle folder into one tar file (fixed
//! order, times and modes, so the same bundle always exports to the same bytes); `import`
//! unpacks one into a new folder and verifies it ([`bundle::import`]). `promote` releases a
//! bundle only when the scorecard measured on it passes a gate, and writes the new bundle with
//! that evidence inside its digest.

use crate::config::bundle::{self, Manifest, MANIFEST};
use crate::config::{self, ConfigErrors};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `bundle`.
#[derive(Debug, Args)]
pub struct BundleArgs {
    #[command(subcommand)]
    command: BundleCommand,
}

#[derive(Debug, Subcommand)]
enum BundleCommand {
    /// Build a bundle from a configuration file (it must compile).
    Build {
        /// The configuration (spec) to build from.
        spec: PathBuf,
        /// The new bundle: a folder, or a `.tar` file.
        #[arg(short, long)]
        out: PathBuf,
        /// Also write the spec's deployment sections here, as a starting binding.
        #[arg(long)]
        binding_out: Option<PathBuf>,
    },
    /// Verify a bundle (folder or `.tar`) and describe what it holds.
    Inspect {
        /// The bundle.
        bundle: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bind a bundle folder and compile it exactly as `serve --bundle` would.
    Check {
        /// The bundle folder.
        bundle: PathBuf,
        /// The binding file.
        #[arg(long)]
        binding: Option<PathBuf>,
    },
    /// Pack a bundle folder into one `.tar` file, after verifying it.
    Export {
        /// The bundle folder.
        bundle: PathBuf,
        /// The archive to write.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Unpack a bundle archive into a new folder and verify it.
    Import {
        /// The archive.
        archive: PathBuf,
        /// The folder to create.
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Release a bundle folder: check the scorecard `eval` measured on it (served from this
    /// bundle) against a gate, and only when every criterion holds write a new bundle carrying
    /// the scorecard, the gate and the verdicts as evidence. Exit 1 names the failed criterion.
    Promote {
        /// The candidate bundle folder.
        bundle: PathBuf,
        /// `scorecard.json` from `mom-router eval` run against this bundle.
        #[arg(long)]
        scorecard: PathBuf,
        /// The gate file.
        #[arg(long)]
        gate: PathBuf,
        /// The promoted bundle folder to create.
        #[arg(short, long)]
        out: PathBuf,
    },
}

/// Runs `bundle`.
pub fn run(args: BundleArgs) -> ExitCode {
    let outcome = match args.command {
        BundleCommand::Build {
            spec,
            out,
            binding_out,
        } => build(&spec, &out, binding_out.as_deref()),
        BundleCommand::Inspect { bundle, json } => inspect(&bundle, json),
        BundleCommand::Check { bundle, binding } => check(&bundle, binding.as_deref()),
        BundleCommand::Export { bundle, out } => bundle::open(&bundle)
            .and_then(|opened| export(&opened.dir, &opened.manifest, &out))
            .map(|()| format!("{}: exported {}", out.display(), bundle.display())),
        BundleCommand::Import { archive, out } => bundle::import(&archive, &out).map(|manifest| {
            format!(
                "{}: imported {} ({} files, verified)",
                out.display(),
                manifest.digest,
                manifest.files.len()
            )
        }),
        BundleCommand::Promote {
            bundle,
            scorecard,
            gate,
            out,
        } => return super::promote::run(&bundle, &scorecard, &gate, &out),
    };
    match outcome {
        Ok(text) => super::write_stdout(&text),
        Err(errors) => {
            eprintln!("mom-router bundle: {} error(s)", errors.0.len());
            for error in &errors.0 {
                eprintln!("  {error}");
            }
            ExitCode::FAILURE
        }
    }
}

fn error(message: impl Into<String>) -> ConfigErrors {
    ConfigErrors::one("", message)
}

fn is_archive(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "tar")
}

/// A fresh folder under the system temp folder, removed when dropped.
fn scratch() -> Result<tempfile::TempDir, ConfigErrors> {
    tempfile::tempdir().map_err(|e| error(format!("cannot create a temporary folder: {e}")))
}

fn build(spec: &Path, out: &Path, binding_out: Option<&Path>) -> Result<String, ConfigErrors> {
    let scratch = if is_archive(out) {
        Some(scratch()?)
    } else {
        None
    };
    let folder = scratch
        .as_ref()
        .map(|s| s.path().join("bundle"))
        .unwrap_or_else(|| out.to_owned());
    let built = bundle::build(spec, &folder)?;
    if scratch.is_some() {
        export(&folder, &built.manifest, out)?;
    }
    if let Some(path) = binding_out {
        let mut binding = built.binding.clone();
        binding.insert(
            serde_yaml::Value::String("bundle".to_owned()),
            serde_yaml::Value::String(built.manifest.digest.clone()),
        );
        let text = serde_yaml::to_string(&serde_yaml::Value::Mapping(binding))
            .map_err(|e| error(format!("cannot write the binding: {e}")))?;
        std::fs::write(path, text)
            .map_err(|e| error(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(format!(
        "{}: bundle {} ({} files, {} assets)",
        out.display(),
        built.manifest.digest,
        built.manifest.files.len(),
        built.manifest.assets.len()
    ))
}

fn inspect(path: &Path, as_json: bool) -> Result<String, ConfigErrors> {
    let scratch;
    let folder = if is_archive(path) {
        scratch = self::scratch()?;
        let folder = scratch.path().join("bundle");
        bundle::import(path, &folder)?;
        folder
    } else {
        path.to_owned()
    };
    let opened = bundle::open(&folder)?;
    let summary = summary(&opened.policy);
    if as_json {
        let document = json!({"manifest": opened.manifest, "policy": summary, "verified": true});
        return Ok(format!("{document:#}"));
    }
    let manifest = &opened.manifest;
    let mut lines = vec![
        format!(
            "bundle {} (version {:?})",
            manifest.digest, manifest.version
        ),
        "verified: every file matches the manifest".to_owned(),
    ];
    for file in &manifest.files {
        lines.push(format!(
            "  {}  {} bytes  sha256 {}",
            file.path, file.bytes, file.sha256
        ));
    }
    for asset in &manifest.assets {
        lines.push(format!("asset {} = {}", asset.role, asset.path));
    }
    for evidence in &manifest.evidence {
        lines.push(format!("evidence {} = {}", evidence.role, evidence.path));
    }
    for (section, entries) in summary.as_object().into_iter().flatten() {
        let names: Vec<String> = entries
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str().map(str::to_owned))
            .collect();
        lines.push(format!("{section}: {}", names.join(", ")));
    }
    lines.push(format!("a binding supplies: {}", manifest.binds.join(", ")));
    Ok(lines.join("\n"))
}

/// The policy's parts by name: identities with versions, models, signals with types,
/// decisions with their algorithm or looper.
fn summary(policy: &serde_yaml::Mapping) -> serde_json::Value {
    let list = |section: &str, describe: &dyn Fn(&serde_yaml::Value) -> String| {
        policy
            .get(section)
            .and_then(serde_yaml::Value::as_sequence)
            .into_iter()
            .flatten()
            .map(describe)
            .collect::<Vec<_>>()
    };
    let text = |value: &serde_yaml::Value, key: &str| {
        value
            .get(key)
            .map(|v| match v {
                serde_yaml::Value::String(s) => s.clone(),
                serde_yaml::Value::Mapping(m) => m
                    .get("type")
                    .and_then(serde_yaml::Value::as_str)
                    .unwrap_or("set")
                    .to_owned(),
                other => serde_yaml::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            })
            .unwrap_or_default()
    };
    json!({
        "identities": list("identities", &|i| format!("{} v{}", text(i, "name"), text(i, "version"))),
        "models": list("models", &|m| format!("{} ({})", text(m, "name"), text(m, "providerModel"))),
        "signals": list("signals", &|s| format!("{} ({})", text(s, "name"), text(s, "type"))),
        "decisions": list("decisions", &|d| {
            let how = match text(d, "looper") {
                looper if !looper.is_empty() => format!("looper {looper}"),
                _ => text(d, "algorithm"),
            };
            format!("{} ({})", text(d, "name"), if how.is_empty() { "static".to_owned() } else { how })
        }),
    })
}

fn check(folder: &Path, binding: Option<&Path>) -> Result<String, ConfigErrors> {
    let snapshot = config::binding::compile_bound(folder, binding)?;
    let (bundle, binding) = snapshot
        .artifact
        .as_ref()
        .map(|a| (a.bundle_digest.as_str(), a.binding_digest.as_str()))
        .unwrap_or_default();
    Ok(format!(
        "{}: ok, bundle {bundle}, binding {}, {}",
        folder.display(),
        if binding.is_empty() { "none" } else { binding },
        super::described(&snapshot)
    ))
}

/// Writes `manifest`'s files and the manifest into a tar at `out`, every header fixed.
fn export(folder: &Path, manifest: &Manifest, out: &Path) -> Result<(), ConfigErrors> {
    let file = std::fs::File::create(out)
        .map_err(|e| error(format!("cannot create {}: {e}", out.display())))?;
    let mut archive = tar::Builder::new(file);
    let names = std::iter::once(MANIFEST).chain(manifest.files.iter().map(|f| f.path.as_str()));
    for name in names {
        let bytes = std::fs::read(folder.join(name))
            .map_err(|e| error(format!("cannot read {name}: {e}")))?;
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        archive
            .append_data(&mut header, name, bytes.as_slice())
            .map_err(|e| error(format!("cannot write {}: {e}", out.display())))?;
    }
    archive
        .into_inner()
        .and_then(|mut f| std::io::Write::flush(&mut f))
        .map_err(|e| error(format!("cannot write {}: {e}", out.display())))
}
