//! Selection: how a matched decision picks one of its models. Every choice records a score per
//! candidate so `explain`, headers and metadata can show why.

/// The closed set of selection algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// The first candidate.
    Static,
    /// A deterministic weighted split keyed by the request (its id, else its body).
    Weighted,
}

impl Algorithm {
    /// The name shown in headers, metadata and access logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::Weighted => "weighted",
        }
    }
}

/// A candidate model with its configured weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Index into the snapshot's model table.
    pub model: usize,
    /// Relative share (weighted) or ignored (static).
    pub weight: f64,
}

/// The choice and the score behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Index into the candidate list.
    pub chosen: usize,
    /// One score per candidate, in candidate order.
    pub scores: Vec<f64>,
}

/// Picks one candidate. `key` places the request on the weighted wheel; equal keys pick alike.
/// `candidates` is never empty (configuration compilation guarantees it).
pub fn select(algorithm: Algorithm, candidates: &[Candidate], key: u64) -> Selection {
    match algorithm {
        Algorithm::Static => Selection {
            chosen: 0,
            scores: (0..candidates.len())
                .map(|i| if i == 0 { 1.0 } else { 0.0 })
                .collect(),
        },
        Algorithm::Weighted => {
            let total: f64 = candidates.iter().map(|c| c.weight).sum();
            let scores: Vec<f64> = candidates.iter().map(|c| c.weight / total).collect();
            let point = (key as f64 / u64::MAX as f64).min(1.0);
            let mut cumulative = 0.0;
            let chosen = scores
                .iter()
                .position(|share| {
                    cumulative += share;
                    point < cumulative
                })
                .unwrap_or(candidates.len().saturating_sub(1));
            Selection { chosen, scores }
        }
    }
}

/// A stable 64-bit FNV-1a hash, used to key weighted selection.
pub fn request_key(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAIR: [Candidate; 2] = [
        Candidate {
            model: 7,
            weight: 3.0,
        },
        Candidate {
            model: 9,
            weight: 1.0,
        },
    ];

    #[test]
    fn static_always_picks_the_first_candidate() {
        let s = select(Algorithm::Static, &PAIR, u64::MAX);
        assert_eq!(s.chosen, 0);
        assert_eq!(s.scores, vec![1.0, 0.0]);
    }

    #[test]
    fn weighted_choice_follows_the_key_and_the_weights() {
        assert_eq!(select(Algorithm::Weighted, &PAIR, 0).chosen, 0);
        assert_eq!(select(Algorithm::Weighted, &PAIR, u64::MAX).chosen, 1);
        let second = (0..4000u64)
            .map(|i| select(Algorithm::Weighted, &PAIR, request_key(&i.to_le_bytes())).chosen)
            .filter(|c| *c == 1)
            .count();
        assert!((800..1200).contains(&second), "share of second: {second}");
        assert_eq!(
            select(Algorithm::Weighted, &PAIR, 1).scores,
            vec![0.75, 0.25]
        );
    }
}
