//! What fine-tuning runs on: each example's hidden states below the trained layers, computed
//! once by the frozen lower layers, and the batches drawn from them.

use crate::inference::tokenize::TextTokenizer;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};

use super::layer::Weights;

/// One input's hidden states below the trained layers (tokens × width), its label, and the
/// example it was read from (a windowed example gives several inputs).
pub struct Lower {
    pub states: Tensor,
    pub label: u32,
    pub example: usize,
}

/// The frozen lower layers: the same weights read as a model of fewer layers.
pub fn lower_model(
    weights: &Weights,
    config: &Config,
    trained: usize,
) -> anyhow::Result<BertModel> {
    let mut lower = config.clone();
    lower.num_hidden_layers = config.num_hidden_layers - trained;
    let vb = VarBuilder::from_tensors(weights.clone(), DType::F32, &Device::Cpu);
    Ok(BertModel::load(vb, &lower)?)
}

/// The lower hidden states of `texts`, one tensor per text (its own tokens only).
pub fn lower_states(
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

/// The lower states of `inputs` (text, label, example), computed in batches of similar length
/// (little of each is padding), in the order given.
pub fn lower_all(
    model: &BertModel,
    tokenizer: &TextTokenizer,
    inputs: &[(String, u32, usize)],
) -> anyhow::Result<Vec<Lower>> {
    let mut by_length: Vec<usize> = (0..inputs.len()).collect();
    by_length.sort_by_key(|&i| inputs[i].0.len());
    let mut out: Vec<Option<Lower>> = (0..inputs.len()).map(|_| None).collect();
    for chunk in by_length.chunks(32) {
        let texts: Vec<&str> = chunk.iter().map(|&i| inputs[i].0.as_str()).collect();
        for (states, &i) in lower_states(model, tokenizer, &texts)?
            .into_iter()
            .zip(chunk)
        {
            let (_, label, example) = inputs[i];
            out[i] = Some(Lower {
                states,
                label,
                example,
            });
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Pads `inputs`' states into one batch: states (batch × tokens × width) and mask (batch ×
/// tokens).
pub fn padded(inputs: &[&Lower]) -> candle_core::Result<(Tensor, Tensor)> {
    let tokens = inputs
        .iter()
        .map(|e| e.states.dim(0))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let longest = tokens.iter().copied().max().unwrap_or(1);
    let mut states = Vec::with_capacity(inputs.len());
    let mut mask = Vec::with_capacity(inputs.len() * longest);
    for (input, &length) in inputs.iter().zip(&tokens) {
        states.push(input.states.pad_with_zeros(0, 0, longest - length)?);
        mask.extend((0..longest).map(|t| u8::from(t < length)));
    }
    let mask = Tensor::from_vec(mask, (inputs.len(), longest), &Device::Cpu)?;
    Ok((Tensor::stack(&states, 0)?, mask))
}

/// A seeded order (xorshift), so a run repeats.
pub fn shuffled<T>(items: &mut [T], seed: u64) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// Batches of similar length (less padding), in a seeded order: indices into `inputs`.
pub fn batches(inputs: &[Lower], size: usize, seed: u64) -> candle_core::Result<Vec<Vec<usize>>> {
    let mut order: Vec<(usize, usize)> = inputs
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_every_input_once_in_a_seeded_order() {
        let inputs: Vec<Lower> = (1..=10)
            .map(|n| Lower {
                states: Tensor::zeros((n, 4), DType::F32, &Device::Cpu).unwrap(),
                label: 0,
                example: n,
            })
            .collect();
        let first = batches(&inputs, 3, 7).unwrap();
        assert_eq!(first, batches(&inputs, 3, 7).unwrap());
        let mut seen: Vec<usize> = first.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        // Similar lengths share a batch: sorted by length, then cut.
        assert!(first.iter().any(|b| b == &vec![0, 1, 2]));
    }
}
