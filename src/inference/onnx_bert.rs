//! BERT sentence encoder on ONNX Runtime (see [`super::onnx_session`] for how the runtime and
//! the execution provider are chosen).

use super::onnx_adapter::adapted_model;
use super::onnx_lookup::dequantize_after_lookup;
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
        let patched = model_bytes(model, adapter).map_err(InferenceError::Load)?;
        let (session, mut described) = open_session(
            model,
            library,
            providers,
            require_first,
            threads,
            patched.as_deref(),
        )?;
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

/// The bytes ONNX Runtime opens in place of the file `model`: with `adapter` applied and each int8
/// table dequantized after its lookup ([`dequantize_after_lookup`]); `None` when the file can be
/// opened as it is.
fn model_bytes(model: &Path, adapter: Option<&Path>) -> Result<Option<Bytes>, String> {
    let read = match adapter {
        Some(adapter) => adapted_model(model, adapter)?,
        None => std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?,
    };
    let read = Bytes::from(read);
    match dequantize_after_lookup(&read).map_err(|e| format!("{}: {e}", model.display()))? {
        Some(rewritten) => Ok(Some(Bytes::from(rewritten))),
        None if adapter.is_some() => Ok(Some(read)),
        None => Ok(None),
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
