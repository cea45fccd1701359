//! Language signal: whatlang detection over the scanned text.

use super::text::Scope;
use super::{Evidence, SignalError};
use crate::llm::ChatRequest;
use whatlang::Lang;

/// Matches when the text is in one of the configured languages.
#[derive(Debug, Clone)]
pub struct LanguageSignal {
    languages: Vec<Lang>,
    min_confidence: f64,
    scope: Scope,
}

impl LanguageSignal {
    /// Builds the signal from ISO 639-3 codes (`eng`, `fra`, `cmn`, …).
    pub fn new(
        codes: &[String],
        min_confidence: f64,
        scope: Scope,
    ) -> Result<Self, Vec<SignalError>> {
        let mut errors = Vec::new();
        if codes.is_empty() {
            errors.push(SignalError::new(
                "languages",
                "list at least one ISO 639-3 language code, e.g. eng",
            ));
        }
        let mut languages = Vec::new();
        for (i, code) in codes.iter().enumerate() {
            match Lang::from_code(code.to_ascii_lowercase()) {
                Some(lang) => languages.push(lang),
                None => errors.push(SignalError::new(
                    format!("languages[{i}]"),
                    format!(
                        "unknown language {code:?}; use ISO 639-3 codes such as eng, fra, deu, spa, cmn, jpn"
                    ),
                )),
            }
        }
        if !(0.0..=1.0).contains(&min_confidence) {
            errors.push(SignalError::new(
                "minConfidence",
                format!("must be between 0 and 1, got {min_confidence}"),
            ));
        }
        if errors.is_empty() {
            Ok(Self {
                languages,
                min_confidence,
                scope,
            })
        } else {
            Err(errors)
        }
    }

    pub(super) fn evaluate(&self, request: &ChatRequest) -> Evidence {
        let text = self.scope.texts(request).collect::<Vec<_>>().join("\n");
        let Some(info) = whatlang::detect(&text) else {
            return Evidence {
                confidence: 0.0,
                ..Evidence::certain(false)
            };
        };
        let matched =
            self.languages.contains(&info.lang()) && info.confidence() >= self.min_confidence;
        Evidence {
            matched,
            confidence: info.confidence(),
            value: None,
            label: Some(info.lang().code().to_owned()),
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> ChatRequest {
        let body = serde_json::json!({"model":"m","messages":[{"role":"user","content":text}]});
        ChatRequest::parse(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn detects_french_and_labels_it() {
        let signal = LanguageSignal::new(&["fra".to_owned()], 0.0, Scope::LastUser).unwrap();
        let e = signal.evaluate(&request(
            "Bonjour, pouvez-vous m'expliquer comment fonctionne la photosynthèse des plantes ?",
        ));
        assert!(e.matched);
        assert_eq!(e.label.as_deref(), Some("fra"));
        let english = signal.evaluate(&request(
            "Hello, could you explain how photosynthesis works in plants?",
        ));
        assert!(!english.matched);
        assert_eq!(english.label.as_deref(), Some("eng"));
    }

    #[test]
    fn unknown_codes_name_the_expected_format() {
        let errors = LanguageSignal::new(&["en".to_owned()], 0.0, Scope::LastUser).unwrap_err();
        assert_eq!(errors[0].field, "languages[0]");
        assert!(errors[0].message.contains("ISO 639-3"));
    }
}
