//! An on-disk cache of training embeddings, so refitting a head (other settings, another
//! shape) does not re-embed the data. One safetensors file: tensor `vectors` (`[n, dims]`) and
//! metadata `keys` (the SHA-256 of each text) and `probe` (the encoder's probe embedding, so a
//! different encoder never reads another's vectors).

use crate::config::hex_sha256;
use crate::inference::{f32s_from_le, f32s_to_le};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

/// Cached vectors by text hash, for one encoder.
#[derive(Debug, Default)]
pub struct EmbeddingCache {
    probe: String,
    vectors: HashMap<String, Vec<f32>>,
}

fn key(text: &str) -> String {
    hex_sha256(text.as_bytes())
}

fn probe_key(probe: &[f32]) -> String {
    hex_sha256(&f32s_to_le(probe))
}

impl EmbeddingCache {
    /// Reads `path` if it exists and was written for the encoder whose probe embedding is
    /// `probe`; otherwise starts empty.
    pub fn open(path: &Path, probe: &[f32]) -> Self {
        let probe = probe_key(probe);
        let read = || -> Option<HashMap<String, Vec<f32>>> {
            let bytes = std::fs::read(path).ok()?;
            let (_, metadata) = SafeTensors::read_metadata(&bytes).ok()?;
            let info = metadata.metadata().clone()?;
            if info.get("probe")? != &probe {
                return None;
            }
            let keys: Vec<String> = serde_json::from_str(info.get("keys")?).ok()?;
            let tensors = SafeTensors::deserialize(&bytes).ok()?;
            let view = tensors.tensor("vectors").ok()?;
            let dims = *view.shape().get(1)?;
            let values = f32s_from_le(view.data());
            Some(
                keys.into_iter()
                    .zip(values.chunks_exact(dims).map(<[f32]>::to_vec))
                    .collect(),
            )
        };
        Self {
            vectors: read().unwrap_or_default(),
            probe,
        }
    }

    /// The cached vector of `text`.
    pub fn get(&self, text: &str) -> Option<&Vec<f32>> {
        self.vectors.get(&key(text))
    }

    /// Remembers the vector of `text`.
    pub fn insert(&mut self, text: &str, vector: Vec<f32>) {
        self.vectors.insert(key(text), vector);
    }

    /// Writes the cache to `path`.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut keys: Vec<&String> = self.vectors.keys().collect();
        keys.sort();
        let dims = keys.first().map_or(0, |k| self.vectors[*k].len());
        let data: Vec<u8> = keys
            .iter()
            .flat_map(|k| f32s_to_le(&self.vectors[*k]))
            .collect();
        let view = TensorView::new(Dtype::F32, vec![keys.len(), dims], &data)?;
        let info: HashMap<String, String> = [
            ("probe".to_owned(), self.probe.clone()),
            ("keys".to_owned(), serde_json::to_string(&keys)?),
        ]
        .into_iter()
        .collect();
        safetensors::serialize_to_file([("vectors", view)], Some(info), path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_ignores_another_encoders_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.safetensors");
        let mut cache = EmbeddingCache::open(&path, &[1.0, 0.0]);
        cache.insert("a", vec![0.5, 0.25]);
        cache.insert("b", vec![1.0, 2.0]);
        cache.save(&path).unwrap();
        let again = EmbeddingCache::open(&path, &[1.0, 0.0]);
        assert_eq!(again.get("b"), Some(&vec![1.0, 2.0]));
        assert_eq!(again.get("c"), None);
        assert_eq!(EmbeddingCache::open(&path, &[0.0, 1.0]).get("a"), None);
    }
}
