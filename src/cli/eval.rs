//! `mom-router eval`: runs a suite through Envoy against identities and every fixed model, and
//! writes the scorecard. Exit 0 when the run finished (whatever the scores), 1 when every
//! request of some target failed (the scorecard is still written), 2 when the inputs are
//! unusable.

use crate::eval::{self, grade::Sandbox, report, suite};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The suite (JSON Lines: `id`, `kind` humaneval|choice|exact, `prompt`, …).
    #[arg(long)]
    suite: PathBuf,
    /// What Envoy's mom-router serves (`--config FILE` or `--bundle DIR [--binding FILE]`):
    /// its identities, models and prices.
    #[command(flatten)]
    source: super::SourceArgs,
    /// Envoy's public listener.
    #[arg(long, default_value = "http://127.0.0.1:10000")]
    url: String,
    /// An identity to evaluate (repeatable).
    #[arg(long = "identity", required = true)]
    identities: Vec<String>,
    /// A fixed model to compare with (repeatable); default every configured model.
    #[arg(long = "fixed")]
    fixed: Vec<String>,
    /// Only the first N items.
    #[arg(long)]
    limit: Option<usize>,
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
    /// The Python interpreter that runs HumanEval tests.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the scorecard goes.
    #[arg(long, default_value = "eval-out")]
    out: PathBuf,
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
    if let Some(limit) = args.limit {
        items.truncate(limit.max(1));
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
        snapshot.models.iter().map(|m| m.name.clone()).collect()
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
            .filter_map(|m| m.pricing.map(|p| (m.name.clone(), p)))
            .collect(),
        max_tokens: args.max_tokens,
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        concurrency: args.concurrency,
        sandbox: Sandbox {
            python: args.python.clone(),
            timeout: Duration::from_secs(args.exec_timeout_s.max(1)),
        },
    };
    let runtime = match super::runtime(true) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
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
    let card = report::scorecard(&name, &items, &options, outcomes);
    let silent: Vec<&str> = card
        .summaries
        .iter()
        .filter(|s| s.items > 0 && s.errors == s.items)
        .map(|s| s.target.as_str())
        .collect();
    let written = match report::write(&card, &args.out) {
        Ok(markdown) => super::write_stdout(&markdown),
        Err(e) => return unusable(e),
    };
    if !silent.is_empty() {
        eprintln!(
            "mom-router eval: every request to {} failed (is Envoy listening at {}?); the scorecard is not a measurement",
            silent.join(", "),
            args.url
        );
        return ExitCode::FAILURE;
    }
    written
}
