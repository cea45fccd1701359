//! PII signal: which personal-data types the request contains, from the validated detectors in
//! [`super::pii_patterns`] and, when configured, the token classifier's entities (computed once
//! per request over every message). Reports the types found, never the values.

use super::embedding::OnError;
use super::pii_patterns::{self, PiiKind};
use super::text::Scope;
use super::{Evidence, SignalError};
use crate::inference::{EntityFound, InferenceError};
use crate::llm::ChatRequest;
use std::sync::Arc;

/// The token classifier's output for one request.
pub type Entities = Result<Arc<Vec<EntityFound>>, InferenceError>;

/// Matches when a watched PII type occurs.
#[derive(Debug, Clone)]
pub struct PiiSignal {
    watched: Vec<String>,
    scope: Scope,
    uses_ner: bool,
    min_score: f32,
    /// What a missing classifier answer means.
    pub on_error: OnError,
}

impl PiiSignal {
    /// Watches `entities` (every known type when empty) except those in `allow`. `ner_types`
    /// are the token classifier's types when one is configured.
    pub fn new(
        entities: &[String],
        allow: &[String],
        scope: Scope,
        ner_types: Option<&[String]>,
        min_score: f32,
        on_error: OnError,
    ) -> Result<Self, Vec<SignalError>> {
        let mut known: Vec<String> = PiiKind::ALL.iter().map(|k| k.name().to_owned()).collect();
        for t in ner_types.unwrap_or_default() {
            if !known.contains(t) {
                known.push(t.clone());
            }
        }
        let mut errors = Vec::new();
        for (field, names) in [("entities", entities), ("allow", allow)] {
            for (i, name) in names.iter().enumerate() {
                if !known.contains(name) {
                    let hint = if ner_types.is_none() {
                        " (names, addresses and other entity types need inference.ner)"
                    } else {
                        ""
                    };
                    errors.push(SignalError::new(
                        format!("{field}[{i}]"),
                        format!(
                            "unknown PII type {name:?}; known types: {}{hint}",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let base = if entities.is_empty() {
            known
        } else {
            entities.to_vec()
        };
        let watched: Vec<String> = base.into_iter().filter(|k| !allow.contains(k)).collect();
        if watched.is_empty() {
            return Err(vec![SignalError::new(
                "allow",
                "every PII type is allowed, so the signal could never match",
            )]);
        }
        Ok(Self {
            watched,
            scope,
            uses_ner: ner_types.is_some(),
            min_score,
            on_error,
        })
    }

    /// True when the signal reads the token classifier's entities.
    pub fn uses_ner(&self) -> bool {
        self.uses_ner
    }

    pub(super) fn evaluate(&self, request: &ChatRequest, entities: Option<&Entities>) -> Evidence {
        let mut found: Vec<&str> = Vec::new();
        for text in self.scope.texts(request) {
            for kind in pii_patterns::find(text) {
                found.push(kind.name());
            }
        }
        let mut error = None;
        if self.uses_ner {
            match entities {
                Some(Ok(entities)) => found.extend(
                    entities
                        .iter()
                        .filter(|e| e.score >= self.min_score)
                        .map(|e| e.kind.as_str()),
                ),
                Some(Err(e)) => error = Some(e.to_string()),
                None => {
                    error = Some("the token classifier did not run for this request".to_owned())
                }
            }
        }
        let mut types: Vec<&str> = self
            .watched
            .iter()
            .map(String::as_str)
            .filter(|w| found.contains(w))
            .collect();
        types.sort_unstable();
        let matched = !types.is_empty() || (error.is_some() && self.on_error == OnError::Match);
        Evidence {
            matched,
            confidence: if error.is_some() { 0.0 } else { 1.0 },
            value: Some(types.len() as f64),
            label: (!types.is_empty()).then(|| types.join(",")),
            error,
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

    fn signal(entities: &[&str], allow: &[&str], ner: Option<&[String]>) -> PiiSignal {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PiiSignal::new(
            &own(entities),
            &own(allow),
            Scope::All,
            ner,
            0.5,
            OnError::NoMatch,
        )
        .unwrap()
    }

    #[test]
    fn reports_the_types_found_and_honours_the_allow_list() {
        let all = signal(&[], &["IP_ADDRESS"], None);
        let e = all.evaluate(
            &request("I am jo@example.org from 10.1.2.3, card 4111111111111111"),
            None,
        );
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("CREDIT_CARD,EMAIL"));
        assert_eq!(e.value, Some(2.0));
        assert!(
            !all.evaluate(&request("my server is 10.1.2.3"), None)
                .matched
        );
        let only_email = signal(&["EMAIL"], &[], None);
        assert!(
            !only_email
                .evaluate(&request("SSN 123-45-6789"), None)
                .matched
        );
    }

    #[test]
    fn classifier_entities_count_above_the_minimum_score_and_failures_are_recorded() {
        let ner_types = vec!["GIVEN_NAME".to_owned(), "CITY".to_owned()];
        let names = signal(&["GIVEN_NAME"], &[], Some(&ner_types));
        let found: Entities = Ok(Arc::new(vec![
            EntityFound {
                kind: "GIVEN_NAME".to_owned(),
                score: 0.9,
            },
            EntityFound {
                kind: "CITY".to_owned(),
                score: 0.2,
            },
        ]));
        let e = names.evaluate(&request("hi"), Some(&found));
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("GIVEN_NAME"));
        let weak: Entities = Ok(Arc::new(vec![EntityFound {
            kind: "GIVEN_NAME".to_owned(),
            score: 0.3,
        }]));
        assert!(!names.evaluate(&request("hi"), Some(&weak)).matched);
        let failed: Entities = Err(InferenceError::Overloaded);
        let e = names.evaluate(&request("hi"), Some(&failed));
        assert!(!e.matched);
        assert_eq!(e.error.as_deref(), Some("encoder overloaded: queue full"));
    }

    #[test]
    fn unknown_types_and_empty_watch_lists_are_config_errors() {
        let errors = PiiSignal::new(
            &["GIVEN_NAME".to_owned()],
            &[],
            Scope::All,
            None,
            0.5,
            OnError::NoMatch,
        )
        .unwrap_err();
        assert_eq!(errors[0].field, "entities[0]");
        assert!(errors[0].message.ends_with("need inference.ner)"));
        let everything: Vec<String> = PiiKind::ALL.iter().map(|k| k.name().to_owned()).collect();
        assert!(PiiSignal::new(&[], &everything, Scope::All, None, 0.5, OnError::NoMatch).is_err());
    }
}
