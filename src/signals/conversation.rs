//! Conversation-shape and context-length signals.

use super::{Evidence, SignalError};
use crate::llm::ChatRequest;

/// An inclusive range of estimated prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRange {
    min: Option<u64>,
    max: Option<u64>,
}

impl TokenRange {
    /// Builds a range; at least one bound, and `min <= max`.
    pub fn new(min: Option<u64>, max: Option<u64>) -> Result<Self, SignalError> {
        check_bounds(min, max, "minTokens", "maxTokens")?;
        Ok(Self { min, max })
    }

    fn contains(&self, n: u64) -> bool {
        self.min.is_none_or(|min| n >= min) && self.max.is_none_or(|max| n <= max)
    }
}

fn check_bounds(
    min: Option<u64>,
    max: Option<u64>,
    min_name: &str,
    max_name: &str,
) -> Result<(), SignalError> {
    match (min, max) {
        (None, None) => Err(SignalError::new(
            min_name,
            format!("set `{min_name}`, `{max_name}` or both"),
        )),
        (Some(min), Some(max)) if min > max => Err(SignalError::new(
            min_name,
            format!("`{min_name}` ({min}) is greater than `{max_name}` ({max})"),
        )),
        _ => Ok(()),
    }
}

/// Estimated tokens in every message: one token per four characters, rounded up.
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let chars: usize = request
        .messages
        .iter()
        .map(|m| m.text.chars().count())
        .sum();
    (chars as u64).div_ceil(4)
}

pub(super) fn context_length(range: &TokenRange, request: &ChatRequest) -> Evidence {
    let tokens = estimate_tokens(request);
    Evidence {
        value: Some(tokens as f64),
        ..Evidence::certain(range.contains(tokens))
    }
}

/// Conditions on turns, tools and images; all set conditions must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationSignal {
    min_turns: Option<u64>,
    max_turns: Option<u64>,
    has_tools: Option<bool>,
    has_images: Option<bool>,
}

impl ConversationSignal {
    /// Builds the signal; at least one condition must be set.
    pub fn new(
        min_turns: Option<u64>,
        max_turns: Option<u64>,
        has_tools: Option<bool>,
        has_images: Option<bool>,
    ) -> Result<Self, SignalError> {
        if has_tools.is_none() && has_images.is_none() {
            check_bounds(min_turns, max_turns, "minTurns", "maxTurns").map_err(|mut e| {
                e.message = "set at least one of `minTurns`, `maxTurns`, `hasTools`, `hasImages`"
                    .to_owned();
                e
            })?;
        } else if min_turns.is_some() || max_turns.is_some() {
            check_bounds(min_turns, max_turns, "minTurns", "maxTurns")?;
        }
        Ok(Self {
            min_turns,
            max_turns,
            has_tools,
            has_images,
        })
    }

    pub(super) fn evaluate(&self, request: &ChatRequest) -> Evidence {
        let turns = request.user_turns() as u64;
        let matched = self.min_turns.is_none_or(|min| turns >= min)
            && self.max_turns.is_none_or(|max| turns <= max)
            && self.has_tools.is_none_or(|want| request.has_tools == want)
            && self
                .has_images
                .is_none_or(|want| request.has_images() == want);
        Evidence {
            value: Some(turns as f64),
            ..Evidence::certain(matched)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: serde_json::Value) -> ChatRequest {
        ChatRequest::parse(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn context_length_estimates_four_characters_per_token() {
        let r = request(serde_json::json!({"model":"m","messages":[
            {"role":"system","content":"abcd"},{"role":"user","content":"abcdefghi"}]}));
        assert_eq!(estimate_tokens(&r), 4);
        let long = TokenRange::new(Some(4), None).unwrap();
        assert!(context_length(&long, &r).matched);
        assert!(!context_length(&TokenRange::new(None, Some(3)).unwrap(), &r).matched);
        assert!(TokenRange::new(Some(5), Some(1)).is_err());
        assert!(TokenRange::new(None, None).is_err());
    }

    #[test]
    fn conversation_checks_turns_tools_and_images_together() {
        let r = request(
            serde_json::json!({"model":"m","tools":[{"type":"function"}],"messages":[
            {"role":"user","content":"a"},{"role":"assistant","content":"b"},
            {"role":"user","content":"c"}]}),
        );
        let multi_turn_with_tools =
            ConversationSignal::new(Some(2), None, Some(true), None).unwrap();
        let e = multi_turn_with_tools.evaluate(&r);
        assert!(e.matched);
        assert_eq!(e.value, Some(2.0));
        let images = ConversationSignal::new(None, None, None, Some(true)).unwrap();
        assert!(!images.evaluate(&r).matched);
        assert!(ConversationSignal::new(None, None, None, None).is_err());
    }
}
