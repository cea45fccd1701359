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
        drop_address_parts_without_an_address(&mut found);
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

/// Parts of an address that are only numbers or a unit on their own.
const ADDRESS_PARTS: [&str; 3] = ["BUILDING_NUMBER", "ZIP_CODE", "SECONDARY_ADDRESS"];
/// What makes those parts an address.
const ADDRESS_ANCHORS: [&str; 3] = ["STREET_NAME", "CITY", "STATE"];

/// A house number, postal code or flat number is personal data as part of an address: the token
/// classifier also tags bare numbers that way ("What is 92 - 38?" gave a building number and a
/// postal code), so those types count only when a street, city or state was found with them.
fn drop_address_parts_without_an_address(found: &mut Vec<&str>) {
    if !found.iter().any(|kind| ADDRESS_ANCHORS.contains(kind)) {
        found.retain(|kind| !ADDRESS_PARTS.contains(kind));
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
    fn a_house_number_or_postal_code_counts_only_with_a_street_city_or_state() {
        let ner_types: Vec<String> = ["BUILDING_NUMBER", "ZIP_CODE", "STREET_NAME", "CITY"]
            .map(str::to_owned)
            .to_vec();
        let addresses = signal(&[], &["CITY"], Some(&ner_types));
        let entities = |kinds: &[&str]| -> Entities {
            Ok(Arc::new(
                kinds
                    .iter()
                    .map(|kind| EntityFound {
                        kind: (*kind).to_owned(),
                        score: 0.9,
                    })
                    .collect(),
            ))
        };
        let sum = entities(&["BUILDING_NUMBER", "ZIP_CODE"]);
        let e = addresses.evaluate(&request("What is 92 - 38?"), Some(&sum));
        assert!(!e.matched, "{:?}", e.label);
        let street = entities(&["BUILDING_NUMBER", "STREET_NAME"]);
        let e = addresses.evaluate(&request("Lindenstrasse 12"), Some(&street));
        assert_eq!(e.label.as_deref(), Some("BUILDING_NUMBER,STREET_NAME"));
        // An allowed city still makes the postal code next to it part of an address.
        let city = entities(&["ZIP_CODE", "CITY"]);
        let e = addresses.evaluate(&request("10115 Berlin"), Some(&city));
        assert_eq!(e.label.as_deref(), Some("ZIP_CODE"));
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
