//! Raw inference settings as written in the YAML document: the sentence encoder and the token
//! classifier (see [`super::raw`]).

use serde::Deserialize;

/// Neural inference settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawInference {
    /// The sentence encoder shared by every embedding-based signal.
    pub encoder: Option<RawEncoder>,
    /// The token classifier the `pii` signals use for named entities (ONNX Runtime).
    pub ner: Option<RawNer>,
}

/// A BERT token classifier with BIO labels (e.g. the Rampart PII model).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawNer {
    /// Directory with `tokenizer.json` and `config.json` (`id2label`).
    pub model_dir: String,
    /// The `.onnx` file.
    pub onnx_model: String,
    /// `libonnxruntime.so`; default `$ORT_DYLIB_PATH`.
    pub runtime_library: Option<String>,
    /// Execution providers in preference order; default `[cpu]`.
    pub execution_providers: Option<Vec<String>>,
    /// Fail at load when the first provider cannot be used.
    #[serde(default)]
    pub require_first_provider: bool,
    /// Window length in tokens (windows overlap by a quarter); default 256.
    pub max_tokens: Option<usize>,
    /// Threads for one forward pass; default 1.
    pub threads: Option<usize>,
    /// Most windows in one batch; default 16.
    pub max_batch: Option<usize>,
    /// Longest wait for a batch to fill, in milliseconds; default 2.
    pub max_wait_ms: Option<u64>,
    /// Queued texts beyond which calls are refused as overloaded; default 256.
    pub queue: Option<usize>,
    /// Longest a call waits for the model (queue and forward pass), in milliseconds, before
    /// it fails as overloaded; default none. Keep it below Envoy's ext_proc message_timeout.
    pub call_timeout_ms: Option<u64>,
    /// Results cached by text; default 10000.
    pub cache_entries: Option<u64>,
    /// An entity counts when one of its tokens reaches this probability; default 0.5.
    pub min_score: Option<f32>,
    /// `read` (default) or `skip` the Markdown-fenced code blocks of a message: skipped, the
    /// classifier reads only the prose around them (the validated detectors still read all).
    pub fenced_code: Option<RawFencedCode>,
}

/// What the token classifier reads of fenced code blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawFencedCode {
    /// Everything.
    Read,
    /// The prose around the blocks.
    Skip,
}

/// Which runtime runs the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawBackend {
    /// Candle (safetensors).
    Candle,
    /// ONNX Runtime (an `.onnx` file).
    Onnx,
}

/// A sentence encoder (BERT family, e.g. all-MiniLM-L6-v2).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEncoder {
    /// `candle` or `onnx`.
    pub backend: RawBackend,
    /// Directory with `tokenizer.json` (and for Candle `model.safetensors`, `config.json`).
    /// Relative paths are relative to the configuration file.
    pub model_dir: String,
    /// The `.onnx` file (backend `onnx`).
    pub onnx_model: Option<String>,
    /// A low-rank adapter (`mom-router finetune --rank`) applied to the weights on load (either
    /// backend).
    pub adapter: Option<String>,
    /// A spelling corrector in front of the encoder: misspelt words of English prose are
    /// corrected in what the encoder reads (never in what the model is sent).
    pub spelling: Option<RawSpelling>,
    /// `libonnxruntime.so` (backend `onnx`); default `$ORT_DYLIB_PATH`.
    pub runtime_library: Option<String>,
    /// Execution providers in preference order: `cuda`, `rocm`, `openvino`, `cpu` (default `[cpu]`);
    /// backend `candle` takes `cuda` and `cpu`.
    pub execution_providers: Option<Vec<String>>,
    /// Fail at load when the first provider cannot be used, instead of falling back.
    #[serde(default)]
    pub require_first_provider: bool,
    /// Inputs are truncated to this many tokens; default 256.
    pub max_tokens: Option<usize>,
    /// Threads for one forward pass; default 1.
    pub threads: Option<usize>,
    /// Most texts in one batch; default 16.
    pub max_batch: Option<usize>,
    /// Longest wait for a batch to fill, in milliseconds; default 2.
    pub max_wait_ms: Option<u64>,
    /// Queued texts beyond which calls are refused as overloaded; default 256.
    pub queue: Option<usize>,
    /// Longest a call waits for the model (queue and forward pass), in milliseconds, before
    /// it fails as overloaded; default none. Keep it below Envoy's ext_proc message_timeout.
    pub call_timeout_ms: Option<u64>,
    /// Embeddings cached by text; default 10000.
    pub cache_entries: Option<u64>,
}

/// The encoder's spelling corrector: a word-frequency dictionary gives the corrections, and words
/// in it, in the encoder's vocabulary or in a `keep` list are never changed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSpelling {
    /// Lines of `word count` (lower case), e.g. SymSpell's English frequency dictionary.
    pub dictionary: String,
    /// Files of words (one per line) that are right as they are: the technical terms of the
    /// traffic the router sees.
    #[serde(default)]
    pub keep: Vec<String>,
}
