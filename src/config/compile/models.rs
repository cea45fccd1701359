//! The models neural signals share: the sentence encoder and the token classifier, loaded (or
//! reused) through the inference registry.

use super::signals::CompiledNer;
use crate::config::error::Errors;
use crate::config::raw::{RawBackend, RawEncoder, RawFencedCode, RawNer};
use crate::inference::{
    self, Backend, BatchSettings, EncoderHandle, EncoderSpec, SpellingSpec, TokenClassifierSpec,
};
use crate::signals::text::FencedCode;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Providers `executionProviders` may name.
const PROVIDERS: &[&str] = &["cuda", "rocm", "openvino", "cpu"];

/// The configured providers (default `[cpu]`), or `None` after reporting a bad one. Backend
/// candle takes only its own devices ([`inference::CANDLE_DEVICES`]).
fn providers(
    raw: Option<&Vec<String>>,
    candle: bool,
    path: &str,
    errors: &mut Errors,
) -> Option<Vec<String>> {
    let providers = raw.cloned().unwrap_or_else(|| vec!["cpu".to_owned()]);
    let allowed = if candle {
        inference::CANDLE_DEVICES
    } else {
        PROVIDERS
    };
    let mut ok = true;
    for (i, provider) in providers.iter().enumerate() {
        if !allowed.contains(&provider.as_str()) {
            let message = if PROVIDERS.contains(&provider.as_str()) {
                format!(
                    "backend candle runs on {}, not {provider:?} (an ONNX Runtime provider: use \
                     backend onnx for it)",
                    allowed.join(" or ")
                )
            } else {
                format!(
                    "unknown provider {provider:?}; use one of: {}",
                    allowed.join(", ")
                )
            };
            errors.push(format!("{path}.executionProviders[{i}]"), message);
            ok = false;
        }
    }
    if providers.is_empty() {
        errors.push(
            format!("{path}.executionProviders"),
            "list at least one provider, e.g. cpu",
        );
        ok = false;
    }
    ok.then_some(providers)
}

/// Batching settings with their documented defaults (16, 2 ms, 256, 10000).
fn batch_settings(
    max_batch: Option<usize>,
    max_wait_ms: Option<u64>,
    queue: Option<usize>,
    cache_entries: Option<u64>,
) -> BatchSettings {
    BatchSettings {
        max_batch: max_batch.unwrap_or(16).max(1),
        max_wait: Duration::from_millis(max_wait_ms.unwrap_or(2)),
        queue: queue.unwrap_or(256).max(1),
        cache_entries: cache_entries.unwrap_or(10_000),
    }
}

/// `runtimeLibrary` resolved against `base`, or `$ORT_DYLIB_PATH`.
fn runtime_library(raw: Option<&str>, base: &Path) -> Option<std::path::PathBuf> {
    raw.map(|p| base.join(p))
        .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(Into::into))
}

pub(super) fn compile_ner(raw: &RawNer, base: &Path, errors: &mut Errors) -> Option<CompiledNer> {
    let path = "inference.ner";
    let providers = providers(raw.execution_providers.as_ref(), false, path, errors);
    let Some(runtime_library) = runtime_library(raw.runtime_library.as_deref(), base) else {
        errors.push(
            format!("{path}.runtimeLibrary"),
            "the token classifier needs libonnxruntime.so: set runtimeLibrary or ORT_DYLIB_PATH",
        );
        return None;
    };
    let min_score = raw.min_score.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&min_score) {
        errors.push(
            format!("{path}.minScore"),
            format!("must be between 0 and 1, got {min_score}"),
        );
        return None;
    }
    let spec = TokenClassifierSpec {
        model: base.join(&raw.onnx_model),
        model_dir: base.join(&raw.model_dir),
        runtime_library,
        providers: providers?,
        require_first: raw.require_first_provider,
        max_tokens: raw.max_tokens.unwrap_or(256).clamp(16, 512),
        threads: raw.threads.unwrap_or(1).max(1),
    };
    let settings = batch_settings(raw.max_batch, raw.max_wait_ms, raw.queue, raw.cache_entries);
    let loaded = inference::labels_of(&spec.model_dir.join("config.json")).and_then(|labels| {
        let handle = inference::shared_token_classifier(&spec, settings)?;
        Ok((labels, handle))
    });
    match loaded {
        Ok((labels, handle)) => {
            let mut types: Vec<String> = labels
                .iter()
                .filter_map(|l| l.strip_prefix("B-").map(str::to_owned))
                .collect();
            types.dedup();
            Some(CompiledNer {
                handle,
                types,
                min_score,
                fenced_code: match raw.fenced_code {
                    Some(RawFencedCode::Skip) => FencedCode::Skip,
                    Some(RawFencedCode::Read) | None => FencedCode::Read,
                },
            })
        }
        Err(e) => {
            errors.push(
                path,
                format!("{e}; check the model paths (fetch them with ./scripts/fetch-models.sh)"),
            );
            None
        }
    }
}

pub(super) fn compile_encoder(
    raw: &RawEncoder,
    base: &Path,
    errors: &mut Errors,
) -> Option<Arc<EncoderHandle>> {
    let path = "inference.encoder";
    let resolve = |p: &str| base.join(p);
    let model_dir = resolve(&raw.model_dir);
    let candle = matches!(raw.backend, RawBackend::Candle);
    let providers = providers(raw.execution_providers.as_ref(), candle, path, errors);
    let ok = providers.is_some();
    let providers = providers.unwrap_or_default();
    let backend = match raw.backend {
        RawBackend::Candle => Backend::Candle {
            devices: providers,
            require_first: raw.require_first_provider,
            adapter: raw.adapter.as_deref().map(resolve),
        },
        RawBackend::Onnx => {
            let model = raw.onnx_model.as_deref().map(resolve);
            let library = runtime_library(raw.runtime_library.as_deref(), base);
            match (model, library) {
                (Some(model), Some(runtime_library)) => Backend::Onnx {
                    model,
                    runtime_library,
                    providers,
                    require_first: raw.require_first_provider,
                    adapter: raw.adapter.as_deref().map(resolve),
                },
                (None, _) => {
                    errors.push(
                        format!("{path}.onnxModel"),
                        "backend onnx needs the path of the .onnx file",
                    );
                    return None;
                }
                (_, None) => {
                    errors.push(
                        format!("{path}.runtimeLibrary"),
                        "backend onnx needs libonnxruntime.so: set runtimeLibrary or ORT_DYLIB_PATH",
                    );
                    return None;
                }
            }
        }
    };
    let spec = EncoderSpec {
        backend,
        model_dir,
        max_tokens: raw.max_tokens.unwrap_or(256).clamp(8, 512),
        threads: raw.threads.unwrap_or(1).max(1),
        batch: batch_settings(raw.max_batch, raw.max_wait_ms, raw.queue, raw.cache_entries),
        spelling: raw.spelling.as_ref().map(|s| SpellingSpec {
            dictionary: resolve(&s.dictionary),
            keep: s.keep.iter().map(|k| resolve(k)).collect(),
        }),
    };
    if !ok {
        return None;
    }
    match inference::shared_encoder(&spec) {
        Ok(handle) => Some(handle),
        Err(e) => {
            errors.push(
                path,
                format!("{e}; check the model paths (fetch them with ./scripts/fetch-models.sh)"),
            );
            None
        }
    }
}
