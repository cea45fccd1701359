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

use candle_core::{Device, Tensor};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
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

/// Writes an adapter for the encoder whose weights hash to `base_sha256`.
pub fn write_adapter(
    path: &Path,
    tensors: &[AdapterTensor],
    scale: f64,
    base_sha256: &str,
) -> Result<(), String> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| super::f32s_to_le(&t.values))
        .collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, b)| {
            TensorView::new(Dtype::F32, t.shape.clone(), b)
                .map(|view| (t.name.clone(), view))
                .map_err(|e| format!("{}: {e}", t.name))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let info = HashMap::from([
        ("format".to_owned(), ADAPTER_FORMAT.to_owned()),
        ("scale".to_owned(), scale.to_string()),
        ("baseSha256".to_owned(), base_sha256.to_owned()),
    ]);
    safetensors::serialize_to_file(views, Some(info), path)
        .map_err(|e| format!("{}: {e}", path.display()))
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
    let at = |e: &dyn std::fmt::Display| format!("adapter {}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| at(&e))?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| at(&e))?;
    let info = header.metadata().clone().unwrap_or_default();
    let field = |key: &str| info.get(key).map(String::as_str).unwrap_or_default();
    if field("format") != ADAPTER_FORMAT {
        return Err(at(&format!(
            "format {:?}, expected {ADAPTER_FORMAT}",
            field("format")
        )));
    }
    let scale: f64 = field("scale")
        .parse()
        .map_err(|_| at(&format!("scale {:?} is not a number", field("scale"))))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| at(&e))?;
    let mut tensors = HashMap::new();
    for (name, view) in file.tensors() {
        if view.dtype() != Dtype::F32 {
            return Err(at(&format!("{name} is {:?}, not F32", view.dtype())));
        }
        let values = super::f32s_from_le(view.data());
        let shape = view.shape().to_vec();
        tensors.insert(
            name.clone(),
            AdapterTensor {
                name,
                shape,
                values,
            },
        );
    }
    let mut names: Vec<String> = tensors.keys().cloned().collect();
    names.sort();
    let mut changes = Vec::new();
    for name in names {
        let Some(tensor) = tensors.remove(&name) else {
            continue;
        };
        if let Some(weight) = name.strip_suffix(".down") {
            let up = tensors
                .remove(&format!("{weight}.up"))
                .ok_or_else(|| at(&format!("{name} has no {weight}.up")))?;
            let absmax = tensors
                .remove(&format!("{weight}.absmax"))
                .map(|t| t.values);
            changes.push(Change::LowRank {
                weight: weight.to_owned(),
                up,
                down: tensor,
                absmax,
            });
        } else if let Some(weight) = name
            .strip_suffix(".up")
            .or_else(|| name.strip_suffix(".absmax"))
        {
            if !tensors.contains_key(&format!("{weight}.down")) {
                return Err(at(&format!("{name} has no matching .down")));
            }
            // Taken with its `.down`, which sorts after it.
            tensors.insert(name, tensor);
        } else {
            changes.push(Change::Replace(tensor));
        }
    }
    Ok(Adapter {
        path: path.to_owned(),
        scale,
        base_sha256: field("baseSha256").to_owned(),
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

    fn part(name: &str, shape: Vec<usize>, values: Vec<f32>) -> AdapterTensor {
        AdapterTensor {
            name: name.to_owned(),
            shape,
            values,
        }
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
                part("w.down", vec![1, 2], vec![1.0, 2.0]),
                part("w.up", vec![2, 1], vec![2.0, -2.0]),
                part("b", vec![2], vec![0.25, -0.5]),
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
                part("w.down", vec![1, 2], vec![1.0, 2.0]),
                part("w.up", vec![up, 1], vec![1.0; up]),
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

        let stray = [part("x", vec![1], vec![1.0])];
        let path = adapter(dir.path(), &stray, "abc");
        let error = merge_adapter(&path, &mut base(), "abc").unwrap_err();
        assert!(error.contains("the encoder has no tensor x"), "{error}");

        let alone = [part("w.up", vec![2, 1], vec![1.0; 2])];
        let path = adapter(dir.path(), &alone, "abc");
        let error = merge_adapter(&path, &mut base(), "abc").unwrap_err();
        assert!(error.contains("w.up has no matching .down"), "{error}");
    }
}
