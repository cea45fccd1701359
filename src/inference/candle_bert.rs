//! BERT sentence encoder on Candle (CPU): weights from `model.safetensors`, shape from
//! `config.json`, mean pooling and L2 normalisation as sentence-transformers does.

use super::tokenize::TextTokenizer;
use super::{Encoder, InferenceError};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::Path;

/// The Candle encoder.
pub struct CandleBert {
    model: BertModel,
    tokenizer: TextTokenizer,
    device: Device,
}

fn load_error(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Load(e.to_string())
}

fn run_error(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Run(e.to_string())
}

impl CandleBert {
    /// Loads `config.json` and `model.safetensors` from `dir`.
    pub fn load(dir: &Path, tokenizer: TextTokenizer) -> Result<Self, InferenceError> {
        let device = Device::Cpu;
        let config_path = dir.join("config.json");
        let config: Config = serde_json::from_slice(
            &std::fs::read(&config_path)
                .map_err(|e| load_error(format!("{}: {e}", config_path.display())))?,
        )
        .map_err(|e| load_error(format!("{}: {e}", config_path.display())))?;
        let weights_path = dir.join("model.safetensors");
        let weights = std::fs::read(&weights_path)
            .map_err(|e| load_error(format!("{}: {e}", weights_path.display())))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(load_error)?;
        let model = BertModel::load(vb, &config).map_err(load_error)?;
        Ok(Self {
            model,
            tokenizer,
            device,
        })
    }
}

impl Encoder for CandleBert {
    fn encode(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let batch = self.tokenizer.batch(texts)?;
        let shape = (batch.batch, batch.tokens);
        let ids = Tensor::from_vec(batch.ids.clone(), shape, &self.device).map_err(run_error)?;
        let type_ids =
            Tensor::from_vec(batch.type_ids.clone(), shape, &self.device).map_err(run_error)?;
        let mask = Tensor::from_vec(batch.mask.clone(), shape, &self.device).map_err(run_error)?;
        let hidden = self
            .model
            .forward(&ids, &type_ids, Some(&mask))
            .map_err(run_error)?;
        let dims = hidden.dim(2).map_err(run_error)?;
        let flat: Vec<f32> = hidden
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .map_err(run_error)?;
        batch.pool(&flat, dims)
    }

    fn describe(&self) -> String {
        "candle cpu".to_owned()
    }
}
