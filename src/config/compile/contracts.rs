//! `decisions[].outputContract` → [`Contract`]: each kind's fields checked, schemas and
//! expressions compiled at load so a bad one is a config error naming its path.

use crate::config::error::Errors;
use crate::config::raw::{RawContractKind, RawOnViolation, RawOutputContract};
use crate::config::snapshot::{Contract, OnViolation};
use crate::llm::contract::OutputContract;

pub(super) fn compile_contract(
    raw: &RawOutputContract,
    path: &str,
    errors: &mut Errors,
) -> Option<Contract> {
    let path = format!("{path}.outputContract");
    let kind = raw.kind;
    let fields: [(&str, bool, RawContractKind); 4] = [
        (
            "choices",
            raw.choices.is_some(),
            RawContractKind::MultipleChoice,
        ),
        ("language", raw.language.is_some(), RawContractKind::Code),
        ("schema", raw.schema.is_some(), RawContractKind::JsonSchema),
        ("pattern", raw.pattern.is_some(), RawContractKind::Regex),
    ];
    let mut ok = true;
    for (field, present, owner) in fields {
        if present && owner != kind {
            errors.push(
                format!("{path}.{field}"),
                format!("`{field}` belongs to type {}", kind_name(owner)),
            );
            ok = false;
        }
    }
    let shape = match kind {
        RawContractKind::MultipleChoice => {
            let choices = raw
                .choices
                .clone()
                .unwrap_or_else(|| ["A", "B", "C", "D"].map(str::to_owned).to_vec());
            let bad = choices
                .iter()
                .position(|c| c.is_empty() || !c.chars().all(|ch| ch.is_ascii_alphanumeric()));
            if choices.is_empty() {
                errors.push(format!("{path}.choices"), "list at least one answer");
                None
            } else if let Some(i) = bad {
                errors.push(
                    format!("{path}.choices[{i}]"),
                    "an answer is letters or digits (it is read from `ANSWER: X`)",
                );
                None
            } else {
                Some(OutputContract::MultipleChoice { choices })
            }
        }
        RawContractKind::Code => Some(OutputContract::Code {
            language: raw.language.clone().filter(|l| !l.trim().is_empty()),
        }),
        RawContractKind::JsonSchema => match &raw.schema {
            None => {
                errors.push(format!("{path}.schema"), "type json_schema needs `schema`");
                None
            }
            Some(schema) => match OutputContract::json_schema(schema.clone()) {
                Ok(contract) => Some(contract),
                Err(reason) => {
                    errors.push(
                        format!("{path}.schema"),
                        format!("not a valid JSON Schema: {reason}"),
                    );
                    None
                }
            },
        },
        RawContractKind::Regex => match raw.pattern.as_deref().map(regex::Regex::new) {
            None => {
                errors.push(format!("{path}.pattern"), "type regex needs `pattern`");
                None
            }
            Some(Err(reason)) => {
                errors.push(
                    format!("{path}.pattern"),
                    format!("not a valid regular expression: {reason}"),
                );
                None
            }
            Some(Ok(regex)) => Some(OutputContract::Pattern { regex }),
        },
    };
    let shape = shape.filter(|_| ok)?;
    Some(Contract {
        shape,
        on_violation: match raw.on_violation {
            RawOnViolation::Annotate => OnViolation::Annotate,
            RawOnViolation::Fail => OnViolation::Fail,
        },
        repair: true,
    })
}

fn kind_name(kind: RawContractKind) -> &'static str {
    match kind {
        RawContractKind::MultipleChoice => "multiple_choice",
        RawContractKind::Code => "code",
        RawContractKind::JsonSchema => "json_schema",
        RawContractKind::Regex => "regex",
    }
}
