//! `mom-router train` and `mom-router eval-signal`: argument shapes and printing; the work is in
//! [`crate::train`].

use crate::train::{self, EvalOptions, FitSettings, Report, Split, TrainOptions};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `mom-router train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Configuration whose `inference.encoder` embeds the examples (the encoder the head will
    /// read in production).
    #[arg(long)]
    config: PathBuf,
    /// Labelled examples, JSON Lines with `text` and `label`.
    #[arg(long)]
    data: PathBuf,
    /// The head's task: the signal type that may load it (`domain`, `jailbreak`).
    #[arg(long)]
    task: String,
    /// Output head file (safetensors).
    #[arg(long)]
    out: PathBuf,
    /// Percentage of examples held out (by text hash) and scored, 1 to 90.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=90))]
    holdout: u32,
    /// Train and score on overlapping word windows, as the jailbreak signal scans.
    #[arg(long)]
    windows: bool,
    /// Hidden layer width; 0 fits a linear (logistic regression) head.
    #[arg(long, default_value_t = 0)]
    hidden: usize,
    /// Passes over the training data.
    #[arg(long, default_value_t = 400)]
    epochs: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = 0.01)]
    learning_rate: f64,
    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.0001)]
    weight_decay: f64,
    /// Rows per optimisation step (shuffled each epoch); 0 uses every row at once.
    #[arg(long, default_value_t = 0)]
    batch_size: usize,
    /// Seed of the initial weights and the shuffling.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Weigh every label equally in the loss, however many examples it has.
    #[arg(long)]
    balance: bool,
    /// Embedding cache file, reused and updated (for the same encoder only).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Temperature-scale the head: fit the temperature on half of the held-out share and
    /// report the expected calibration error before and after on the other half.
    #[arg(long)]
    calibrate: bool,
}

/// Arguments of `mom-router eval-signal`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Configuration that defines the signal.
    #[arg(long)]
    config: PathBuf,
    /// The signal to score.
    #[arg(long)]
    signal: String,
    /// Labelled examples, JSON Lines with `text` and `label`.
    #[arg(long)]
    data: PathBuf,
    /// Data label meaning "should match" (repeatable); makes the score binary.
    #[arg(long)]
    positive: Vec<String>,
    /// Score only the share `train --holdout N` held out.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=90))]
    held_out: Option<u32>,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Also print up to this many examples the signal got wrong.
    #[arg(long, default_value_t = 0)]
    show_mistakes: usize,
    /// Also score each language apart, by whatlang's guess (the `language` signal's detector;
    /// short texts are sometimes named wrongly): a signal right in English and wrong elsewhere
    /// shows here, not in the overall score.
    #[arg(long)]
    by_language: bool,
}

fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("mom-router: {error:#}");
    ExitCode::FAILURE
}

/// Runs `train`.
pub fn run_train(args: TrainArgs) -> ExitCode {
    let options = TrainOptions {
        config: args.config,
        data: args.data,
        task: args.task,
        out: args.out,
        holdout: args.holdout,
        windows: args.windows,
        fit: FitSettings {
            hidden: args.hidden,
            epochs: args.epochs,
            learning_rate: args.learning_rate,
            weight_decay: args.weight_decay,
            batch_size: args.batch_size,
            seed: args.seed,
        },
        balance: args.balance,
        cache: args.cache,
        calibrate: args.calibrate,
    };
    match train::train(&options) {
        Ok(trained) => {
            let calibration = trained.calibration.map_or_else(String::new, |c| {
                format!(
                    "\ncalibration: temperature {:.3} fitted on {} held-out examples; expected \
                     calibration error on the other {}: {:.4} before, {:.4} after",
                    c.temperature, c.fitted_on, c.measured_on, c.ece_before, c.ece_after
                )
            });
            super::write_stdout(&format!(
                "wrote {}\nheld out ({}%):\n{}{calibration}",
                options.out.display(),
                options.holdout,
                trained.report
            ))
        }
        Err(e) => fail(&e),
    }
}

/// Runs `eval`.
pub fn run_eval(args: EvalArgs) -> ExitCode {
    let snapshot = match train::load_config(&args.config) {
        Ok(snapshot) => snapshot,
        Err(e) => return fail(&e),
    };
    let binary = !args.positive.is_empty();
    let options = EvalOptions {
        signal: args.signal,
        data: args.data,
        positive: args.positive,
        split: args.held_out.map_or(Split::All, Split::HeldOut),
        concurrency: args.concurrency,
        by_language: args.by_language,
    };
    let runtime = match super::runtime(super::Threads::Workers(None)) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(train::evaluate_signal(&snapshot, &options)) {
        Ok(scored) => {
            let mut text = scored.report.to_string();
            if !scored.by_language.is_empty() {
                text.push_str("by language (whatlang's guess):\n");
            }
            for (code, report) in &scored.by_language {
                text.push_str(&by_language_line(code, report, binary));
            }
            for mistake in scored.mistakes.iter().take(args.show_mistakes) {
                let snippet: String = mistake.text.chars().take(160).collect();
                text.push_str(&format!(
                    "mistake: truth {} / reported {}: {snippet:?}\n",
                    mistake.truth, mistake.reported
                ));
            }
            super::write_stdout(text.trim_end())
        }
        Err(e) => fail(&e),
    }
}

/// One language's score: its examples, accuracy and, for a binary score, the F1 of the class the
/// signal should match (otherwise macro-F1).
fn by_language_line(code: &str, report: &Report, binary: bool) -> String {
    let f1 = match (binary, report.labels.get(1), report.per_label.get(1)) {
        (true, Some(positive), Some((_, _, f1, n))) => {
            format!("F1 of {positive} {f1:.4} ({n} of them)")
        }
        _ => format!("macro-F1 {:.4}", report.macro_f1),
    };
    format!(
        "  {code}  examples {}  accuracy {:.4}  {f1}\n",
        report.examples, report.accuracy
    )
}
