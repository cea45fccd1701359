//! ONNX Runtime through `ort` (`load-dynamic`): the runtime library is loaded once per process
//! from the configured path, and execution providers are tried in the configured order, each
//! failure recorded in one line, falling back to the next (normally the CPU).

use super::onnx_lookup::dequantize_after_lookup;
use super::InferenceError;
use bytes::Bytes;
use ort::environment::Environment;
use ort::ep;
use ort::session::Session;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Which library the process's ONNX Runtime came from, and the environment or why it failed.
type LoadedRuntime = Option<(PathBuf, Result<Environment, String>)>;

/// The process's ONNX Runtime: one per process, loaded on first use.
static RUNTIME: OnceLock<Mutex<LoadedRuntime>> = OnceLock::new();

/// The process's ONNX Runtime environment, on the runtime library `library` (loaded on first use;
/// ONNX Runtime allows one environment per process, so every session opens in this one).
pub fn environment(library: &Path) -> Result<Environment, InferenceError> {
    // The same file named two ways (`a/../b`, a symlink) is the same runtime.
    let canonical = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_owned());
    let library = canonical.as_path();
    let cell = RUNTIME.get_or_init(|| Mutex::new(None));
    let mut slot = cell
        .lock()
        .map_err(|_| InferenceError::Load("onnx runtime lock poisoned".to_owned()))?;
    if slot.is_none() {
        let loaded = ort::init_from(library)
            .map_err(|e| format!("cannot load {}: {e}", library.display()))
            .and_then(|builder| {
                builder
                    .with_name("mom-router")
                    .build()
                    .map_err(|e| e.to_string())
            });
        *slot = Some((library.to_owned(), loaded));
    }
    match slot.as_ref() {
        Some((loaded_from, _)) if loaded_from != library => Err(InferenceError::Load(format!(
            "ONNX Runtime was already loaded from {}; one process uses one runtime library",
            loaded_from.display()
        ))),
        Some((_, Ok(env))) => Ok(env.clone()),
        Some((_, Err(reason))) => Err(InferenceError::Load(reason.clone())),
        None => Err(InferenceError::Load(
            "onnx runtime not initialised".to_owned(),
        )),
    }
}

/// The ONNX Runtime this process loaded: the library's path and its build string
/// (`git-branch=…, git-commit-id=…, build type=…`), or `None` when no runtime was loaded.
pub fn loaded_runtime() -> Option<(PathBuf, String)> {
    let slot = RUNTIME.get()?.lock().ok()?;
    match slot.as_ref() {
        Some((library, Ok(_))) => {
            let info = ort::info();
            let info = info.strip_prefix("ORT Build Info: ").unwrap_or(info);
            Some((library.clone(), info.to_owned()))
        }
        _ => None,
    }
}

fn provider(name: &str) -> Option<ep::ExecutionProviderDispatch> {
    match name {
        "cuda" => Some(ep::CUDA::default().build().error_on_failure()),
        "rocm" => Some(ep::ROCm::default().build().error_on_failure()),
        "openvino" => Some(ep::OpenVINO::default().build().error_on_failure()),
        _ => None,
    }
}

/// Opens `model` (or `patched`, its bytes changed, read in its place) with the first execution
/// provider in `providers` that registers, each int8 table of it dequantized after its lookup
/// ([`dequantize_after_lookup`]); returns the session and a description such as
/// `onnx cpu (cuda unavailable: …)`.
pub fn open_session(
    model: &Path,
    library: &Path,
    providers: &[String],
    require_first: bool,
    threads: usize,
    patched: Option<Bytes>,
) -> Result<(Session, String), InferenceError> {
    let env = environment(library)?;
    let bytes = model_bytes(model, patched).map_err(InferenceError::Load)?;
    let mut skipped = Vec::new();
    for (i, name) in providers.iter().enumerate() {
        // No memory arena and no memory patterns: inputs change shape with every batch (text
        // length), and both keep what the largest shapes needed. Under a soak of mixed request
        // sizes the arena grew the process past 3 GiB within a minute.
        let builder = Session::builder(&env)
            .and_then(|b| b.with_intra_threads(threads.max(1)).map_err(Into::into))
            .and_then(|b| b.with_memory_pattern(false).map_err(Into::into))
            .map_err(|e| InferenceError::Load(e.to_string()))?;
        let builder = match provider(name) {
            None => builder
                .with_execution_providers([ep::CPU::default().with_arena_allocator(false).build()])
                .map_err(|e| e.to_string()),
            Some(dispatch) => builder
                .with_execution_providers([dispatch])
                .map_err(|e| e.to_string()),
        };
        let session = builder.and_then(|mut b| {
            match &bytes {
                Some(bytes) => b.commit_from_memory(bytes),
                None => b.commit_from_file(model),
            }
            .map_err(|e| e.to_string())
        });
        match session {
            Ok(session) => {
                let mut described = format!("onnx {name}");
                if !skipped.is_empty() {
                    described.push_str(&format!(" ({})", skipped.join("; ")));
                }
                return Ok((session, described));
            }
            Err(reason) => {
                skipped.push(super::unavailable(name, &reason, i == 0 && require_first)?);
            }
        }
    }
    Err(InferenceError::Load(format!(
        "no execution provider could load {}: {}",
        model.display(),
        skipped.join("; ")
    )))
}

/// The bytes to open in place of the file `model`: `patched` or the file, with each int8 table
/// dequantized after its lookup; `None` when the file opens as it is (a model without such a
/// table is then read twice, once here to look).
fn model_bytes(model: &Path, patched: Option<Bytes>) -> Result<Option<Bytes>, String> {
    let in_place = |e| format!("{}: {e}", model.display());
    let read = match &patched {
        Some(bytes) => bytes.clone(),
        None => Bytes::from(std::fs::read(model).map_err(|e| in_place(e.to_string()))?),
    };
    match dequantize_after_lookup(&read).map_err(in_place)? {
        Some(rewritten) => Ok(Some(Bytes::from(rewritten))),
        None => Ok(patched),
    }
}
