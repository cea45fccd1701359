//! Output contracts: the shape a looper's final answer must have — a multiple-choice
//! `ANSWER: X` line, a complete fenced code block, a JSON value valid against a JSON Schema, or a
//! regular expression. A contract checks an answer, tells a model what it asks for, and words
//! the one repair request a broken answer gets.

use serde_json::Value;
use std::sync::{Arc, LazyLock};

/// The shape an answer must have.
#[derive(Clone)]
pub enum OutputContract {
    /// The answer ends with `ANSWER: X`, X one of `choices`.
    MultipleChoice {
        /// Allowed letters (or tokens), as declared.
        choices: Vec<String>,
    },
    /// The answer holds one complete fenced code block, labelled `language` when one is declared.
    Code {
        /// The fence label asked for (`python`), compared case-insensitively.
        language: Option<String>,
    },
    /// The answer is one JSON value valid against `schema`.
    JsonSchema {
        /// The compiled schema.
        validator: Arc<jsonschema::Validator>,
        /// The schema as declared (shown to models and in errors).
        schema: Value,
    },
    /// The answer matches a regular expression.
    Pattern {
        /// The compiled expression.
        regex: regex::Regex,
    },
}

impl std::fmt::Debug for OutputContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutputContract({}: {})", self.name(), self.describe())
    }
}

impl PartialEq for OutputContract {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.describe() == other.describe()
    }
}

impl Eq for OutputContract {}

static ANSWER_LINE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"(?i)\bANSWER\s*:\s*\(?([A-Za-z0-9]+)\)?").ok());

static FENCE: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"(?s)```([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)```").ok());

impl OutputContract {
    /// Compiles a JSON Schema contract; the error names what is wrong with the schema.
    pub fn json_schema(schema: Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(Self::JsonSchema {
            validator: Arc::new(validator),
            schema,
        })
    }

    /// `multiple_choice`, `code`, `json_schema` or `regex`, as headers and metadata show it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MultipleChoice { .. } => "multiple_choice",
            Self::Code { .. } => "code",
            Self::JsonSchema { .. } => "json_schema",
            Self::Pattern { .. } => "regex",
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::MultipleChoice { choices } => choices.join(","),
            Self::Code { language } => language.clone().unwrap_or_default(),
            Self::JsonSchema { schema, .. } => schema.to_string(),
            Self::Pattern { regex } => regex.as_str().to_owned(),
        }
    }

    /// What the contract asks, worded for a model's system message.
    pub fn instruction(&self) -> String {
        match self {
            Self::MultipleChoice { choices } => format!(
                "End your answer with one line `ANSWER: X`, where X is one of {}.",
                choices.join(", ")
            ),
            Self::Code { language } => format!(
                "Give the code in one complete fenced code block (```{} … ```) that runs as it is.",
                language.as_deref().unwrap_or("")
            ),
            Self::JsonSchema { schema, .. } => format!(
                "Reply with one JSON value and nothing else, valid against this JSON Schema: {schema}"
            ),
            Self::Pattern { regex } => format!(
                "Your answer must match the regular expression `{}`.",
                regex.as_str()
            ),
        }
    }

    /// `Ok` when `text` keeps the contract; otherwise what is wrong with it, in one line.
    pub fn check(&self, text: &str) -> Result<(), String> {
        match self {
            Self::MultipleChoice { choices } => {
                let found = ANSWER_LINE
                    .as_ref()
                    .and_then(|re| re.captures_iter(text).last())
                    .and_then(|c| c.get(1))
                    .map(|m| m.as_str().to_owned());
                match found {
                    None => Err("no `ANSWER: X` line".to_owned()),
                    Some(answer) if choices.iter().any(|c| c.eq_ignore_ascii_case(&answer)) => {
                        Ok(())
                    }
                    Some(answer) => Err(format!(
                        "`ANSWER: {answer}` is not one of {}",
                        choices.join(", ")
                    )),
                }
            }
            Self::Code { language } => {
                let blocks: Vec<(String, String)> = FENCE
                    .as_ref()
                    .map(|re| {
                        re.captures_iter(text)
                            .map(|c| (c[1].to_owned(), c[2].to_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                if blocks.is_empty() {
                    return Err("no complete fenced code block (``` … ```)".to_owned());
                }
                let fits = |label: &str| {
                    language
                        .as_deref()
                        .is_none_or(|wanted| same_language(wanted, label))
                };
                match blocks.iter().find(|(label, _)| fits(label)) {
                    Some((_, code)) if !code.trim().is_empty() => Ok(()),
                    Some(_) => Err("the code block is empty".to_owned()),
                    None => Err(format!(
                        "no code block labelled `{}` (found: {})",
                        language.as_deref().unwrap_or_default(),
                        blocks
                            .iter()
                            .map(|(l, _)| if l.is_empty() { "unlabelled" } else { l })
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
            }
            Self::JsonSchema { validator, .. } => {
                let value = json_in(text).ok_or("the answer holds no JSON value")?;
                let first = validator.iter_errors(&value).next().map(|error| {
                    let at = error.instance_path().to_string();
                    let at = if at.is_empty() { "/".to_owned() } else { at };
                    format!("JSON at {at}: {error}")
                });
                first.map_or(Ok(()), Err)
            }
            Self::Pattern { regex } => {
                if regex.is_match(text) {
                    Ok(())
                } else {
                    Err(format!("the answer does not match `{}`", regex.as_str()))
                }
            }
        }
    }

    /// The message asking a model to fix an answer that broke the contract for `reason`.
    pub fn repair_request(&self, reason: &str) -> String {
        format!(
            "Your answer does not have the required format: {reason}. {} Reply again with the \
             whole answer in that format.",
            self.instruction()
        )
    }
}

fn same_language(wanted: &str, label: &str) -> bool {
    let alias = |l: &str| match l.to_ascii_lowercase().as_str() {
        "py" | "python3" => "python".to_owned(),
        "js" => "javascript".to_owned(),
        "rs" => "rust".to_owned(),
        "sh" | "shell" => "bash".to_owned(),
        other => other.to_owned(),
    };
    alias(wanted) == alias(label)
}

/// The JSON value an answer holds: all of it, a fenced block's content, or the span from the
/// first `{` (or `[`) to the last matching bracket.
pub fn json_in(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    if let Some(re) = FENCE.as_ref() {
        for captures in re.captures_iter(text) {
            if let Ok(value) = serde_json::from_str(captures[2].trim()) {
                return Some(value);
            }
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        let (Some(start), Some(end)) = (text.find(open), text.rfind(close)) else {
            continue;
        };
        if let Some(Ok(value)) = text.get(start..=end).map(serde_json::from_str) {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn choices() -> OutputContract {
        OutputContract::MultipleChoice {
            choices: ["A", "B", "C", "D"].map(str::to_owned).to_vec(),
        }
    }

    #[test]
    fn multiple_choice_reads_the_last_answer_line() {
        let contract = choices();
        assert_eq!(contract.check("Reasoning…\nANSWER: C"), Ok(()));
        assert_eq!(contract.check("answer: (b)"), Ok(()));
        assert_eq!(
            contract.check("ANSWER: A then changed: ANSWER: E"),
            Err("`ANSWER: E` is not one of A, B, C, D".to_owned())
        );
        assert_eq!(
            contract.check("It is C."),
            Err("no `ANSWER: X` line".to_owned())
        );
    }

    #[test]
    fn code_needs_a_closed_block_in_the_declared_language() {
        let contract = OutputContract::Code {
            language: Some("python".to_owned()),
        };
        assert_eq!(
            contract.check("Here:\n```py\ndef f():\n    return 1\n```\n"),
            Ok(())
        );
        assert!(contract
            .check("```python\ndef f():\n")
            .unwrap_err()
            .contains("no complete fenced code block"));
        assert_eq!(
            contract.check("```rust\nfn f() {}\n```"),
            Err("no code block labelled `python` (found: rust)".to_owned())
        );
        assert_eq!(
            contract.check("```python\n\n```"),
            Err("the code block is empty".to_owned())
        );
        let any = OutputContract::Code { language: None };
        assert_eq!(any.check("```\nls\n```"), Ok(()));
    }

    #[test]
    fn json_schema_validates_the_json_the_answer_holds() {
        let contract = OutputContract::json_schema(json!({
            "type": "object", "required": ["name", "age"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        }))
        .unwrap();
        assert_eq!(contract.check(r#"{"name": "Ada", "age": 36}"#), Ok(()));
        assert_eq!(
            contract.check("Sure:\n```json\n{\"name\": \"Ada\", \"age\": 36}\n```"),
            Ok(())
        );
        let wrong = contract.check(r#"{"name": "Ada", "age": -1}"#).unwrap_err();
        assert!(wrong.starts_with("JSON at /age:"), "{wrong}");
        let missing = contract.check(r#"{"name": "Ada"}"#).unwrap_err();
        assert!(missing.contains("age"), "{missing}");
        assert_eq!(
            contract.check("no json"),
            Err("the answer holds no JSON value".to_owned())
        );
        assert!(OutputContract::json_schema(json!({"type": "no-such-type"})).is_err());
    }

    #[test]
    fn a_pattern_matches_anywhere_unless_anchored() {
        let contract = OutputContract::Pattern {
            regex: regex::Regex::new(r"^\d{4}-\d{2}-\d{2}$").unwrap(),
        };
        assert_eq!(contract.check("2026-11-30"), Ok(()));
        assert!(contract.check("on 2026-11-30").is_err());
        let request = contract.repair_request("the answer does not match");
        assert!(request.contains("the answer does not match") && request.contains("^\\d{4}"));
    }
}
