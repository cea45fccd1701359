//! `decisions[].looper` → [`Looper`]: one function per looper type, each checking its bounds
//! and naming its models among the decision's modelRefs (the cascade's escalation order fixed).

use crate::config::error::Errors;
use crate::config::raw::{RawLooper, RawLooperOnError, RawMeasure, RawOrder};
use crate::config::snapshot::{
    CallLimits, ConfidenceLooper, FusionLooper, Looper, Model, OnCallError, RatingsLooper,
    RemomLooper, WorkflowsLooper,
};
use crate::llm::logprobs::Measure;
use crate::selection::Candidate;
use std::time::Duration;

pub(super) fn compile_looper(
    raw: &RawLooper,
    path: &str,
    candidates: &[Candidate],
    models: &[Option<Model>],
    errors: &mut Errors,
) -> Option<Looper> {
    let refs = Refs {
        path: format!("{path}.looper"),
        candidates,
        models,
    };
    match raw {
        RawLooper::Fusion { .. } => fusion(&refs, raw, errors),
        RawLooper::Workflows { .. } => workflows(&refs, raw, errors),
        RawLooper::Remom { .. } => remom(&refs, raw, errors),
        RawLooper::Ratings { .. } => ratings(&refs, raw, errors),
        RawLooper::Confidence { .. } => confidence(&refs, raw, errors),
    }
}

/// What every looper's fields are checked against: its path and the decision's modelRefs.
struct Refs<'a> {
    path: String,
    candidates: &'a [Candidate],
    models: &'a [Option<Model>],
}

impl Refs<'_> {
    fn name_of(&self, candidate: &Candidate) -> &str {
        self.models
            .get(candidate.model)
            .and_then(Option::as_ref)
            .map_or("", |m| &*m.name)
    }

    /// The candidate index of model `wanted`, named in `field`; an error naming the modelRefs
    /// when it is not one of them.
    fn find(&self, field: &str, wanted: &str, errors: &mut Errors) -> Option<usize> {
        let found = self
            .candidates
            .iter()
            .position(|c| self.name_of(c) == wanted);
        if found.is_none() {
            let names: Vec<&str> = self.candidates.iter().map(|c| self.name_of(c)).collect();
            errors.push(
                format!("{}.{field}", self.path),
                format!(
                    "{wanted:?} is not one of this decision's modelRefs ({})",
                    names.join(", ")
                ),
            );
        }
        found
    }
}

/// The looper's call limits (each checked above 0 with the looper's other counts).
fn limits(max_tokens: u64, per_call_ms: u64, total_ms: u64) -> CallLimits {
    CallLimits {
        max_tokens,
        per_call: Duration::from_millis(per_call_ms),
        total: Duration::from_millis(total_ms),
    }
}

/// `type: fusion`: a judge and a finalizer among the modelRefs, the others the panel.
fn fusion(refs: &Refs<'_>, raw: &RawLooper, errors: &mut Errors) -> Option<Looper> {
    let RawLooper::Fusion {
        judge,
        finalizer,
        max_concurrent,
        min_successes,
        max_tokens,
        per_call_timeout_ms,
        total_timeout_ms,
    } = raw
    else {
        return None;
    };
    let (path, candidates) = (&refs.path, refs.candidates);
    let mut ok = all_positive(
        path,
        &[
            ("maxConcurrent", *max_concurrent as u64),
            ("minSuccesses", *min_successes as u64),
            ("maxTokens", *max_tokens),
            ("perCallTimeoutMs", *per_call_timeout_ms),
            ("totalTimeoutMs", *total_timeout_ms),
        ],
        errors,
    );
    let judge = refs.find("judge", judge, errors);
    let finalizer = refs.find("finalizer", finalizer, errors);
    let (Some(judge), Some(finalizer)) = (judge, finalizer) else {
        return None;
    };
    let panel: Vec<usize> = (0..candidates.len())
        .filter(|&i| i != judge && i != finalizer)
        .collect();
    if *min_successes > panel.len() {
        errors.push(
            format!("{path}.minSuccesses"),
            format!(
                "asks for {min_successes} answers from a panel of {} (modelRefs other than the judge and the finalizer)",
                panel.len()
            ),
        );
        ok = false;
    }
    ok.then(|| {
        Looper::Fusion(FusionLooper {
            judge,
            panel: RemomLooper {
                synthesizer: finalizer,
                rounds: vec![panel.len()],
                panel,
                max_concurrent: *max_concurrent,
                min_successes: *min_successes,
                limits: limits(*max_tokens, *per_call_timeout_ms, *total_timeout_ms),
            },
        })
    })
}

/// `type: workflows`: a planner, a finalizer, an optional verifier and the workers.
fn workflows(refs: &Refs<'_>, raw: &RawLooper, errors: &mut Errors) -> Option<Looper> {
    let RawLooper::Workflows {
        planner,
        finalizer,
        verifier,
        workers,
        max_steps,
        max_parallel,
        max_tokens,
        per_call_timeout_ms,
        total_timeout_ms,
        on_error,
    } = raw
    else {
        return None;
    };
    let (path, candidates) = (&refs.path, refs.candidates);
    let mut ok = all_positive(
        path,
        &[
            ("maxSteps", *max_steps as u64),
            ("maxParallel", *max_parallel as u64),
            ("maxTokens", *max_tokens),
            ("perCallTimeoutMs", *per_call_timeout_ms),
            ("totalTimeoutMs", *total_timeout_ms),
        ],
        errors,
    );
    let planner = refs.find("planner", planner, errors);
    let finalizer = refs.find("finalizer", finalizer, errors);
    let verifier = verifier
        .as_ref()
        .map(|name| refs.find("verifier", name, errors));
    let workers: Vec<Option<usize>> = match workers {
        Some(names) => names
            .iter()
            .enumerate()
            .map(|(i, name)| refs.find(&format!("workers[{i}]"), name, errors))
            .collect(),
        None => (0..candidates.len())
            .filter(|&i| Some(i) != planner && Some(i) != finalizer && verifier != Some(Some(i)))
            .map(Some)
            .collect(),
    };
    if workers.is_empty() {
        errors.push(
            format!("{path}.workers"),
            "a workflow needs workers: list them, or add modelRefs besides the planner, finalizer and verifier",
        );
        ok = false;
    }
    let (Some(planner), Some(finalizer)) = (planner, finalizer) else {
        return None;
    };
    let verifier = match verifier {
        Some(Some(v)) => Some(v),
        Some(None) => return None,
        None => None,
    };
    let workers: Option<Vec<usize>> = workers.into_iter().collect();
    let workers = workers?;
    ok.then(|| {
        Looper::Workflows(WorkflowsLooper {
            planner,
            finalizer,
            verifier,
            workers,
            max_steps: *max_steps,
            max_parallel: *max_parallel,
            limits: limits(*max_tokens, *per_call_timeout_ms, *total_timeout_ms),
            on_error: on_call_error(*on_error),
        })
    })
}

/// `type: remom`: a synthesizer, the other modelRefs the panel, one round or a schedule.
fn remom(refs: &Refs<'_>, raw: &RawLooper, errors: &mut Errors) -> Option<Looper> {
    let RawLooper::Remom {
        synthesizer,
        samples,
        breadth,
        max_concurrent,
        min_successes,
        max_tokens,
        per_call_timeout_ms,
        total_timeout_ms,
    } = raw
    else {
        return None;
    };
    let (path, candidates) = (&refs.path, refs.candidates);
    let mut ok = all_positive(
        path,
        &[
            ("samples", *samples as u64),
            ("maxConcurrent", *max_concurrent as u64),
            ("minSuccesses", *min_successes as u64),
            ("maxTokens", *max_tokens),
            ("perCallTimeoutMs", *per_call_timeout_ms),
            ("totalTimeoutMs", *total_timeout_ms),
        ],
        errors,
    );
    let breadth = breadth.clone().unwrap_or_default();
    if let Some(round) = breadth.iter().position(|&calls| calls == 0) {
        errors.push(
            format!("{path}.breadth[{round}]"),
            "a round needs at least one call",
        );
        ok = false;
    }
    if !breadth.is_empty() && *samples != 1 {
        errors.push(
            format!("{path}.samples"),
            "give either `samples` (one round) or `breadth` (a schedule of rounds), not both",
        );
        ok = false;
    }
    let synthesizer_index = refs.find("synthesizer", synthesizer, errors)?;
    let panel: Vec<usize> = (0..candidates.len())
        .filter(|&i| i != synthesizer_index)
        .collect();
    if panel.is_empty() {
        errors.push(
            path.clone(),
            "ReMoM needs a panel: list at least one model besides the synthesizer",
        );
        ok = false;
    }
    let rounds = if breadth.is_empty() {
        vec![panel.len() * samples]
    } else {
        breadth
    };
    let smallest = rounds.iter().min().copied().unwrap_or(0);
    if smallest > 0 && *min_successes > smallest {
        errors.push(
            format!("{path}.minSuccesses"),
            format!("asks for {min_successes} answers from a round of {smallest} panel calls"),
        );
        ok = false;
    }
    ok.then(|| {
        Looper::Remom(RemomLooper {
            synthesizer: synthesizer_index,
            panel,
            rounds,
            max_concurrent: *max_concurrent,
            min_successes: *min_successes,
            limits: limits(*max_tokens, *per_call_timeout_ms, *total_timeout_ms),
        })
    })
}

/// `type: ratings`: every modelRef answers; enough answers must come back.
fn ratings(refs: &Refs<'_>, raw: &RawLooper, errors: &mut Errors) -> Option<Looper> {
    let RawLooper::Ratings {
        max_concurrent,
        min_successes,
        max_tokens,
        per_call_timeout_ms,
        total_timeout_ms,
    } = raw
    else {
        return None;
    };
    let (path, candidates) = (&refs.path, refs.candidates);
    let mut ok = all_positive(
        path,
        &[
            ("maxConcurrent", *max_concurrent as u64),
            ("minSuccesses", *min_successes as u64),
            ("maxTokens", *max_tokens),
            ("perCallTimeoutMs", *per_call_timeout_ms),
            ("totalTimeoutMs", *total_timeout_ms),
        ],
        errors,
    );
    if *min_successes > candidates.len() {
        errors.push(
            format!("{path}.minSuccesses"),
            format!(
                "asks for {min_successes} answers from {} modelRefs",
                candidates.len()
            ),
        );
        ok = false;
    }
    ok.then(|| {
        Looper::Ratings(RatingsLooper {
            max_concurrent: *max_concurrent,
            min_successes: *min_successes,
            limits: limits(*max_tokens, *per_call_timeout_ms, *total_timeout_ms),
        })
    })
}

/// `type: confidence`: at least two modelRefs, escalated in declared or cost order.
fn confidence(refs: &Refs<'_>, raw: &RawLooper, errors: &mut Errors) -> Option<Looper> {
    let RawLooper::Confidence {
        measure,
        threshold,
        order,
        max_tokens,
        per_call_timeout_ms,
        total_timeout_ms,
        on_error,
    } = raw
    else {
        return None;
    };
    let (path, candidates, models) = (&refs.path, refs.candidates, refs.models);
    let mut ok = true;
    if candidates.len() < 2 {
        errors.push(
            path.clone(),
            "a confidence cascade needs at least two modelRefs (tentative models, then the one it escalates to)",
        );
        ok = false;
    }
    if !threshold.is_finite() {
        errors.push(format!("{path}.threshold"), "must be a number");
        ok = false;
    }
    ok &= all_positive(
        path,
        &[
            ("maxTokens", *max_tokens),
            ("perCallTimeoutMs", *per_call_timeout_ms),
            ("totalTimeoutMs", *total_timeout_ms),
        ],
        errors,
    );
    let mut sequence: Vec<usize> = (0..candidates.len()).collect();
    if *order == RawOrder::Cost {
        let price = |c: &Candidate| {
            models
                .get(c.model)
                .and_then(Option::as_ref)
                .and_then(|m| m.pricing)
                .map(|p| p.input_per_million + p.output_per_million)
        };
        if let Some(missing) = candidates.iter().find(|c| price(c).is_none()) {
            let name = models
                .get(missing.model)
                .and_then(Option::as_ref)
                .map_or("?", |m| &*m.name);
            errors.push(
                format!("{path}.order"),
                format!("order: cost reads model cost; declare `pricing` on model {name:?}"),
            );
            ok = false;
        } else {
            sequence.sort_by(|&a, &b| {
                let (pa, pb) = (price(&candidates[a]), price(&candidates[b]));
                pa.unwrap_or(0.0).total_cmp(&pb.unwrap_or(0.0))
            });
        }
    }
    ok.then(|| {
        Looper::Confidence(ConfidenceLooper {
            measure: match measure {
                RawMeasure::AvgLogprob => Measure::AvgLogprob,
                RawMeasure::Margin => Measure::Margin,
                RawMeasure::SelfVerify => Measure::SelfVerify,
            },
            threshold: *threshold,
            order: sequence,
            limits: limits(*max_tokens, *per_call_timeout_ms, *total_timeout_ms),
            on_error: on_call_error(*on_error),
        })
    })
}

fn on_call_error(raw: RawLooperOnError) -> OnCallError {
    match raw {
        RawLooperOnError::Skip => OnCallError::Skip,
        RawLooperOnError::Fail => OnCallError::Fail,
        RawLooperOnError::Fallback => OnCallError::Fallback,
    }
}

/// Reports each `(field, value)` that is 0; true when none is.
fn all_positive(path: &str, fields: &[(&str, u64)], errors: &mut Errors) -> bool {
    let mut ok = true;
    for (field, value) in fields {
        if *value == 0 {
            errors.push(format!("{path}.{field}"), "must be greater than 0");
            ok = false;
        }
    }
    ok
}
