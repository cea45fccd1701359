//! `decisions[].outputContract`: the shape a looper's final answer must have.

use serde::Deserialize;

/// An output contract as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawOutputContract {
    /// `multiple_choice`, `code`, `json_schema` or `regex`.
    #[serde(rename = "type")]
    pub kind: RawContractKind,
    /// `multiple_choice`: the allowed answers (default A, B, C, D).
    pub choices: Option<Vec<String>>,
    /// `code`: the fence label the block must carry (any when absent).
    pub language: Option<String>,
    /// `json_schema`: the JSON Schema the answer must be valid against.
    pub schema: Option<serde_json::Value>,
    /// `regex`: the expression the answer must match.
    pub pattern: Option<String>,
    /// An answer still broken after its one repair: `annotate` (default: returned with
    /// `x-mom-contract: …:violated`) or `fail` (502).
    #[serde(default)]
    pub on_violation: RawOnViolation,
}

/// The kinds of output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawContractKind {
    /// A final `ANSWER: X` line.
    MultipleChoice,
    /// One complete fenced code block.
    Code,
    /// One JSON value valid against a schema.
    JsonSchema,
    /// A regular expression.
    Regex,
}

/// What an answer still broken after its repair does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawOnViolation {
    /// Return it, marked.
    #[default]
    Annotate,
    /// Fail the request.
    Fail,
}
