//! Fitting a head with candle-nn: AdamW on (optionally class-balanced) cross-entropy over frozen
//! embeddings, full-batch or in shuffled mini-batches. Initial weights and shuffling come from a
//! seeded generator, so a run is reproducible.

use crate::inference::Dense;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};

/// How to fit.
#[derive(Debug, Clone, Copy)]
pub struct FitSettings {
    /// Hidden layer width; 0 fits a linear (multinomial logistic) head.
    pub hidden: usize,
    /// Passes over the training data.
    pub epochs: usize,
    /// AdamW learning rate.
    pub learning_rate: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Rows per optimisation step (shuffled each epoch); 0 uses every row at once.
    pub batch_size: usize,
    /// Seed of the initial weights and the shuffling.
    pub seed: u64,
}

/// A small seeded generator (SplitMix64) for initial weights.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_unit(&mut self) -> f32 {
        // 24 random bits → [-1, 1).
        ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }

    /// Fisher–Yates shuffle.
    fn shuffle(&mut self, items: &mut [u32]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// Fits layers mapping `inputs` (rows of equal width) to `classes` labels; `targets[i]` is the
/// label index of row `i`. Returns the layers and the final training loss.
pub fn fit(
    inputs: &[Vec<f32>],
    targets: &[usize],
    classes: usize,
    settings: FitSettings,
    balance: bool,
) -> candle_core::Result<(Vec<Dense>, f32)> {
    let device = Device::Cpu;
    let rows = inputs.len();
    let dims = inputs.first().map_or(0, Vec::len);
    let x = Tensor::from_vec(inputs.concat(), (rows, dims), &device)?;
    let y = Tensor::from_vec(
        targets.iter().map(|&t| t as u32).collect::<Vec<_>>(),
        (rows, 1),
        &device,
    )?;
    // Balanced class weights make every class count as much as the others in the loss.
    let mut counts = vec![0usize; classes];
    targets.iter().for_each(|&t| counts[t] += 1);
    let weights: Vec<f32> = targets
        .iter()
        .map(|&t| {
            if balance {
                rows as f32 / (classes as f32 * counts[t] as f32)
            } else {
                1.0
            }
        })
        .collect();
    let sample_weight = Tensor::from_vec(weights, rows, &device)?;

    let mut rng = Rng(settings.seed);
    let widths: Vec<usize> = if settings.hidden == 0 {
        vec![dims, classes]
    } else {
        vec![dims, settings.hidden, classes]
    };
    let mut layers: Vec<(Var, Var)> = Vec::new();
    for pair in widths.windows(2) {
        let (inp, out) = (pair[0], pair[1]);
        let scale = 1.0 / (inp as f32).sqrt();
        let init: Vec<f32> = (0..inp * out).map(|_| rng.next_unit() * scale).collect();
        let weight = Var::from_tensor(&Tensor::from_vec(init, (out, inp), &device)?)?;
        let bias = Var::zeros(out, DType::F32, &device)?;
        layers.push((weight, bias));
    }
    let params = ParamsAdamW {
        lr: settings.learning_rate,
        weight_decay: settings.weight_decay,
        ..ParamsAdamW::default()
    };
    let vars = layers
        .iter()
        .flat_map(|(w, b)| [w.clone(), b.clone()])
        .collect();
    let mut optimizer = AdamW::new(vars, params)?;
    let forward = |x: &Tensor| -> candle_core::Result<Tensor> {
        let mut h = x.clone();
        for (i, (weight, bias)) in layers.iter().enumerate() {
            h = h
                .matmul(&weight.as_tensor().t()?)?
                .broadcast_add(bias.as_tensor())?;
            if i + 1 < layers.len() {
                h = h.relu()?;
            }
        }
        Ok(h)
    };
    let loss_of = |x: &Tensor, y: &Tensor, w: &Tensor| -> candle_core::Result<Tensor> {
        let log_p = candle_nn::ops::log_softmax(&forward(x)?, D::Minus1)?;
        let picked = log_p.gather(y, 1)?.squeeze(1)?;
        let total = f64::from(w.sum_all()?.to_scalar::<f32>()?);
        (picked * w)?.sum_all()? / -total
    };
    let batch = if settings.batch_size == 0 {
        rows
    } else {
        settings.batch_size.min(rows)
    };
    let mut order: Vec<u32> = (0..rows as u32).collect();
    for _ in 0..settings.epochs.max(1) {
        if batch < rows {
            rng.shuffle(&mut order);
        }
        for slice in order.chunks(batch) {
            let loss = if batch == rows {
                loss_of(&x, &y, &sample_weight)?
            } else {
                let index = Tensor::from_slice(slice, slice.len(), &device)?;
                loss_of(
                    &x.index_select(&index, 0)?,
                    &y.index_select(&index, 0)?,
                    &sample_weight.index_select(&index, 0)?,
                )?
            };
            optimizer.backward_step(&loss)?;
        }
    }
    let last_loss = loss_of(&x, &y, &sample_weight)?.to_scalar::<f32>()?;
    let dense = layers
        .iter()
        .map(|(weight, bias)| {
            Ok(Dense {
                inputs: weight.as_tensor().dim(1)?,
                weight: weight.as_tensor().flatten_all()?.to_vec1::<f32>()?,
                bias: bias.as_tensor().to_vec1::<f32>()?,
            })
        })
        .collect::<candle_core::Result<Vec<_>>>()?;
    Ok((dense, last_loss))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::Head;

    fn settings(hidden: usize) -> FitSettings {
        FitSettings {
            hidden,
            epochs: 300,
            learning_rate: 0.05,
            weight_decay: 0.0,
            batch_size: 0,
            seed: 7,
        }
    }

    /// Three clusters around orthogonal directions, with deterministic jitter.
    fn clusters() -> (Vec<Vec<f32>>, Vec<usize>) {
        let mut inputs = Vec::new();
        let mut targets = Vec::new();
        let mut rng = Rng(1);
        for class in 0..3 {
            for _ in 0..40 {
                let mut v: Vec<f32> = (0..6).map(|_| rng.next_unit() * 0.3).collect();
                v[class * 2] += 1.0;
                inputs.push(v);
                targets.push(class);
            }
        }
        (inputs, targets)
    }

    #[test]
    fn separable_clusters_are_learned_by_both_shapes() {
        let (inputs, targets) = clusters();
        for hidden in [0, 16] {
            let (layers, loss) = fit(&inputs, &targets, 3, settings(hidden), true).unwrap();
            assert!(loss < 0.2, "hidden {hidden}: loss {loss}");
            let head = Head {
                task: "toy".to_owned(),
                labels: vec!["a".into(), "b".into(), "c".into()],
                layers,
                probe: vec![0.0; 6],
                encoder: String::new(),
                encoder_sha256: String::new(),
            };
            let right = inputs
                .iter()
                .zip(&targets)
                .filter(|(x, &t)| head.predict(x).0 == t)
                .count();
            assert_eq!(right, inputs.len(), "hidden {hidden}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_head() {
        let (inputs, targets) = clusters();
        let a = fit(&inputs, &targets, 3, settings(0), false).unwrap().0;
        let b = fit(&inputs, &targets, 3, settings(0), false).unwrap().0;
        assert_eq!(a, b);
    }
}
