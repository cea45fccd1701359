//! Numbers with a fixed count of decimals, as the `x-mom-*` labels carry them, written the way
//! `format!("{:.N}")` writes them but without its exact-arithmetic path on every call: scaled
//! and rounded in `f64` when that cannot differ from the exact decimal rounding, and by `format!`
//! otherwise (near a tie, out of range, not finite).

use std::fmt::Write as _;

/// Largest scaled magnitude written by integer arithmetic: below it one `f64` product is within
/// 1e-7 of the exact one. Above it `format!` writes.
const FAST_LIMIT: f64 = 1e9;

/// Appends `value` with `decimals` digits after the point (at most 6), exactly as
/// `write!(out, "{value:.decimals$}")` would.
pub fn push_fixed(out: &mut String, value: f64, decimals: u32) {
    let decimals = decimals.min(6);
    let scale = 10f64.powi(decimals as i32);
    let scaled = value.abs() * scale;
    let fraction = scaled - scaled.floor();
    // Below the limit only a value whose scaled fraction sits near one half can round another
    // way than its exact decimal expansion does.
    if !scaled.is_finite() || scaled >= FAST_LIMIT || (fraction - 0.5).abs() < 1e-6 {
        let _ = write!(out, "{value:.prec$}", prec = decimals as usize);
        return;
    }
    let rounded = scaled.round() as u64;
    if value.is_sign_negative() {
        // `format!` keeps the sign of a negative value that rounds to zero ("-0.000").
        out.push('-');
    }
    let unit = 10u64.pow(decimals);
    push_digits(out, rounded / unit, 1);
    if decimals > 0 {
        out.push('.');
        push_digits(out, rounded % unit, decimals as usize);
    }
}

/// Appends `n` in decimal, zero-padded to at least `width` digits (at most 20).
fn push_digits(out: &mut String, n: u64, width: usize) {
    out.push_str(Digits::padded(n, width).as_str());
}

/// An integer's decimal digits, written on the stack.
pub struct Digits {
    digits: [u8; 20],
    first: usize,
}

impl Digits {
    /// `n` in decimal.
    pub fn new(n: u64) -> Self {
        Self::padded(n, 1)
    }

    /// `n` in decimal, zero-padded to at least `width` digits (at most 20).
    fn padded(mut n: u64, width: usize) -> Self {
        let mut digits = [b'0'; 20];
        let mut first = digits.len();
        while n > 0 || first == digits.len() {
            first -= 1;
            digits[first] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        let first = first.min(digits.len().saturating_sub(width));
        Self { digits, first }
    }

    /// The digits as text.
    pub fn as_str(&self) -> &str {
        // Always ASCII digits: the fallback is never taken.
        std::str::from_utf8(&self.digits[self.first..]).unwrap_or_default()
    }
}

/// `value` with `decimals` digits after the point (see [`push_fixed`]).
pub fn fixed(value: f64, decimals: u32) -> String {
    let mut out = String::with_capacity(12);
    push_fixed(&mut out, value, decimals);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn digits_are_written_as_to_string_writes_them() {
        for n in [0, 7, 10, 99, 100, 65_535, u64::MAX] {
            assert_eq!(Digits::new(n).as_str(), n.to_string());
        }
    }

    #[test]
    fn it_writes_what_format_writes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(44);
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            0.5,
            0.05,
            0.0005,
            0.00005,
            0.12345,
            0.99995,
            0.999_95,
            2.675,
            1.0005,
            -0.00004,
            -1.5,
            999_999.999_95,
            1e9,
            1e12,
            3e-9,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
        ];
        for _ in 0..200_000 {
            values.push(rng.random_range(-2.0..2.0));
            values.push(rng.random::<f64>() * 10f64.powi(rng.random_range(-8..12)));
            // Just under the limit, where one product's error is largest.
            values.push(rng.random_range(0.0..1e9) / 10f64.powi(rng.random_range(0..=6)));
            // Ties in decimal, the hard case for scaling.
            let tie = f64::from(rng.random_range(0..100_000u32)) / 10_000.0 + 0.000_05;
            values.push(tie);
        }
        for value in values {
            for decimals in 0..=6u32 {
                let want = format!("{value:.prec$}", prec = decimals as usize);
                assert_eq!(fixed(value, decimals), want, "{value:e} at {decimals}");
            }
        }
    }
}
