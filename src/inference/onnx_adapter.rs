//! A low-rank adapter applied to an ONNX encoder: the model file's bytes are patched where the
//! adapted tensors' data lies (each keeps its shape and type, so every other byte stays as
//! exported) and ONNX Runtime loads the patched copy, which runs at the original's cost. (Handing
//! the tensors to the runtime as initializers to use instead of the file's does not do: its
//! constant folding reads an int8 weight's dequantization from the file first.) The graph says
//! where each dense weight is: the `MatMul` whose result gets the layer's named bias added
//! (`….query.bias` → `….query.weight`), its weight either an f32 initializer (in × out) or an
//! int8 one dequantized on the fly, `Cast(q) · scale` with one scale per output channel. An int8
//! weight is dequantized, the update added, and quantized again the same way.
//!
//! The adapter records the largest |value| of each row of the weights it was trained on; the
//! model's weights must reproduce them (an int8 scale is that value / 127), so an adapter is
//! never applied to another encoder's weights.

use super::adapter::{read_adapter, Adapter, AdapterTensor, Change};
use super::onnx_graph::{
    dense_weights, f32s, matrix, named, shape, ModelProto, Stored, TensorProto, FLOAT,
};
use bytes::Bytes;
use std::collections::HashMap;
use std::path::Path;

/// Relative difference allowed between a recorded row maximum and the model's.
const ABSMAX_TOLERANCE: f32 = 1e-4;

/// A tensor's adapted values.
#[derive(Debug, Clone, PartialEq)]
enum Replacement {
    /// f32 values of this shape.
    F32(Vec<usize>, Vec<f32>),
    /// int8 values of this shape.
    I8(Vec<usize>, Vec<i8>),
}

impl Replacement {
    /// The values as an ONNX tensor's raw data holds them (little-endian).
    fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Self::F32(_, values) => super::f32s_to_le(values),
            Self::I8(_, values) => values.iter().map(|v| v.to_le_bytes()[0]).collect(),
        }
    }
}

/// The ONNX model at `model` with the adapter at `adapter` applied: the file's bytes, patched.
pub(crate) fn adapted_model(model: &Path, adapter: &Path) -> Result<Vec<u8>, String> {
    let file = Bytes::from(std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?);
    let mut patched = file.to_vec();
    for (tensor, replacement) in replacements(model, &file, adapter)? {
        let data = replacement.to_le_bytes();
        // Decoded from `file` itself, the tensor's data is a slice of it: its place in the file.
        let at = (tensor.raw_data.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize);
        let place = at..at + data.len();
        if data.len() != tensor.raw_data.len()
            || file.get(place.clone()) != Some(&tensor.raw_data[..])
        {
            return Err(format!(
                "{}: cannot place the adapted {} in the file",
                model.display(),
                tensor.name
            ));
        }
        patched[place].copy_from_slice(&data);
    }
    Ok(patched)
}

/// The adapted value of each of the model's tensors the adapter changes.
fn replacements(
    model: &Path,
    file: &Bytes,
    adapter: &Path,
) -> Result<Vec<(TensorProto, Replacement)>, String> {
    let adapter = read_adapter(adapter)?;
    let decoded = <ModelProto as prost::Message>::decode(file.clone())
        .map_err(|e| format!("{}: not an ONNX model: {e}", model.display()))?;
    let graph = decoded.graph.unwrap_or_default();
    let initializers: HashMap<&str, &TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let weights = dense_weights(&graph, &initializers);
    let mut out = Vec::new();
    for change in &adapter.changes {
        match change {
            Change::LowRank {
                weight,
                up,
                down,
                absmax,
            } => {
                let Some(absmax) = absmax else {
                    return Err(adapter.error(format!(
                        "{weight}: no record of the weights it was trained on \
                         ({weight}.absmax; finetune writes it since adapters run on ONNX Runtime)"
                    )));
                };
                let stored = named(&weights, weight).ok_or_else(|| {
                    adapter.error(format!("the ONNX model has no dense weight {weight}"))
                })?;
                out.extend(low_rank(&adapter, weight, stored, up, down, absmax)?);
            }
            Change::Replace(tensor) => {
                let base = named(&initializers, &tensor.name).ok_or_else(|| {
                    adapter.error(format!("the ONNX model has no tensor {}", tensor.name))
                })?;
                if base.data_type != FLOAT || shape(base) != tensor.shape {
                    return Err(adapter.error(format!(
                        "{} is f32 {:?}, the ONNX model's {:?} (type {})",
                        tensor.name,
                        tensor.shape,
                        shape(base),
                        base.data_type
                    )));
                }
                let values = Replacement::F32(tensor.shape.clone(), tensor.values.clone());
                out.push(((*base).clone(), values));
            }
        }
    }
    Ok(out)
}

/// The initializers that add `scale · up · down` to the weight `stored`, after checking that
/// its rows' largest values are `absmax`.
fn low_rank(
    adapter: &Adapter,
    name: &str,
    stored: &Stored<'_>,
    up: &AdapterTensor,
    down: &AdapterTensor,
    absmax: &[f32],
) -> Result<Vec<(TensorProto, Replacement)>, String> {
    let error = |message: String| adapter.error(format!("{name}: {message}"));
    let (ins, outs) = match stored {
        Stored::F32(t) | Stored::Int8 { values: t, .. } => matrix(t).map_err(&error)?,
    };
    let (values, found_absmax) = match stored {
        Stored::F32(t) => {
            let values = f32s(t).map_err(&error)?;
            let absmax = column_absmax(&values, outs);
            (values, absmax)
        }
        Stored::Int8 { values, scales } => {
            let scale = f32s(scales).map_err(&error)?;
            if scale.len() != outs {
                return Err(error(format!(
                    "{} scales for {outs} output channels",
                    scale.len()
                )));
            }
            let dequantized = values
                .raw_data
                .iter()
                .enumerate()
                .map(|(i, &q)| f32::from(q as i8) * scale[i % outs])
                .collect();
            (dequantized, scale.iter().map(|s| s * 127.0).collect())
        }
    };
    let differs = |(found, recorded): (&f32, &f32)| {
        (found - recorded).abs() > ABSMAX_TOLERANCE * recorded.abs().max(1e-6)
    };
    if found_absmax.len() != absmax.len() || found_absmax.iter().zip(absmax).any(differs) {
        return Err(error(
            "these are not the weights the adapter was trained on (their rows' largest values \
             differ from the ones it records)"
                .to_owned(),
        ));
    }
    let rank = down.shape.first().copied().unwrap_or_default();
    if up.shape != [outs, rank] || down.shape != [rank, ins] {
        return Err(error(format!(
            "up {:?} and down {:?} do not make the weight's {outs} × {ins}",
            up.shape, down.shape
        )));
    }
    let mut merged = values;
    for o in 0..outs {
        for i in 0..ins {
            let update: f32 = (0..rank)
                .map(|r| up.values[o * rank + r] * down.values[r * ins + i])
                .sum();
            merged[i * outs + o] += adapter.scale as f32 * update;
        }
    }
    Ok(match stored {
        Stored::F32(t) => vec![((*t).clone(), Replacement::F32(vec![ins, outs], merged))],
        Stored::Int8 { values, scales } => {
            let (q, scale) = quantize(&merged, outs);
            vec![
                ((*values).clone(), Replacement::I8(vec![ins, outs], q)),
                ((*scales).clone(), Replacement::F32(shape(scales), scale)),
            ]
        }
    })
}

/// Symmetric int8 with one scale per column of the `[rows, outs]` row-major `values`: the
/// column's largest |value| / 127.
fn quantize(values: &[f32], outs: usize) -> (Vec<i8>, Vec<f32>) {
    let scale: Vec<f32> = column_absmax(values, outs)
        .into_iter()
        .map(|m| if m > 0.0 { m / 127.0 } else { 1.0 })
        .collect();
    let q = values
        .iter()
        .enumerate()
        .map(|(i, v)| (v / scale[i % outs]).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (q, scale)
}

/// The largest |value| of each column of the `[rows, outs]` row-major `values`.
fn column_absmax(values: &[f32], outs: usize) -> Vec<f32> {
    let mut max = vec![0.0f32; outs];
    for (i, v) in values.iter().enumerate() {
        max[i % outs] = max[i % outs].max(v.abs());
    }
    max
}

#[cfg(test)]
mod tests {
    use super::super::onnx_graph::{GraphProto, NodeProto, INT8};
    use super::*;
    use crate::inference::{f32s_to_le, write_adapter};

    fn tensor(name: &str, dims: &[i64], data_type: i32, raw_data: Vec<u8>) -> TensorProto {
        TensorProto {
            dims: dims.to_vec(),
            data_type,
            name: name.to_owned(),
            raw_data: Bytes::from(raw_data),
            ..TensorProto::default()
        }
    }

    /// What the adapter changes in the model, by tensor name.
    fn adapted_initializers(
        model: &Path,
        adapter: &Path,
    ) -> Result<Vec<(String, Replacement)>, String> {
        let file = Bytes::from(std::fs::read(model).unwrap());
        let found = replacements(model, &file, adapter)?;
        Ok(found.into_iter().map(|(t, r)| (t.name, r)).collect())
    }

    fn node(op_type: &str, input: &[&str], output: &str) -> NodeProto {
        NodeProto {
            input: input.iter().map(|i| (*i).to_owned()).collect(),
            output: vec![output.to_owned()],
            op_type: op_type.to_owned(),
            ..NodeProto::default()
        }
    }

    /// A layer as an exporter writes it, `x · W + b` with W (2 in × 3 out) either int8 with
    /// one scale per output or f32, and the bias named `inner.l.q.bias`.
    fn model(dir: &Path, int8: bool) -> std::path::PathBuf {
        // W = [[1, -2, 0.5], [-1, 4, 0.25]] (in × out): column maxima 1, 4, 0.5.
        let mut initializer = vec![tensor("inner.l.q.bias", &[3], FLOAT, f32s_to_le(&[0.0; 3]))];
        let mut nodes = Vec::new();
        if int8 {
            let scale = [1.0 / 127.0, 4.0 / 127.0, 0.5 / 127.0];
            let q: [i8; 6] = [127, -64, 127, -127, 127, 64];
            initializer.push(tensor(
                "w_q",
                &[2, 3],
                INT8,
                q.iter().map(|v| *v as u8).collect(),
            ));
            initializer.push(tensor("w_scale", &[1, 3], FLOAT, f32s_to_le(&scale)));
            nodes.push(node("Cast", &["w_q"], "w_f"));
            nodes.push(node("Mul", &["w_f", "w_scale"], "w"));
        } else {
            let w = [1.0, -2.0, 0.5, -1.0, 4.0, 0.25];
            initializer.push(tensor("w", &[2, 3], FLOAT, f32s_to_le(&w)));
        }
        nodes.push(node("MatMul", &["x", "w"], "xw"));
        nodes.push(node("Add", &["xw", "inner.l.q.bias"], "y"));
        let model = ModelProto {
            graph: Some(GraphProto {
                node: nodes,
                initializer,
                ..GraphProto::default()
            }),
        };
        let path = dir.join(if int8 { "int8.onnx" } else { "f32.onnx" });
        std::fs::write(&path, prost::Message::encode_to_vec(&model)).unwrap();
        path
    }

    /// An adapter of `l.q.weight` (out × in = 3 × 2, rank 1, scale 0.5) adding 0.5 to its
    /// (out 0, in 0), and a new bias; `extra` is one more tensor to replace.
    fn adapter(dir: &Path, absmax: Option<Vec<f32>>, extra: Option<&str>) -> std::path::PathBuf {
        let mut tensors = vec![
            AdapterTensor::new("l.q.weight.down", vec![1, 2], vec![1.0, 0.0]),
            AdapterTensor::new("l.q.weight.up", vec![3, 1], vec![1.0, 0.0, 0.0]),
            AdapterTensor::new("l.q.bias", vec![3], vec![0.1, 0.2, 0.3]),
        ];
        if let Some(absmax) = absmax {
            tensors.push(AdapterTensor::new("l.q.weight.absmax", vec![3], absmax));
        }
        if let Some(extra) = extra {
            tensors.push(AdapterTensor::new(extra, vec![3], vec![0.0; 3]));
        }
        let path = dir.join("adapter.safetensors");
        write_adapter(&path, &tensors, 0.5, "sha").unwrap();
        path
    }

    /// The model's rows' largest values, as finetune records them.
    const ABSMAX: [f32; 3] = [1.0, 4.0, 0.5];

    fn find<'a>(found: &'a [(String, Replacement)], name: &str) -> &'a Replacement {
        &found.iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn an_f32_weight_gets_the_update_transposed_and_the_bias_its_exported_name() {
        let dir = tempfile::tempdir().unwrap();
        let found = adapted_initializers(
            &model(dir.path(), false),
            &adapter(dir.path(), Some(ABSMAX.to_vec()), None),
        )
        .unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            find(&found, "w"),
            &Replacement::F32(vec![2, 3], vec![1.5, -2.0, 0.5, -1.0, 4.0, 0.25])
        );
        assert_eq!(
            find(&found, "inner.l.q.bias"),
            &Replacement::F32(vec![3], vec![0.1, 0.2, 0.3])
        );
    }

    #[test]
    fn an_int8_weight_is_dequantized_updated_and_quantized_per_output_channel() {
        let dir = tempfile::tempdir().unwrap();
        let found = adapted_initializers(
            &model(dir.path(), true),
            &adapter(dir.path(), Some(ABSMAX.to_vec()), None),
        )
        .unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        // Column 0 becomes [1.5, -1]: scale 1.5 / 127, -1 → -84.67 → -85; the others keep theirs.
        assert_eq!(
            find(&found, "w_q"),
            &Replacement::I8(vec![2, 3], vec![127, -64, 127, -85, 127, 64])
        );
        let Replacement::F32(shape, scale) = find(&found, "w_scale") else {
            panic!("scales are f32");
        };
        assert_eq!(shape, &vec![1, 3]);
        for (got, want) in scale.iter().zip([1.5 / 127.0, 4.0 / 127.0, 0.5 / 127.0]) {
            assert!((got - want).abs() < 1e-7, "{scale:?}");
        }
    }

    #[test]
    fn the_patched_model_holds_the_adapted_values_and_is_otherwise_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = model(dir.path(), true);
        let adapter = adapter(dir.path(), Some(ABSMAX.to_vec()), None);
        let original = std::fs::read(&path).unwrap();
        let patched = adapted_model(&path, &adapter).unwrap();
        assert_eq!(patched.len(), original.len());
        let decoded = <ModelProto as prost::Message>::decode(patched.as_slice()).unwrap();
        let graph = decoded.graph.unwrap();
        let data = |name: &str| {
            graph
                .initializer
                .iter()
                .find(|t| t.name == name)
                .unwrap()
                .raw_data
                .to_vec()
        };
        let q: Vec<i8> = data("w_q").iter().map(|b| *b as i8).collect();
        assert_eq!(q, vec![127, -64, 127, -85, 127, 64]);
        assert_eq!(data("inner.l.q.bias"), f32s_to_le(&[0.1, 0.2, 0.3]));
        let changed = original
            .iter()
            .zip(&patched)
            .filter(|(a, b)| a != b)
            .count();
        // One int8 value, one scale and the bias's three values; nothing else moved.
        assert!(
            (1..=1 + 4 + 12).contains(&changed),
            "{changed} bytes changed"
        );
    }

    #[test]
    fn other_weights_an_unrecorded_base_or_a_missing_tensor_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let int8 = model(dir.path(), true);
        let other = adapter(dir.path(), Some(vec![2.0, 4.0, 0.5]), None);
        let error = adapted_initializers(&int8, &other).unwrap_err();
        assert!(
            error.contains("l.q.weight: these are not the weights the adapter was trained on"),
            "{error}"
        );
        let unrecorded = adapter(dir.path(), None, None);
        let error = adapted_initializers(&int8, &unrecorded).unwrap_err();
        assert!(
            error.contains("l.q.weight: no record of the weights"),
            "{error}"
        );
        let stray = adapter(dir.path(), Some(ABSMAX.to_vec()), Some("l.k.bias"));
        let error = adapted_initializers(&int8, &stray).unwrap_err();
        assert!(
            error.contains("the ONNX model has no tensor l.k.bias"),
            "{error}"
        );
        let error =
            adapted_initializers(&dir.path().join("adapter.safetensors"), &stray).unwrap_err();
        assert!(error.contains("not an ONNX model"), "{error}");
    }
}
