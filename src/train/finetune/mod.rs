//! `mom-router finetune`: the sentence encoder's top layers trained on labelled examples, so that
//! its embedding separates the labels a head reads, where the frozen encoder only offers what it
//! learned elsewhere. The lower layers stay frozen: each example's hidden states below the
//! trained layers are computed once, and every epoch runs only the top layers, mean pooling,
//! L2 normalisation (as the served encoder pools) and a linear head forward and backward. Several
//! tasks (one labelled set each, with a training head of its own) train the same layers, so one
//! forward of the result serves every head fitted on it. The result is an encoder directory the
//! Candle backend loads like the original, or a low-rank adapter either backend applies (its
//! heads are then fitted on it by `mom-router train`); each set's held-out share (by text hash,
//! as `train` splits) is never trained on.

mod layer;
mod states;

use layer::{additive_mask, parse_weights, write_weights, TrainableLayer, Training, Weights};
use states::{batches, lower_all, lower_model, padded, shuffled, Lower};

use super::data::{is_held_out, label_set, read_examples};
use crate::inference::tokenize::TextTokenizer;
use crate::inference::{weights_sha256, write_adapter, AdapterTensor};
use crate::signals::text::windows;
use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use candle_transformers::models::bert::Config;
use std::path::{Path, PathBuf};

/// One labelled set the encoder is trained for, with a training head of its own.
#[derive(Debug, Clone)]
pub struct FinetuneTask {
    /// Labelled examples (JSON Lines: `text`, `label`).
    pub data: PathBuf,
    /// Each example read in overlapping word windows, as the jailbreak signal scans, each window
    /// with the example's label; a held-out example is scored by its windows' largest
    /// probabilities.
    pub windowed: bool,
    /// The multiplier of this task's loss: how hard its batches pull the shared layers against
    /// the other tasks' (AdamW scales each step by the gradients' recent size, so one task alone
    /// trains alike at any weight).
    pub weight: f64,
}

/// What `mom-router finetune` trains.
#[derive(Debug, Clone)]
pub struct FinetuneOptions {
    /// The encoder: `config.json`, `model.safetensors` and `tokenizer.json`.
    pub encoder: PathBuf,
    /// The tasks trained together (at least one).
    pub tasks: Vec<FinetuneTask>,
    /// Where to write the trained encoder (a directory, created).
    pub out: PathBuf,
    /// How many of the top layers are trained.
    pub layers: usize,
    /// Train a low-rank update of this rank (with the biases and layer norms) and write it as
    /// an adapter file; `None` trains every weight and writes a whole encoder directory.
    pub rank: Option<usize>,
    /// The low-rank update's alpha (its multiplier is alpha / rank).
    pub alpha: f64,
    /// Passes over the training examples.
    pub epochs: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// AdamW learning rate of the encoder's layers.
    pub learning_rate: f64,
    /// AdamW learning rate of the training heads.
    pub head_learning_rate: f64,
    /// Inputs are truncated to this many tokens.
    pub max_tokens: usize,
    /// Percentage of examples held out (by text hash) and scored, never trained on.
    pub holdout: u32,
    /// Train on at most this many examples of each task (a seeded choice), for a quicker run.
    pub limit: Option<usize>,
    /// Seed of the choice and of the order of the batches.
    pub seed: u64,
}

/// What a fine-tuning run measured on one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskScore {
    /// Examples trained on.
    pub trained: usize,
    /// Held-out examples scored.
    pub held_out: usize,
    /// The task's training head's accuracy on its held-out examples after training.
    pub held_out_accuracy: f64,
}

/// What a fine-tuning run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Finetuned {
    /// Each task's scores, in the order given.
    pub tasks: Vec<TaskScore>,
    /// Mean training loss of each epoch (over every task's batches).
    pub losses: Vec<f64>,
}

/// One task's inputs below the trained layers, its labels, and how many examples each side has.
struct TaskInputs {
    labels: usize,
    train: Vec<Lower>,
    held: Vec<Lower>,
    trained: usize,
    held_out: usize,
}

/// The trained top layers with one training head per task.
struct Top {
    layers: Vec<TrainableLayer>,
    heads: Vec<(Var, Var)>,
}

impl Top {
    fn logits(&self, task: usize, states: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let additive = additive_mask(mask)?;
        let mut hidden = states.clone();
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &additive)?;
        }
        let (weight, bias) = &self.heads[task];
        pooled(&hidden, mask)?
            .matmul(&weight.t()?)?
            .broadcast_add(bias.as_tensor())
    }
}

/// The pooled, L2-normalised embedding of `hidden` under `mask`, as the served encoder pools.
fn pooled(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
    let mean = summed.broadcast_div(&weights.sum(1)?)?;
    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
    mean.broadcast_div(&(norm + 1e-12)?)
}

/// Held-out accuracy of a task's training head: each example's guess is the label of largest
/// probability, over its windows' largest probabilities when it was read in windows.
fn accuracy(top: &Top, task: usize, inputs: &[Lower], size: usize) -> anyhow::Result<f64> {
    let mut best: std::collections::BTreeMap<usize, (Vec<f32>, u32)> = Default::default();
    for chunk in inputs.chunks(size.max(1)) {
        let refs: Vec<&Lower> = chunk.iter().collect();
        let (states, mask) = padded(&refs)?;
        let logits = top.logits(task, &states, &mask)?;
        let probabilities: Vec<Vec<f32>> =
            candle_nn::ops::softmax(&logits, D::Minus1)?.to_vec2()?;
        for (p, input) in probabilities.into_iter().zip(chunk) {
            let (seen, _) = best
                .entry(input.example)
                .or_insert_with(|| (vec![0.0; p.len()], input.label));
            for (s, v) in seen.iter_mut().zip(p) {
                *s = s.max(v);
            }
        }
    }
    let right = best
        .values()
        .filter(|(p, label)| {
            let guess = p
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i as u32);
            guess == Some(*label)
        })
        .count();
    Ok(right as f64 / best.len().max(1) as f64)
}

/// Reads the encoder's `config.json`.
fn read_config(dir: &Path) -> anyhow::Result<Config> {
    let path = dir.join("config.json");
    let text = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{}: not a BERT config", path.display()))
}

/// The trained variables as an adapter's tensors, with `NAME.absmax` (the largest |value| of
/// each row of `weights`' `NAME`) beside each low-rank pair, by which the encoder the adapter
/// belongs to is recognised in an int8 export of it.
fn adapter_tensors(
    weights: &Weights,
    vars: &[(String, Var)],
) -> candle_core::Result<Vec<AdapterTensor>> {
    let mut tensors = Vec::with_capacity(vars.len() * 2);
    for (name, var) in vars {
        let tensor = var.as_tensor();
        tensors.push(AdapterTensor::new(
            name.clone(),
            tensor.dims().to_vec(),
            tensor.flatten_all()?.to_vec1()?,
        ));
        let Some(weight) = name.strip_suffix(".down") else {
            continue;
        };
        let base = weights
            .get(weight)
            .ok_or_else(|| candle_core::Error::Msg(format!("no weight {weight}")))?;
        let absmax: Vec<f32> = base.abs()?.max(1)?.to_vec1()?;
        tensors.push(AdapterTensor::new(
            format!("{weight}.absmax"),
            vec![absmax.len()],
            absmax,
        ));
    }
    Ok(tensors)
}

/// Writes the encoder directory `options.out`: the original's files, `vars` in place of their
/// tensors.
fn write_encoder(
    options: &FinetuneOptions,
    weights: &Weights,
    vars: &[(String, Var)],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(options.encoder.join(file), options.out.join(file))
            .with_context(|| format!("cannot copy {file} to {}", options.out.display()))?;
    }
    write_weights(weights, vars, &options.out.join("model.safetensors"))?;
    Ok(())
}

/// Reads `task`'s examples and computes their inputs below the trained layers.
fn task_inputs(
    task: &FinetuneTask,
    options: &FinetuneOptions,
    lower: &candle_transformers::models::bert::BertModel,
    tokenizer: &TextTokenizer,
) -> anyhow::Result<TaskInputs> {
    let examples = read_examples(&task.data)?;
    let labels = label_set(&examples);
    let index = |label: &str| labels.iter().position(|l| l == label).unwrap_or(0) as u32;
    let (held, mut train): (Vec<_>, Vec<_>) = examples
        .iter()
        .partition(|e| is_held_out(&e.text, options.holdout));
    if let Some(limit) = options.limit {
        shuffled(&mut train, options.seed);
        train.truncate(limit);
    }
    if train.is_empty() || held.is_empty() {
        bail!("{}: nothing to train on or to score", task.data.display());
    }
    let inputs = |set: &[&super::Example]| -> Vec<(String, u32, usize)> {
        let mut out = Vec::with_capacity(set.len());
        for (i, example) in set.iter().enumerate() {
            let label = index(&example.label);
            if task.windowed {
                out.extend(windows(&example.text).into_iter().map(|w| (w, label, i)));
            } else {
                out.push((example.text.clone(), label, i));
            }
        }
        out
    };
    Ok(TaskInputs {
        labels: labels.len(),
        train: lower_all(lower, tokenizer, &inputs(&train))?,
        held: lower_all(lower, tokenizer, &inputs(&held))?,
        trained: train.len(),
        held_out: held.len(),
    })
}

/// Every task's batches of one epoch, as (task, inputs): one task's batches in a seeded order,
/// several tasks' interleaved in another.
fn epoch_order(
    tasks: &[TaskInputs],
    size: usize,
    seed: u64,
) -> candle_core::Result<Vec<(usize, Vec<usize>)>> {
    let mut order = Vec::new();
    for (t, task) in tasks.iter().enumerate() {
        let task_seed = seed.wrapping_add((t as u64) << 32);
        order.extend(
            batches(&task.train, size, task_seed)?
                .into_iter()
                .map(|b| (t, b)),
        );
    }
    if tasks.len() > 1 {
        shuffled(&mut order, seed.wrapping_add(2));
    }
    Ok(order)
}

/// Trains the top layers and writes the encoder, or its adapter, to `options.out`.
pub fn finetune(options: &FinetuneOptions) -> anyhow::Result<Finetuned> {
    let config = read_config(&options.encoder)?;
    if options.layers == 0 || options.layers > config.num_hidden_layers {
        bail!(
            "--layers must be 1 to {} (the encoder's layers), not {}",
            config.num_hidden_layers,
            options.layers
        );
    }
    if options.tasks.is_empty() {
        bail!("no labelled set to train on");
    }
    if let Some(task) = options
        .tasks
        .iter()
        .find(|t| !(t.weight.is_finite() && t.weight > 0.0))
    {
        bail!(
            "{}: the weight must be a positive number, not {}",
            task.data.display(),
            task.weight
        );
    }
    let training = match options.rank {
        None => Training::Whole,
        Some(0) => bail!("--rank must be at least 1"),
        Some(rank) => Training::LowRank {
            rank,
            scale: options.alpha / rank as f64,
            seed: options.seed,
        },
    };
    let tokenizer =
        TextTokenizer::load(&options.encoder.join("tokenizer.json"), options.max_tokens)?;
    let weights_path = options.encoder.join("model.safetensors");
    let weights_bytes = std::fs::read(&weights_path)
        .with_context(|| format!("cannot read {}", weights_path.display()))?;
    let weights = parse_weights(&weights_bytes)
        .with_context(|| format!("cannot read {}", weights_path.display()))?;
    let lower = lower_model(&weights, &config, options.layers)?;
    let started = std::time::Instant::now();
    let mut tasks = Vec::with_capacity(options.tasks.len());
    for task in &options.tasks {
        let inputs = task_inputs(task, options, &lower, &tokenizer)?;
        tracing::info!(
            data = %task.data.display(),
            trained = inputs.trained,
            inputs = inputs.train.len(),
            held_out = inputs.held_out,
            seconds = started.elapsed().as_secs(),
            "lower layers computed"
        );
        tasks.push(inputs);
    }

    let mut vars = Vec::new();
    let mut layers = Vec::new();
    for i in config.num_hidden_layers - options.layers..config.num_hidden_layers {
        let (layer, layer_vars) = TrainableLayer::load(
            &weights,
            i,
            config.num_attention_heads,
            config.layer_norm_eps,
            training,
        )?;
        layers.push(layer);
        vars.extend(layer_vars);
    }
    let width = config.hidden_size;
    let heads = tasks
        .iter()
        .map(|t| {
            Ok((
                Var::zeros((t.labels, width), DType::F32, &Device::Cpu)?,
                Var::zeros(t.labels, DType::F32, &Device::Cpu)?,
            ))
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    let top = Top { layers, heads };
    let params = |lr| ParamsAdamW {
        lr,
        weight_decay: 0.01,
        ..Default::default()
    };
    let encoder_vars = vars.iter().map(|(_, v)| v.clone()).collect();
    let mut encoder_opt = AdamW::new(encoder_vars, params(options.learning_rate))?;
    let head_vars = top
        .heads
        .iter()
        .flat_map(|(w, b)| [w.clone(), b.clone()])
        .collect();
    let mut head_opt = AdamW::new(head_vars, params(options.head_learning_rate))?;
    let mut losses = Vec::new();
    for epoch in 0..options.epochs {
        let mut total = 0.0;
        let order = epoch_order(&tasks, options.batch_size, options.seed + epoch as u64)?;
        for (step, (task, batch)) in order.iter().enumerate() {
            if step % 100 == 0 {
                tracing::info!(epoch, step, of = order.len(), "training");
            }
            let refs: Vec<&Lower> = batch.iter().map(|&i| &tasks[*task].train[i]).collect();
            let (states, mask) = padded(&refs)?;
            let targets: Vec<u32> = refs.iter().map(|e| e.label).collect();
            let targets = Tensor::from_vec(targets, refs.len(), &Device::Cpu)?;
            let logits = top.logits(*task, &states, &mask)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &targets)?;
            let grads = (&loss * options.tasks[*task].weight)?.backward()?;
            encoder_opt.step(&grads)?;
            head_opt.step(&grads)?;
            total += f64::from(loss.to_scalar::<f32>()?);
        }
        let mean = total / order.len().max(1) as f64;
        tracing::info!(
            epoch,
            loss = mean,
            seconds = started.elapsed().as_secs(),
            "epoch"
        );
        losses.push(mean);
    }
    let scores = tasks
        .iter()
        .enumerate()
        .map(|(t, task)| {
            Ok(TaskScore {
                trained: task.trained,
                held_out: task.held_out,
                held_out_accuracy: accuracy(&top, t, &task.held, options.batch_size)?,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    match training {
        Training::Whole => write_encoder(options, &weights, &vars)?,
        Training::LowRank { scale, .. } => {
            write_adapter(
                &options.out,
                &adapter_tensors(&weights, &vars)?,
                scale,
                &weights_sha256(&weights_bytes),
            )
            .map_err(anyhow::Error::msg)?;
        }
    }
    Ok(Finetuned {
        tasks: scores,
        losses,
    })
}

#[cfg(test)]
mod tests {
    use super::states::lower_states;
    use super::*;

    fn minilm() -> PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/models/all-MiniLM-L6-v2");
        assert!(
            dir.exists(),
            "{} is missing: run ./scripts/fetch-models.sh (./scripts/test.sh does)",
            dir.display()
        );
        dir
    }

    /// The frozen lower layers, then the trainable top layers with the file's weights, give the
    /// embedding the whole encoder gives: the fine-tuned forward is the served one.
    #[test]
    fn lower_then_trainable_layers_embed_as_the_whole_encoder() {
        let dir = minilm();
        let config = read_config(&dir).unwrap();
        let tokenizer = TextTokenizer::load(&dir.join("tokenizer.json"), 128).unwrap();
        let weights =
            parse_weights(&std::fs::read(dir.join("model.safetensors")).unwrap()).unwrap();
        let texts = [
            "How do vaccines train the immune system?",
            "Find the eigenvalues of the matrix [[2, 1], [1, 2]].",
            "ok",
        ];
        let whole = lower_model(&weights, &config, 0).unwrap();
        let batch = tokenizer.batch(&texts).unwrap();
        let shape = (batch.batch, batch.tokens);
        let ids = Tensor::from_vec(batch.ids.clone(), shape, &Device::Cpu).unwrap();
        let types = Tensor::from_vec(batch.type_ids.clone(), shape, &Device::Cpu).unwrap();
        let mask = Tensor::from_vec(batch.mask.clone(), shape, &Device::Cpu).unwrap();
        let hidden = whole.forward(&ids, &types, Some(&mask)).unwrap();
        let expected: Vec<Vec<f32>> = pooled(&hidden, &mask).unwrap().to_vec2().unwrap();

        for trained in [1, 2] {
            let lower = lower_model(&weights, &config, trained).unwrap();
            let states = lower_states(&lower, &tokenizer, &texts).unwrap();
            let examples: Vec<Lower> = states
                .into_iter()
                .map(|states| Lower {
                    states,
                    label: 0,
                    example: 0,
                })
                .collect();
            let refs: Vec<&Lower> = examples.iter().collect();
            let (states, mask) = padded(&refs).unwrap();
            let additive = additive_mask(&mask).unwrap();
            let mut hidden = states;
            for i in config.num_hidden_layers - trained..config.num_hidden_layers {
                let (layer, vars) = TrainableLayer::load(
                    &weights,
                    i,
                    config.num_attention_heads,
                    1e-12,
                    Training::Whole,
                )
                .unwrap();
                assert_eq!(vars.len(), 16, "every weight of layer {i} is trained");
                hidden = layer.forward(&hidden, &additive).unwrap();
            }
            let got: Vec<Vec<f32>> = pooled(&hidden, &mask).unwrap().to_vec2().unwrap();
            for (g, e) in got.iter().zip(&expected) {
                let worst = g
                    .iter()
                    .zip(e)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(worst < 1e-4, "{trained} trained layers differ by {worst}");
            }
        }
    }

    /// A layer trained with low-rank updates computes what the encoder computes once its
    /// adapter is merged into the weights (as the Candle backend loads it).
    #[test]
    fn a_low_rank_layer_computes_what_its_merged_adapter_loads() {
        let dir = minilm();
        let config = read_config(&dir).unwrap();
        let weights =
            parse_weights(&std::fs::read(dir.join("model.safetensors")).unwrap()).unwrap();
        let heads = config.num_attention_heads;
        let training = Training::LowRank {
            rank: 4,
            scale: 2.0,
            seed: 3,
        };
        let (adapted, vars) = TrainableLayer::load(&weights, 5, heads, 1e-12, training).unwrap();
        // Six dense layers (down, up, bias each) and two norms (gain, shift).
        assert_eq!(vars.len(), 6 * 3 + 2 * 2);
        for (name, var) in &vars {
            if name.ends_with(".up") || name.ends_with(".bias") {
                var.set(&(var.as_tensor() + 0.01).unwrap()).unwrap();
            }
        }
        let file = tempfile::NamedTempFile::new().unwrap();
        let tensors = adapter_tensors(&weights, &vars).unwrap();
        write_adapter(file.path(), &tensors, 2.0, "base").unwrap();
        let mut merged = weights.clone();
        crate::inference::merge_adapter(file.path(), &mut merged, "base").unwrap();
        let (whole, _) = TrainableLayer::load(&merged, 5, heads, 1e-12, Training::Whole).unwrap();

        let hidden = Tensor::randn(0f32, 1.0, (2, 7, config.hidden_size), &Device::Cpu).unwrap();
        let mask = Tensor::ones((2, 7), DType::U8, &Device::Cpu).unwrap();
        let additive = additive_mask(&mask).unwrap();
        let original = TrainableLayer::load(&weights, 5, heads, 1e-12, Training::Whole)
            .unwrap()
            .0
            .forward(&hidden, &additive)
            .unwrap();
        let trained = adapted.forward(&hidden, &additive).unwrap();
        let loaded = whole.forward(&hidden, &additive).unwrap();
        let gap = |a: &Tensor, b: &Tensor| -> f32 {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        assert!(gap(&trained, &loaded) < 1e-4, "{}", gap(&trained, &loaded));
        assert!(
            gap(&trained, &original) > 1e-2,
            "the update changed the layer"
        );
    }
}
