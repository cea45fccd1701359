//! Projections: evidence derived from other signals' results. A `score` projection is a weighted
//! sum of signal confidences, values or match flags, cut into named bands (`difficulty.easy`,
//! `difficulty.hard`); a `partition` is a softmax over competing signals whose winner alone
//! holds (`intent.code` vs `intent.math`). Each output is referenced in decisions like a signal.

use super::SignalError;

/// Which part of a signal's result a score reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Its confidence (0..=1).
    Confidence,
    /// Its measured value (0 when it has none).
    Value,
    /// 1 when it matched, else 0.
    Matched,
}

/// What a projection reads of one earlier signal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Input {
    /// Whether it matched.
    pub matched: bool,
    /// Its confidence.
    pub confidence: f64,
    /// Its value, if any.
    pub value: Option<f64>,
}

/// The two projection shapes.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Score {
        /// `(signal index, weight, reading)`.
        inputs: Vec<(usize, f64, Reading)>,
        /// Each band's lowest score, ascending (one per output).
        lowest: Vec<f64>,
    },
    Partition {
        /// Each member's signal index (one per output).
        members: Vec<usize>,
        temperature: f64,
    },
}

/// A compiled projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// Its name; outputs are `name.output`.
    pub name: String,
    /// Output names: the bands, or the members.
    outputs: Vec<String>,
    shape: Shape,
}

/// One evaluation: the score (weighted sum, or the winner's softmax probability), the index of
/// the output that holds (if any) and the confidence in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The weighted sum, or the winner's probability.
    pub score: f64,
    /// The output that holds.
    pub winner: Option<usize>,
    /// Confidence in the winner.
    pub confidence: f64,
}

impl Projection {
    /// A weighted sum cut into bands; `bands` are `(name, lowest score)` in ascending order.
    pub fn score(
        name: &str,
        inputs: Vec<(usize, f64, Reading)>,
        bands: Vec<(String, f64)>,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        if inputs.is_empty() {
            errors.push(SignalError::new("inputs", "list at least one input signal"));
        }
        if bands.is_empty() {
            errors.push(SignalError::new("bands", "list at least one band"));
        }
        for (i, pair) in bands.windows(2).enumerate() {
            if pair[1].1 <= pair[0].1 {
                errors.push(SignalError::new(
                    format!("bands[{}].atLeast", i + 1),
                    format!(
                        "bands must rise: {} is not above the previous band's {}",
                        pair[1].1, pair[0].1
                    ),
                ));
            }
        }
        errors.extend(duplicate_names(
            bands.iter().map(|(n, _)| n.as_str()),
            "bands",
        ));
        if !errors.is_empty() {
            return Err(errors);
        }
        let (outputs, lowest) = bands.into_iter().unzip();
        Ok(Self {
            name: name.to_owned(),
            outputs,
            shape: Shape::Score { inputs, lowest },
        })
    }

    /// A softmax over competing signals at `temperature`; `members` are `(signal, name)`.
    pub fn partition(
        name: &str,
        members: Vec<(usize, String)>,
        temperature: f64,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        if members.len() < 2 {
            errors.push(SignalError::new(
                "members",
                "a partition chooses between at least two signals",
            ));
        }
        if !(temperature > 0.0 && temperature.is_finite()) {
            errors.push(SignalError::new(
                "temperature",
                format!("must be a positive number, got {temperature}"),
            ));
        }
        errors.extend(duplicate_names(
            members.iter().map(|(_, n)| n.as_str()),
            "members",
        ));
        if !errors.is_empty() {
            return Err(errors);
        }
        let (members, outputs) = members.into_iter().unzip();
        Ok(Self {
            name: name.to_owned(),
            outputs,
            shape: Shape::Partition {
                members,
                temperature,
            },
        })
    }

    /// Output names, in output order.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// The signal indices it reads.
    pub fn inputs(&self) -> Vec<usize> {
        match &self.shape {
            Shape::Score { inputs, .. } => inputs.iter().map(|(i, _, _)| *i).collect(),
            Shape::Partition { members, .. } => members.clone(),
        }
    }

    /// Evaluates the projection; `read` gives an earlier signal's result (absent counts as not
    /// matched, confidence 0).
    pub fn evaluate(&self, read: impl Fn(usize) -> Option<Input>) -> Outcome {
        let input = |i: usize| {
            read(i).unwrap_or(Input {
                matched: false,
                confidence: 0.0,
                value: None,
            })
        };
        match &self.shape {
            Shape::Score { inputs, lowest } => {
                let score: f64 = inputs
                    .iter()
                    .map(|&(index, weight, reading)| {
                        let found = input(index);
                        weight
                            * match reading {
                                Reading::Confidence => found.confidence,
                                Reading::Value => found.value.unwrap_or(0.0),
                                Reading::Matched => f64::from(u8::from(found.matched)),
                            }
                    })
                    .sum();
                let winner = lowest.iter().rposition(|bound| score >= *bound);
                Outcome {
                    score,
                    winner,
                    confidence: if winner.is_some() { 1.0 } else { 0.0 },
                }
            }
            Shape::Partition {
                members,
                temperature,
            } => {
                // Only members that matched compete; their confidences go through a softmax.
                let competing: Vec<(usize, f64)> = members
                    .iter()
                    .enumerate()
                    .map(|(k, index)| (k, input(*index)))
                    .filter(|(_, found)| found.matched)
                    .map(|(k, found)| (k, found.confidence))
                    .collect();
                let Some(top) = competing.iter().map(|(_, c)| *c).reduce(f64::max) else {
                    return Outcome {
                        score: 0.0,
                        winner: None,
                        confidence: 0.0,
                    };
                };
                let weights: Vec<f64> = competing
                    .iter()
                    .map(|(_, c)| ((c - top) / temperature).exp())
                    .collect();
                let total: f64 = weights.iter().sum();
                let (best, weight) = competing
                    .iter()
                    .zip(&weights)
                    .map(|((k, _), w)| (*k, *w))
                    .fold((0, f64::MIN), |b, (k, w)| if w > b.1 { (k, w) } else { b });
                let probability = weight / total;
                Outcome {
                    score: probability,
                    winner: Some(best),
                    confidence: probability,
                }
            }
        }
    }
}

fn duplicate_names<'a>(names: impl Iterator<Item = &'a str>, field: &str) -> Vec<SignalError> {
    let mut seen = Vec::new();
    let mut errors = Vec::new();
    for (i, name) in names.enumerate() {
        if seen.contains(&name) {
            errors.push(SignalError::new(
                format!("{field}[{i}]"),
                format!("duplicate output {name:?}"),
            ));
        }
        seen.push(name);
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(matched: bool, confidence: f64, value: Option<f64>) -> Option<Input> {
        Some(Input {
            matched,
            confidence,
            value,
        })
    }

    fn difficulty() -> Projection {
        Projection::score(
            "difficulty",
            vec![(0, 0.5, Reading::Confidence), (1, 0.001, Reading::Value)],
            vec![
                ("easy".to_owned(), f64::MIN),
                ("medium".to_owned(), 0.4),
                ("hard".to_owned(), 0.8),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_score_lands_in_the_band_its_inputs_put_it_in() {
        let p = difficulty();
        assert_eq!(p.outputs(), vec!["easy", "medium", "hard"]);
        // 0.5 * 0.2 + 0.001 * 100 = 0.2 → easy.
        let easy = p.evaluate(|i| [input(true, 0.2, None), input(true, 1.0, Some(100.0))][i]);
        assert_eq!(easy.winner, Some(0));
        assert!((easy.score - 0.2).abs() < 1e-12);
        // 0.5 * 0.9 + 0.001 * 500 = 0.95 → hard.
        let hard = p.evaluate(|i| [input(true, 0.9, None), input(true, 1.0, Some(500.0))][i]);
        assert_eq!(hard.winner, Some(2));
    }

    #[test]
    fn a_partition_picks_the_most_confident_matching_member() {
        let p = Projection::partition(
            "intent",
            vec![(0, "code".to_owned()), (1, "math".to_owned())],
            0.1,
        )
        .unwrap();
        let code = p.evaluate(|i| [input(true, 0.9, None), input(true, 0.7, None)][i]);
        assert_eq!(code.winner, Some(0));
        assert!(code.confidence > 0.85 && code.confidence < 0.9, "{code:?}");
        // The stronger member did not match: the other wins outright.
        let math = p.evaluate(|i| [input(false, 0.99, None), input(true, 0.6, None)][i]);
        assert_eq!((math.winner, math.confidence), (Some(1), 1.0));
        let none = p.evaluate(|_| input(false, 0.9, None));
        assert_eq!(none.winner, None);
    }

    #[test]
    fn bad_shapes_name_their_field() {
        let falling = Projection::score(
            "x",
            vec![(0, 1.0, Reading::Matched)],
            vec![("a".to_owned(), 0.5), ("b".to_owned(), 0.2)],
        )
        .unwrap_err();
        assert_eq!(falling[0].field, "bands[1].atLeast");
        let lonely = Projection::partition("y", vec![(0, "a".to_owned())], 0.0).unwrap_err();
        let fields: Vec<&str> = lonely.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["members", "temperature"]);
    }
}
