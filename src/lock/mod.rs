//! The resolution lock: what a running mom-router resolved its policy to, written at start-up
//! and after every applied reload. It names the bundle and binding digests, every asset's hash,
//! the runtimes actually in use (the ONNX Runtime library's hash and build string, execution
//! provider, Candle device), the
//! encoder's weights hash and whether each trained head was fitted on that encoder, the model
//! ids each backend lists at `GET /v1/models` (asked through Envoy's internal listener, as
//! loopers' calls go), and the Envoy version its admin endpoint reports. Its digest goes into
//! every run record, so a record says exactly what served it.

use crate::config::Snapshot;
use crate::llm::LlmClient;
use arc_swap::ArcSwapOption;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lock's format tag.
pub const FORMAT: &str = "mom-router.lock/v1";

/// One resolution.
#[derive(Debug, Clone)]
pub struct Lock {
    /// The snapshot it resolved (`label@hash12`).
    pub config_version: String,
    /// `sha256:` and the hex digest of the document without its time.
    pub digest: String,
    /// The whole document, `digest` and `resolvedUnixMs` included.
    pub document: Value,
}

/// The live lock, shared by the admin server and the record sink.
pub type LockSlot = Arc<ArcSwapOption<Lock>>;

/// How long a resolution keeps asking unreachable backends and Envoy before recording why.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// Total time to keep retrying.
    pub total: Duration,
    /// One attempt's limit.
    pub attempt: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            total: Duration::from_secs(20),
            attempt: Duration::from_secs(2),
        }
    }
}

/// Resolves `snapshot`: reads hashes, asks every backend and Envoy.
pub async fn resolve(snapshot: &Snapshot, client: &LlmClient, patience: Patience) -> Lock {
    let files = {
        let snapshot_assets = snapshot.artifact.as_ref().map(|a| a.assets.clone());
        let weights = snapshot
            .encoder
            .as_ref()
            .and_then(|e| e.weights_file().map(|p| p.to_owned()));
        let runtime = crate::inference::loaded_onnx_runtime();
        tokio::task::spawn_blocking(move || {
            hashes(snapshot_assets.unwrap_or_default(), weights, runtime)
        })
        .await
        .unwrap_or_default()
    };
    // Backends and Envoy are asked at once: each may take the whole patience.
    let (upstreams, envoy) = tokio::join!(
        upstreams(snapshot, client, patience),
        envoy(snapshot.server.envoy_admin.as_deref(), patience)
    );
    let mut document = json!({
        "format": FORMAT,
        "momRouter": env!("CARGO_PKG_VERSION"),
        "configVersion": snapshot.version,
        "bundle": snapshot.artifact.as_ref().map(|a| json!({
            "digest": a.bundle_digest,
            "assets": files.assets,
        })),
        "binding": snapshot.artifact.as_ref().map(|a| json!({
            "digest": if a.binding_digest.is_empty() { Value::Null } else { json!(a.binding_digest) },
        })),
        "runtime": runtime(snapshot, &files),
        "heads": files.heads(),
        "upstreams": upstreams,
        "envoy": envoy,
    });
    let digest = format!(
        "sha256:{}",
        crate::config::hex_sha256(&serde_json::to_vec(&document).unwrap_or_default())
    );
    document["digest"] = json!(digest);
    document["resolvedUnixMs"] = json!(crate::state::now_ms());
    Lock {
        config_version: snapshot.version.to_string(),
        digest,
        document,
    }
}

/// Hashes read from disk.
#[derive(Debug, Default)]
struct Files {
    /// Every bundle asset: role, path, sha256, and for a head the encoder it was fitted on.
    assets: Vec<Value>,
    /// The encoder's weights file and its sha256.
    encoder: Option<(String, String)>,
    /// The ONNX Runtime library, its build string and its sha256.
    onnx_runtime: Option<Value>,
}

impl Files {
    /// Each trained head with the encoder it was fitted on and whether that is the running one.
    fn heads(&self) -> Vec<Value> {
        self.assets
            .iter()
            .filter(|a| a.get("trainedOnEncoder").is_some())
            .map(|a| {
                let trained = a["trainedOnEncoder"].as_str().unwrap_or_default();
                json!({
                    "role": a["role"],
                    "sha256": a["sha256"],
                    "trainedOnEncoder": trained,
                    "matchesEncoder": self.encoder.as_ref().is_some_and(|(_, sha)| sha == trained),
                })
            })
            .collect()
    }
}

fn sha256_of(path: &std::path::Path) -> String {
    crate::config::sha256_file(path).unwrap_or_else(|e| format!("unreadable: {e}"))
}

fn hashes(
    assets: Vec<(String, String, String)>,
    weights: Option<PathBuf>,
    runtime: Option<(PathBuf, String)>,
) -> Files {
    let assets = assets
        .into_iter()
        .map(|(role, path, sha256)| {
            let mut entry = json!({"role": role, "path": path, "sha256": sha256});
            if role.ends_with(".head") {
                if let Ok(head) = crate::inference::Head::load(std::path::Path::new(&path)) {
                    entry["trainedOnEncoder"] = json!(head.encoder_sha256);
                }
            }
            entry
        })
        .collect();
    let encoder = weights.map(|path| (path.display().to_string(), sha256_of(&path)));
    let onnx_runtime = runtime.map(|(library, build)| {
        json!({"library": library.display().to_string(), "sha256": sha256_of(&library), "build": build})
    });
    Files {
        assets,
        encoder,
        onnx_runtime,
    }
}

fn runtime(snapshot: &Snapshot, files: &Files) -> Value {
    let described = snapshot.encoder.as_ref().map(|e| e.describe());
    let encoder = &files.encoder;
    json!({
        "onnxRuntime": files.onnx_runtime,
        "encoder": snapshot.encoder.as_ref().map(|_| json!({
            "runs": described,
            "executionProvider": described.and_then(execution_provider),
            "weights": encoder.as_ref().map(|(path, _)| path),
            "sha256": encoder.as_ref().map(|(_, sha)| sha),
        })),
        "ner": snapshot.ner.as_ref().map(|n| json!({
            "runs": n.describe(),
            "executionProvider": execution_provider(n.describe()),
        })),
        "candleDevice": described
            .and_then(|d| d.strip_prefix("candle "))
            .map(|rest| rest.split_whitespace().next().unwrap_or("cpu").to_owned()),
    })
}

/// The provider in a model's description: `onnx cuda` → `cuda`, `candle cpu` → `cpu`.
fn execution_provider(described: &str) -> Option<String> {
    described.split_whitespace().nth(1).map(|p| {
        p.trim_end_matches(|c: char| !c.is_alphanumeric())
            .to_owned()
    })
}

/// Asks each model's backend what it serves, retrying until `patience` runs out.
async fn upstreams(snapshot: &Snapshot, client: &LlmClient, patience: Patience) -> Vec<Value> {
    let asks = snapshot.models.iter().map(|model| async move {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < patience.total {
            match client.list_models(&model.name, patience.attempt).await {
                Ok(ids) => {
                    return json!({
                        "model": model.name,
                        "providerModel": model.provider_model,
                        "observed": ids,
                        "listed": ids.iter().any(|id| **id == *model.provider_model),
                    })
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        json!({
            "model": model.name,
            "providerModel": model.provider_model,
            "observed": Value::Null,
            "error": last,
        })
    });
    futures_util::future::join_all(asks).await
}

/// Envoy's version from its admin `/server_info`.
async fn envoy(admin: Option<&str>, patience: Patience) -> Value {
    let Some(admin) = admin else {
        return json!({"admin": Value::Null, "version": Value::Null, "error": "server.envoyAdmin is not configured"});
    };
    let http = reqwest::Client::new();
    let url = format!("{}/server_info", admin.trim_end_matches('/'));
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < patience.total {
        let asked = tokio::time::timeout(patience.attempt, async {
            let response = http.get(&url).send().await.map_err(|e| e.to_string())?;
            response.json::<Value>().await.map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|_| Err("no answer in time".to_owned()));
        match asked {
            Ok(info) => {
                return json!({
                    "admin": admin,
                    "version": info["version"],
                    "state": info["state"],
                })
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    json!({"admin": admin, "version": Value::Null, "error": last})
}

/// Resolves the live snapshot now and after every `changed` notification, keeping the result
/// in `slot` and, when `path` is given, writing it there as pretty JSON.
pub async fn maintain(
    store: Arc<crate::config::ConfigStore>,
    client: LlmClient,
    slot: LockSlot,
    path: Option<PathBuf>,
    changed: Arc<tokio::sync::Notify>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let snapshot = store.snapshot();
        let resolving = resolve(&snapshot, &client, Patience::default());
        let lock = tokio::select! {
            lock = resolving => lock,
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        if let Some(path) = &path {
            let text = serde_json::to_string_pretty(&lock.document).unwrap_or_default();
            if let Err(e) = std::fs::write(path, format!("{text}\n")) {
                tracing::error!(path = %path.display(), error = %e, "cannot write the resolution lock");
            }
        }
        tracing::info!(digest = %lock.digest, version = %lock.config_version, "resolution lock written");
        slot.store(Some(Arc::new(lock)));
        tokio::select! {
            _ = changed.notified() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}
