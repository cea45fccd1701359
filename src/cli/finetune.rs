//! `mom-router finetune`: arguments and report.

use crate::train::{self, FinetuneOptions, FinetuneTask};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `finetune`.
#[derive(Debug, Args)]
pub struct FinetuneArgs {
    /// The encoder directory (`config.json`, `model.safetensors`, `tokenizer.json`).
    #[arg(long)]
    encoder: PathBuf,
    /// Labelled examples, JSON Lines with `text` and `label`: one task, with a training head of
    /// its own. Given more than once (with `--windowed`), the tasks train the same layers.
    #[arg(long)]
    data: Vec<PathBuf>,
    /// A task whose examples are read in overlapping word windows, as the jailbreak signal
    /// scans (each window with its example's label; a held-out example scored by its windows).
    #[arg(long)]
    windowed: Vec<PathBuf>,
    /// `FILE=W`: the task read from FILE (as given to `--data` or `--windowed`) pulls the shared
    /// layers with weight W against the others' 1 (its loss multiplied by W).
    #[arg(long, value_name = "FILE=W")]
    weight: Vec<String>,
    /// Output: an encoder directory (created; the same files, the trained layers' weights
    /// changed), or with `--rank` the adapter file.
    #[arg(long)]
    out: PathBuf,
    /// How many of the top layers are trained.
    #[arg(long, default_value_t = 1)]
    layers: usize,
    /// Train a low-rank update of this rank of each dense weight (with the biases and layer
    /// norms) and write it as an adapter file (`adapter:` of a Candle encoder), instead of
    /// every weight.
    #[arg(long)]
    rank: Option<usize>,
    /// The low-rank update's alpha: its multiplier is alpha / rank.
    #[arg(long, default_value_t = 16.0)]
    alpha: f64,
    /// Passes over the training examples.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// AdamW learning rate of the encoder's layers.
    #[arg(long, default_value_t = 5e-5)]
    learning_rate: f64,
    /// AdamW learning rate of the training head.
    #[arg(long, default_value_t = 0.01)]
    head_learning_rate: f64,
    /// Inputs are truncated to this many tokens.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Percentage of examples held out (by text hash, as `train` splits) and scored, 1 to 90.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=90))]
    holdout: u32,
    /// Train on at most this many examples (a seeded choice).
    #[arg(long)]
    limit: Option<usize>,
    /// Seed of the choice and of the batches' order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// The tasks of `args`, each with the weight `--weight` gives it (1 by default).
fn tasks(args: &FinetuneArgs) -> Result<Vec<FinetuneTask>, String> {
    let whole = args.data.iter().map(|data| (data, false));
    let windowed = args.windowed.iter().map(|data| (data, true));
    let mut tasks: Vec<FinetuneTask> = whole
        .chain(windowed)
        .map(|(data, windowed)| FinetuneTask {
            data: data.clone(),
            windowed,
            weight: 1.0,
        })
        .collect();
    for given in &args.weight {
        let parsed = given
            .rsplit_once('=')
            .and_then(|(file, w)| Some((PathBuf::from(file), w.trim().parse::<f64>().ok()?)));
        let Some((file, weight)) = parsed else {
            return Err(format!("--weight {given}: expected FILE=W, W a number"));
        };
        let Some(task) = tasks.iter_mut().find(|t| t.data == file) else {
            return Err(format!(
                "--weight {given}: {} is not a file given to --data or --windowed",
                file.display()
            ));
        };
        task.weight = weight;
    }
    Ok(tasks)
}

/// Runs `finetune`.
pub fn run(args: &FinetuneArgs) -> ExitCode {
    let tasks = match tasks(args) {
        Ok(tasks) => tasks,
        Err(e) => {
            eprintln!("mom-router finetune: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = FinetuneOptions {
        encoder: args.encoder.clone(),
        tasks,
        out: args.out.clone(),
        layers: args.layers,
        rank: args.rank,
        alpha: args.alpha,
        epochs: args.epochs,
        batch_size: args.batch_size,
        learning_rate: args.learning_rate,
        head_learning_rate: args.head_learning_rate,
        max_tokens: args.max_tokens,
        holdout: args.holdout,
        limit: args.limit,
        seed: args.seed,
    };
    match train::finetune(&options) {
        Ok(done) => {
            let losses: Vec<String> = done.losses.iter().map(|l| format!("{l:.4}")).collect();
            let mut report = format!(
                "wrote {}\nloss by epoch {}",
                options.out.display(),
                losses.join(", ")
            );
            for (task, score) in options.tasks.iter().zip(&done.tasks) {
                report.push_str(&format!(
                    "\n{}: trained on {} examples; held out ({}%, {} examples): training head \
                     accuracy {:.4}",
                    task.data.display(),
                    score.trained,
                    options.holdout,
                    score.held_out,
                    score.held_out_accuracy
                ));
            }
            super::write_stdout(&report)
        }
        Err(e) => {
            eprintln!("mom-router finetune: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        args: FinetuneArgs,
    }

    fn tasks_of(line: &str) -> Result<Vec<FinetuneTask>, String> {
        let words = ["finetune", "--encoder", "e", "--out", "o"];
        let words = words.into_iter().chain(line.split_whitespace());
        tasks(
            &Command::try_parse_from(words)
                .map_err(|e| e.to_string())?
                .args,
        )
    }

    #[test]
    fn a_weight_names_the_file_of_its_task() {
        let tasks = tasks_of("--data a.jsonl --windowed b.jsonl --weight b.jsonl=0.5").unwrap();
        let weights: Vec<(bool, f64)> = tasks.iter().map(|t| (t.windowed, t.weight)).collect();
        assert_eq!(weights, [(false, 1.0), (true, 0.5)]);
        let unknown = tasks_of("--data a.jsonl --weight c.jsonl=2").unwrap_err();
        assert!(
            unknown.contains("c.jsonl is not a file given to --data or --windowed"),
            "{unknown}"
        );
        let malformed = tasks_of("--data a.jsonl --weight a.jsonl").unwrap_err();
        assert!(malformed.contains("expected FILE=W"), "{malformed}");
    }
}
