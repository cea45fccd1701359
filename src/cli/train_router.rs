//! `mom-router train-router`: argument shapes and the printed report; the work is in
//! [`crate::train::train_router`].

use crate::train::{self, CascadeSpec, FitSettings, Grid, Point, RouterOptions, RouterReport};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `mom-router train-router`.
#[derive(Debug, Args)]
pub struct TrainRouterArgs {
    /// Traces written by `mom-router eval --traces` (every item answered by every model).
    #[arg(long)]
    traces: PathBuf,
    /// Configuration whose `inference.encoder` embeds the prompts (the encoder the head will
    /// read in production).
    #[arg(long)]
    config: PathBuf,
    /// Output head file (safetensors).
    #[arg(short, long)]
    out: PathBuf,
    /// Percentage of items held out (by a hash of the item id) and scored, 1 to 90.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=90))]
    holdout: u32,
    /// Passes over the training items (logistic heads).
    #[arg(long, default_value_t = 300)]
    epochs: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = 0.05)]
    learning_rate: f64,
    /// AdamW weight decays tried for the P(correct) heads (cross-validated per model).
    #[arg(long = "weight-decay", default_values_t = [0.01, 0.1, 0.3, 1.0, 3.0, 10.0])]
    weight_decays: Vec<f64>,
    /// AdamW weight decay of the request-kind classifier (the head's first stage).
    #[arg(long, default_value_t = 0.1)]
    kind_weight_decay: f64,
    /// L2 penalties tried for the latency and token regressions (cross-validated per model).
    #[arg(long = "ridge", default_values_t = [0.1, 1.0, 10.0, 100.0])]
    ridges: Vec<f64>,
    /// Folds of the training items for cross-validation.
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// Latency weights (per predicted second) to place on the frontier in the report.
    #[arg(long = "latency-weight", default_values_t = [0.0, 0.002, 0.003, 0.005, 0.0075, 0.0085, 0.01, 0.0125, 0.015, 0.02, 0.03, 0.05, 0.1, 0.5])]
    latency_weights: Vec<f64>,
    /// Seed of the initial weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Embedding cache file, reused and updated (for the same encoder only).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Also learn a confidence cascade as a candidate: `FIRST>THEN` (FIRST answers; THEN is
    /// asked when FIRST's mean token log-probability is below the threshold most accurate on
    /// the training items) or `FIRST>THEN@THRESHOLD` (that threshold). Needs traces recorded
    /// with `eval --logprobs`.
    #[arg(long)]
    cascade: Option<CascadeSpec>,
}

/// Runs `train-router`.
pub fn run(args: TrainRouterArgs) -> ExitCode {
    let options = RouterOptions {
        config: args.config,
        traces: args.traces,
        out: args.out,
        holdout: args.holdout,
        fit: FitSettings {
            hidden: 0,
            epochs: args.epochs,
            learning_rate: args.learning_rate,
            weight_decay: 0.0,
            batch_size: 0,
            seed: args.seed,
        },
        grid: Grid {
            weight_decays: args.weight_decays,
            ridges: args.ridges,
            folds: args.folds,
        },
        kind_weight_decay: args.kind_weight_decay,
        latency_weights: args.latency_weights,
        cache: args.cache,
        cascade: args.cascade,
    };
    match train::train_router(&options) {
        Ok(report) => super::write_stdout(&render(&report, &options)),
        Err(e) => {
            eprintln!("mom-router train-router: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn table(points: &[Point], models: &[String]) -> String {
    let oracle = points.iter().find(|p| p.name == "oracle");
    let mut text = format!(
        "| policy | accuracy | compute s | regret vs oracle | {} |\n",
        models.join(" | ")
    );
    text.push_str(&format!(
        "|---|---:|---:|---:|{}\n",
        "---:|".repeat(models.len())
    ));
    for point in points {
        let regret = oracle.map_or(0.0, |o| o.accuracy - point.accuracy);
        let choices: Vec<String> = point.choices.iter().map(ToString::to_string).collect();
        text.push_str(&format!(
            "| {} | {:.3} | {:.1} | {:+.3} | {} |\n",
            point.name,
            point.accuracy,
            point.compute_ms / 1000.0,
            regret,
            choices.join(" | ")
        ));
    }
    text
}

fn render(report: &RouterReport, options: &RouterOptions) -> String {
    let mut text = format!(
        "wrote {}\ntrained on {} items; held out {} ({}% by id hash)\n\
         request kinds: {} (held out, predicted kind right: {:.3})\n\nper model, held out:\n\
         | model | accuracy | AUC | Brier | latency rel. error |\n|---|---:|---:|---:|---:|\n",
        options.out.display(),
        report.trained,
        report.held_out,
        options.holdout,
        report.kinds.join(", "),
        report.kind_accuracy
    );
    for m in &report.per_model {
        text.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.2} |\n",
            m.model, m.accuracy, m.auc, m.brier, m.latency_relative_error
        ));
    }
    text.push_str("\ncross-validated per model (on the training items):\n");
    for c in &report.chosen {
        text.push_str(&format!(
            "- {}: weight decay {}, out-of-fold log loss {:.3}; ridge {}\n",
            c.model, c.weight_decay, c.log_loss, c.ridge
        ));
    }
    if let Some(c) = &report.cascade {
        text.push_str(&format!(
            "\ncascade {}: {} first, {} when its mean token log-probability is below {:.3} \
             (on the training items at that threshold: accuracy {:.3}, {:.1} % escalated)\n",
            c.name,
            c.first,
            c.then,
            c.threshold,
            c.training_accuracy,
            c.training_escalated * 100.0
        ));
    }
    text.push_str("\nheld out (items sent to each model on the right):\n");
    text.push_str(&table(&report.held_out_points, &report.models));
    text.push_str("\ntraining items, out-of-fold predictions (choose operating points here):\n");
    text.push_str(&table(&report.training_points, &report.models));
    text
}
