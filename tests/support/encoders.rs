//! The real all-MiniLM-L6-v2 encoders the inference tests load (from `.cache/`, which
//! `./scripts/fetch-models.sh` fills and the test command runs first), and the PyTorch reference
//! embeddings they are checked against.

use mom_router::inference::{Backend, BatchSettings, EncoderSpec};
use std::path::PathBuf;
use std::time::Duration;

/// `.cache/PATH`, which must exist.
pub fn cache(path: &str) -> PathBuf {
    let full = super::repo().join(".cache").join(path);
    assert!(
        full.exists(),
        "{} is missing: run ./scripts/fetch-models.sh (./scripts/test.sh does)",
        full.display()
    );
    full
}

/// Batching with no embedding cache.
pub fn settings(max_batch: usize, max_wait_ms: u64, queue: usize) -> BatchSettings {
    BatchSettings {
        max_batch,
        max_wait: Duration::from_millis(max_wait_ms),
        queue,
        cache_entries: 0,
    }
}

/// The int8 ONNX export on the runtime library `runtime` (under `.cache/`), trying `providers`
/// in order.
pub fn onnx_on(runtime: &str, providers: &[&str], require_first: bool) -> EncoderSpec {
    EncoderSpec {
        backend: Backend::Onnx {
            model: cache("models/all-MiniLM-L6-v2-int8/model.onnx"),
            runtime_library: cache(runtime),
            providers: providers.iter().map(|p| (*p).to_owned()).collect(),
            require_first,
            adapter: None,
        },
        model_dir: cache("models/all-MiniLM-L6-v2"),
        max_tokens: 256,
        threads: 1,
        batch: settings(8, 1, 64),
        spelling: None,
    }
}

/// The texts the reference embeddings are of.
pub const TEXTS: [&str; 3] = [
    "This is a test sentence.",
    "How do I reverse a linked list in Rust?",
    "The weather in Lisbon is sunny today.",
];

/// [`TEXTS`] as owned strings.
pub fn texts() -> Vec<String> {
    TEXTS.iter().map(|t| (*t).to_owned()).collect()
}

/// The reference embeddings of [`TEXTS`]: all-MiniLM-L6-v2 through PyTorch
/// sentence-transformers on the same model files, written by
/// `benches/reference_sentence_transformers.py --golden` (its `produced_by` field says how).
pub fn golden() -> Vec<Vec<f32>> {
    let path = super::repo().join("tests/fixtures/golden/minilm-sentence-transformers.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let texts: Vec<&str> = doc["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(texts, TEXTS);
    doc["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}
