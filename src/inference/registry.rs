//! One loaded model per distinct specification and set of model files, shared by every
//! configuration snapshot that names it: a policy reload never reloads unchanged weights.

use super::{
    Backend, BatchSettings, EncoderHandle, EncoderSpec, EntityFound, InferenceError, ModelHandle,
    OnnxTokenClassifier, TokenClassifierSpec,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::SystemTime;

/// Size and modification time of each model file: a changed file loads a new encoder.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// Live encoders by specification and model files.
type Loaded = HashMap<(EncoderSpec, Fingerprint), Weak<EncoderHandle>>;

static LOADED: OnceLock<Mutex<Loaded>> = OnceLock::new();

fn fingerprint(spec: &EncoderSpec) -> Result<Fingerprint, InferenceError> {
    let mut files = vec![spec.model_dir.join("tokenizer.json")];
    match &spec.backend {
        Backend::Candle { adapter, .. } => {
            files.push(spec.model_dir.join("model.safetensors"));
            files.push(spec.model_dir.join("config.json"));
            files.extend(adapter.iter().cloned());
        }
        Backend::Onnx { model, adapter, .. } => {
            files.push(model.clone());
            files.extend(adapter.iter().cloned());
        }
    }
    fingerprint_files(&files)
}

fn fingerprint_files(files: &[PathBuf]) -> Result<Fingerprint, InferenceError> {
    files
        .iter()
        .cloned()
        .map(|path| {
            let meta = std::fs::metadata(&path)
                .map_err(|e| InferenceError::Load(format!("{}: {e}", path.display())))?;
            Ok((path, meta.len(), meta.modified().ok()))
        })
        .collect()
}

/// The live handle under `key` in `registry`, or a new one from `start`, remembered weakly so
/// it stops once no snapshot holds it.
fn live_or_start<K: Eq + std::hash::Hash, H>(
    registry: &OnceLock<Mutex<HashMap<K, Weak<H>>>>,
    what: &str,
    key: K,
    start: impl FnOnce() -> Result<H, InferenceError>,
) -> Result<Arc<H>, InferenceError> {
    let loaded = registry.get_or_init(|| Mutex::new(HashMap::new()));
    let mut loaded = loaded
        .lock()
        .map_err(|_| InferenceError::Load(format!("{what} registry lock poisoned")))?;
    loaded.retain(|_, handle| handle.strong_count() > 0);
    if let Some(handle) = loaded.get(&key).and_then(Weak::upgrade) {
        return Ok(handle);
    }
    let handle = Arc::new(start()?);
    loaded.insert(key, Arc::downgrade(&handle));
    Ok(handle)
}

/// The running encoder for `spec`, loading it if no live snapshot holds one.
pub fn shared_encoder(spec: &EncoderSpec) -> Result<Arc<EncoderHandle>, InferenceError> {
    let key = (spec.clone(), fingerprint(spec)?);
    live_or_start(&LOADED, "encoder", key, || {
        EncoderHandle::spawn(spec.clone())
    })
}

/// A running token classifier.
pub type TokenClassifierHandle = ModelHandle<Vec<EntityFound>>;

type LoadedClassifiers =
    HashMap<(TokenClassifierSpec, BatchSettings, Fingerprint), Weak<TokenClassifierHandle>>;

static CLASSIFIERS: OnceLock<Mutex<LoadedClassifiers>> = OnceLock::new();

/// The running token classifier for `spec`, loading it if no live snapshot holds one.
pub fn shared_token_classifier(
    spec: &TokenClassifierSpec,
    settings: BatchSettings,
) -> Result<Arc<TokenClassifierHandle>, InferenceError> {
    let files = [
        spec.model.clone(),
        spec.model_dir.join("tokenizer.json"),
        spec.model_dir.join("config.json"),
    ];
    let key = (spec.clone(), settings, fingerprint_files(&files)?);
    live_or_start(&CLASSIFIERS, "classifier", key, || {
        let load_spec = spec.clone();
        ModelHandle::start("mom-ner", settings, move || {
            OnnxTokenClassifier::load(&load_spec)
        })
    })
}
