//! The binding: where a bundle runs. It supplies the deployment sections (server, inference,
//! state, records) and may map each of the bundle's logical models to another provider model
//! id. It can never change what the bundle decides: a decision, identity, signal, projection or
//! session key, a model the bundle does not declare, or any model field but `providerModel` is
//! an error naming the path, because that change needs a new bundle version.

use super::bundle::{Bundle, DEPLOYMENT_SECTIONS};
use super::{hex_sha256, ConfigError, ConfigErrors, Snapshot};
use serde_yaml::{Mapping, Value};
use std::path::Path;

/// Sections that carry the bundle's meaning; a binding naming one is refused.
const SEMANTIC_SECTIONS: &[&str] = &[
    "version",
    "identities",
    "signals",
    "projections",
    "decisions",
    "sessions",
];

/// The deployment's identity, recorded on the snapshot it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The bundle's digest (`sha256:…`).
    pub bundle_digest: String,
    /// The binding file's digest (`sha256:…`), empty when the bundle runs unbound.
    pub binding_digest: String,
    /// Every semantic asset: its role, absolute path and hash.
    pub assets: Vec<(String, String, String)>,
}

/// A binding read from disk.
#[derive(Debug, Clone)]
pub struct Binding {
    /// `sha256:` and the hex digest of the file's bytes.
    pub digest: String,
    document: Mapping,
}

/// Reads the binding at `path`.
pub fn read(path: &Path) -> Result<Binding, ConfigErrors> {
    let bytes = std::fs::read(path).map_err(|e| {
        ConfigErrors::one("binding", format!("cannot read {}: {e}", path.display()))
    })?;
    let digest = format!("sha256:{}", hex_sha256(&bytes));
    let document = match serde_yaml::from_slice::<Value>(&bytes) {
        Ok(Value::Mapping(document)) => document,
        Ok(Value::Null) => Mapping::new(),
        Ok(_) => return Err(ConfigErrors::one("binding", "must be a YAML mapping")),
        Err(e) => return Err(ConfigErrors::one("binding", format!("not valid YAML: {e}"))),
    };
    Ok(Binding { digest, document })
}

/// The configuration document `bundle` bound by `binding`: the bundle's policy (assets at
/// absolute paths) plus the binding's deployment sections and provider model ids. Every
/// binding key that would change the bundle's meaning is an error.
pub fn bind(bundle: &Bundle, binding: Option<&Binding>) -> Result<Mapping, ConfigErrors> {
    let mut document = bundle.resolved_policy();
    let Some(binding) = binding else {
        return Ok(document);
    };
    let mut errors = Vec::new();
    for (key, value) in &binding.document {
        let Some(key) = key.as_str() else {
            errors.push(ConfigError::new(
                "binding",
                format!("key {key:?} is not a string"),
            ));
            continue;
        };
        let path = format!("binding.{key}");
        match key {
            "bundle" => {
                let pinned = value.as_str().unwrap_or_default();
                if pinned != bundle.manifest.digest {
                    errors.push(ConfigError::new(
                        path,
                        format!(
                            "this binding is for bundle {pinned:?}, not {}",
                            bundle.manifest.digest
                        ),
                    ));
                }
            }
            "models" => bind_models(&mut document, value, &mut errors),
            _ if DEPLOYMENT_SECTIONS.contains(&key) => {
                document.insert(Value::String(key.to_owned()), value.clone());
            }
            _ if SEMANTIC_SECTIONS.contains(&key) => errors.push(ConfigError::new(
                path,
                format!(
                    "`{key}` is part of the bundle's decision semantics; a binding cannot change it — build a new bundle version"
                ),
            )),
            _ => errors.push(ConfigError::new(
                path,
                "unknown key; a binding sets: bundle, server, inference, state, records, models",
            )),
        }
    }
    if errors.is_empty() {
        Ok(document)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Applies `models: {NAME: {providerModel: ID}}` to the policy's models.
fn bind_models(document: &mut Mapping, value: &Value, errors: &mut Vec<ConfigError>) {
    let Value::Mapping(bound) = value else {
        errors.push(ConfigError::new(
            "binding.models",
            "must map model names to {providerModel: ID}",
        ));
        return;
    };
    let Some(Value::Sequence(models)) = document.get_mut("models") else {
        errors.push(ConfigError::new(
            "binding.models",
            "the bundle declares no models to bind",
        ));
        return;
    };
    for (name, fields) in bound {
        let name = name.as_str().unwrap_or_default();
        let path = format!("binding.models.{name}");
        let Some(model) = models
            .iter_mut()
            .find(|m| m.get("name").and_then(Value::as_str) == Some(name))
        else {
            errors.push(ConfigError::new(
                path,
                "not a model of the bundle; adding a model changes the decision graph — build a new bundle version",
            ));
            continue;
        };
        let Value::Mapping(fields) = fields else {
            errors.push(ConfigError::new(path, "must be {providerModel: ID}"));
            continue;
        };
        for (field, setting) in fields {
            let field = field.as_str().unwrap_or_default();
            match (field, setting) {
                ("providerModel", Value::String(id)) if !id.trim().is_empty() => {
                    if let Value::Mapping(model) = model {
                        model.insert(
                            Value::String("providerModel".to_owned()),
                            Value::String(id.clone()),
                        );
                    }
                }
                ("providerModel", _) => errors.push(ConfigError::new(
                    format!("{path}.providerModel"),
                    "must be a non-empty string",
                )),
                _ => errors.push(ConfigError::new(
                    format!("{path}.{field}"),
                    "part of the bundle's semantics (selection reads it); a binding sets only providerModel — build a new bundle version",
                )),
            }
        }
    }
}

/// Opens the bundle at `bundle_dir`, binds it with the binding at `binding_path` and compiles
/// the result; relative paths in the binding resolve against the binding's folder.
pub fn compile_bound(
    bundle_dir: &Path,
    binding_path: Option<&Path>,
) -> Result<Snapshot, ConfigErrors> {
    let bundle = super::bundle::open(bundle_dir)?;
    let binding = binding_path.map(read).transpose()?;
    let document = bind(&bundle, binding.as_ref())?;
    let text = serde_yaml::to_string(&Value::Mapping(document))
        .map_err(|e| ConfigErrors::one("", format!("cannot compose: {e}")))?;
    let base = binding_path
        .and_then(Path::parent)
        .unwrap_or(&bundle.dir)
        .to_owned();
    let mut snapshot = super::compile_in(&text, &base)?;
    // The version names the bundle too, so what answered (`x-mom-config-version`, scorecards)
    // can be tied to the bundle that decided.
    snapshot.version = format!(
        "{}+bundle.{}",
        snapshot.version,
        bundle_tag(&bundle.manifest.digest)
    )
    .into();
    snapshot.artifact = Some(Artifact {
        bundle_digest: bundle.manifest.digest.clone(),
        binding_digest: binding.map(|b| b.digest).unwrap_or_default(),
        assets: bundle
            .manifest
            .assets
            .iter()
            .map(|a| {
                (
                    a.role.clone(),
                    bundle.dir.join(&a.path).display().to_string(),
                    a.sha256.clone(),
                )
            })
            .collect(),
    });
    Ok(snapshot)
}

/// The short form of a bundle digest that configuration versions carry: its first 12 hex
/// digits.
pub fn bundle_tag(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..12.min(hex.len())]
}
