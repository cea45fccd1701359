//! Inference: sentence encoders on Candle and ONNX Runtime behind one synchronous trait, each
//! owned by a dedicated worker thread fed by a bounded queue with dynamic micro-batching
//! ([`worker`]). Nothing here runs on the async runtime; callers await a reply channel, and a
//! full queue answers [`InferenceError::Overloaded`] at once.

mod adapter;
mod candle_bert;
mod head;
mod head_file;
mod onnx_adapter;
mod onnx_bert;
mod onnx_graph;
mod onnx_lookup;
mod onnx_ner;
mod onnx_session;
mod onnx_wire;
mod registry;
mod router_head;
mod router_input;
mod spelling;
pub(crate) mod tokenize;
pub mod worker;

pub use adapter::{merge_adapter, weights_sha256, write_adapter, AdapterTensor, ADAPTER_FORMAT};
pub use candle_bert::DEVICES as CANDLE_DEVICES;
pub use head::{
    argmax, f32s_from_le, f32s_to_le, softmax, Dense, Head, HeadError, HEAD_FORMAT, PROBE_TEXT,
};
pub use onnx_lookup::dequantize_after_lookup;
pub use onnx_ner::{labels_of, EntityFound, OnnxTokenClassifier, TokenClassifierSpec};
pub use onnx_session::{environment as onnx_environment, loaded_runtime as loaded_onnx_runtime};
pub use registry::{shared_encoder, shared_token_classifier, TokenClassifierHandle};
pub use router_head::{ModelHeads, Prediction, RouterHead, ROUTER_FORMAT};
pub use router_input::{
    cheap_features, crossed, crossed_width, kind_input, kind_input_width, ROUTER_FEATURES,
};
pub use spelling::{Speller, SpellingSpec};
pub use worker::{BatchSettings, Batched, EncoderHandle, EncoderStats, ModelHandle};

use std::path::PathBuf;

/// Why an inference call produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferenceError {
    /// The model or runtime could not be loaded.
    #[error("cannot load encoder: {0}")]
    Load(String),
    /// A forward pass failed.
    #[error("inference failed: {0}")]
    Run(String),
    /// The worker's queue is full; the request was not queued.
    #[error("encoder overloaded: queue full")]
    Overloaded,
    /// The worker has stopped.
    #[error("encoder worker stopped")]
    Closed,
    /// No answer within the call deadline (`callTimeoutMs`): the model is too busy.
    #[error("model overloaded: no answer within {0} ms")]
    TimedOut(u64),
}

/// A sentence encoder: pooled, L2-normalised embeddings, one per input text.
pub trait Encoder {
    /// Embeds a batch of texts.
    fn encode(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError>;
    /// What is running, e.g. `candle cpu` or `onnx cpu (cuda unavailable: …)`.
    fn describe(&self) -> String;
}

/// Which runtime executes the encoder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Candle, BERT from `model.safetensors` + `config.json`.
    Candle {
        /// Devices in preference order (`cuda`, `cpu`).
        devices: Vec<String>,
        /// Fail instead of falling back when the first device cannot load.
        require_first: bool,
        /// A low-rank adapter merged into the weights on load.
        adapter: Option<PathBuf>,
    },
    /// ONNX Runtime through `ort`, loading `libonnxruntime` from `runtime_library`.
    Onnx {
        /// The `.onnx` file.
        model: PathBuf,
        /// Path of `libonnxruntime.so`.
        runtime_library: PathBuf,
        /// Execution providers in preference order (`cuda`, `rocm`, `openvino`, `cpu`).
        providers: Vec<String>,
        /// Fail instead of falling back when the first provider cannot load.
        require_first: bool,
        /// A low-rank adapter applied on load (written into a copy of the model file).
        adapter: Option<PathBuf>,
    },
}

/// Everything needed to load one encoder; equal specs share one loaded model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EncoderSpec {
    /// Runtime.
    pub backend: Backend,
    /// Directory with `tokenizer.json` (and, for Candle, the weights and `config.json`).
    pub model_dir: PathBuf,
    /// Inputs are truncated to this many tokens (head of the text).
    pub max_tokens: usize,
    /// Threads the runtime may use for one forward pass.
    pub threads: usize,
    /// Batching and queueing.
    pub batch: BatchSettings,
    /// A spelling corrector for the text the encoder reads.
    pub spelling: Option<SpellingSpec>,
}

/// The one-line reason a provider or device `name` could not load (`cuda unavailable: …`),
/// logged in full; an error instead when it was the first and required.
pub(crate) fn unavailable(
    name: &str,
    reason: &str,
    first_required: bool,
) -> Result<String, InferenceError> {
    let line = format!(
        "{name} unavailable: {}",
        reason.lines().next().unwrap_or_default()
    );
    tracing::warn!(provider = %name, %reason, "could not load; trying the next");
    if first_required {
        return Err(InferenceError::Load(line));
    }
    Ok(line)
}

/// Loads the encoder a spec describes, on the calling thread. The spelling corrector's word lists
/// are read after the model, so that they are not held through the model's load, the start-up's
/// peak of memory; only the vocabulary's whole words are taken from the tokenizer before.
pub fn load(spec: &EncoderSpec) -> Result<Box<dyn Encoder>, InferenceError> {
    let tokenizer =
        tokenize::TextTokenizer::load(&spec.model_dir.join("tokenizer.json"), spec.max_tokens)?;
    let words = spec.spelling.as_ref().map(|_| tokenizer.whole_words());
    let encoder = load_model(spec, tokenizer)?;
    let (Some(spelling), Some(words)) = (&spec.spelling, words) else {
        return Ok(encoder);
    };
    let speller = Speller::load(spelling, words.iter().map(String::as_str))?;
    Ok(Box::new(spelling::Spelled {
        inner: encoder,
        speller,
    }))
}

/// Loads the encoder's model alone, around its loaded tokenizer.
fn load_model(
    spec: &EncoderSpec,
    tokenizer: tokenize::TextTokenizer,
) -> Result<Box<dyn Encoder>, InferenceError> {
    match &spec.backend {
        Backend::Candle {
            devices,
            require_first,
            adapter,
        } => Ok(Box::new(candle_bert::CandleBert::load(
            &spec.model_dir,
            adapter.as_deref(),
            tokenizer,
            devices,
            *require_first,
        )?)),
        Backend::Onnx {
            model,
            runtime_library,
            providers,
            require_first,
            adapter,
        } => Ok(Box::new(onnx_bert::OnnxBert::load(
            model,
            adapter.as_deref(),
            runtime_library,
            providers,
            *require_first,
            spec.threads,
            tokenizer,
        )?)),
    }
}

/// Mean of the token vectors where `mask` is 1, then L2-normalised.
pub(crate) fn mean_pool(hidden: &[f32], mask: &[i64], tokens: usize, dims: usize) -> Vec<f32> {
    let mut pooled = vec![0.0f32; dims];
    let mut count = 0.0f32;
    for t in 0..tokens {
        if mask[t] == 0 {
            continue;
        }
        count += 1.0;
        for (d, value) in pooled.iter_mut().enumerate() {
            *value += hidden[t * dims + d];
        }
    }
    let count = count.max(1.0);
    for value in &mut pooled {
        *value /= count;
    }
    normalize(&mut pooled);
    pooled
}

/// Scales `v` to unit length (no-op for the zero vector).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

/// Cosine similarity of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
