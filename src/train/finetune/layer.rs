//! The top encoder layers as trainable variables: a BERT layer's forward pass written with
//! operations Candle can differentiate (its fused layer norm cannot be), from the weights of a
//! `model.safetensors`, and those weights written back into a copy of the file.

use candle_core::{DType, Device, Result, Tensor, Var, D};
use std::collections::HashMap;
use std::path::Path;

/// A dense layer: `x · Wᵀ + b`.
struct Dense {
    weight: Var,
    bias: Var,
}

impl Dense {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.broadcast_matmul(&self.weight.t()?)?
            .broadcast_add(self.bias.as_tensor())
    }
}

/// Layer normalisation over the last dimension, as BERT writes it.
struct Norm {
    gain: Var,
    shift: Var,
    eps: f64,
}

impl Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let variance = centred.sqr()?.mean_keepdim(D::Minus1)?;
        centred
            .broadcast_div(&(variance + self.eps)?.sqrt()?)?
            .broadcast_mul(self.gain.as_tensor())?
            .broadcast_add(self.shift.as_tensor())
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

/// Reads a safetensors file onto the CPU.
pub fn read_weights(path: &Path) -> Result<Weights> {
    candle_core::safetensors::load(path, &Device::Cpu)
}

impl TrainableLayer {
    /// Layer `index` of `weights` (`encoder.layer.{index}.…`), its tensors copied into variables;
    /// each variable is also returned with its tensor's name.
    pub fn load(
        weights: &Weights,
        index: usize,
        heads: usize,
        eps: f64,
    ) -> Result<(Self, Vec<(String, Var)>)> {
        let mut vars = Vec::new();
        let mut var = |name: String| -> Result<Var> {
            let tensor = weights
                .get(&name)
                .ok_or_else(|| candle_core::Error::Msg(format!("no tensor {name}")))?;
            let var = Var::from_tensor(&tensor.to_dtype(DType::F32)?)?;
            vars.push((name, var.clone()));
            Ok(var)
        };
        let prefix = format!("encoder.layer.{index}");
        let mut dense = |part: &str| -> Result<Dense> {
            Ok(Dense {
                weight: var(format!("{prefix}.{part}.weight"))?,
                bias: var(format!("{prefix}.{part}.bias"))?,
            })
        };
        let query = dense("attention.self.query")?;
        let key = dense("attention.self.key")?;
        let value = dense("attention.self.value")?;
        let attention_out = dense("attention.output.dense")?;
        let intermediate = dense("intermediate.dense")?;
        let output = dense("output.dense")?;
        let mut norm = |part: &str| -> Result<Norm> {
            Ok(Norm {
                gain: var(format!("{prefix}.{part}.LayerNorm.weight"))?,
                shift: var(format!("{prefix}.{part}.LayerNorm.bias"))?,
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
