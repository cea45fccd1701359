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
    /// The model's own probability that its answer is correct: a second call asks it YES or
    /// NO, and the probability of YES is read from the first token's log-probabilities.
    SelfVerify,
}

impl Measure {
    /// The name in configuration and headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::AvgLogprob => "avg_logprob",
            Self::Margin => "margin",
            Self::SelfVerify => "self_verify",
        }
    }
}

/// The answer's confidence, or `None` when the reply carries no log-probabilities.
pub fn confidence(reply: &Value, measure: Measure) -> Option<f64> {
    if measure == Measure::SelfVerify {
        // Read from the verification reply with [`yes_probability`], not from the answer.
        return None;
    }
    let tokens = reply["choices"][0]["logprobs"]["content"].as_array()?;
    let mut total = 0.0;
    let mut count = 0usize;
    for token in tokens {
        let chosen = token["logprob"].as_f64()?;
        let value = match measure {
            Measure::AvgLogprob | Measure::SelfVerify => chosen,
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

/// The probability a YES/NO verification reply gives to YES: the first token's probability
/// mass on yes-tokens (chosen and alternatives); without log-probabilities, 1 for a reply that
/// starts with yes and 0 otherwise. `None` for a reply with no text.
pub fn yes_probability(reply: &Value) -> Option<f64> {
    let is_yes = |token: &str| token.trim().trim_matches('.').eq_ignore_ascii_case("yes");
    let first = &reply["choices"][0]["logprobs"]["content"][0];
    if let Some(chosen) = first["logprob"].as_f64() {
        let mut seen = vec![first["token"].as_str().unwrap_or_default().to_owned()];
        let mut yes = if is_yes(&seen[0]) { chosen.exp() } else { 0.0 };
        for alternative in first["top_logprobs"].as_array().into_iter().flatten() {
            let token = alternative["token"].as_str().unwrap_or_default();
            if seen.iter().any(|t| t == token) {
                continue;
            }
            seen.push(token.to_owned());
            if is_yes(token) {
                yes += alternative["logprob"].as_f64().map_or(0.0, f64::exp);
            }
        }
        return Some(yes.min(1.0));
    }
    let text = reply["choices"][0]["message"]["content"].as_str()?.trim();
    if text.is_empty() {
        return None;
    }
    let word = text
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default();
    Some(if word.eq_ignore_ascii_case("yes") {
        1.0
    } else {
        0.0
    })
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
    fn self_verification_sums_the_yes_tokens_of_the_first_position() {
        let verdict = json!({"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [
            {"token": "Yes", "logprob": (0.6f64).ln(), "top_logprobs": [
                {"token": "Yes", "logprob": (0.6f64).ln()},
                {"token": " yes", "logprob": (0.1f64).ln()},
                {"token": "No", "logprob": (0.3f64).ln()}]}]}}]});
        assert!((yes_probability(&verdict).unwrap() - 0.7).abs() < 1e-9);
        let plain_no = json!({"choices": [{"message": {"content": "No, it is wrong."}}]});
        assert_eq!(yes_probability(&plain_no), Some(0.0));
        let plain_yes = json!({"choices": [{"message": {"content": "YES."}}]});
        assert_eq!(yes_probability(&plain_yes), Some(1.0));
        assert_eq!(confidence(&verdict, Measure::SelfVerify), None);
    }

    #[test]
    fn a_reply_without_logprobs_has_no_confidence() {
        let plain = json!({"choices": [{"message": {"content": "x"}}]});
        assert_eq!(confidence(&plain, Measure::AvgLogprob), None);
        assert_eq!(confidence(&reply(&[]), Measure::AvgLogprob), None);
    }
}
