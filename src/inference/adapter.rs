//! A low-rank adapter of the sentence encoder, as `mom-router finetune --rank` writes it: a
//! small safetensors file applied to the encoder's weights when they load (merged into Candle's
//! tensors here; patched into an ONNX model by [`super::onnx_adapter`]), so the adapted encoder
//! costs what the original costs. Each tensor either replaces the encoder's
//! tensor of the same name and shape (a bias, a layer norm), or, as a pair `NAME.down` (rank ×
//! in) and `NAME.up` (out × rank), adds `scale · up · down` to weight `NAME` (out × in), with
//! `NAME.absmax` (out), the largest |value| of each row of the original weight, by which an
//! int8 copy of the encoder is recognised ([`super::onnx_adapter`]). The metadata names the
//! format, the scale and the SHA-256 of the encoder weights it was trained on; another encoder
//! is refused.

use super::head::HeadError;
use super::head_file::{write_f32_tensors, HeadFile};
use candle_core::{Device, Tensor};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// The `format` an adapter file names.
pub const ADAPTER_FORMAT: &str = "mom-router-adapter/1";

/// The hex SHA-256 of `bytes`.
pub fn weights_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// One tensor of an adapter: name, shape, values.
pub struct AdapterTensor {
    /// The encoder tensor it replaces, or `NAME.down` / `NAME.up` of weight `NAME`.
    pub name: String,
    /// Its dimensions.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub values: Vec<f32>,
}

impl AdapterTensor {
    /// A tensor called `name` of this shape and these values.
    pub fn new(name: impl Into<String>, shape: Vec<usize>, values: Vec<f32>) -> Self {
        Self {
            name: name.into(),
            shape,
            values,
        }
    }
}

/// Writes an adapter for the encoder whose weights hash to `base_sha256`.
pub fn write_adapter(
    path: &Path,
    tensors: &[AdapterTensor],
    scale: f64,
    base_sha256: &str,
) -> Result<(), String> {
    let buffers: Vec<_> = tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.shape.clone(),
                super::f32s_to_le(&t.values),
            )
        })
        .collect();
    let info = HashMap::from([
        ("format".to_owned(), ADAPTER_FORMAT.to_owned()),
        ("scale".to_owned(), scale.to_string()),
        ("baseSha256".to_owned(), base_sha256.to_owned()),
    ]);
    write_f32_tensors(path, &buffers, info).map_err(|e| e.to_string())
}

/// An adapter file, read and checked for its format.
pub(crate) struct Adapter {
    /// The file, for errors.
    pub path: std::path::PathBuf,
    /// What each low-rank product is multiplied by.
    pub scale: f64,
    /// The SHA-256 of the encoder weights file it was trained on.
    pub base_sha256: String,
    /// What it changes, in the order of the tensors' names.
    pub changes: Vec<Change>,
}

/// One change an adapter makes to the encoder.
pub(crate) enum Change {
    /// Adds `scale · up · down` to weight `weight` (out × in).
    LowRank {
        weight: String,
        up: AdapterTensor,
        down: AdapterTensor,
        /// `NAME.absmax`: the largest |value| of each row of the base weight, when recorded; an
        /// int8 copy of the encoder (one scale per output channel) must reproduce it.
        absmax: Option<Vec<f32>>,
    },
    /// Replaces the encoder's tensor of the same name and shape.
    Replace(AdapterTensor),
}

impl Adapter {
    /// An error about this adapter.
    pub fn error(&self, message: impl std::fmt::Display) -> String {
        format!("adapter {}: {message}", self.path.display())
    }
}

/// Reads the adapter at `path`.
pub(crate) fn read_adapter(path: &Path) -> Result<Adapter, String> {
    let at = |e: &dyn std::fmt::Display| format!("adapter {e}");
    let bytes = std::fs::read(path).map_err(|e| at(&HeadError::new(path, e.to_string())))?;
    let file = HeadFile::parse(path, &bytes, "adapter").map_err(|e| at(&e))?;
    let format = file.field("format").map_err(|e| at(&e))?;
    if format != ADAPTER_FORMAT {
        return Err(at(
            &file.error(format!("format {format:?}, expected {ADAPTER_FORMAT}"))
        ));
    }
    let scale = file.field("scale").map_err(|e| at(&e))?;
    let scale: f64 = scale
        .parse()
        .map_err(|_| at(&file.error(format!("scale {scale:?} is not a number"))))?;
    let mut tensors = HashMap::new();
    for name in file.names() {
        let (shape, values) = file.f32(&name).map_err(|e| at(&e))?;
        tensors.insert(name.clone(), AdapterTensor::new(name, shape, values));
    }
    // Each `NAME.down` takes its `NAME.up` and `NAME.absmax`; what is left replaces a tensor.
    let mut downs: Vec<String> = tensors
        .keys()
        .filter_map(|name| name.strip_suffix(".down").map(str::to_owned))
        .collect();
    downs.sort();
    let mut changes = Vec::new();
    for weight in downs {
        let take = |tensors: &mut HashMap<String, AdapterTensor>, part: &str| {
            tensors.remove(&format!("{weight}.{part}"))
        };
        let down = take(&mut tensors, "down");
        let up = take(&mut tensors, "up");
        let absmax = take(&mut tensors, "absmax").map(|t| t.values);
        let (Some(down), Some(up)) = (down, up) else {
            return Err(at(&file.error(format!("{weight}.down has no {weight}.up"))));
        };
        changes.push(Change::LowRank {
            weight,
            up,
            down,
            absmax,
        });
    }
    let mut rest: Vec<AdapterTensor> = tensors.into_values().collect();
    rest.sort_by(|a, b| a.name.cmp(&b.name));
    for tensor in rest {
        if tensor.name.ends_with(".up") || tensor.name.ends_with(".absmax") {
            return Err(at(
                &file.error(format!("{} has no matching .down", tensor.name))
            ));
        }
        changes.push(Change::Replace(tensor));
    }
    Ok(Adapter {
        path: path.to_owned(),
        scale,
        base_sha256: file.field("baseSha256").map_err(|e| at(&e))?,
        changes,
    })
}

/// Merges the adapter at `path` into `weights`, the tensors of the encoder file whose bytes
/// hash to `base_sha256`.
pub fn merge_adapter(
    path: &Path,
    weights: &mut HashMap<String, Tensor>,
    base_sha256: &str,
) -> Result<(), String> {
    let adapter = read_adapter(path)?;
    if adapter.base_sha256 != base_sha256 {
        return Err(adapter.error(format!(
            "trained on the encoder weights with SHA-256 {}, not these ({base_sha256})",
            adapter.base_sha256
        )));
    }
    let tensor = |t: &AdapterTensor| {
        Tensor::from_slice(&t.values, t.shape.as_slice(), &Device::Cpu)
            .map_err(|e| adapter.error(e))
    };
    for change in &adapter.changes {
        match change {
            Change::LowRank {
                weight, up, down, ..
            } => add_low_rank(weights, weight, &tensor(up)?, &tensor(down)?, adapter.scale)
                .map_err(|e| adapter.error(e))?,
            Change::Replace(replacement) => {
                let name = &replacement.name;
                let base = weights
                    .get(name)
                    .ok_or_else(|| adapter.error(format!("the encoder has no tensor {name}")))?;
                if base.dims() != replacement.shape.as_slice() {
                    return Err(adapter.error(format!(
                        "{name} is {:?}, the encoder's {:?}",
                        replacement.shape,
                        base.dims()
                    )));
                }
                weights.insert(name.clone(), tensor(replacement)?);
            }
        }
    }
    Ok(())
}

/// `weights[name] += scale · up · down`.
fn add_low_rank(
    weights: &mut HashMap<String, Tensor>,
    name: &str,
    up: &Tensor,
    down: &Tensor,
    scale: f64,
) -> Result<(), String> {
    let base = weights
        .get(name)
        .ok_or_else(|| format!("the encoder has no weight {name}"))?;
    let merged = up
        .matmul(down)
        .and_then(|update| {
            if update.dims() != base.dims() {
                return Err(candle_core::Error::Msg(format!(
                    "{name}'s update is {:?}, the weight {:?}",
                    update.dims(),
                    base.dims()
                )));
            }
            base.to_dtype(update.dtype())? + (update * scale)?
        })
        .map_err(|e| e.to_string())?;
    weights.insert(name.to_owned(), merged);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(values: &[f32], shape: (usize, usize)) -> Tensor {
        Tensor::from_slice(values, shape, &Device::Cpu).unwrap()
    }

    fn adapter(dir: &Path, tensors: &[AdapterTensor], base: &str) -> std::path::PathBuf {
        let path = dir.join("adapter.safetensors");
        write_adapter(&path, tensors, 0.5, base).unwrap();
        path
    }

    fn base() -> HashMap<String, Tensor> {
        HashMap::from([
            ("w".to_owned(), tensor(&[1.0, 0.0, 0.0, 1.0], (2, 2))),
            (
                "b".to_owned(),
                Tensor::from_slice(&[0.0f32, 0.0], 2, &Device::Cpu).unwrap(),
            ),
        ])
    }

    #[test]
    fn a_low_rank_pair_adds_its_scaled_product_and_other_tensors_replace() {
        let dir = tempfile::tempdir().unwrap();
        let path = adapter(
            dir.path(),
            &[
                AdapterTensor::new("w.down", vec![1, 2], vec![1.0, 2.0]),
                AdapterTensor::new("w.up", vec![2, 1], vec![2.0, -2.0]),
                AdapterTensor::new("b", vec![2], vec![0.25, -0.5]),
            ],
            "abc",
        );
        let mut weights = base();
        merge_adapter(&path, &mut weights, "abc").unwrap();
        // w + 0.5 · [[2], [-2]] · [[1, 2]] = [[1, 0], [0, 1]] + [[1, 2], [-1, -2]]
        let w: Vec<Vec<f32>> = weights["w"].to_vec2().unwrap();
        assert_eq!(w, vec![vec![2.0, 2.0], vec![-1.0, -1.0]]);
        assert_eq!(weights["b"].to_vec1::<f32>().unwrap(), vec![0.25, -0.5]);
    }

    #[test]
    fn another_encoder_a_stray_tensor_or_a_wrong_shape_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pair = |up: usize| {
            vec![
                AdapterTensor::new("w.down", vec![1, 2], vec![1.0, 2.0]),
                AdapterTensor::new("w.up", vec![up, 1], vec![1.0; up]),
            ]
        };
        let path = adapter(dir.path(), &pair(2), "abc");
        let error = merge_adapter(&path, &mut base(), "def").unwrap_err();
        assert!(error.contains("SHA-256 abc, not these (def)"), "{error}");

        let path = adapter(dir.path(), &pair(3), "abc");
        let error = merge_adapter(&path, &mut base(), "abc").unwrap_err();
        assert!(
            error.contains("w's update is [3, 2], the weight [2, 2]"),
            "{error}"
        );

        let stray = [AdapterTensor::new("x", vec![1], vec![1.0])];
        let path = adapter(dir.path(), &stray, "abc");
        let error = merge_adapter(&path, &mut base(), "abc").unwrap_err();
        assert!(error.contains("the encoder has no tensor x"), "{error}");

        let alone = [AdapterTensor::new("w.up", vec![2, 1], vec![1.0; 2])];
        let path = adapter(dir.path(), &alone, "abc");
        let error = merge_adapter(&path, &mut base(), "abc").unwrap_err();
        assert!(error.contains("w.up has no matching .down"), "{error}");
    }
}
