//! PII signal: which personal-data types the scanned messages contain, by the validated
//! detectors in [`super::pii_patterns`]. Reports the types found, never the values.

use super::pii_patterns::{self, PiiKind};
use super::text::Scope;
use super::{Evidence, SignalError};
use crate::llm::ChatRequest;

/// Matches when a watched PII type occurs.
#[derive(Debug, Clone)]
pub struct PiiSignal {
    watched: Vec<PiiKind>,
    scope: Scope,
}

impl PiiSignal {
    /// Watches `entities` (every type when empty) except those in `allow`.
    pub fn new(
        entities: &[String],
        allow: &[String],
        scope: Scope,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        let mut parse = |field: &str, names: &[String]| -> Vec<PiiKind> {
            names
                .iter()
                .enumerate()
                .filter_map(|(i, name)| {
                    let kind = PiiKind::from_name(name);
                    if kind.is_none() {
                        let known: Vec<&str> = PiiKind::ALL.iter().map(|k| k.name()).collect();
                        errors.push(SignalError::new(
                            format!("{field}[{i}]"),
                            format!(
                                "unknown PII type {name:?}; known types: {}",
                                known.join(", ")
                            ),
                        ));
                    }
                    kind
                })
                .collect()
        };
        let listed = parse("entities", entities);
        let allowed = parse("allow", allow);
        if !errors.is_empty() {
            return Err(errors);
        }
        let base = if listed.is_empty() {
            PiiKind::ALL.to_vec()
        } else {
            listed
        };
        let watched: Vec<PiiKind> = base.into_iter().filter(|k| !allowed.contains(k)).collect();
        if watched.is_empty() {
            return Err(vec![SignalError::new(
                "allow",
                "every PII type is allowed, so the signal could never match",
            )]);
        }
        Ok(Self { watched, scope })
    }

    pub(super) fn evaluate(&self, request: &ChatRequest) -> Evidence {
        let mut found: Vec<PiiKind> = Vec::new();
        for text in self.scope.texts(request) {
            for kind in pii_patterns::find(text) {
                if self.watched.contains(&kind) && !found.contains(&kind) {
                    found.push(kind);
                }
            }
        }
        found.sort();
        let label = (!found.is_empty())
            .then(|| found.iter().map(|k| k.name()).collect::<Vec<_>>().join(","));
        Evidence {
            value: Some(found.len() as f64),
            label,
            ..Evidence::certain(!found.is_empty())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> ChatRequest {
        let body = serde_json::json!({"model":"m","messages":[
            {"role":"system","content":"support bot"},{"role":"user","content":text}]});
        ChatRequest::parse(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn reports_the_types_found_and_honours_the_allow_list() {
        let all = PiiSignal::new(&[], &["IP_ADDRESS".to_owned()], Scope::All).unwrap();
        let e = all.evaluate(&request(
            "I am jo@example.org from 10.1.2.3, card 4111111111111111",
        ));
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("EMAIL,CREDIT_CARD"));
        assert_eq!(e.value, Some(2.0));
        assert!(!all.evaluate(&request("my server is 10.1.2.3")).matched);
        let only_email = PiiSignal::new(&["EMAIL".to_owned()], &[], Scope::LastUser).unwrap();
        assert!(!only_email.evaluate(&request("SSN 123-45-6789")).matched);
    }

    #[test]
    fn unknown_types_and_empty_watch_lists_are_config_errors() {
        let errors = PiiSignal::new(&["PASSPORT".to_owned()], &[], Scope::All).unwrap_err();
        assert_eq!(errors[0].field, "entities[0]");
        let everything: Vec<String> = PiiKind::ALL.iter().map(|k| k.name().to_owned()).collect();
        assert!(PiiSignal::new(&[], &everything, Scope::All).is_err());
    }
}
