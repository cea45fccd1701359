//! Confidence of an answer from the token log-probabilities an OpenAI-compatible server returns
//! with `logprobs: true` (`choices[0].logprobs.content[].logprob` and, with `top_logprobs`, the
//! alternatives).

use serde_json::Value;

/// How confidence is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Mean token log-probability (≤ 0; closer to 0 is more confident).
    AvgLogprob,
    /// Mean gap between the chosen token's log-probability and the best alternative's (≥ 0).
    Margin,
}

impl Measure {
    /// The name in configuration and headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::AvgLogprob => "avg_logprob",
            Self::Margin => "margin",
        }
    }
}

/// The answer's confidence, or `None` when the reply carries no log-probabilities.
pub fn confidence(reply: &Value, measure: Measure) -> Option<f64> {
    let tokens = reply["choices"][0]["logprobs"]["content"].as_array()?;
    let mut total = 0.0;
    let mut count = 0usize;
    for token in tokens {
        let chosen = token["logprob"].as_f64()?;
        let value = match measure {
            Measure::AvgLogprob => chosen,
            Measure::Margin => {
                let best_other = token["top_logprobs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|alt| alt["token"] != token["token"])
                    .filter_map(|alt| alt["logprob"].as_f64())
                    .fold(f64::NEG_INFINITY, f64::max);
                if best_other.is_finite() {
                    chosen - best_other
                } else {
                    // No alternative offered: the chosen token stands alone.
                    -chosen.min(0.0) + 10.0
                }
            }
        };
        total += value;
        count += 1;
    }
    (count > 0).then(|| total / count as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(tokens: &[(f64, f64)]) -> Value {
        let content: Vec<Value> = tokens
            .iter()
            .enumerate()
            .map(|(i, (chosen, other))| {
                json!({"token": format!("t{i}"), "logprob": chosen,
                       "top_logprobs": [{"token": format!("t{i}"), "logprob": chosen},
                                        {"token": "alt", "logprob": other}]})
            })
            .collect();
        json!({"choices": [{"message": {"content": "x"}, "logprobs": {"content": content}}]})
    }

    #[test]
    fn average_and_margin_read_every_token() {
        let r = reply(&[(-0.1, -3.0), (-0.3, -1.0)]);
        let avg = confidence(&r, Measure::AvgLogprob).unwrap();
        assert!((avg - -0.2).abs() < 1e-12);
        let margin = confidence(&r, Measure::Margin).unwrap();
        assert!((margin - ((2.9 + 0.7) / 2.0)).abs() < 1e-12);
        assert!(confidence(&reply(&[(-2.5, -2.6)]), Measure::Margin).unwrap() < 0.2);
    }

    #[test]
    fn a_reply_without_logprobs_has_no_confidence() {
        let plain = json!({"choices": [{"message": {"content": "x"}}]});
        assert_eq!(confidence(&plain, Measure::AvgLogprob), None);
        assert_eq!(confidence(&reply(&[]), Measure::AvgLogprob), None);
    }
}
