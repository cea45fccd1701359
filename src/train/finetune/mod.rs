//! `mom-router finetune`: the sentence encoder's top layers trained on labelled examples, so that
//! its embedding separates the labels a head reads, where the frozen encoder only offers what it
//! learned elsewhere. The lower layers stay frozen: each example's hidden states below the
//! trained layers are computed once, and every epoch runs only the top layers, mean pooling,
//! L2 normalisation (as the served encoder pools) and a linear head forward and backward. The
//! result is an encoder directory the Candle backend loads like the original (its heads are
//! then fitted on it by `mom-router train`); the examples' held-out share (by text hash, as
//! `train` splits) is never trained on.

mod layer;

use layer::{additive_mask, parse_weights, write_weights, TrainableLayer, Training, Weights};

use super::data::{is_held_out, label_set, read_examples};
use crate::inference::tokenize::TextTokenizer;
use crate::inference::{weights_sha256, write_adapter, AdapterTensor};
use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder};
use candle_transformers::models::bert::{BertModel, Config};
use std::path::{Path, PathBuf};

/// What `mom-router finetune` trains.
#[derive(Debug, Clone)]
pub struct FinetuneOptions {
    /// The encoder: `config.json`, `model.safetensors` and `tokenizer.json`.
    pub encoder: PathBuf,
    /// Labelled examples (JSON Lines: `text`, `label`).
    pub data: PathBuf,
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
    /// AdamW learning rate of the training head.
    pub head_learning_rate: f64,
    /// Inputs are truncated to this many tokens.
    pub max_tokens: usize,
    /// Percentage of examples held out (by text hash) and scored, never trained on.
    pub holdout: u32,
    /// Train on at most this many examples (a seeded choice), for a quicker run.
    pub limit: Option<usize>,
    /// Seed of the choice and of the order of the batches.
    pub seed: u64,
}

/// What a fine-tuning run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Finetuned {
    /// Examples trained on.
    pub trained: usize,
    /// Held-out examples scored.
    pub held_out: usize,
    /// Mean training loss of each epoch.
    pub losses: Vec<f64>,
    /// The training head's accuracy on the held-out examples after training.
    pub held_out_accuracy: f64,
}

/// One example's hidden states below the trained layers (tokens × width) and its label.
struct Lower {
    states: Tensor,
    label: u32,
}

/// The frozen lower layers: the same weights read as a model of fewer layers.
fn lower_model(weights: &Weights, config: &Config, trained: usize) -> anyhow::Result<BertModel> {
    let mut lower = config.clone();
    lower.num_hidden_layers = config.num_hidden_layers - trained;
    let vb = VarBuilder::from_tensors(weights.clone(), DType::F32, &Device::Cpu);
    Ok(BertModel::load(vb, &lower)?)
}

/// The lower hidden states of `texts`, one tensor per text (its own tokens only).
fn lower_states(
    model: &BertModel,
    tokenizer: &TextTokenizer,
    texts: &[&str],
) -> anyhow::Result<Vec<Tensor>> {
    let batch = tokenizer.batch(texts)?;
    let shape = (batch.batch, batch.tokens);
    let ids = Tensor::from_vec(batch.ids.clone(), shape, &Device::Cpu)?;
    let type_ids = Tensor::from_vec(batch.type_ids.clone(), shape, &Device::Cpu)?;
    let mask = Tensor::from_vec(batch.mask.clone(), shape, &Device::Cpu)?;
    let hidden = model.forward(&ids, &type_ids, Some(&mask))?;
    (0..batch.batch)
        .map(|i| {
            let row = &batch.mask[i * batch.tokens..(i + 1) * batch.tokens];
            let length = row.iter().filter(|&&m| m == 1).count().max(1);
            Ok(hidden.get(i)?.narrow(0, 0, length)?.contiguous()?)
        })
        .collect()
}

/// Pads `examples`' states into one batch: states (batch × tokens × width) and mask (batch ×
/// tokens).
fn padded(examples: &[&Lower]) -> candle_core::Result<(Tensor, Tensor)> {
    let tokens = examples
        .iter()
        .map(|e| e.states.dim(0))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let longest = tokens.iter().copied().max().unwrap_or(1);
    let mut states = Vec::with_capacity(examples.len());
    let mut mask = Vec::with_capacity(examples.len() * longest);
    for (example, &length) in examples.iter().zip(&tokens) {
        states.push(example.states.pad_with_zeros(0, 0, longest - length)?);
        mask.extend((0..longest).map(|t| u8::from(t < length)));
    }
    let mask = Tensor::from_vec(mask, (examples.len(), longest), &Device::Cpu)?;
    Ok((Tensor::stack(&states, 0)?, mask))
}

/// The pooled, L2-normalised embedding of `hidden` under `mask`, as the served encoder pools.
fn pooled(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
    let mean = summed.broadcast_div(&weights.sum(1)?)?;
    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
    mean.broadcast_div(&(norm + 1e-12)?)
}

/// The trained top layers with the training head.
struct Top {
    layers: Vec<TrainableLayer>,
    head_weight: Var,
    head_bias: Var,
}

impl Top {
    fn logits(&self, states: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let additive = additive_mask(mask)?;
        let mut hidden = states.clone();
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &additive)?;
        }
        pooled(&hidden, mask)?
            .matmul(&self.head_weight.t()?)?
            .broadcast_add(self.head_bias.as_tensor())
    }
}

/// A seeded order (xorshift), so a run repeats.
fn shuffled<T>(items: &mut [T], seed: u64) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// Batches of similar length (less padding), in a seeded order.
fn batches(examples: &[Lower], size: usize, seed: u64) -> candle_core::Result<Vec<Vec<usize>>> {
    let mut order: Vec<(usize, usize)> = examples
        .iter()
        .enumerate()
        .map(|(i, e)| Ok((e.states.dim(0)?, i)))
        .collect::<candle_core::Result<_>>()?;
    shuffled(&mut order, seed);
    order.sort_by_key(|&(length, _)| length);
    let mut batches: Vec<Vec<usize>> = order
        .chunks(size.max(1))
        .map(|chunk| chunk.iter().map(|&(_, i)| i).collect())
        .collect();
    shuffled(&mut batches, seed.wrapping_add(1));
    Ok(batches)
}

/// Held-out accuracy of the training head.
fn accuracy(top: &Top, examples: &[Lower], size: usize) -> anyhow::Result<f64> {
    let mut right = 0usize;
    for chunk in examples.chunks(size.max(1)) {
        let refs: Vec<&Lower> = chunk.iter().collect();
        let (states, mask) = padded(&refs)?;
        let guesses: Vec<u32> = top.logits(&states, &mask)?.argmax(D::Minus1)?.to_vec1()?;
        right += guesses
            .iter()
            .zip(chunk)
            .filter(|(g, e)| **g == e.label)
            .count();
    }
    Ok(right as f64 / examples.len().max(1) as f64)
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
    let examples = read_examples(&options.data)?;
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
        bail!(
            "{}: nothing to train on or to score",
            options.data.display()
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
    // Texts of similar length share a batch, so little of it is padding.
    let lower_of = |set: &[&super::Example]| -> anyhow::Result<Vec<Lower>> {
        let mut by_length: Vec<&super::Example> = set.to_vec();
        by_length.sort_by_key(|e| e.text.len());
        let mut out = Vec::with_capacity(set.len());
        for chunk in by_length.chunks(32) {
            let texts: Vec<&str> = chunk.iter().map(|e| e.text.as_str()).collect();
            for (states, example) in lower_states(&lower, &tokenizer, &texts)?
                .into_iter()
                .zip(chunk)
            {
                out.push(Lower {
                    states,
                    label: index(&example.label),
                });
            }
        }
        Ok(out)
    };
    let started = std::time::Instant::now();
    let train = lower_of(&train)?;
    let held = lower_of(&held)?;
    tracing::info!(
        trained = train.len(),
        held_out = held.len(),
        seconds = started.elapsed().as_secs(),
        "lower layers computed"
    );

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
    let top = Top {
        layers,
        head_weight: Var::zeros((labels.len(), width), DType::F32, &Device::Cpu)?,
        head_bias: Var::zeros(labels.len(), DType::F32, &Device::Cpu)?,
    };
    let params = |lr| ParamsAdamW {
        lr,
        weight_decay: 0.01,
        ..Default::default()
    };
    let encoder_vars = vars.iter().map(|(_, v)| v.clone()).collect();
    let mut encoder_opt = AdamW::new(encoder_vars, params(options.learning_rate))?;
    let head_vars = vec![top.head_weight.clone(), top.head_bias.clone()];
    let mut head_opt = AdamW::new(head_vars, params(options.head_learning_rate))?;
    let mut losses = Vec::new();
    for epoch in 0..options.epochs {
        let mut total = 0.0;
        let order = batches(&train, options.batch_size, options.seed + epoch as u64)?;
        for (step, batch) in order.iter().enumerate() {
            if step % 100 == 0 {
                tracing::info!(epoch, step, of = order.len(), "training");
            }
            let refs: Vec<&Lower> = batch.iter().map(|&i| &train[i]).collect();
            let (states, mask) = padded(&refs)?;
            let targets: Vec<u32> = refs.iter().map(|e| e.label).collect();
            let targets = Tensor::from_vec(targets, refs.len(), &Device::Cpu)?;
            let loss = candle_nn::loss::cross_entropy(&top.logits(&states, &mask)?, &targets)?;
            let grads = loss.backward()?;
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
    let held_out_accuracy = accuracy(&top, &held, options.batch_size)?;

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
        trained: train.len(),
        held_out: held.len(),
        losses,
        held_out_accuracy,
    })
}

#[cfg(test)]
mod tests {
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
                .map(|states| Lower { states, label: 0 })
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

    #[test]
    fn batches_cover_every_example_once_in_a_seeded_order() {
        let examples: Vec<Lower> = (1..=10)
            .map(|n| Lower {
                states: Tensor::zeros((n, 4), DType::F32, &Device::Cpu).unwrap(),
                label: 0,
            })
            .collect();
        let first = batches(&examples, 3, 7).unwrap();
        assert_eq!(first, batches(&examples, 3, 7).unwrap());
        let mut seen: Vec<usize> = first.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        // Similar lengths share a batch: sorted by length, then cut.
        assert!(first.iter().any(|b| b == &vec![0, 1, 2]));
    }
}
