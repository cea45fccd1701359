//! Tokenisation shared by both backends: truncation to the configured window and padding to
//! the longest text of the batch. Only a text's head is tokenized ([`BYTES_PER_TOKEN`] bytes
//! per token of the window): the window reads no further, and a 1 MiB message would otherwise
//! cost tens of megabytes and milliseconds to tokenize whole before truncation.

use super::{mean_pool, InferenceError};
use std::path::Path;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Bytes of text tokenized per token of the window. Ordinary text spends 3–6 bytes a token;
/// only a head mostly of whitespace or of words longer than this can hold fewer tokens than
/// the window, and then the window reads that head alone.
pub const BYTES_PER_TOKEN: usize = 64;

/// A loaded tokenizer with its window.
pub struct TextTokenizer {
    inner: Tokenizer,
    max_bytes: usize,
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
        Ok(Self {
            inner,
            max_bytes: max_tokens.saturating_mul(BYTES_PER_TOKEN),
        })
    }

    /// The vocabulary's whole lower-case words (no word pieces, no marks), in no order.
    pub fn whole_words(&self) -> Vec<String> {
        let mut vocabulary = self.inner.get_vocab(false);
        vocabulary.retain(|w, _| w.chars().all(|c| c.is_ascii_lowercase()));
        vocabulary.into_keys().collect()
    }

    /// Tokenises a batch.
    pub fn batch(&self, texts: &[&str]) -> Result<TokenBatch, InferenceError> {
        let heads: Vec<&str> = texts.iter().map(|t| head_of(t, self.max_bytes)).collect();
        let encodings = self
            .inner
            .encode_batch(heads, true)
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

/// The first `max` bytes of `text`, cut back to a character boundary and then to the last
/// whitespace (so no word is cut into other tokens) when there is one in the second half.
fn head_of(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind(char::is_whitespace) {
        Some(space) if space >= end / 2 => &head[..space],
        _ => head,
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

#[cfg(test)]
mod tests {
    use super::head_of;

    #[test]
    fn a_long_text_is_cut_at_a_boundary_before_a_word() {
        assert_eq!(head_of("short", 64), "short");
        let text = "word ".repeat(100);
        let head = head_of(&text, 64);
        assert!(head.len() <= 64 && text.starts_with(head));
        assert!(head.ends_with("word"), "{head:?}");
        // Multi-byte characters are never cut; a head without spaces is cut where it must be.
        let wide = "ß".repeat(100);
        let head = head_of(&wide, 65);
        assert_eq!(head.len(), 64);
        assert!(wide.starts_with(head));
    }
}
