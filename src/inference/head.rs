//! Router-owned classification heads: a few dense layers (ReLU between them, softmax at the end)
//! applied to the shared sentence embedding. A head costs microseconds, so it runs inline on the
//! caller's thread; the encoder forward it reads is the expensive part and is shared.
//!
//! File format (safetensors): tensors `layers.N.weight` (`[out, in]`, f32), `layers.N.bias`
//! (`[out]`) and `probe` (the training encoder's embedding of [`PROBE_TEXT`]); metadata `format`
//! (`mom-router-head/1`), `task`, `labels` (JSON array), `encoder` (what produced the training
//! embeddings) and `encoderSha256` (its weights file).

use super::head_file::{write_f32_tensors, HeadFile};
use std::collections::HashMap;
use std::path::Path;

/// Format tag written into every head file.
pub const HEAD_FORMAT: &str = "mom-router-head/1";

/// The sentence whose embedding identifies the encoder a head was trained on: a head is usable
/// with any encoder that embeds it (nearly) the same way, e.g. the same model in fp32 on Candle
/// or int8 on ONNX Runtime.
pub const PROBE_TEXT: &str =
    "mom-router probe: which encoder produced the embeddings this head was trained on?";

/// Why a head cannot be loaded or saved.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct HeadError {
    path: String,
    message: String,
}

impl HeadError {
    pub(crate) fn new(path: &Path, message: impl Into<String>) -> Self {
        Self {
            path: path.display().to_string(),
            message: message.into(),
        }
    }
}

/// One dense layer, row-major `[out, in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Weights, `outputs × inputs`.
    pub weight: Vec<f32>,
    /// Bias, one per output.
    pub bias: Vec<f32>,
    /// Inputs.
    pub inputs: usize,
}

impl Dense {
    pub(crate) fn outputs(&self) -> usize {
        self.bias.len()
    }

    pub(crate) fn apply(&self, x: &[f32]) -> Vec<f32> {
        self.weight
            .chunks_exact(self.inputs)
            .zip(&self.bias)
            .map(|(row, b)| row.iter().zip(x).map(|(w, v)| w * v).sum::<f32>() + b)
            .collect()
    }
}

/// A trained head with its label set and the identity of its encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// What it classifies, e.g. `domain`.
    pub task: String,
    /// Output labels, in logit order.
    pub labels: Vec<String>,
    /// Layers, input first; ReLU between layers.
    pub layers: Vec<Dense>,
    /// The training encoder's embedding of [`PROBE_TEXT`].
    pub probe: Vec<f32>,
    /// What produced the training embeddings (backend and provider).
    pub encoder: String,
    /// SHA-256 of the training encoder's weights file.
    pub encoder_sha256: String,
}

impl Head {
    /// Input width (the embedding size).
    pub fn dims(&self) -> usize {
        self.layers.first().map_or(0, |l| l.inputs)
    }

    /// The last layer's outputs for one embedding (before the softmax).
    pub fn logits(&self, embedding: &[f32]) -> Vec<f32> {
        let mut x = embedding.to_vec();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.apply(&x);
            if i + 1 < self.layers.len() {
                x.iter_mut().for_each(|v| *v = v.max(0.0));
            }
        }
        x
    }

    /// Class probabilities for one embedding, in [`Head::labels`] order.
    pub fn probabilities(&self, embedding: &[f32]) -> Vec<f32> {
        let mut x = self.logits(embedding);
        softmax(&mut x);
        x
    }

    /// Divides the head's logits by `temperature` for good, by scaling its last layer: the
    /// file format and the cost of a forward stay as they are.
    pub fn temper(&mut self, temperature: f64) {
        if let Some(last) = self.layers.last_mut() {
            let scale = (1.0 / temperature) as f32;
            last.weight.iter_mut().for_each(|w| *w *= scale);
            last.bias.iter_mut().for_each(|b| *b *= scale);
        }
    }

    /// The most probable label and its probability.
    pub fn predict(&self, embedding: &[f32]) -> (usize, f32) {
        argmax(&self.probabilities(embedding))
    }

    /// Reads a head file and checks that its shapes fit together.
    pub fn load(path: &Path) -> Result<Self, HeadError> {
        let bytes = std::fs::read(path).map_err(|e| HeadError::new(path, e.to_string()))?;
        let file = HeadFile::parse(path, &bytes, "head")?;
        let bad = |m: String| file.error(m);
        let format = file.field("format")?;
        if format != HEAD_FORMAT {
            return Err(bad(format!(
                "head format {format:?} is not {HEAD_FORMAT:?}; retrain it with `mom-router train`"
            )));
        }
        let labels: Vec<String> = file.json("labels")?;
        let mut layers = Vec::new();
        while file.has(&format!("layers.{}.weight", layers.len())) {
            let i = layers.len();
            let (shape, weight) = file.f32(&format!("layers.{i}.weight"))?;
            let (bias_shape, bias) = file.f32(&format!("layers.{i}.bias"))?;
            let [outputs, inputs] = shape[..] else {
                return Err(bad(format!("layers.{i}.weight must be 2-D, is {shape:?}")));
            };
            if bias_shape != [outputs] {
                return Err(bad(format!(
                    "layers.{i}.bias has shape {bias_shape:?}, expected [{outputs}]"
                )));
            }
            if let Some(previous) = layers.last().map(Dense::outputs) {
                if previous != inputs {
                    return Err(bad(format!(
                        "layers.{i} takes {inputs} inputs but layers.{} gives {previous}",
                        i - 1
                    )));
                }
            }
            layers.push(Dense {
                weight,
                bias,
                inputs,
            });
        }
        let Some(last) = layers.last() else {
            return Err(bad("the head has no layers".to_owned()));
        };
        if last.outputs() != labels.len() || labels.len() < 2 {
            return Err(bad(format!(
                "{} labels for {} outputs; a head needs one label per output and at least two",
                labels.len(),
                last.outputs()
            )));
        }
        let (_, probe) = file.f32("probe")?;
        let head = Self {
            task: file.field("task")?,
            labels,
            probe,
            encoder: file.field("encoder")?,
            encoder_sha256: file.field("encoderSha256")?,
            layers,
        };
        if head.probe.len() != head.dims() {
            return Err(bad(format!(
                "probe has {} values for a {}-wide input",
                head.probe.len(),
                head.dims()
            )));
        }
        Ok(head)
    }

    /// Writes the head file; `extra` adds metadata (e.g. the training report).
    pub fn save(&self, path: &Path, extra: &[(&str, String)]) -> Result<(), HeadError> {
        let mut buffers: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (i, layer) in self.layers.iter().enumerate() {
            buffers.push((
                format!("layers.{i}.weight"),
                vec![layer.outputs(), layer.inputs],
                f32s_to_le(&layer.weight),
            ));
            buffers.push((
                format!("layers.{i}.bias"),
                vec![layer.outputs()],
                f32s_to_le(&layer.bias),
            ));
        }
        buffers.push((
            "probe".to_owned(),
            vec![self.probe.len()],
            f32s_to_le(&self.probe),
        ));
        let labels =
            serde_json::to_string(&self.labels).map_err(|e| HeadError::new(path, e.to_string()))?;
        let mut info: HashMap<String, String> = [
            ("format", HEAD_FORMAT.to_owned()),
            ("task", self.task.clone()),
            ("labels", labels),
            ("encoder", self.encoder.clone()),
            ("encoderSha256", self.encoder_sha256.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        info.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        write_f32_tensors(path, &buffers, info)
    }
}

/// Little-endian bytes as f32 values (the safetensors layout); a trailing partial value is
/// ignored.
pub fn f32s_from_le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// f32 values as little-endian bytes (the safetensors layout).
pub fn f32s_to_le(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The index and value of the largest element (the first on ties; `(0, f32::MIN)` when empty).
pub fn argmax(values: &[f32]) -> (usize, f32) {
    values.iter().enumerate().fold(
        (0, f32::MIN),
        |best, (i, &v)| if v > best.1 { (i, v) } else { best },
    )
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let top = x.iter().copied().fold(f32::MIN, f32::max);
    x.iter_mut().for_each(|v| *v = (*v - top).exp());
    let total: f32 = x.iter().sum();
    if total > 0.0 {
        x.iter_mut().for_each(|v| *v /= total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Head {
        Head {
            task: "toy".to_owned(),
            labels: vec!["a".to_owned(), "b".to_owned()],
            layers: vec![
                Dense {
                    weight: vec![1.0, 0.0, 0.0, 1.0, -1.0, -1.0],
                    bias: vec![0.0, 0.0, 0.5],
                    inputs: 2,
                },
                Dense {
                    weight: vec![2.0, 0.0, 0.0, 0.0, 2.0, 1.0],
                    bias: vec![0.0, 0.1],
                    inputs: 3,
                },
            ],
            probe: vec![0.6, 0.8],
            encoder: "test".to_owned(),
            encoder_sha256: "00".to_owned(),
        }
    }

    #[test]
    fn relu_between_layers_and_softmax_at_the_end() {
        let head = tiny();
        // x = [1, 0]: hidden = relu([1, 0, -0.5]) = [1, 0, 0]; logits = [2, 0.1].
        let p = head.probabilities(&[1.0, 0.0]);
        let expected = 1.0 / (1.0 + (0.1f32 - 2.0).exp());
        assert!((p[0] - expected).abs() < 1e-6, "{p:?}");
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(head.predict(&[0.0, 1.0]).0, 1);
    }

    #[test]
    fn tempering_divides_the_logits() {
        let mut head = tiny();
        let before = head.logits(&[1.0, 0.3]);
        head.temper(2.0);
        let after = head.logits(&[1.0, 0.3]);
        for (b, a) in before.iter().zip(&after) {
            assert!((b / 2.0 - a).abs() < 1e-6, "{before:?} {after:?}");
        }
    }

    #[test]
    fn saves_and_loads_the_same_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toy.safetensors");
        tiny().save(&path, &[("report", "{}".to_owned())]).unwrap();
        assert_eq!(Head::load(&path).unwrap(), tiny());
    }

    #[test]
    fn refuses_a_file_that_is_not_a_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        std::fs::write(&path, b"not safetensors").unwrap();
        assert!(Head::load(&path).is_err());
        let mut broken = tiny();
        broken.labels.pop();
        broken.save(&path, &[]).unwrap();
        let error = Head::load(&path).unwrap_err().to_string();
        assert!(error.contains("1 labels for 2 outputs"), "{error}");
    }
}
