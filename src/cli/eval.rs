//! `mom-router eval`: runs a suite through Envoy against identities and every fixed model, and
//! writes the scorecard (and, with `--traces`, the fixed models' traces). Exit 0 when the run
//! finished (whatever the scores), 1 when every request of some target failed or a `--gate`
//! criterion failed (the scorecard is still written), 2 when the inputs are unusable.

use crate::eval::{self, gate, report, sandbox::Sandbox, score::Outcome, suite};
use crate::records::traces::{self, TraceRow};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The suite (JSON Lines: `id`, `kind` humaneval|choice|exact|contains|number, `prompt`, …).
    #[arg(long)]
    suite: PathBuf,
    /// What Envoy's mom-router serves (`--config FILE` or `--bundle DIR [--binding FILE]`):
    /// its identities, models and prices.
    #[command(flatten)]
    source: super::SourceArgs,
    /// Envoy's public listener.
    #[arg(long, default_value = "http://127.0.0.1:10000")]
    url: String,
    /// An identity to evaluate (repeatable; none when only `--traces` of the fixed models are
    /// wanted).
    #[arg(long = "identity")]
    identities: Vec<String>,
    /// A fixed model to compare with (repeatable); default every configured model.
    #[arg(long = "fixed")]
    fixed: Vec<String>,
    /// Only the first N items.
    #[arg(long)]
    limit: Option<usize>,
    /// Only the items `train-router --holdout N` held out (by a hash of the item id): the
    /// split nothing was trained on.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=90))]
    held_out: Option<u32>,
    /// A release gate (YAML): after the scorecard, check its criteria; exit 1 naming each
    /// failed one. The verdicts go to OUT/gate.json.
    #[arg(long)]
    gate: Option<PathBuf>,
    /// `max_tokens` of every request.
    #[arg(long, default_value_t = 384)]
    max_tokens: u32,
    /// Longest wait for one answer, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Longest run of one HumanEval program, in seconds.
    #[arg(long, default_value_t = 10)]
    exec_timeout_s: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Stream every answer (`stream: true`) and record the time to its first chunk in the
    /// scorecard and the traces (`ttftMs`).
    #[arg(long)]
    stream: bool,
    /// Ask every answer's token log-probabilities (`logprobs: true`) and record their mean as
    /// the answer's `confidence` in the traces: what `train-router --cascade` simulates a
    /// confidence cascade from.
    #[arg(long, conflicts_with = "stream")]
    logprobs: bool,
    /// The Python interpreter that runs HumanEval tests.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the scorecard goes.
    #[arg(long, default_value = "eval-out")]
    out: PathBuf,
    /// Also write the fixed models' traces here (JSON Lines, one row per item and model: what
    /// `train-router` learns from).
    #[arg(long)]
    traces: Option<PathBuf>,
}

fn unusable(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mom-router eval: {message}");
    ExitCode::from(2)
}

/// Runs `eval`.
pub fn run(args: EvalArgs) -> ExitCode {
    let source = args.source.source();
    let snapshot = match source.load() {
        Ok(snapshot) => snapshot,
        Err(errors) => return unusable(format!("{}: {errors}", source.describe())),
    };
    let text = match std::fs::read_to_string(&args.suite) {
        Ok(text) => text,
        Err(e) => return unusable(format!("cannot read {}: {e}", args.suite.display())),
    };
    let mut items = match suite::parse(&text) {
        Ok(items) => items,
        Err(e) => return unusable(format!("{}: {e}", args.suite.display())),
    };
    if let Some(percent) = args.held_out {
        items.retain(|item| traces::is_held_out(&item.id, percent));
        if items.is_empty() {
            return unusable(format!(
                "no item of {} is in the held-out {percent}%",
                args.suite.display()
            ));
        }
    }
    if let Some(limit) = args.limit {
        items.truncate(limit.max(1));
    }
    let gate = match &args.gate {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| gate::parse(&text))
        {
            Ok(gate) => Some(gate),
            Err(e) => return unusable(format!("{}: {e}", path.display())),
        },
        None => None,
    };
    if args.identities.is_empty() && args.fixed.is_empty() && args.traces.is_none() {
        return unusable(
            "name an --identity or a --fixed model to evaluate, or --traces to record the fixed models",
        );
    }
    for identity in &args.identities {
        if snapshot.identity(identity).is_none() {
            return unusable(format!(
                "{identity:?} is not an identity of {}",
                source.describe()
            ));
        }
    }
    let fixed = if args.fixed.is_empty() {
        snapshot.models.iter().map(|m| m.name.to_string()).collect()
    } else {
        args.fixed.clone()
    };
    if let Some(unknown) = fixed.iter().find(|m| snapshot.model_index(m).is_none()) {
        return unusable(format!(
            "{unknown:?} is not a model of {}",
            source.describe()
        ));
    }
    let options = eval::Options {
        url: args.url.clone(),
        identities: args.identities.clone(),
        fixed,
        pricing: snapshot
            .models
            .iter()
            .filter_map(|m| m.pricing.map(|p| (m.name.to_string(), p)))
            .collect(),
        power_watts: snapshot
            .models
            .iter()
            .filter_map(|m| m.power_watts.map(|w| (m.name.to_string(), w)))
            .collect(),
        max_tokens: args.max_tokens,
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        concurrency: args.concurrency,
        sandbox: Sandbox {
            python: args.python.clone(),
            timeout: Duration::from_secs(args.exec_timeout_s.max(1)),
        },
        stream: args.stream,
        logprobs: args.logprobs,
    };
    let runtime = match super::runtime(super::Threads::Workers(None)) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    if items
        .iter()
        .any(|i| i.kind == crate::eval::suite::Kind::Humaneval)
    {
        eprintln!(
            "mom-router eval: code runs in a sandbox: {}",
            crate::eval::sandbox::isolation()
        );
    }
    let total = (items.len() * options.targets().len()) as u64;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let tick = |outcome: &eval::score::Outcome| {
        bar.set_message(format!("{} {}", outcome.target, outcome.item));
        bar.inc(1);
    };
    let outcomes = runtime.block_on(eval::run(&items, &options, &tick));
    bar.finish_and_clear();
    let name = args
        .suite
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(path) = &args.traces {
        let rows = trace_rows(&items, &options, &outcomes);
        if let Err(e) = std::fs::write(path, traces::to_jsonl(&rows)) {
            return unusable(format!("cannot write {}: {e}", path.display()));
        }
    }
    let card = report::scorecard(&name, &items, &options, outcomes);
    let silent: Vec<&str> = card
        .summaries
        .iter()
        .filter(|s| s.items > 0 && s.errors == s.items)
        .map(|s| s.target.as_str())
        .collect();
    let verdicts = gate.as_ref().map(|gate| gate::check(gate, &card));
    let appendix = verdicts
        .as_deref()
        .map(|v| format!("\n{}", gate::render(v)))
        .unwrap_or_default();
    let written = match report::write(&card, &args.out, &appendix) {
        Ok(markdown) => super::write_stdout(&markdown),
        Err(e) => return unusable(e),
    };
    if let Some(verdicts) = &verdicts {
        let path = args.out.join("gate.json");
        let json = serde_json::to_string_pretty(verdicts).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, json + "\n") {
            return unusable(format!("cannot write {}: {e}", path.display()));
        }
    }
    let failed_gate = verdicts.iter().flatten().any(|v| !v.passed);
    if !silent.is_empty() {
        eprintln!(
            "mom-router eval: every request to {} failed (is Envoy listening at {}?); the scorecard is not a measurement",
            silent.join(", "),
            args.url
        );
        return ExitCode::FAILURE;
    }
    if failed_gate {
        eprintln!("mom-router eval: the release gate failed (see the FAIL lines; verdicts in {}/gate.json)", args.out.display());
        return ExitCode::FAILURE;
    }
    written
}

/// The fixed models' outcomes as trace rows, item by item.
fn trace_rows(
    items: &[suite::Item],
    options: &eval::Options,
    outcomes: &[Outcome],
) -> Vec<TraceRow> {
    let by_id: std::collections::HashMap<&str, &suite::Item> =
        items.iter().map(|i| (i.id.as_str(), i)).collect();
    outcomes
        .iter()
        .filter(|o| options.fixed.contains(&o.target))
        .filter_map(|o| {
            let item = by_id.get(o.item.as_str())?;
            Some(TraceRow {
                item: o.item.clone(),
                kind: item.kind.name().to_owned(),
                model: o.target.clone(),
                prompt: suite::user_message(item),
                passed: o.score >= 1.0,
                status: o.status,
                prompt_tokens: o.prompt_tokens,
                completion_tokens: o.completion_tokens,
                latency_ms: o.latency_ms,
                ttft_ms: if options.stream { o.ttft_ms } else { 0.0 },
                finish_reason: o.finish_reason.clone(),
                answer: o.answer.clone(),
                max_tokens: Some(item.max_tokens.unwrap_or(options.max_tokens)),
                confidence: o.confidence,
            })
        })
        .collect()
}
