//! Projections compiled into derived signals: each output (`difficulty.hard`) joins the signal
//! table after the ordinary signals, so rules reference it by name and the engine evaluates it
//! after the signals it reads.

use super::BROKEN;
use crate::config::error::Errors;
use crate::config::raw::{RawProjection, RawReading};
use crate::config::snapshot::NameIndex;
use crate::signals::{Projection, ProjectionOutput, Reading, Signal, SignalKind};
use std::sync::Arc;

fn reading(raw: RawReading) -> Reading {
    match raw {
        RawReading::Confidence => Reading::Confidence,
        RawReading::Value => Reading::Value,
        RawReading::Matched => Reading::Matched,
    }
}

/// The output signals of every valid projection. `signal_index` names the ordinary signals
/// (positions below `ordinary`); projections may read only those.
pub(super) fn compile_projections(
    raw: &[(usize, RawProjection)],
    signal_index: &NameIndex,
    errors: &mut Errors,
) -> Vec<Signal> {
    let mut outputs = Vec::new();
    for (i, projection) in raw {
        let path = format!("projections[{i}]");
        let mut resolve = |name: &str, field: String| -> Option<usize> {
            match signal_index.get(name).copied() {
                Some(BROKEN) => None,
                Some(index) => Some(index),
                None => {
                    let mut known: Vec<&str> = signal_index.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    errors.push(
                        format!("{path}.{field}"),
                        format!(
                            "unknown signal {name:?}; known signals: {}",
                            known.join(", ")
                        ),
                    );
                    None
                }
            }
        };
        let (name, compiled) = match projection {
            RawProjection::Score {
                name,
                inputs,
                bands,
            } => {
                let resolved: Vec<Option<(usize, f64, Reading)>> = inputs
                    .iter()
                    .enumerate()
                    .map(|(j, input)| {
                        let index = resolve(&input.signal, format!("inputs[{j}].signal"))?;
                        Some((index, input.weight, reading(input.read)))
                    })
                    .collect();
                let Some(resolved) = resolved.into_iter().collect::<Option<Vec<_>>>() else {
                    continue;
                };
                let bands = bands
                    .iter()
                    .map(|b| (b.name.clone(), b.at_least.unwrap_or(f64::NEG_INFINITY)))
                    .collect();
                (name, Projection::score(name, resolved, bands))
            }
            RawProjection::Partition {
                name,
                members,
                temperature,
            } => {
                let resolved: Vec<Option<(usize, String)>> = members
                    .iter()
                    .enumerate()
                    .map(|(j, member)| {
                        Some((resolve(member, format!("members[{j}]"))?, member.clone()))
                    })
                    .collect();
                let Some(resolved) = resolved.into_iter().collect::<Option<Vec<_>>>() else {
                    continue;
                };
                (name, Projection::partition(name, resolved, *temperature))
            }
        };
        match compiled {
            Ok(projection) => {
                let projection = Arc::new(projection);
                for (output, label) in projection.outputs().iter().enumerate() {
                    outputs.push(Signal {
                        name: format!("{name}.{label}").into(),
                        kind: SignalKind::Projection(ProjectionOutput {
                            projection: projection.clone(),
                            output,
                        }),
                    });
                }
            }
            Err(problems) => {
                for problem in problems {
                    errors.push(format!("{path}.{}", problem.field), problem.message);
                }
            }
        }
    }
    outputs
}
