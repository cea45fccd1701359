//! Tokenisation shared by both backends: truncation to the configured window and padding to
//! the longest text of the batch.

use super::{mean_pool, InferenceError};
use std::path::Path;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// A loaded tokenizer with its window.
pub struct TextTokenizer {
    inner: Tokenizer,
}

/// A padded batch, row-major `[batch, tokens]`.
pub struct TokenBatch {
    /// Token ids.
    pub ids: Vec<i64>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Vec<i64>,
    /// Segment ids (all 0).
    pub type_ids: Vec<i64>,
    /// Rows.
    pub batch: usize,
    /// Columns.
    pub tokens: usize,
}

impl TextTokenizer {
    /// Loads `tokenizer.json`, truncating to `max_tokens` (the shipped file pads to 128 by default;
    /// that is replaced by padding to the longest text in the batch).
    pub fn load(path: &Path, max_tokens: usize) -> Result<Self, InferenceError> {
        let mut inner = Tokenizer::from_file(path)
            .map_err(|e| InferenceError::Load(format!("{}: {e}", path.display())))?;
        inner
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| InferenceError::Load(e.to_string()))?;
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        Ok(Self { inner })
    }

    /// Tokenises a batch.
    pub fn batch(&self, texts: &[&str]) -> Result<TokenBatch, InferenceError> {
        let encodings = self
            .inner
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| InferenceError::Run(format!("tokenizer: {e}")))?;
        let tokens = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut batch = TokenBatch {
            ids: Vec::with_capacity(texts.len() * tokens),
            mask: Vec::with_capacity(texts.len() * tokens),
            type_ids: vec![0; texts.len() * tokens],
            batch: texts.len(),
            tokens,
        };
        for encoding in &encodings {
            batch
                .ids
                .extend(encoding.get_ids().iter().map(|&i| i64::from(i)));
            batch
                .mask
                .extend(encoding.get_attention_mask().iter().map(|&m| i64::from(m)));
        }
        Ok(batch)
    }
}

impl TokenBatch {
    /// Mean-pools the encoder's output (`[batch, tokens, dims]`, row-major) over each row's real
    /// tokens and L2-normalises: one sentence embedding per text.
    pub fn pool(&self, hidden: &[f32], dims: usize) -> Result<Vec<Vec<f32>>, InferenceError> {
        let row = self.tokens * dims;
        if dims == 0 || hidden.len() != self.batch * row {
            return Err(InferenceError::Run(format!(
                "encoder output holds {} values, expected {} x {} x {dims}",
                hidden.len(),
                self.batch,
                self.tokens
            )));
        }
        Ok((0..self.batch)
            .map(|i| {
                mean_pool(
                    &hidden[i * row..(i + 1) * row],
                    &self.mask[i * self.tokens..(i + 1) * self.tokens],
                    self.tokens,
                    dims,
                )
            })
            .collect())
    }
}
