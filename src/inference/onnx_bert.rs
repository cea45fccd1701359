//! BERT sentence encoder on ONNX Runtime (see [`super::onnx_session`] for how the runtime and
//! the execution provider are chosen).

use super::onnx_adapter::adapted_model;
use super::onnx_session::open_session;
use super::tokenize::TextTokenizer;
use super::{Encoder, InferenceError};
use bytes::Bytes;
use ort::session::Session;
use ort::value::Tensor;
use std::path::Path;

/// The ONNX Runtime encoder.
pub struct OnnxBert {
    session: Session,
    tokenizer: TextTokenizer,
    described: String,
}

impl OnnxBert {
    /// Loads `model`, with `adapter` applied, with the first execution provider that registers.
    pub fn load(
        model: &Path,
        adapter: Option<&Path>,
        library: &Path,
        providers: &[String],
        require_first: bool,
        threads: usize,
        tokenizer: TextTokenizer,
    ) -> Result<Self, InferenceError> {
        let patched = adapter
            .map(|adapter| adapted_model(model, adapter).map(Bytes::from))
            .transpose()
            .map_err(InferenceError::Load)?;
        let (session, mut described) =
            open_session(model, library, providers, require_first, threads, patched)?;
        if let Some(adapter) = adapter.and_then(Path::file_name) {
            described.push_str(&format!(" + {}", adapter.to_string_lossy()));
        }
        Ok(Self {
            session,
            tokenizer,
            described,
        })
    }
}

impl Encoder for OnnxBert {
    fn encode(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let batch = self.tokenizer.batch(texts)?;
        let shape = [batch.batch, batch.tokens];
        let run = |e: ort::Error| InferenceError::Run(e.to_string());
        let ids = Tensor::from_array((shape, batch.ids.clone())).map_err(run)?;
        let mask = Tensor::from_array((shape, batch.mask.clone())).map_err(run)?;
        let types = Tensor::from_array((shape, batch.type_ids.clone())).map_err(run)?;
        let outputs = self
            .session
            .run(ort::inputs![
                "input_ids" => ids,
                "attention_mask" => mask,
                "token_type_ids" => types,
            ])
            .map_err(run)?;
        let (out_shape, hidden) = outputs[0].try_extract_tensor::<f32>().map_err(run)?;
        let dims = out_shape.last().copied().unwrap_or_default() as usize;
        batch.pool(hidden, dims)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}
