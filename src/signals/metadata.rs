//! Metadata signal: one predicate on one request header.

use super::{Evidence, SignalError};
use crate::llm::Headers;
use regex::Regex;

/// What the header must satisfy.
#[derive(Debug, Clone)]
pub enum HeaderPredicate {
    /// Equals one of the values.
    Equals(Vec<String>),
    /// Matches the regular expression.
    Pattern(Regex),
    /// Is present (true) or absent (false).
    Present(bool),
}

/// A predicate on a named header.
#[derive(Debug, Clone)]
pub struct MetadataSignal {
    header: String,
    predicate: HeaderPredicate,
}

impl MetadataSignal {
    /// Builds the signal; exactly one of `equals`, `pattern`, `present` must be set.
    pub fn new(
        header: &str,
        equals: Option<&[String]>,
        pattern: Option<&str>,
        present: Option<bool>,
    ) -> Result<Self, SignalError> {
        if header.trim().is_empty() {
            return Err(SignalError::new("header", "name the header to test"));
        }
        let predicate = match (equals, pattern, present) {
            (Some(values), None, None) if !values.is_empty() => {
                HeaderPredicate::Equals(values.to_vec())
            }
            (Some(_), None, None) => {
                return Err(SignalError::new("equals", "list at least one value"))
            }
            (None, Some(pattern), None) => {
                HeaderPredicate::Pattern(Regex::new(pattern).map_err(|e| {
                    SignalError::new(
                        "pattern",
                        format!(
                            "invalid regular expression {pattern:?}: {}",
                            e.to_string().replace('\n', " ")
                        ),
                    )
                })?)
            }
            (None, None, Some(present)) => HeaderPredicate::Present(present),
            _ => {
                return Err(SignalError::new(
                    "header",
                    "set exactly one of `equals`, `pattern` or `present`",
                ))
            }
        };
        Ok(Self {
            header: header.to_ascii_lowercase(),
            predicate,
        })
    }

    pub(super) fn evaluate(&self, headers: &Headers) -> Evidence {
        let value = headers.get(&self.header);
        let matched = match (&self.predicate, value) {
            (HeaderPredicate::Present(want), value) => value.is_some() == *want,
            (HeaderPredicate::Equals(values), Some(value)) => values.iter().any(|v| v == value),
            (HeaderPredicate::Pattern(regex), Some(value)) => regex.is_match(value),
            (HeaderPredicate::Equals(_) | HeaderPredicate::Pattern(_), None) => false,
        };
        Evidence::certain(matched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_predicate_tests_the_named_header() {
        let headers = Headers::new([("x-tenant".to_owned(), "acme-eu".to_owned())]);
        let equals = MetadataSignal::new("X-Tenant", Some(&["acme-eu".to_owned()]), None, None);
        assert!(equals.unwrap().evaluate(&headers).matched);
        let pattern = MetadataSignal::new("x-tenant", None, Some("-us$"), None).unwrap();
        assert!(!pattern.evaluate(&headers).matched);
        let absent = MetadataSignal::new("x-beta", None, None, Some(false)).unwrap();
        assert!(absent.evaluate(&headers).matched);
        assert!(MetadataSignal::new("x", Some(&[]), None, Some(true)).is_err());
    }
}
