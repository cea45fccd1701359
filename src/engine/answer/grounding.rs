//! The grounding check: every sentence of an answer is scored against the context the request
//! provided — its system, developer, user and tool messages, cut into sentences — as
//! `(1 − w) · best cosine + w · word overlap`, where the cosine compares the sentence's embedding
//! with each context sentence's and the overlap is the share of the sentence's content words
//! found anywhere in the context (names an answer invents are not). A sentence stating a number
//! of two or more digits the context never mentions scores 0. A sentence at or above the
//! threshold is supported; the answer is grounded when the supported share reaches the rule's
//! minimum.

use crate::config::GroundingRule;
use crate::inference::EncoderHandle;
use crate::llm::ChatRequest;
use std::collections::HashSet;

/// Context sentences compared with at most (the first, in message order).
pub const MAX_CONTEXT: usize = 256;
/// Answer sentences checked at most (the first).
pub const MAX_CLAIMS: usize = 64;

/// Words too common to show that an answer used the context.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "was", "were", "is", "it", "its", "this", "that", "these", "those",
    "with", "from", "into", "about", "has", "have", "had", "not", "but", "you", "your", "they",
    "their", "them", "there", "here", "which", "what", "when", "where", "who", "how", "can",
    "could", "would", "should", "will", "also", "than", "then", "been", "being", "does", "did",
    "our", "out", "all", "any", "some", "such", "very", "more", "most", "one", "may",
];

/// What the response phase checks a forwarded answer against.
#[derive(Debug, Clone, PartialEq)]
pub struct GroundingCheck {
    /// The rule.
    pub rule: GroundingRule,
    /// The request's context, in sentences.
    context: Vec<String>,
    /// Every content word of the context.
    words: HashSet<String>,
}

/// How an answer fared.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Sentences supported.
    pub supported: usize,
    /// Sentences checked.
    pub checked: usize,
    /// The lowest sentence score (1 when nothing was checked).
    pub lowest: f32,
    /// The supported share reached the rule's minimum.
    pub grounded: bool,
    /// Why the check could not run (the encoder failed); the answer then counts as ungrounded.
    pub error: Option<String>,
}

impl Verdict {
    /// `grounded 3/3 min=0.71`, `ungrounded 1/4 min=0.22`, or `unchecked: reason`.
    pub fn label(&self) -> String {
        match &self.error {
            Some(reason) => format!("unchecked: {reason}"),
            None => format!(
                "{} {}/{} min={:.2}",
                if self.grounded {
                    "grounded"
                } else {
                    "ungrounded"
                },
                self.supported,
                self.checked,
                self.lowest
            ),
        }
    }
}

impl GroundingCheck {
    /// The check of `rule` for `request`'s context (read from the request as forwarded).
    pub fn new(rule: &GroundingRule, request: &ChatRequest) -> Self {
        let mut context = Vec::new();
        let mut words = HashSet::new();
        for message in &request.messages {
            if !matches!(
                message.role.as_str(),
                "system" | "developer" | "user" | "tool"
            ) {
                continue;
            }
            words.extend(content_words(&message.text));
            for sentence in sentences(&message.text) {
                if context.len() < MAX_CONTEXT && !context.contains(&sentence) {
                    context.push(sentence);
                }
            }
        }
        Self {
            rule: rule.clone(),
            context,
            words,
        }
    }

    /// Judges `answer`. An encoder that cannot answer leaves the answer ungrounded, with the
    /// reason.
    pub async fn judge(&self, encoder: Option<&EncoderHandle>, answer: &str) -> Verdict {
        let claims: Vec<String> = sentences(answer)
            .into_iter()
            .filter(|s| !content_words(s).is_empty())
            .take(MAX_CLAIMS)
            .collect();
        if claims.is_empty() {
            return Verdict {
                supported: 0,
                checked: 0,
                lowest: 1.0,
                grounded: true,
                error: None,
            };
        }
        let mut texts = claims.clone();
        texts.extend(self.context.iter().cloned());
        let embedded = match encoder {
            Some(encoder) => encoder
                .embed_many(&texts, None)
                .await
                .map_err(|e| e.to_string()),
            None => Err("no encoder is configured".to_owned()),
        };
        let vectors = match embedded {
            Ok(vectors) => vectors,
            Err(reason) => {
                return Verdict {
                    supported: 0,
                    checked: claims.len(),
                    lowest: 0.0,
                    grounded: false,
                    error: Some(reason),
                }
            }
        };
        let (claim_vectors, context_vectors) = vectors.split_at(claims.len());
        let weight = self.rule.lexical_weight;
        let scores: Vec<f32> = claims
            .iter()
            .zip(claim_vectors)
            .map(|(claim, vector)| {
                if self.invents_a_number(claim) {
                    return 0.0;
                }
                let best = context_vectors
                    .iter()
                    .map(|c| crate::inference::cosine(vector, c))
                    .fold(0.0f32, f32::max);
                (1.0 - weight) * best + weight * self.overlap(claim)
            })
            .collect();
        let supported = scores.iter().filter(|s| **s >= self.rule.threshold).count();
        let share = supported as f32 / scores.len() as f32;
        Verdict {
            supported,
            checked: scores.len(),
            lowest: scores.iter().copied().fold(1.0, f32::min),
            grounded: share >= self.rule.min_supported,
            error: None,
        }
    }

    /// True when `sentence` states a number of two or more digits the context never mentions
    /// (a date, a quantity, a price): such a sentence is unsupported whatever its meaning.
    fn invents_a_number(&self, sentence: &str) -> bool {
        content_words(sentence)
            .iter()
            .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_digit()))
            .any(|number| !self.words.contains(number))
    }

    /// Share of `sentence`'s content words found in the context.
    fn overlap(&self, sentence: &str) -> f32 {
        let words = content_words(sentence);
        if words.is_empty() {
            return 1.0;
        }
        let found = words.iter().filter(|w| self.words.contains(*w)).count();
        found as f32 / words.len() as f32
    }
}

/// The check's outcome on one answer: its verdict, and whether the fallback replaced it.
#[derive(Debug, Clone, PartialEq)]
pub struct Grounded {
    /// How the answer fared.
    pub verdict: Verdict,
    /// The rule's fallback answer was given instead.
    pub replaced: bool,
}

impl Grounded {
    /// The answer passed the check: it may be kept by the cache.
    pub fn passed(&self) -> bool {
        self.verdict.error.is_none() && self.verdict.grounded
    }

    /// `grounded`, `ungrounded`, `replaced` or `unchecked` (the metric's outcome).
    pub fn outcome(&self) -> &'static str {
        match (&self.verdict.error, self.verdict.grounded, self.replaced) {
            (Some(_), _, _) => "unchecked",
            (None, true, _) => "grounded",
            (None, false, true) => "replaced",
            (None, false, false) => "ungrounded",
        }
    }

    /// For `x-mom-grounding`, records and metadata: the verdict's label, `;fallback` added
    /// when replaced.
    pub fn label(&self) -> String {
        let label = self.verdict.label();
        match self.replaced {
            true => format!("{label};fallback"),
            false => label,
        }
    }
}

/// What the check did to one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// The outcome.
    pub grounded: Grounded,
    /// The fallback answer's body (JSON or events) that replaces an unsupported answer.
    pub replacement: Option<Vec<u8>>,
}

impl GroundingCheck {
    /// Judges the answer, and builds the fallback (in the answer's form: JSON or events) that
    /// replaces it when it is not grounded and the rule fails closed.
    pub async fn settle(
        &self,
        encoder: Option<&EncoderHandle>,
        answer: &super::held::Held,
        provider_model: &str,
    ) -> Settled {
        let verdict = self.judge(encoder, answer.text()).await;
        let fallback = self.rule.fallback.as_deref().filter(|_| !verdict.grounded);
        let replacement = fallback.map(|text| {
            let completion = fallback_completion(text, provider_model);
            crate::engine::Reply::completion(&completion, answer.stream()).body
        });
        Settled {
            grounded: Grounded {
                verdict,
                replaced: replacement.is_some(),
            },
            replacement,
        }
    }
}

/// The JSON completion carrying `text`, the fallback answer given instead of an unsupported one.
fn fallback_completion(text: &str, provider_model: &str) -> serde_json::Value {
    serde_json::json!({
        "id": format!("chatcmpl-mom-{:016x}", rand::random::<u64>()),
        "object": "chat.completion",
        "created": crate::state::now_ms() / 1000,
        "model": provider_model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
    })
}

/// `text` cut after `.`, `!`, `?` or a line break, trimmed, empty pieces dropped.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        let next_is_space = chars.get(i + 1).is_none_or(|(_, n)| n.is_whitespace());
        let ends = c == '\n' || (matches!(c, '.' | '!' | '?') && next_is_space);
        if ends {
            let piece = text[start..at + c.len_utf8()].trim();
            if !piece.is_empty() {
                out.push(piece.to_owned());
            }
            start = at + c.len_utf8();
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

/// Lower-case words of three or more letters or digits (any number), stopwords left out.
fn content_words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 || w.chars().all(|c| c.is_ascii_digit()))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_end_at_stops_followed_by_space_and_at_line_breaks() {
        assert_eq!(
            sentences("It is 3.5 m tall. Built in 1889!\nWhy? Because"),
            ["It is 3.5 m tall.", "Built in 1889!", "Why?", "Because"]
        );
    }

    #[test]
    fn overlap_counts_the_content_words_the_context_holds() {
        let rule = GroundingRule {
            threshold: 0.5,
            lexical_weight: 0.4,
            min_supported: 1.0,
            fallback: None,
        };
        let request = ChatRequest::parse(
            br#"{"model":"m","messages":[{"role":"system","content":"The tower was completed in 1889."},
                {"role":"user","content":"When?"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let check = GroundingCheck::new(&rule, &request);
        assert_eq!(check.context, ["The tower was completed in 1889.", "When?"]);
        assert!((check.overlap("It was completed in 1889.") - 1.0).abs() < 1e-6);
        // "built" and "1650" are not in the context; "tower" is.
        assert!((check.overlap("The tower was built in 1650.") - 1.0 / 3.0).abs() < 1e-6);
        assert!(check.invents_a_number("The tower was built in 1650."));
        assert!(!check.invents_a_number("It took 2 years, ending in 1889."));
    }
}
