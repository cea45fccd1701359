//! `mom-router eval-signal`: runs one configured signal over labelled examples, each sent as a
//! single user message through the same neural inputs and evaluation the router uses.

use super::calibrate::expected_calibration_error;
use super::data::{is_held_out, read_examples};
use super::metrics::Report;
use crate::config::Snapshot;
use crate::engine::neural_inputs;
use crate::llm::{ChatRequest, Headers};
use crate::signals::{Needs, ABSTAIN};
use anyhow::Context;
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which examples of the file are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every example.
    All,
    /// Only the share `train` held out with this percentage.
    HeldOut(u32),
}

/// What `mom-router eval-signal` scores.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The signal's name in the configuration.
    pub signal: String,
    /// Labelled examples (JSON Lines: `text`, `label`).
    pub data: PathBuf,
    /// Data labels that mean "the signal should match"; when given, the score is binary
    /// (matched vs not). When empty, the signal's reported label is compared with the data's.
    pub positive: Vec<String>,
    /// Which examples to score.
    pub split: Split,
    /// Requests in flight at once (so the encoder can batch them).
    pub concurrency: usize,
    /// Also score each language apart, as the `language` signal detects it.
    pub by_language: bool,
}

/// What `evaluate_signal` measured.
#[derive(Debug, Clone)]
pub struct Scored {
    /// Every example scored.
    pub report: Report,
    /// The examples the signal got wrong, in data order.
    pub mistakes: Vec<Mistake>,
    /// With [`EvalOptions::by_language`]: the same score per detected language (ISO 639-3 code,
    /// `und` where whatlang makes no guess), most examples first. A short text's guess can be
    /// wrong: of the 56 English questions in `heads/data/ood/domain.jsonl`, 12 are named otherwise.
    pub by_language: Vec<(String, Report)>,
}

/// One example the signal got wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mistake {
    /// The example's text.
    pub text: String,
    /// The data's label.
    pub truth: String,
    /// What the signal reported (its label, `matched` or not).
    pub reported: String,
}

/// Scores the signal on the examples.
pub async fn evaluate_signal(snapshot: &Snapshot, options: &EvalOptions) -> anyhow::Result<Scored> {
    let signal = snapshot
        .signals
        .iter()
        .find(|s| *s.name == *options.signal)
        .with_context(|| format!("no signal named {:?} in the configuration", options.signal))?;
    let needs = Needs::of([&signal.kind]);
    let mut examples = read_examples(&options.data)?;
    if let Split::HeldOut(percent) = options.split {
        examples.retain(|e| is_held_out(&e.text, percent));
    }
    let headers = Headers::new(Vec::new());
    let texts: Vec<String> = examples.iter().map(|e| e.text.clone()).collect();
    let outcomes: Vec<anyhow::Result<Outcome>> = futures_util::stream::iter(examples)
        .map(|example| {
            let headers = &headers;
            async move {
                let body = serde_json::json!({
                    "model": "eval",
                    "messages": [{"role": "user", "content": example.text}],
                });
                let request = ChatRequest::parse(body.to_string().as_bytes())
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                let neural = neural_inputs(snapshot, needs, &request, false).await;
                let result = signal.evaluate(&request, headers, &neural, &|_| None);
                if let Some(error) = result.error {
                    anyhow::bail!("signal {} gave no answer: {error}", signal.name);
                }
                Ok((
                    example.label,
                    result.matched,
                    result.label,
                    result.confidence,
                ))
            }
        })
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    let outcomes = outcomes.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    if options.positive.is_empty() {
        let mut labels: Vec<String> = outcomes
            .iter()
            .flat_map(|(truth, _, predicted, _)| {
                [truth.clone(), predicted.clone().unwrap_or_default()]
            })
            .collect();
        labels.sort();
        labels.dedup();
        let index = |l: &str| labels.iter().position(|x| x == l).unwrap_or_default();
        let pairs: Vec<(usize, usize)> = outcomes
            .iter()
            .map(|(truth, _, predicted, _)| {
                (
                    index(truth),
                    index(predicted.as_deref().unwrap_or_default()),
                )
            })
            .collect();
        let mistakes = mistakes(&texts, &outcomes, |i| pairs[i].0 != pairs[i].1);
        let by_language = by_language(options, &texts, &labels, &pairs);
        let mut report = Report::new(labels, &pairs);
        // How well the reported confidence predicts being right, over the answers given.
        let answered: Vec<(f32, bool)> = outcomes
            .iter()
            .filter(|(_, _, predicted, _)| predicted.as_deref() != Some(ABSTAIN))
            .map(|(truth, _, predicted, confidence)| {
                (
                    *confidence as f32,
                    predicted.as_deref() == Some(truth.as_str()),
                )
            })
            .collect();
        if !answered.is_empty() {
            report.calibration_error = Some(expected_calibration_error(&answered));
        }
        return Ok(Scored {
            report,
            mistakes,
            by_language,
        });
    }
    let positive = options.positive.join("|");
    let pairs: Vec<(usize, usize)> = outcomes
        .iter()
        .map(|(truth, matched, _, _)| {
            (
                usize::from(options.positive.contains(truth)),
                usize::from(*matched),
            )
        })
        .collect();
    let mistakes = mistakes(&texts, &outcomes, |i| pairs[i].0 != pairs[i].1);
    let labels = vec![format!("not {positive}"), positive];
    Ok(Scored {
        by_language: by_language(options, &texts, &labels, &pairs),
        report: Report::new(labels, &pairs),
        mistakes,
    })
}

/// The `(truth, predicted)` pairs scored again per language, as the `language` signal detects
/// each text; empty unless asked for.
fn by_language(
    options: &EvalOptions,
    texts: &[String],
    labels: &[String],
    pairs: &[(usize, usize)],
) -> Vec<(String, Report)> {
    if !options.by_language {
        return Vec::new();
    }
    let mut groups: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
    for (text, pair) in texts.iter().zip(pairs) {
        let code = whatlang::detect(text).map_or("und", |info| info.lang().code());
        groups.entry(code).or_default().push(*pair);
    }
    let mut reports: Vec<(String, Report)> = groups
        .into_iter()
        .map(|(code, pairs)| (code.to_owned(), Report::new(labels.to_vec(), &pairs)))
        .collect();
    reports.sort_by_key(|(_, report)| std::cmp::Reverse(report.examples));
    reports
}

/// What the signal did with one example: the data's label, whether it matched, its label and
/// its confidence.
type Outcome = (String, bool, Option<String>, f64);

fn mistakes(texts: &[String], outcomes: &[Outcome], wrong: impl Fn(usize) -> bool) -> Vec<Mistake> {
    outcomes
        .iter()
        .enumerate()
        .filter(|(i, _)| wrong(*i))
        .map(|(i, (truth, matched, label, _))| Mistake {
            text: texts[i].clone(),
            truth: truth.clone(),
            reported: format!(
                "{} ({})",
                label.as_deref().unwrap_or("-"),
                if *matched { "matched" } else { "not matched" }
            ),
        })
        .collect()
}
