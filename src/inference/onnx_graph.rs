//! The parts of an ONNX model mom-router reads or writes: its initializers (the tensors the file
//! holds, by name), its nodes, and the names of its inputs, outputs and typed values, with a subset
//! of `onnx.proto` (every other field is skipped). Decoded from [`Bytes`], a tensor's data is a
//! slice of the file itself, so its place in the file is known.

use bytes::Bytes;
use std::collections::HashMap;

/// ONNX `TensorProto.DataType` values read here.
pub(super) const FLOAT: i32 = 1;
pub(super) const INT8: i32 = 3;

/// ONNX `AttributeProto.AttributeType`s: a single integer, a subgraph, subgraphs.
pub(super) const ATTRIBUTE_INT: i32 = 2;
pub(super) const GRAPH: i32 = 5;
pub(super) const GRAPHS: i32 = 10;

/// ONNX `TensorProto.DataLocation` of a tensor whose values lie in another file.
pub(super) const EXTERNAL: i32 = 1;

/// `ModelProto.graph`'s field number.
pub(super) const MODEL_GRAPH: u32 = 7;
/// `GraphProto.node`'s and `GraphProto.value_info`'s field numbers.
pub(super) const GRAPH_NODE: u32 = 1;
pub(super) const GRAPH_VALUE_INFO: u32 = 13;

/// The parts of an ONNX model file read here (fields of `onnx.proto`; the rest is skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ModelProto {
    #[prost(message, optional, tag = "7")]
    pub(super) graph: Option<GraphProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub(super) node: Vec<NodeProto>,
    #[prost(message, repeated, tag = "5")]
    pub(super) initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub(super) input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub(super) output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    pub(super) value_info: Vec<ValueInfoProto>,
}

/// A node, with every field an operator of the default domain needs: encoded, it is a whole node.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub(super) input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub(super) output: Vec<String>,
    #[prost(string, tag = "3")]
    pub(super) name: String,
    #[prost(string, tag = "4")]
    pub(super) op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub(super) attribute: Vec<AttributeProto>,
    #[prost(string, tag = "7")]
    pub(super) domain: String,
}

impl NodeProto {
    /// The integer attribute `name`, if the node has it.
    pub(super) fn int_attribute(&self, name: &str) -> Option<i64> {
        self.attribute
            .iter()
            .find(|a| a.name == name && a.r#type == ATTRIBUTE_INT)
            .map(|a| a.i)
    }
}

/// An attribute: its name and type, and its value when it is one integer (the only value read or
/// written here).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct AttributeProto {
    #[prost(string, tag = "1")]
    pub(super) name: String,
    #[prost(int64, tag = "3")]
    pub(super) i: i64,
    #[prost(int32, tag = "20")]
    pub(super) r#type: i32,
}

/// A graph input, output or typed value, by name.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub(super) name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub(super) dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub(super) data_type: i32,
    #[prost(string, tag = "8")]
    pub(super) name: String,
    #[prost(bytes = "bytes", tag = "9")]
    pub(super) raw_data: Bytes,
    #[prost(int32, tag = "14")]
    pub(super) data_location: i32,
}

/// Where a dense weight (out × in in the adapter) lives in the graph, transposed (in × out).
pub(super) enum Stored<'a> {
    F32(&'a TensorProto),
    Int8 {
        values: &'a TensorProto,
        scales: &'a TensorProto,
    },
}

/// The entry of `map` for the adapter's `name`: the same name, or one ending in `.name` (an
/// exporter's prefix such as `inner.`), when exactly one does.
pub(super) fn named<'a, K, T>(map: &'a HashMap<K, T>, name: &str) -> Option<&'a T>
where
    K: std::borrow::Borrow<str> + std::hash::Hash + Eq,
{
    if let Some(found) = map.get(name) {
        return Some(found);
    }
    let suffix = format!(".{name}");
    let mut found = map
        .iter()
        .filter(|(key, _)| (*key).borrow().ends_with(&suffix));
    match (found.next(), found.next()) {
        (Some((_, value)), None) => Some(value),
        _ => None,
    }
}

/// The index of the node that produces each value of `graph`.
pub(super) fn producers(graph: &GraphProto) -> HashMap<&str, usize> {
    graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect()
}

/// An int8 tensor dequantized on the fly, `Cast(values) · scales`: the indices of its `Mul` and
/// `Cast` nodes and its two initializers.
pub(super) struct Dequantized<'a> {
    pub(super) mul: usize,
    pub(super) cast: usize,
    pub(super) values: &'a TensorProto,
    pub(super) scales: &'a TensorProto,
}

/// The value `name` when the graph computes it as `Cast(values) · scales` (either way round),
/// `values` an int8 initializer and `scales` a float one, with nodes of the default domain.
pub(super) fn dequantized<'a>(
    graph: &'a GraphProto,
    producer: &HashMap<&str, usize>,
    initializers: &HashMap<&str, &'a TensorProto>,
    name: &str,
) -> Option<Dequantized<'a>> {
    let node = |value: &str, op_type: &str| {
        let index = *producer.get(value)?;
        let found = &graph.node[index];
        (found.op_type == op_type && found.domain.is_empty()).then_some((index, found))
    };
    let initializer = |value: &str, data_type: i32| {
        initializers
            .get(value)
            .filter(|t| t.data_type == data_type)
            .copied()
    };
    let (mul, product) = node(name, "Mul")?;
    let [a, b] = product.input.as_slice() else {
        return None;
    };
    let of = |cast_output: &str, scales: &str| {
        let (cast, cast_node) = node(cast_output, "Cast")?;
        Some(Dequantized {
            mul,
            cast,
            values: initializer(cast_node.input.first()?, INT8)?,
            scales: initializer(scales, FLOAT)?,
        })
    };
    of(a, b).or_else(|| of(b, a))
}

/// The graph's dense weights by name (`….weight`, from the bias added to their product).
pub(super) fn dense_weights<'a>(
    graph: &'a GraphProto,
    initializers: &HashMap<&str, &'a TensorProto>,
) -> HashMap<String, Stored<'a>> {
    let producer = producers(graph);
    let stored = |name: &str| -> Option<Stored<'a>> {
        if let Some(t) = initializers.get(name).filter(|t| t.data_type == FLOAT) {
            return Some(Stored::F32(t));
        }
        let found = dequantized(graph, &producer, initializers, name)?;
        Some(Stored::Int8 {
            values: found.values,
            scales: found.scales,
        })
    };
    let mut weights = HashMap::new();
    for matmul in graph.node.iter().filter(|n| n.op_type == "MatMul") {
        let (Some(b), Some(product)) = (matmul.input.get(1), matmul.output.first()) else {
            continue;
        };
        let Some(weight) = stored(b) else { continue };
        let bias = graph
            .node
            .iter()
            .filter(|n| n.op_type == "Add" && n.input.contains(product))
            .flat_map(|n| n.input.iter())
            .find_map(|i| {
                i.strip_suffix(".bias")
                    .filter(|_| initializers.contains_key(i.as_str()))
            });
        if let Some(layer) = bias {
            weights.insert(format!("{layer}.weight"), weight);
        }
    }
    weights
}

/// The dimensions of `t`.
pub(super) fn shape(t: &TensorProto) -> Vec<usize> {
    t.dims.iter().map(|&d| d.max(0) as usize).collect()
}

/// `(rows, columns)` of a two-dimensional `t` whose raw data holds every value.
pub(super) fn matrix(t: &TensorProto) -> Result<(usize, usize), String> {
    let width = if t.data_type == INT8 { 1 } else { 4 };
    match shape(t).as_slice() {
        &[rows, columns] if t.raw_data.len() == rows * columns * width => Ok((rows, columns)),
        dims => Err(format!(
            "{} is {dims:?} with {} bytes of data, not a matrix held in raw data",
            t.name,
            t.raw_data.len()
        )),
    }
}

/// The f32 values of `t`, from its raw data.
pub(super) fn f32s(t: &TensorProto) -> Result<Vec<f32>, String> {
    if t.data_type != FLOAT || t.raw_data.len() % 4 != 0 {
        return Err(format!("{} is not f32 held in raw data", t.name));
    }
    Ok(super::f32s_from_le(&t.raw_data))
}
