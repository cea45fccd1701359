//! BERT sentence encoder on Candle: weights from `model.safetensors` (with a low-rank adapter
//! merged into them when one is configured), shape from `config.json`, mean pooling and L2
//! normalisation as sentence-transformers does. It runs on the first device
//! of the configured list that loads the model and answers a first forward pass: `cuda` (GPU 0,
//! in a build with the `cuda` feature) or `cpu`.

use super::tokenize::TextTokenizer;
use super::{Encoder, InferenceError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::collections::HashMap;
use std::path::Path;

/// The devices it runs on, named as `executionProviders` names them (`cuda` needs a build with
/// the `cuda` feature).
pub const DEVICES: &[&str] = &["cuda", "cpu"];

/// The Candle encoder.
pub struct CandleBert {
    model: BertModel,
    tokenizer: TextTokenizer,
    device: Device,
    described: String,
}

fn load_error(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Load(e.to_string())
}

fn run_error(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Run(e.to_string())
}

impl CandleBert {
    /// Loads `config.json` and `model.safetensors` from `dir`, with `adapter` merged in, onto
    /// the first of `devices` (`cuda`, `cpu`) that takes it; with `require_first`, a first
    /// device that cannot is an error instead of a fallback.
    pub fn load(
        dir: &Path,
        adapter: Option<&Path>,
        tokenizer: TextTokenizer,
        devices: &[String],
        require_first: bool,
    ) -> Result<Self, InferenceError> {
        let config_path = dir.join("config.json");
        let config: Config = serde_json::from_slice(
            &std::fs::read(&config_path)
                .map_err(|e| load_error(format!("{}: {e}", config_path.display())))?,
        )
        .map_err(|e| load_error(format!("{}: {e}", config_path.display())))?;
        let weights_path = dir.join("model.safetensors");
        let bytes = std::fs::read(&weights_path)
            .map_err(|e| load_error(format!("{}: {e}", weights_path.display())))?;
        let weights = match adapter {
            None => Weights::File(bytes),
            Some(adapter) => Weights::Merged(merged(&bytes, adapter).map_err(load_error)?),
        };
        let mut skipped = Vec::new();
        for (i, name) in devices.iter().enumerate() {
            match on_device(name, &config, &weights, &tokenizer) {
                Ok((model, device)) => {
                    let mut described = format!("candle {name}");
                    if let Some(adapter) = adapter.and_then(Path::file_name) {
                        described.push_str(&format!(" + {}", adapter.to_string_lossy()));
                    }
                    if !skipped.is_empty() {
                        described.push_str(&format!(" ({})", skipped.join("; ")));
                    }
                    return Ok(Self {
                        model,
                        tokenizer,
                        device,
                        described,
                    });
                }
                Err(reason) => {
                    skipped.push(super::unavailable(name, &reason, i == 0 && require_first)?);
                }
            }
        }
        Err(load_error(format!(
            "no candle device could load {}: {}",
            weights_path.display(),
            skipped.join("; ")
        )))
    }
}

/// The weights a model is built from: the file as read, or tensors with an adapter merged in.
enum Weights {
    File(Vec<u8>),
    Merged(HashMap<String, Tensor>),
}

/// The tensors of the encoder file `bytes` with the adapter at `path` merged in.
fn merged(bytes: &[u8], path: &Path) -> Result<HashMap<String, Tensor>, String> {
    let mut tensors =
        candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| e.to_string())?;
    super::merge_adapter(path, &mut tensors, &super::weights_sha256(bytes))?;
    Ok(tensors)
}

/// The model on device `name`. A GPU is checked with one forward pass, so one that registers
/// but cannot run the kernels fails here rather than on the first request.
fn on_device(
    name: &str,
    config: &Config,
    weights: &Weights,
    tokenizer: &TextTokenizer,
) -> Result<(BertModel, Device), String> {
    let device = match name {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0).map_err(|e| e.to_string())?,
        other => {
            return Err(format!(
                "candle runs on {}, not {other}",
                DEVICES.join(" or ")
            ))
        }
    };
    let vb = match weights {
        Weights::File(bytes) => VarBuilder::from_slice_safetensors(bytes, DType::F32, &device)
            .map_err(|e| e.to_string())?,
        Weights::Merged(tensors) => VarBuilder::from_tensors(tensors.clone(), DType::F32, &device),
    };
    let model = BertModel::load(vb, config).map_err(|e| e.to_string())?;
    if !device.is_cpu() {
        forward(&model, tokenizer, &device, &["mom-router device check"])
            .map_err(|e| e.to_string())?;
    }
    Ok((model, device))
}

/// Pooled embeddings of `texts`.
fn forward(
    model: &BertModel,
    tokenizer: &TextTokenizer,
    device: &Device,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, InferenceError> {
    let batch = tokenizer.batch(texts)?;
    let shape = (batch.batch, batch.tokens);
    let ids = Tensor::from_vec(batch.ids.clone(), shape, device).map_err(run_error)?;
    let type_ids = Tensor::from_vec(batch.type_ids.clone(), shape, device).map_err(run_error)?;
    let mask = Tensor::from_vec(batch.mask.clone(), shape, device).map_err(run_error)?;
    let hidden = model
        .forward(&ids, &type_ids, Some(&mask))
        .map_err(run_error)?;
    let dims = hidden.dim(2).map_err(run_error)?;
    let flat: Vec<f32> = hidden
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .map_err(run_error)?;
    batch.pool(&flat, dims)
}

impl Encoder for CandleBert {
    fn encode(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        forward(&self.model, &self.tokenizer, &self.device, texts)
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}
