//! Temperature scaling: one number T that divides a head's logits so that its top probability
//! is a probability (of the top label being right), fitted on examples the head never trained
//! on, and the expected calibration error that says how far a head is from that before and
//! after. Dividing logits by T never changes which label is on top, so accuracy is untouched.

use crate::inference::softmax;

/// Bins of the expected calibration error (equal-width over the top probability).
pub const ECE_BINS: usize = 15;

/// Range searched for ln T: T from e⁻³ ≈ 0.05 to e³ ≈ 20.
const LN_T_RANGE: (f64, f64) = (-3.0, 3.0);

/// What calibration fitted and measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The fitted temperature (logits are divided by it).
    pub temperature: f64,
    /// Examples the temperature was fitted on.
    pub fitted_on: usize,
    /// Examples the errors below were measured on (none of them fitted on).
    pub measured_on: usize,
    /// Expected calibration error of the head as trained.
    pub ece_before: f64,
    /// Expected calibration error after dividing the logits by [`Calibration::temperature`].
    pub ece_after: f64,
}

/// Probabilities of `logits` divided by `temperature`.
pub fn tempered(logits: &[f32], temperature: f64) -> Vec<f32> {
    let mut p: Vec<f32> = logits
        .iter()
        .map(|&l| (f64::from(l) / temperature) as f32)
        .collect();
    softmax(&mut p);
    p
}

/// Mean negative log-likelihood of the true labels at `temperature`.
fn log_loss(rows: &[(Vec<f32>, usize)], temperature: f64) -> f64 {
    let total: f64 = rows
        .iter()
        .map(|(logits, truth)| {
            let p = tempered(logits, temperature)
                .get(*truth)
                .copied()
                .unwrap_or(0.0);
            -f64::from(p.max(1e-12)).ln()
        })
        .sum();
    total / rows.len().max(1) as f64
}

/// The temperature minimising log-loss on `rows` (logits and true label index): golden-section
/// search over ln T, which is unimodal for this one-parameter problem.
pub fn fit_temperature(rows: &[(Vec<f32>, usize)]) -> f64 {
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut low, mut high) = LN_T_RANGE;
    let loss = |ln_t: f64| log_loss(rows, ln_t.exp());
    let mut a = high - ratio * (high - low);
    let mut b = low + ratio * (high - low);
    let (mut loss_a, mut loss_b) = (loss(a), loss(b));
    for _ in 0..60 {
        if loss_a <= loss_b {
            high = b;
            b = a;
            loss_b = loss_a;
            a = high - ratio * (high - low);
            loss_a = loss(a);
        } else {
            low = a;
            a = b;
            loss_a = loss_b;
            b = low + ratio * (high - low);
            loss_b = loss(b);
        }
    }
    ((low + high) / 2.0).exp()
}

/// Expected calibration error: over [`ECE_BINS`] bins of the top probability, the
/// example-weighted mean gap between the bin's mean top probability and its accuracy.
/// `rows` are (top probability, whether the top label was right).
pub fn expected_calibration_error(rows: &[(f32, bool)]) -> f64 {
    let mut bins = [(0usize, 0f64, 0usize); ECE_BINS];
    for &(confidence, right) in rows {
        let bin = ((f64::from(confidence) * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
        bins[bin].0 += 1;
        bins[bin].1 += f64::from(confidence);
        bins[bin].2 += usize::from(right);
    }
    let total = rows.len().max(1) as f64;
    bins.iter()
        .filter(|(count, _, _)| *count > 0)
        .map(|&(count, confidence, right)| {
            let n = count as f64;
            (n / total) * (confidence / n - right as f64 / n).abs()
        })
        .sum()
}

/// Top probability and whether it names the truth, for every row at `temperature`.
pub fn confidences(rows: &[(Vec<f32>, usize)], temperature: f64) -> Vec<(f32, bool)> {
    rows.iter()
        .map(|(logits, truth)| {
            let (best, p) = crate::inference::argmax(&tempered(logits, temperature));
            (p, best == *truth)
        })
        .collect()
}

/// Fits the temperature on `fit_rows` and measures the error before and after on `measure_rows`.
pub fn calibrate(
    fit_rows: &[(Vec<f32>, usize)],
    measure_rows: &[(Vec<f32>, usize)],
) -> Calibration {
    let temperature = fit_temperature(fit_rows);
    Calibration {
        temperature,
        fitted_on: fit_rows.len(),
        measured_on: measure_rows.len(),
        ece_before: expected_calibration_error(&confidences(measure_rows, 1.0)),
        ece_after: expected_calibration_error(&confidences(measure_rows, temperature)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three-class logits whose top label is right with probability 0.7 but whose softmax says
    /// about 0.99: an over-confident head.
    fn over_confident() -> Vec<(Vec<f32>, usize)> {
        (0..200)
            .map(|i| {
                let top = i % 3;
                let truth = if i % 10 < 7 { top } else { (top + 1) % 3 };
                let mut logits = vec![0.0; 3];
                logits[top] = 6.0 + (i % 5) as f32 * 0.2;
                (logits, truth)
            })
            .collect()
    }

    #[test]
    fn an_over_confident_head_gets_a_temperature_above_one_and_a_lower_error() {
        let rows = over_confident();
        let (fit_rows, measure_rows) = rows.split_at(100);
        let calibration = calibrate(fit_rows, measure_rows);
        assert!(calibration.temperature > 2.0, "{calibration:?}");
        assert!(calibration.ece_before > 0.25, "{calibration:?}");
        assert!(
            calibration.ece_after < calibration.ece_before / 4.0,
            "{calibration:?}"
        );
        // The top label is the same at any temperature.
        for (logits, _) in &rows {
            let a = crate::inference::argmax(&tempered(logits, 1.0)).0;
            let b = crate::inference::argmax(&tempered(logits, calibration.temperature)).0;
            assert_eq!(a, b);
        }
    }

    #[test]
    fn a_calibrated_head_keeps_a_temperature_near_one() {
        // Two classes, logits ±ln 3: the top probability is 0.75, right three times in four.
        let rows: Vec<(Vec<f32>, usize)> = (0..400)
            .map(|i| {
                let logits = vec![3f32.ln() / 2.0, -(3f32.ln()) / 2.0];
                (logits, usize::from(i % 4 == 3))
            })
            .collect();
        let temperature = fit_temperature(&rows);
        assert!((temperature - 1.0).abs() < 0.01, "{temperature}");
        assert!(expected_calibration_error(&confidences(&rows, 1.0)) < 1e-6);
    }

    #[test]
    fn the_error_is_the_weighted_gap_per_bin() {
        // Bin of 0.9 (two rows, one right): gap 0.4, weight 1/2; bin of 0.5 (two, both right):
        // gap 0.5, weight 1/2.
        let rows = [(0.9, true), (0.9, false), (0.5, true), (0.5, true)];
        let ece = expected_calibration_error(&rows);
        assert!((ece - 0.45).abs() < 1e-6, "{ece}");
    }
}
