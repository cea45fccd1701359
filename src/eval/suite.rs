//! An evaluation suite: JSON Lines, one item per line, each graded under its own output
//! contract — `humaneval` (the answer's code must pass the item's tests), `choice` (the answer's
//! `ANSWER: X` letter must be the right one), `exact` (the answer, normalised, must equal the
//! expected one), `contains` (the expected words appear in the answer) or `number` (the
//! answer's last number is the expected one).

use serde::Deserialize;

/// How an item is graded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Python code run against the item's `test` (HumanEval's layout: `check(entry_point)`).
    Humaneval,
    /// Multiple choice, answered `ANSWER: X`.
    Choice,
    /// Exact match after normalisation.
    Exact,
    /// The expected words appear in the answer, whole and in order (case and punctuation
    /// ignored): a fact stated in a sentence counts.
    Contains,
    /// The last number in the answer equals the expected one.
    Number,
}

impl Kind {
    /// The kind's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Humaneval => "humaneval",
            Self::Choice => "choice",
            Self::Exact => "exact",
            Self::Contains => "contains",
            Self::Number => "number",
        }
    }
}

/// One item.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    /// Unique within the suite.
    pub id: String,
    /// How it is graded.
    pub kind: Kind,
    /// The task: a function signature and docstring (humaneval), a question (choice, exact).
    pub prompt: String,
    /// Options of a choice item, shown as `A. …`, `B. …`.
    #[serde(default)]
    pub choices: Vec<String>,
    /// The expected letter (choice) or text (exact).
    #[serde(default)]
    pub answer: Option<String>,
    /// HumanEval test code defining `check(candidate)`.
    #[serde(default)]
    pub test: Option<String>,
    /// The function the tests call.
    #[serde(default)]
    pub entry_point: Option<String>,
    /// This item's `max_tokens`, instead of the run's.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Most items a suite may hold.
const MAX_ITEMS: usize = 100_000;

/// Parses a suite, checking each item has what its kind needs; errors name the line.
pub fn parse(text: &str) -> Result<Vec<Item>, String> {
    let mut items: Vec<Item> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = number + 1;
        let item: Item = serde_json::from_str(line).map_err(|e| format!("line {at}: {e}"))?;
        let missing = match item.kind {
            Kind::Humaneval if item.test.is_none() => Some("test"),
            Kind::Humaneval if item.entry_point.is_none() => Some("entry_point"),
            Kind::Choice | Kind::Exact | Kind::Contains | Kind::Number if item.answer.is_none() => {
                Some("answer")
            }
            Kind::Choice if item.choices.is_empty() && !item.prompt.contains("A.") => {
                Some("choices")
            }
            _ => None,
        };
        if let Some(field) = missing {
            return Err(format!(
                "line {at} ({}): a {} item needs `{field}`",
                item.id,
                item.kind.name()
            ));
        }
        if item.kind == Kind::Choice && item.choices.len() > 26 {
            return Err(format!("line {at} ({}): more than 26 choices", item.id));
        }
        if items.iter().any(|i| i.id == item.id) {
            return Err(format!("line {at}: id {:?} appears twice", item.id));
        }
        if items.len() == MAX_ITEMS {
            return Err(format!("more than {MAX_ITEMS} items"));
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err("the suite has no items".to_owned());
    }
    Ok(items)
}

/// The user message sent for `item`.
pub fn user_message(item: &Item) -> String {
    match item.kind {
        Kind::Humaneval => format!(
            "Complete the following Python function. Reply with the complete function, including \
             its signature and any imports it needs, in one ```python code block.\n\n```python\n{}```",
            item.prompt
        ),
        Kind::Choice => {
            let mut text = item.prompt.trim_end().to_owned();
            for (i, choice) in item.choices.iter().enumerate() {
                text.push_str(&format!("\n{}. {choice}", letter(i)));
            }
            text.push_str("\n\nEnd your reply with the line `ANSWER: X`, where X is the letter of the correct choice.");
            text
        }
        Kind::Exact | Kind::Contains | Kind::Number => item.prompt.clone(),
    }
}

/// `A` for 0, `B` for 1, …
pub fn letter(index: usize) -> char {
    char::from(b'A' + (index % 26) as u8)
}
