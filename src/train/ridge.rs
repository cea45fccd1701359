//! Ridge regression in closed form: centred inputs, `(XᵀX + αI) W = XᵀY` solved by Cholesky in
//! f64, the intercept recovered from the means (and not shrunk). Used for the router head's cost
//! predictions, where a few hundred rows meet a few hundred features.

use crate::inference::Dense;

/// Fits one linear map from `inputs` (rows of equal width) to `targets` (rows of equal width)
/// with L2 penalty `alpha`; returns it as a [`Dense`] layer, or `None` when there are no rows.
pub fn ridge(inputs: &[Vec<f32>], targets: &[Vec<f64>], alpha: f64) -> Option<Dense> {
    let rows = inputs.len();
    let dims = inputs.first()?.len();
    let outputs = targets.first()?.len();
    if rows == 0 || targets.len() != rows {
        return None;
    }
    let mean_x: Vec<f64> = (0..dims)
        .map(|j| inputs.iter().map(|r| f64::from(r[j])).sum::<f64>() / rows as f64)
        .collect();
    let mean_y: Vec<f64> = (0..outputs)
        .map(|k| targets.iter().map(|t| t[k]).sum::<f64>() / rows as f64)
        .collect();
    // Gram matrix and right-hand sides over the centred data.
    let mut gram = vec![0.0f64; dims * dims];
    let mut rhs = vec![0.0f64; dims * outputs];
    let mut centred = vec![0.0f64; dims];
    for (row, target) in inputs.iter().zip(targets) {
        for j in 0..dims {
            centred[j] = f64::from(row[j]) - mean_x[j];
        }
        for a in 0..dims {
            let xa = centred[a];
            if xa == 0.0 {
                continue;
            }
            for b in a..dims {
                gram[a * dims + b] += xa * centred[b];
            }
            for k in 0..outputs {
                rhs[a * outputs + k] += xa * (target[k] - mean_y[k]);
            }
        }
    }
    for a in 0..dims {
        for b in 0..a {
            gram[a * dims + b] = gram[b * dims + a];
        }
        gram[a * dims + a] += alpha.max(1e-9);
    }
    let lower = cholesky(&gram, dims)?;
    let mut weight = vec![0.0f32; outputs * dims];
    let mut bias = vec![0.0f32; outputs];
    for k in 0..outputs {
        let column: Vec<f64> = (0..dims).map(|a| rhs[a * outputs + k]).collect();
        let w = solve(&lower, dims, &column);
        let intercept = mean_y[k] - w.iter().zip(&mean_x).map(|(w, m)| w * m).sum::<f64>();
        for (j, value) in w.iter().enumerate() {
            weight[k * dims + j] = *value as f32;
        }
        bias[k] = intercept as f32;
    }
    Some(Dense {
        weight,
        bias,
        inputs: dims,
    })
}

/// The lower Cholesky factor of a symmetric positive-definite `n × n` matrix.
fn cholesky(matrix: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut lower = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = matrix[i * n + j];
            for k in 0..j {
                sum -= lower[i * n + k] * lower[j * n + k];
            }
            if i == j {
                if sum <= 0.0 {
                    return None;
                }
                lower[i * n + i] = sum.sqrt();
            } else {
                lower[i * n + j] = sum / lower[j * n + j];
            }
        }
    }
    Some(lower)
}

/// Solves `L Lᵀ x = b` given the lower factor `L`.
fn solve(lower: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0f64; n];
    for i in 0..n {
        let sum: f64 = (0..i).map(|k| lower[i * n + k] * y[k]).sum();
        y[i] = (b[i] - sum) / lower[i * n + i];
    }
    let mut x = vec![0.0f64; n];
    for i in (0..n).rev() {
        let sum: f64 = (i + 1..n).map(|k| lower[k * n + i] * x[k]).sum();
        x[i] = (y[i] - sum) / lower[i * n + i];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_linear_map_is_recovered() {
        // y0 = 2 x0 − x1 + 3, y1 = 0.5 x1 − 1, on a small grid.
        let mut inputs = Vec::new();
        let mut targets = Vec::new();
        for a in 0..5 {
            for b in 0..4 {
                let (x0, x1) = (a as f32, b as f32 * 0.5);
                inputs.push(vec![x0, x1]);
                targets.push(vec![
                    2.0 * f64::from(x0) - f64::from(x1) + 3.0,
                    0.5 * f64::from(x1) - 1.0,
                ]);
            }
        }
        let dense = ridge(&inputs, &targets, 1e-9).unwrap();
        let close = |a: f32, b: f32| (a - b).abs() < 1e-4;
        assert!(
            close(dense.weight[0], 2.0) && close(dense.weight[1], -1.0),
            "{dense:?}"
        );
        assert!(
            close(dense.weight[2], 0.0) && close(dense.weight[3], 0.5),
            "{dense:?}"
        );
        assert!(
            close(dense.bias[0], 3.0) && close(dense.bias[1], -1.0),
            "{dense:?}"
        );
    }

    #[test]
    fn the_penalty_shrinks_weights_but_not_the_intercept() {
        let inputs: Vec<Vec<f32>> = (0..10).map(|i| vec![i as f32]).collect();
        let targets: Vec<Vec<f64>> = (0..10).map(|i| vec![f64::from(i) + 5.0]).collect();
        let dense = ridge(&inputs, &targets, 1e6).unwrap();
        assert!(dense.weight[0].abs() < 0.01, "{dense:?}");
        // Shrunk to the mean: 9.5.
        assert!((dense.bias[0] - 9.5).abs() < 0.1, "{dense:?}");
        assert!(ridge(&[], &[], 1.0).is_none());
    }
}
