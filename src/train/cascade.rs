//! A confidence cascade as one more candidate of the router head: FIRST answers, and THEN is
//! asked only when FIRST's mean token log-probability is below a threshold. Its outcome on
//! every traced item follows from the two models' rows (FIRST's answer when it was confident
//! enough, else THEN's; the latencies of every call made), so the head learns per request
//! *whether the cascade pays* exactly as it learns a model: its chance of a right answer and
//! its latency. A row without a confidence escalates, as the live cascade does when a reply
//! carries no log-probabilities.

use crate::records::traces::{TraceRow, TracedItem, Traces};
use anyhow::{bail, Context};
use serde::Serialize;
use std::str::FromStr;

/// `FIRST>THEN[@THRESHOLD]`, as `train-router --cascade` takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CascadeSpec {
    /// The model that answers first.
    pub first: String,
    /// The model asked when the first is not confident.
    pub then: String,
    /// A fixed threshold; `None` chooses it on the training items.
    pub threshold: Option<f64>,
}

impl FromStr for CascadeSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let shape = || {
            format!(
                "{text:?}: a cascade is FIRST>THEN or FIRST>THEN@THRESHOLD (two different \
                 models of the traces; a mean log-probability ≤ 0)"
            )
        };
        let (pair, threshold) = match text.split_once('@') {
            Some((pair, level)) => match level.trim().parse::<f64>() {
                Ok(t) if t.is_finite() && t <= 0.0 => (pair, Some(t)),
                _ => return Err(shape()),
            },
            None => (text, None),
        };
        match pair.split_once('>') {
            Some((first, then))
                if !first.trim().is_empty()
                    && !then.trim().is_empty()
                    && first.trim() != then.trim() =>
            {
                Ok(Self {
                    first: first.trim().to_owned(),
                    then: then.trim().to_owned(),
                    threshold,
                })
            }
            _ => Err(shape()),
        }
    }
}

impl CascadeSpec {
    /// The candidate's name in the head and the report.
    pub fn name(&self) -> String {
        format!("{}>{}", self.first, self.then)
    }
}

/// The cascade the head was trained with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cascade {
    /// The candidate's name (`FIRST>THEN`).
    pub name: String,
    /// The model that answers first.
    pub first: String,
    /// The model asked when the first is not confident.
    pub then: String,
    /// Mean token log-probability FIRST's answer needs to be kept.
    pub threshold: f64,
    /// On the training items at that threshold: the cascade's accuracy, and the share of
    /// items it escalated.
    pub training_accuracy: f64,
    /// See `training_accuracy`.
    pub training_escalated: f64,
}

/// Whether the cascade keeps FIRST's answer `row` at `threshold` (a row without a confidence
/// escalates).
fn keeps(row: &TraceRow, threshold: f64) -> bool {
    row.confidence.is_some_and(|c| c >= threshold)
}

/// The cascade's row on one item at `threshold`.
fn simulate(item: &TracedItem, name: &str, first: usize, then: usize, threshold: f64) -> TraceRow {
    let (a, b) = (&item.rows[first], &item.rows[then]);
    let kept = keeps(a, threshold);
    let answered = if kept { a } else { b };
    let both = |x: u64, y: u64| if kept { x } else { x + y };
    TraceRow {
        model: name.to_owned(),
        passed: answered.passed,
        status: answered.status,
        prompt_tokens: both(a.prompt_tokens, b.prompt_tokens),
        completion_tokens: both(a.completion_tokens, b.completion_tokens),
        latency_ms: if kept {
            a.latency_ms
        } else {
            a.latency_ms + b.latency_ms
        },
        ttft_ms: 0.0,
        finish_reason: answered.finish_reason.clone(),
        answer: answered.answer.clone(),
        confidence: None,
        ..a.clone()
    }
}

/// Right answers and escalations of the cascade at `threshold` over `split`.
fn tally(
    traces: &Traces,
    split: &[usize],
    first: usize,
    then: usize,
    threshold: f64,
) -> (usize, usize) {
    split.iter().fold((0, 0), |(right, escalated), &i| {
        let rows = &traces.items[i].rows;
        let kept = keeps(&rows[first], threshold);
        let passed = if kept {
            rows[first].passed
        } else {
            rows[then].passed
        };
        (right + usize::from(passed), escalated + usize::from(!kept))
    })
}

/// The threshold with the most right answers on `train` (fewest escalations on a tie), among
/// FIRST's confidences there: the cascade at its most accurate; the head then decides per
/// request whether that accuracy is worth its compute.
fn choose_threshold(traces: &Traces, train: &[usize], first: usize, then: usize) -> Option<f64> {
    let mut levels: Vec<f64> = train
        .iter()
        .filter_map(|&i| traces.items[i].rows[first].confidence)
        .collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    levels
        .into_iter()
        .map(|level| (level, tally(traces, train, first, then, level)))
        .max_by(|(_, (r1, e1)), (_, (r2, e2))| r1.cmp(r2).then(e2.cmp(e1)))
        .map(|(level, _)| level)
}

/// `traces` with the cascade appended as one more candidate (its threshold chosen on `train`
/// only), and the cascade.
pub fn with_cascade(
    traces: &Traces,
    spec: &CascadeSpec,
    train: &[usize],
) -> anyhow::Result<(Traces, Cascade)> {
    let position = |model: &str| {
        traces
            .models
            .iter()
            .position(|m| m == model)
            .with_context(|| {
                format!(
                    "cascade {}: {model:?} is not a model of the traces ({})",
                    spec.name(),
                    traces.models.join(", ")
                )
            })
    };
    let (first, then) = (position(&spec.first)?, position(&spec.then)?);
    let name = spec.name();
    if traces.models.contains(&name) {
        bail!("cascade {name}: the traces already have a model of that name");
    }
    let measured = train
        .iter()
        .any(|&i| traces.items[i].rows[first].confidence.is_some());
    let chosen = spec
        .threshold
        .or_else(|| choose_threshold(traces, train, first, then));
    let (Some(threshold), true) = (chosen, measured) else {
        bail!(
            "cascade {name}: no training row of {} carries a confidence; record the traces with \
             `mom-router eval --traces OUT --logprobs`",
            spec.first
        );
    };
    let (right, escalated) = tally(traces, train, first, then, threshold);
    let share = |n: usize| super::rounded(n as f64 / train.len().max(1) as f64);
    let cascade = Cascade {
        name: name.clone(),
        first: spec.first.clone(),
        then: spec.then.clone(),
        threshold,
        training_accuracy: share(right),
        training_escalated: share(escalated),
    };
    let mut extended = traces.clone();
    extended.models.push(name.clone());
    for item in &mut extended.items {
        let row = simulate(item, &name, first, then, threshold);
        item.rows.push(row);
    }
    Ok((extended, cascade))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str, passed: bool, latency_ms: f64, confidence: Option<f64>) -> TraceRow {
        TraceRow {
            item: String::new(),
            kind: "exact".to_owned(),
            model: model.to_owned(),
            prompt: String::new(),
            passed,
            status: 200,
            prompt_tokens: 10,
            completion_tokens: 4,
            latency_ms,
            ttft_ms: 0.0,
            finish_reason: "stop".to_owned(),
            answer: format!("{model} says"),
            max_tokens: None,
            confidence,
        }
    }

    /// Items (small's confidence, small right, large right): small is right exactly when it
    /// is confident (≥ −0.2), except one confident mistake at −0.1.
    fn traces() -> Traces {
        let cases = [
            (-0.05, true, true),
            (-0.1, false, true),
            (-0.15, true, false),
            (-0.2, true, true),
            (-0.6, false, true),
            (-0.9, false, false),
        ];
        let items = cases
            .iter()
            .enumerate()
            .map(|(i, &(confidence, small, large))| TracedItem {
                id: format!("{i}"),
                kind: "exact".to_owned(),
                prompt: format!("item {i}"),
                rows: vec![
                    row("large", large, 2000.0, Some(-0.01)),
                    row("small", small, 100.0, Some(confidence)),
                ],
            })
            .collect();
        Traces {
            models: vec!["large".to_owned(), "small".to_owned()],
            items,
        }
    }

    #[test]
    fn the_threshold_is_the_most_accurate_and_the_rows_follow_from_it() {
        let traces = traces();
        let all: Vec<usize> = (0..6).collect();
        let spec: CascadeSpec = "small>large".parse().unwrap();
        let (extended, cascade) = with_cascade(&traces, &spec, &all).unwrap();
        // By hand: at −0.2 small keeps items 0–3 (3 right) and large answers 4 (right) and 5
        // (wrong): 4 of 6, two escalations. −0.15 and −0.05 also get 4 but escalate 3 and 5;
        // −0.6 keeps item 4 (wrong) and −0.9 everything: 3 each.
        assert_eq!(cascade.threshold, -0.2);
        assert_eq!(cascade.training_accuracy, 0.6667);
        assert_eq!(cascade.training_escalated, 0.3333);
        assert_eq!(extended.models, ["large", "small", "small>large"]);
        let kept = &extended.items[2].rows[2];
        assert!(kept.passed && kept.latency_ms == 100.0 && kept.answer == "small says");
        let escalated = &extended.items[5].rows[2];
        assert_eq!(escalated.latency_ms, 2100.0);
        assert_eq!(escalated.completion_tokens, 8);
        assert_eq!(escalated.answer, "large says");
        assert!(!escalated.passed);
        // A fixed threshold is taken as given: at −0.1 items 2 and 3 escalate too.
        let fixed: CascadeSpec = "small>large@-0.1".parse().unwrap();
        assert_eq!(fixed.threshold, Some(-0.1));
        let (extended, cascade) = with_cascade(&traces, &fixed, &all).unwrap();
        assert_eq!(cascade.threshold, -0.1);
        assert_eq!(cascade.training_escalated, 0.6667);
        assert_eq!(extended.items[3].rows[2].latency_ms, 2100.0);
    }

    #[test]
    fn a_row_without_confidence_escalates_and_bad_specs_are_named() {
        let mut traces = traces();
        traces.items[0].rows[1].confidence = None;
        let all: Vec<usize> = (0..6).collect();
        let spec: CascadeSpec = "small>large".parse().unwrap();
        let (extended, _) = with_cascade(&traces, &spec, &all).unwrap();
        assert_eq!(extended.items[0].rows[2].latency_ms, 2100.0);
        for item in &mut traces.items {
            item.rows[1].confidence = None;
        }
        let error = with_cascade(&traces, &spec, &all).unwrap_err().to_string();
        assert!(error.contains("--logprobs"), "{error}");
        let unknown: CascadeSpec = "tiny>large".parse().unwrap();
        let error = with_cascade(&traces, &unknown, &all)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("\"tiny\" is not a model of the traces (large, small)"),
            "{error}"
        );
        let error = with_cascade(&traces, &"small>large@-0.5".parse().unwrap(), &all)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--logprobs"), "{error}");
        assert!("small".parse::<CascadeSpec>().is_err());
        assert!("small>large@0.5".parse::<CascadeSpec>().is_err());
        assert!("small>large@x".parse::<CascadeSpec>().is_err());
        assert!("small>small".parse::<CascadeSpec>().is_err());
    }
}
