//! Keyword signal: literal terms through one Aho-Corasick automaton plus a regex set, combined
//! with `any`, `all` or `none`.

use super::text::Scope;
use super::{Evidence, SignalError};
use crate::llm::ChatRequest;
use aho_corasick::AhoCorasick;
use regex::RegexSet;

/// How matched terms combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeywordOperator {
    /// Any term occurs.
    Any,
    /// Every term occurs.
    All,
    /// No term occurs.
    None,
}

/// A compiled keyword signal.
#[derive(Debug, Clone)]
pub struct KeywordSignal {
    terms: Vec<String>,
    keyword_count: usize,
    literals: Option<AhoCorasick>,
    patterns: Option<RegexSet>,
    operator: KeywordOperator,
    pub(super) case_sensitive: bool,
    pub(super) whole_words: bool,
    pub(super) scope: Scope,
    /// Its place in the policy's [`super::keyword_index::KeywordIndex`], once indexed.
    pub slot: Option<usize>,
}

impl KeywordSignal {
    /// Compiles literal keywords and regular expressions.
    pub fn new(
        keywords: &[String],
        patterns: &[String],
        operator: KeywordOperator,
        case_sensitive: bool,
        whole_words: bool,
        scope: Scope,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        if keywords.is_empty() && patterns.is_empty() {
            errors.push(SignalError::new(
                "keywords",
                "a keyword signal needs at least one entry in `keywords` or `patterns`",
            ));
        }
        for (i, keyword) in keywords.iter().enumerate() {
            if keyword.trim().is_empty() {
                errors.push(SignalError::new(
                    format!("keywords[{i}]"),
                    "empty keyword; remove it",
                ));
            }
        }
        for (i, pattern) in patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(pattern) {
                let reason = e.to_string().replace('\n', " ");
                errors.push(SignalError::new(
                    format!("patterns[{i}]"),
                    format!("invalid regular expression {pattern:?}: {reason}"),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let folded: Vec<String> = keywords.iter().map(|k| fold(k, case_sensitive)).collect();
        let literals = if folded.is_empty() {
            None
        } else {
            Some(AhoCorasick::new(&folded).map_err(|e| {
                vec![SignalError::new(
                    "keywords",
                    format!("cannot build matcher: {e}"),
                )]
            })?)
        };
        let patterns_set = if patterns.is_empty() {
            None
        } else {
            let set = regex::RegexSetBuilder::new(patterns)
                .case_insensitive(!case_sensitive)
                .build()
                .map_err(|e| vec![SignalError::new("patterns", e.to_string())])?;
            Some(set)
        };
        let mut terms = keywords.to_vec();
        terms.extend(patterns.iter().cloned());
        Ok(Self {
            terms,
            keyword_count: keywords.len(),
            literals,
            patterns: patterns_set,
            operator,
            case_sensitive,
            whole_words,
            scope,
            slot: None,
        })
    }

    /// The literal keywords, as declared.
    pub fn keywords(&self) -> &[String] {
        &self.terms[..self.keyword_count]
    }

    /// The regular expressions, as declared.
    pub fn patterns(&self) -> &[String] {
        &self.terms[self.keyword_count..]
    }

    /// Matches this signal alone on `request` (the policy's combined index does the same for
    /// every keyword signal at once).
    pub fn evaluate(&self, request: &ChatRequest) -> Evidence {
        let literal_count = self.literals.as_ref().map_or(0, |ac| ac.patterns_len());
        let mut hits = vec![false; self.terms.len()];
        for text in self.scope.texts(request) {
            if let Some(ac) = &self.literals {
                let folded = fold(text, self.case_sensitive);
                for found in ac.find_overlapping_iter(&folded) {
                    if !self.whole_words || is_whole_word(&folded, found.start(), found.end()) {
                        hits[found.pattern().as_usize()] = true;
                    }
                }
            }
            if let Some(set) = &self.patterns {
                for index in set.matches(text).iter() {
                    hits[literal_count + index] = true;
                }
            }
        }
        self.evidence(&hits)
    }

    /// The evidence of `hits` (one per term: literals, then patterns), however they were found.
    pub(super) fn evidence(&self, hits: &[bool]) -> Evidence {
        let hit_count = hits.iter().filter(|hit| **hit).count();
        let matched = match self.operator {
            KeywordOperator::Any => hit_count > 0,
            KeywordOperator::All => hit_count == hits.len(),
            KeywordOperator::None => hit_count == 0,
        };
        let label = hits
            .iter()
            .position(|hit| *hit)
            .map(|i| self.terms[i].clone());
        Evidence {
            matched,
            confidence: 1.0,
            value: Some(hit_count as f64),
            label,
            error: None,
        }
    }
}

pub(super) fn fold(text: &str, case_sensitive: bool) -> String {
    if case_sensitive {
        text.to_owned()
    } else {
        text.to_lowercase()
    }
}

pub(super) fn is_whole_word(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> ChatRequest {
        let body = serde_json::json!({"model":"m","messages":[{"role":"user","content":text}]});
        ChatRequest::parse(body.to_string().as_bytes()).unwrap()
    }

    fn signal(keywords: &[&str], patterns: &[&str], operator: KeywordOperator) -> KeywordSignal {
        let keywords: Vec<String> = keywords.iter().map(|s| s.to_string()).collect();
        let patterns: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
        KeywordSignal::new(&keywords, &patterns, operator, false, true, Scope::LastUser).unwrap()
    }

    #[test]
    fn literal_keywords_match_whole_words_case_insensitively() {
        let s = signal(&["SQL", "integral"], &[], KeywordOperator::Any);
        let e = s.evaluate(&request("Compute the Integral please"));
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("integral"));
        assert!(!s.evaluate(&request("use sqlite")).matched);
    }

    #[test]
    fn all_and_none_operators_combine_literals_and_patterns() {
        let all = signal(&["solve"], &[r"\d+\s*[+*/-]\s*\d+"], KeywordOperator::All);
        assert!(all.evaluate(&request("solve 2 + 3")).matched);
        assert!(!all.evaluate(&request("solve it")).matched);
        let none = signal(&["password"], &[], KeywordOperator::None);
        assert!(none.evaluate(&request("hello")).matched);
        assert!(!none.evaluate(&request("my Password is")).matched);
    }

    #[test]
    fn bad_regex_and_empty_lists_are_reported_per_field() {
        let errors = KeywordSignal::new(
            &[" ".to_owned()],
            &["(".to_owned()],
            KeywordOperator::Any,
            false,
            true,
            Scope::LastUser,
        )
        .unwrap_err();
        assert_eq!(errors[0].field, "keywords[0]");
        assert_eq!(errors[1].field, "patterns[0]");
        assert!(errors[1]
            .message
            .starts_with("invalid regular expression \"(\""));
    }
}
