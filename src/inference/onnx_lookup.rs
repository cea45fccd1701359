//! An int8 embedding table looked up before it is dequantized. An exporter that quantizes a
//! table with one scale per row writes `Gather(Cast(q) · scale, ids)`; ONNX Runtime folds
//! `Cast(q) · scale` into a float table when it loads the model (the whole vocabulary at four
//! times the int8 bytes) and holds two float copies of what it folds while it builds the session.
//! The same lookup written `Cast(Gather(q, ids)) · Gather(scale, ids)` reads int8 rows and
//! dequantizes only the rows looked up: every value is the same product of the same int8 value
//! and scale, the table stays int8, and nothing of it is folded. The model's bytes are rewritten
//! field by field ([`super::onnx_wire`]): the three nodes of each such lookup give way to four,
//! the typed values they produced are dropped, and every other byte is copied as it lies.

use super::onnx_graph::{
    dequantized, producers, AttributeProto, Dequantized, GraphProto, ModelProto, NodeProto,
    TensorProto, ValueInfoProto, ATTRIBUTE_INT, EXTERNAL, FLOAT, GRAPH, GRAPHS, GRAPH_NODE,
    GRAPH_VALUE_INFO, MODEL_GRAPH,
};
use super::onnx_wire::{fields, put_bytes, put_header};
use bytes::Bytes;
use prost::Message;
use std::collections::{HashMap, HashSet};

/// One table lookup to rewrite: the indices of its `Cast`, `Mul` and `Gather` nodes, the nodes
/// that replace the `Gather`, and the values the `Cast` and the `Mul` produced.
#[derive(Debug)]
struct Lookup {
    cast: usize,
    mul: usize,
    gather: usize,
    replacement: [NodeProto; 4],
    dropped_values: [String; 2],
}

/// The ONNX model `model` with each int8 table dequantized after its lookup instead of before,
/// or `None` when it has no such table, keeps tensors in other files (it must then be opened
/// from its path) or is not a model this can read (ONNX Runtime then says why).
pub fn dequantize_after_lookup(model: &Bytes) -> Result<Option<Vec<u8>>, String> {
    let Ok(decoded) = ModelProto::decode(model.clone()) else {
        return Ok(None);
    };
    let graph = decoded.graph.unwrap_or_default();
    if graph
        .initializer
        .iter()
        .any(|t| t.data_location == EXTERNAL)
    {
        return Ok(None);
    }
    let found = lookups(&graph);
    if found.is_empty() {
        return Ok(None);
    }
    let model_fields = fields(model)?;
    let [graph_field] = model_fields
        .iter()
        .filter(|f| f.number == MODEL_GRAPH)
        .collect::<Vec<_>>()[..]
    else {
        return Ok(None);
    };
    let graph_bytes = &model[graph_field.value.clone()];
    let pieces = rewritten_graph(graph_bytes, graph.node.len(), &found)?;
    let graph_len: usize = pieces.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(model.len() + graph_len - graph_bytes.len());
    for field in &model_fields {
        if field.number == MODEL_GRAPH {
            put_header(&mut out, MODEL_GRAPH, graph_len);
            for piece in &pieces {
                out.extend_from_slice(piece);
            }
        } else {
            out.extend_from_slice(&model[field.whole.clone()]);
        }
    }
    Ok(Some(out))
}

/// The graph's fields with the lookups rewritten, as slices of `graph` or new bytes.
fn rewritten_graph<'a>(
    graph: &'a [u8],
    node_count: usize,
    found: &[Lookup],
) -> Result<Vec<std::borrow::Cow<'a, [u8]>>, String> {
    use std::borrow::Cow;
    let dropped: HashSet<usize> = found.iter().flat_map(|l| [l.cast, l.mul]).collect();
    let replaced: HashMap<usize, &[NodeProto; 4]> =
        found.iter().map(|l| (l.gather, &l.replacement)).collect();
    let dropped_values: HashSet<&str> = found
        .iter()
        .flat_map(|l| l.dropped_values.iter().map(String::as_str))
        .collect();
    let mut pieces = Vec::new();
    let mut node = 0;
    for field in fields(graph)? {
        match field.number {
            GRAPH_NODE => {
                let index = node;
                node += 1;
                if dropped.contains(&index) {
                    continue;
                }
                if let Some(nodes) = replaced.get(&index) {
                    for new in nodes.iter() {
                        let mut bytes = Vec::new();
                        put_bytes(&mut bytes, GRAPH_NODE, &new.encode_to_vec());
                        pieces.push(Cow::Owned(bytes));
                    }
                    continue;
                }
            }
            GRAPH_VALUE_INFO => {
                let info = ValueInfoProto::decode(&graph[field.value.clone()])
                    .map_err(|e| format!("a typed value of the graph: {e}"))?;
                if dropped_values.contains(info.name.as_str()) {
                    continue;
                }
            }
            _ => {}
        }
        pieces.push(Cow::Borrowed(&graph[field.whole]));
    }
    if node != node_count {
        return Err(format!(
            "the graph has {node_count} nodes decoded and {node} read"
        ));
    }
    Ok(pieces)
}

/// Every `Gather(Cast(q) · scale, ids)` of the graph whose `q` is an int8 `[rows, width]`
/// initializer, `scale` a float `[rows, 1]` one, and whose `Cast` and `Mul` results feed
/// nothing else.
fn lookups(graph: &GraphProto) -> Vec<Lookup> {
    // A subgraph (an `If` or `Loop` body) may read any value of this graph: counting its uses
    // would mean reading it too, so a graph with one is left as it is.
    let mut attributes = graph.node.iter().flat_map(|n| &n.attribute);
    if attributes.any(|a| [GRAPH, GRAPHS].contains(&a.r#type)) {
        return Vec::new();
    }
    let initializers: HashMap<&str, &TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let producer = producers(graph);
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for name in graph.node.iter().flat_map(|n| n.input.iter()) {
        *uses.entry(name.as_str()).or_default() += 1;
    }
    for output in &graph.output {
        *uses.entry(output.name.as_str()).or_default() += 1;
    }
    let taken: HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().chain(&n.output).chain([&n.name]))
        .chain(graph.initializer.iter().map(|t| &t.name))
        .chain(graph.input.iter().chain(&graph.output).map(|v| &v.name))
        .chain(graph.value_info.iter().map(|v| &v.name))
        .map(String::as_str)
        .collect();
    let only_use = |name: &str| uses.get(name) == Some(&1);
    let mut found = Vec::new();
    for (gather, lookup) in graph.node.iter().enumerate() {
        if lookup.op_type != "Gather" || !lookup.domain.is_empty() {
            continue;
        }
        let ([table, ids], [looked_up]) = (lookup.input.as_slice(), lookup.output.as_slice())
        else {
            continue;
        };
        if lookup.int_attribute("axis").unwrap_or(0) != 0 || !only_use(table) {
            continue;
        }
        let Some(Dequantized {
            mul,
            cast,
            values: q,
            scales: scale,
        }) = dequantized(graph, &producer, &initializers, table)
        else {
            continue;
        };
        let cast_node = &graph.node[cast];
        let Some(dequantized) = cast_node.output.first() else {
            continue;
        };
        let usable = cast_node.int_attribute("to") == Some(i64::from(FLOAT))
            && only_use(dequantized)
            && q.dims.len() == 2
            && scale.dims == [q.dims[0], 1];
        if !usable {
            continue;
        }
        let [rows, scales, values] =
            ["int8", "scale", "dequantized"].map(|part| format!("{looked_up}/lookup_{part}"));
        if [&rows, &scales, &values]
            .iter()
            .any(|name| taken.contains(name.as_str()))
        {
            continue;
        }
        let replacement = [
            new_node(&rows, "Gather", &[&q.name, ids], &[("axis", 0)]),
            new_node(&scales, "Gather", &[&scale.name, ids], &[("axis", 0)]),
            new_node(&values, "Cast", &[&rows], &[("to", i64::from(FLOAT))]),
            new_node(looked_up, "Mul", &[&values, &scales], &[]),
        ];
        found.push(Lookup {
            cast,
            mul,
            gather,
            replacement,
            dropped_values: [dequantized.clone(), table.clone()],
        });
    }
    found
}

/// A node of the default domain named after its one output.
fn new_node(output: &str, op_type: &str, input: &[&String], ints: &[(&str, i64)]) -> NodeProto {
    NodeProto {
        input: input.iter().map(|i| (*i).clone()).collect(),
        output: vec![output.to_owned()],
        name: format!("{output}/{op_type}"),
        op_type: op_type.to_owned(),
        attribute: ints
            .iter()
            .map(|(name, i)| AttributeProto {
                name: (*name).to_owned(),
                i: *i,
                r#type: ATTRIBUTE_INT,
            })
            .collect(),
        domain: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::onnx_graph::INT8;
    use super::*;

    fn tensor(name: &str, dims: &[i64], data_type: i32, raw_data: &[u8]) -> TensorProto {
        TensorProto {
            dims: dims.to_vec(),
            data_type,
            name: name.to_owned(),
            raw_data: Bytes::copy_from_slice(raw_data),
            ..TensorProto::default()
        }
    }

    fn node(op_type: &str, input: &[&str], output: &str, ints: &[(&str, i64)]) -> NodeProto {
        let mut built = new_node(output, op_type, &[], ints);
        built.input = input.iter().map(|i| (*i).to_owned()).collect();
        built.name = format!("exported {output}");
        built
    }

    fn named(name: &str) -> ValueInfoProto {
        ValueInfoProto {
            name: name.to_owned(),
        }
    }

    /// `Gather(Cast(table_q) · table_scale, ids) + bias` as an exporter writes it (a 3 × 2 int8
    /// table, one scale per row), with `change` applied to the graph first.
    fn graph(change: impl FnOnce(&mut GraphProto)) -> GraphProto {
        let mut graph = GraphProto {
            node: vec![
                node("Cast", &["table_q"], "table_f", &[("to", 1)]),
                node("Mul", &["table_f", "table_scale"], "table", &[]),
                node("Gather", &["table", "ids"], "rows", &[("axis", 0)]),
                node("Add", &["rows", "bias"], "y", &[]),
            ],
            initializer: vec![
                tensor("table_q", &[3, 2], INT8, &[1, 2, 3, 4, 5, 6]),
                tensor("table_scale", &[3, 1], FLOAT, &[0; 12]),
                tensor("bias", &[2], FLOAT, &[0; 8]),
            ],
            input: vec![named("ids")],
            output: vec![named("y")],
            value_info: vec![named("table_f"), named("table"), named("rows")],
        };
        change(&mut graph);
        graph
    }

    /// The model's bytes: fields the decoded subset skips around the graph (an IR version
    /// before, an opset import after) and inside it (its name).
    fn model(graph: &GraphProto) -> Bytes {
        let mut graph_bytes = graph.encode_to_vec();
        put_bytes(&mut graph_bytes, 2, b"exported graph");
        let mut bytes = vec![0x08, 0x0a];
        put_bytes(&mut bytes, MODEL_GRAPH, &graph_bytes);
        put_bytes(&mut bytes, 8, &[0x10, 0x11]);
        Bytes::from(bytes)
    }

    fn rewritten(graph: &GraphProto) -> Option<Vec<u8>> {
        dequantize_after_lookup(&model(graph)).unwrap()
    }

    #[test]
    fn the_table_is_looked_up_in_int8_then_dequantized_and_nothing_else_moves() {
        let exported = graph(|_| {});
        let bytes = rewritten(&exported).unwrap();
        let decoded = ModelProto::decode(&bytes[..]).unwrap().graph.unwrap();
        let steps: Vec<(&str, Vec<&str>, &str)> = decoded
            .node
            .iter()
            .map(|n| {
                let input = n.input.iter().map(String::as_str).collect();
                (n.op_type.as_str(), input, n.output[0].as_str())
            })
            .collect();
        assert_eq!(
            steps,
            [
                ("Gather", vec!["table_q", "ids"], "rows/lookup_int8"),
                ("Gather", vec!["table_scale", "ids"], "rows/lookup_scale"),
                ("Cast", vec!["rows/lookup_int8"], "rows/lookup_dequantized"),
                (
                    "Mul",
                    vec!["rows/lookup_dequantized", "rows/lookup_scale"],
                    "rows"
                ),
                ("Add", vec!["rows", "bias"], "y"),
            ]
        );
        assert_eq!(decoded.node[0].int_attribute("axis"), Some(0));
        assert_eq!(decoded.node[2].int_attribute("to"), Some(1));
        assert_eq!(decoded.node[4].name, "exported y");
        // The folded values' types go with them; the tensors are the file's.
        assert_eq!(decoded.value_info, [named("rows")]);
        assert_eq!(decoded.initializer, exported.initializer);
        // Every field the subset skips is where it was.
        let fields_of = |bytes: &[u8]| {
            fields(bytes)
                .unwrap()
                .into_iter()
                .map(|f| (f.number, bytes[f.value].to_vec()))
                .collect::<Vec<_>>()
        };
        let model_fields = fields_of(&bytes);
        assert_eq!(model_fields[0], (1, vec![0x0a]));
        assert_eq!(model_fields[2], (8, vec![0x10, 0x11]));
        assert!(fields_of(&model_fields[1].1).contains(&(2, b"exported graph".to_vec())));
        // Nothing is left to rewrite.
        assert_eq!(dequantize_after_lookup(&Bytes::from(bytes)).unwrap(), None);
    }

    #[test]
    fn scales_written_first_are_found_too() {
        let swapped = graph(|g| g.node[1].input.reverse());
        let bytes = rewritten(&swapped).unwrap();
        let decoded = ModelProto::decode(&bytes[..]).unwrap().graph.unwrap();
        assert_eq!(decoded.node.len(), 5);
        assert_eq!(decoded.node[3].output, ["rows"]);
    }

    #[test]
    fn other_graphs_are_left_as_exported() {
        let unchanged: [(&str, GraphProto); 7] = [
            (
                "one scale per column",
                graph(|g| g.initializer[1] = tensor("table_scale", &[1, 2], FLOAT, &[0; 8])),
            ),
            (
                "the dequantized table read elsewhere too",
                graph(|g| g.node.push(node("Identity", &["table"], "copy", &[]))),
            ),
            (
                "the dequantized table a graph output",
                graph(|g| g.output.push(named("table_f"))),
            ),
            (
                "a lookup along another axis",
                graph(|g| g.node[2] = node("Gather", &["table", "ids"], "rows", &[("axis", 1)])),
            ),
            (
                "a cast to another type",
                graph(|g| g.node[0] = node("Cast", &["table_q"], "table_f", &[("to", 10)])),
            ),
            (
                "a float table",
                graph(|g| g.initializer[0] = tensor("table_q", &[3, 2], FLOAT, &[0; 24])),
            ),
            (
                "tensors kept in another file",
                graph(|g| g.initializer[2].data_location = EXTERNAL),
            ),
        ];
        for (case, graph) in unchanged {
            assert_eq!(rewritten(&graph), None, "{case}");
        }
        let clash = graph(|g| {
            g.node
                .push(node("Identity", &["y"], "rows/lookup_int8", &[]))
        });
        assert_eq!(rewritten(&clash), None, "a new name already taken");
        let typed = graph(|g| g.value_info.push(named("rows/lookup_scale")));
        assert_eq!(rewritten(&typed), None, "a new name already typed");
        let with_body = graph(|g| {
            let mut branch = node("If", &["flag"], "branch", &[]);
            branch.attribute.push(AttributeProto {
                name: "then_branch".to_owned(),
                r#type: GRAPH,
                ..AttributeProto::default()
            });
            g.node.push(branch);
        });
        assert_eq!(rewritten(&with_body), None, "a graph with a subgraph");
        let not_onnx = Bytes::from_static(b"not a model");
        assert_eq!(dequantize_after_lookup(&not_onnx).unwrap(), None);
    }
}
