//! The router head's first stage: a softmax classifier of the request's kind, fitted on the
//! training items' grading kinds (`kind` in the traces: code with tests, a word to contain, an
//! exact format, a number) from the shared embedding plus the cheap text features. Telling
//! kinds apart is easy for the embedding; whether a given model gets a given item right is
//! not, which is why the per-model heads read the kind probabilities and not the embedding.

use super::fit::{fit, FitSettings};
use crate::inference::{argmax, Dense};
use crate::records::traces::Traces;
use anyhow::Context;

/// The fitted kind classifier.
pub struct Kinds {
    /// The distinct kinds of the training items, sorted: the classifier's output order.
    pub names: Vec<String>,
    /// `names.len()` outputs over the kind input ([`crate::inference::kind_input`]).
    pub classifier: Dense,
}

/// Fits the kind classifier on the `train` items (`inputs[i]` is item `i`'s kind input). A
/// single kind needs no fit: its classifier is the constant one.
pub fn fit_kinds(
    traces: &Traces,
    inputs: &[Vec<f32>],
    train: &[usize],
    settings: FitSettings,
) -> anyhow::Result<Kinds> {
    let mut names: Vec<String> = train
        .iter()
        .map(|&i| traces.items[i].kind.clone())
        .collect();
    names.sort();
    names.dedup();
    let width = inputs.first().map_or(0, Vec::len);
    if names.len() < 2 {
        return Ok(Kinds {
            names,
            classifier: Dense {
                weight: vec![0.0; width],
                bias: vec![0.0],
                inputs: width,
            },
        });
    }
    let x: Vec<Vec<f32>> = train.iter().map(|&i| inputs[i].clone()).collect();
    let y: Vec<usize> = train
        .iter()
        .map(|&i| names.binary_search(&traces.items[i].kind).unwrap_or(0))
        .collect();
    let (mut layers, _) =
        fit(&x, &y, names.len(), settings, false).context("fitting the request-kind classifier")?;
    let classifier = layers.pop().context("the fit returned no layer")?;
    Ok(Kinds { names, classifier })
}

impl Kinds {
    /// Share of `items` whose most probable kind is their own (a kind the training items lack
    /// counts as a miss).
    pub fn accuracy(&self, traces: &Traces, inputs: &[Vec<f32>], items: &[usize]) -> f64 {
        if items.is_empty() {
            return 0.0;
        }
        let right = items
            .iter()
            .filter(|&&i| {
                let (best, _) = argmax(&self.classifier.apply(&inputs[i]));
                self.names.get(best) == Some(&traces.items[i].kind)
            })
            .count();
        right as f64 / items.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::router::tests::{item, row, settings};

    /// 40 items over `kinds` (item `i` has kind `kinds[i % kinds.len()]`), one model; the first
    /// input tells the kinds apart.
    fn traces(kinds: &[&str]) -> (Traces, Vec<Vec<f32>>) {
        let mut items = Vec::new();
        let mut inputs = Vec::new();
        for i in 0..40 {
            let k = i % kinds.len();
            items.push(item(
                i,
                kinds[k],
                vec![row(i, kinds[k], "m", true, 100.0, 4)],
            ));
            inputs.push(vec![k as f32 * 2.0 - 1.0, (i % 5) as f32 * 0.1]);
        }
        let models = vec!["m".to_owned()];
        (Traces { models, items }, inputs)
    }
    #[test]
    fn kinds_are_learned_in_sorted_order_and_scored_on_other_items() {
        let (traces, inputs) = traces(&["number", "humaneval"]);
        let train: Vec<usize> = (0..30).collect();
        let held: Vec<usize> = (30..40).collect();
        let kinds = fit_kinds(&traces, &inputs, &train, settings()).unwrap();
        assert_eq!(kinds.names, ["humaneval", "number"]);
        assert_eq!(kinds.classifier.outputs(), 2);
        assert_eq!(kinds.accuracy(&traces, &inputs, &held), 1.0);
        // Item 0 is "number" (input −1): the second output wins.
        let (best, _) = argmax(&kinds.classifier.apply(&inputs[0]));
        assert_eq!(kinds.names[best], "number");
    }

    #[test]
    fn one_kind_needs_no_fit() {
        let (traces, inputs) = traces(&["exact"]);
        let train: Vec<usize> = (0..40).collect();
        let kinds = fit_kinds(&traces, &inputs, &train, settings()).unwrap();
        assert_eq!(kinds.names, ["exact"]);
        assert_eq!(kinds.classifier.outputs(), 1);
        assert!(kinds.classifier.weight.iter().all(|w| *w == 0.0));
        assert_eq!(kinds.accuracy(&traces, &inputs, &train), 1.0);
    }
}
