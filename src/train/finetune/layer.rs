//! The top encoder layers as trainable variables: a BERT layer's forward pass written with
//! operations Candle can differentiate (its fused layer norm cannot be), from the weights of a
//! `model.safetensors`, and those weights written back into a copy of the file.

use candle_core::{DType, Device, Result, Tensor, Var, D};
use std::collections::HashMap;
use std::path::Path;

/// How the top layers are trained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Training {
    /// Every weight of the layer.
    Whole,
    /// A low-rank update of each dense weight (`W + scale · up · down`, `down` rank × in, `up`
    /// out × rank, `up` starting at zero so training starts from the encoder as it is), with the
    /// biases and layer norms: the frozen weights take no gradient, and what is trained is a
    /// small file.
    LowRank {
        /// The update's rank.
        rank: usize,
        /// The update's multiplier (alpha / rank).
        scale: f64,
        /// Seed of `down`'s initial values.
        seed: u64,
    },
}

/// A trained low-rank update of a dense weight.
struct LowRank {
    down: Tensor,
    up: Tensor,
    scale: f64,
}

/// A dense layer: `x · Wᵀ + b`, plus `scale · (x · downᵀ) · upᵀ` when it is adapted.
struct Dense {
    weight: Tensor,
    bias: Tensor,
    low_rank: Option<LowRank>,
}

impl Dense {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let out = x
            .broadcast_matmul(&self.weight.t()?)?
            .broadcast_add(&self.bias)?;
        match &self.low_rank {
            None => Ok(out),
            Some(update) => {
                let low = x
                    .broadcast_matmul(&update.down.t()?)?
                    .broadcast_matmul(&update.up.t()?)?;
                out + (low * update.scale)?
            }
        }
    }
}

/// `down`'s initial values: uniform in ±1/√in (seeded xorshift), as low-rank adapters start.
fn initial_down(rank: usize, width: usize, seed: u64) -> Result<Tensor> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let bound = 1.0 / (width as f32).sqrt();
    let values: Vec<f32> = (0..rank * width)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            (unit * 2.0 - 1.0) * bound
        })
        .collect();
    Tensor::from_vec(values, (rank, width), &Device::Cpu)
}

/// Layer normalisation over the last dimension, as BERT writes it.
struct Norm {
    gain: Tensor,
    shift: Tensor,
    eps: f64,
}

impl Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let variance = centred.sqr()?.mean_keepdim(D::Minus1)?;
        centred
            .broadcast_div(&(variance + self.eps)?.sqrt()?)?
            .broadcast_mul(&self.gain)?
            .broadcast_add(&self.shift)
    }
}

/// One BERT encoder layer: self-attention, then the feed-forward block, each with a residual
/// connection and layer norm.
pub struct TrainableLayer {
    query: Dense,
    key: Dense,
    value: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
    heads: usize,
}

/// The tensors of `model.safetensors`, by name.
pub type Weights = HashMap<String, Tensor>;

/// The tensors of a safetensors file's bytes, on the CPU.
pub fn parse_weights(bytes: &[u8]) -> Result<Weights> {
    candle_core::safetensors::load_buffer(bytes, &Device::Cpu)
}

impl TrainableLayer {
    /// Layer `index` of `weights` (`encoder.layer.{index}.…`) trained as `training` says; the
    /// trained variables are also returned, each with the name it is written under (a tensor of
    /// `weights`, or for a low-rank update the weight's name with `.down` or `.up`).
    pub fn load(
        weights: &Weights,
        index: usize,
        heads: usize,
        eps: f64,
        training: Training,
    ) -> Result<(Self, Vec<(String, Var)>)> {
        let mut vars = Vec::new();
        let tensor = |name: &str| -> Result<Tensor> {
            weights
                .get(name)
                .ok_or_else(|| candle_core::Error::Msg(format!("no tensor {name}")))?
                .to_dtype(DType::F32)
        };
        let mut trained = |name: String, value: Tensor| -> Result<Tensor> {
            let var = Var::from_tensor(&value)?;
            let tensor = var.as_tensor().clone();
            vars.push((name, var));
            Ok(tensor)
        };
        let prefix = format!("encoder.layer.{index}");
        let mut parts = 0u64;
        let mut dense = |part: &str| -> Result<Dense> {
            let weight_name = format!("{prefix}.{part}.weight");
            let bias_name = format!("{prefix}.{part}.bias");
            let weight = tensor(&weight_name)?;
            let bias = trained(bias_name.clone(), tensor(&bias_name)?)?;
            parts += 1;
            match training {
                Training::Whole => Ok(Dense {
                    weight: trained(weight_name, weight)?,
                    bias,
                    low_rank: None,
                }),
                Training::LowRank { rank, scale, seed } => {
                    let (out, width) = weight.dims2()?;
                    let start = seed ^ ((index as u64) << 8) ^ parts;
                    let down = trained(
                        format!("{weight_name}.down"),
                        initial_down(rank, width, start)?,
                    )?;
                    let up = trained(
                        format!("{weight_name}.up"),
                        Tensor::zeros((out, rank), DType::F32, &Device::Cpu)?,
                    )?;
                    Ok(Dense {
                        weight,
                        bias,
                        low_rank: Some(LowRank { down, up, scale }),
                    })
                }
            }
        };
        let query = dense("attention.self.query")?;
        let key = dense("attention.self.key")?;
        let value = dense("attention.self.value")?;
        let attention_out = dense("attention.output.dense")?;
        let intermediate = dense("intermediate.dense")?;
        let output = dense("output.dense")?;
        let mut norm = |part: &str| -> Result<Norm> {
            let gain = format!("{prefix}.{part}.LayerNorm.weight");
            let shift = format!("{prefix}.{part}.LayerNorm.bias");
            Ok(Norm {
                gain: trained(gain.clone(), tensor(&gain)?)?,
                shift: trained(shift.clone(), tensor(&shift)?)?,
                eps,
            })
        };
        let attention_norm = norm("attention.output")?;
        let output_norm = norm("output")?;
        let layer = Self {
            query,
            key,
            value,
            attention_out,
            attention_norm,
            intermediate,
            output,
            output_norm,
            heads,
        };
        Ok((layer, vars))
    }

    /// The layer's output for `hidden` (batch × tokens × width); `mask` is the additive
    /// attention mask (batch × 1 × 1 × tokens: 0 for a token, a large negative for padding).
    pub fn forward(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (batch, tokens, width) = hidden.dims3()?;
        let size = width / self.heads;
        let split = |x: Tensor| -> Result<Tensor> {
            x.reshape((batch, tokens, self.heads, size))?
                .transpose(1, 2)?
                .contiguous()
        };
        let query = split(self.query.forward(hidden)?)?;
        let key = split(self.key.forward(hidden)?)?;
        let value = split(self.value.forward(hidden)?)?;
        let scores = (query.matmul(&key.t()?)? / (size as f64).sqrt())?.broadcast_add(mask)?;
        let probabilities = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let context = probabilities
            .matmul(&value)?
            .transpose(1, 2)?
            .contiguous()?
            .flatten_from(D::Minus2)?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + hidden)?)?;
        let inner = self.intermediate.forward(&attended)?.gelu_erf()?;
        self.output_norm
            .forward(&(self.output.forward(&inner)? + &attended)?)
    }
}

/// The additive attention mask for `mask` (batch × tokens of 1 and 0), as BERT adds it.
pub fn additive_mask(mask: &Tensor) -> Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(1)?.unsqueeze(1)?;
    (mask.ones_like()? - &mask)? * f64::from(f32::MIN)
}

/// Writes `weights` with the trained `vars` in place of their tensors.
pub fn write_weights(weights: &Weights, vars: &[(String, Var)], path: &Path) -> Result<()> {
    let mut out = weights.clone();
    for (name, var) in vars {
        out.insert(name.clone(), var.as_tensor().detach());
    }
    candle_core::safetensors::save(&out, path)
}
