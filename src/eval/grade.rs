//! Grading an answer under its item's output contract; HumanEval code runs in the sandbox
//! ([`super::sandbox`]).

use super::sandbox::{run_python, Sandbox};
use super::suite::{Item, Kind};

/// How one answer fared.
#[derive(Debug, Clone, PartialEq)]
pub struct Grade {
    /// 1.0 when correct, else 0.0.
    pub score: f64,
    /// Why it failed, in a few words (empty when it passed).
    pub detail: String,
}

impl Grade {
    pub(super) fn pass() -> Self {
        Self {
            score: 1.0,
            detail: String::new(),
        }
    }

    pub(super) fn fail(detail: impl Into<String>) -> Self {
        Self {
            score: 0.0,
            detail: detail.into(),
        }
    }
}

/// Grades `answer` for `item`.
pub async fn grade(item: &Item, answer: &str, sandbox: &Sandbox) -> Grade {
    match item.kind {
        Kind::Choice => {
            let expected = item.answer.as_deref().unwrap_or_default().trim();
            match chosen_letter(answer) {
                Some(letter) if expected.eq_ignore_ascii_case(&letter.to_string()) => Grade::pass(),
                Some(letter) => Grade::fail(format!("answered {letter}")),
                None => Grade::fail("no ANSWER: X line"),
            }
        }
        Kind::Exact => {
            let expected = normalise(item.answer.as_deref().unwrap_or_default());
            let given = answer
                .rsplit_once("ANSWER:")
                .map_or(answer, |(_, after)| after);
            if normalise(given) == expected {
                Grade::pass()
            } else {
                Grade::fail("different answer")
            }
        }
        Kind::Contains => {
            if contains_words(answer, item.answer.as_deref().unwrap_or_default()) {
                Grade::pass()
            } else {
                Grade::fail("expected words absent")
            }
        }
        Kind::Number => {
            let expected = item.answer.as_deref().unwrap_or_default().trim();
            match (last_number(answer), expected.parse::<f64>()) {
                (Some(given), Ok(expected)) if (given - expected).abs() < 1e-9 => Grade::pass(),
                (Some(given), _) => Grade::fail(format!("answered {given}")),
                (None, _) => Grade::fail("no number"),
            }
        }
        Kind::Humaneval => {
            let program = humaneval_program(item, answer);
            run_python(&program, sandbox).await
        }
    }
}

/// Whether the words of `expected` appear in `answer` in order, whole (not inside a longer
/// word), ignoring case and punctuation between words.
pub fn contains_words(answer: &str, expected: &str) -> bool {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (haystack, needle) = (words(answer), words(expected));
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
}

/// The last number written in `text` (an optional minus sign, digits, an optional decimal part;
/// thousands separators not read).
pub fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut found = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let negative =
                i > 0 && bytes[i - 1] == b'-' && (i < 2 || !bytes[i - 2].is_ascii_digit());
            let start = if negative { i - 1 } else { i };
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            found = text[start..i].parse::<f64>().ok().or(found);
        } else {
            i += 1;
        }
    }
    found
}

/// The letter of the last `ANSWER: X` in `text`.
pub fn chosen_letter(text: &str) -> Option<char> {
    let upper = text.to_ascii_uppercase();
    upper.rmatch_indices("ANSWER").find_map(|(at, _)| {
        let rest = upper[at + "ANSWER".len()..].trim_start_matches([' ', ':', '*', '(', '\t']);
        let letter = rest.chars().next()?;
        let after = rest[letter.len_utf8()..].chars().next();
        (letter.is_ascii_uppercase() && after.is_none_or(|c| !c.is_ascii_alphanumeric()))
            .then_some(letter)
    })
}

/// Lower case, inner whitespace collapsed, surrounding punctuation and quotes removed.
pub fn normalise(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .join(" ")
        .trim_matches(|c: char| c.is_ascii_punctuation() || c == '"' || c == '\'')
        .to_lowercase()
}

/// The code in `answer`: the last fenced block that defines the entry point, else the first
/// fenced block, else the whole answer.
pub fn extract_code(answer: &str, entry_point: &str) -> String {
    let mut blocks = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        let Some(close) = body.find("```") else {
            blocks.push(body.to_owned());
            break;
        };
        blocks.push(body[..close].to_owned());
        rest = &body[close + 3..];
    }
    let defines = format!("def {entry_point}");
    blocks
        .iter()
        .rev()
        .find(|b| b.contains(&defines))
        .or_else(|| blocks.first())
        .cloned()
        .unwrap_or_else(|| answer.to_owned())
}

/// The program that tests an answer: the prompt's imports, the answer's code (after the
/// prompt when the code does not define the entry point itself: a completion), the item's
/// tests and the call of `check`.
pub fn humaneval_program(item: &Item, answer: &str) -> String {
    let entry_point = item.entry_point.as_deref().unwrap_or_default();
    let code = extract_code(answer, entry_point);
    let imports: Vec<&str> = item
        .prompt
        .lines()
        .filter(|l| l.starts_with("import ") || l.starts_with("from "))
        .collect();
    let body = if code.contains(&format!("def {entry_point}")) {
        code
    } else {
        format!("{}{code}", item.prompt)
    };
    format!(
        "{}\n\n{body}\n\n{}\n\ncheck({entry_point})\n",
        imports.join("\n"),
        item.test.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: Kind) -> Item {
        Item {
            id: "t".to_owned(),
            kind,
            prompt:
                "from typing import List\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n"
                    .to_owned(),
            choices: Vec::new(),
            answer: Some("B".to_owned()),
            test: Some("def check(candidate):\n    assert candidate(2, 3) == 5\n".to_owned()),
            entry_point: Some("add".to_owned()),
            max_tokens: None,
        }
    }

    #[test]
    fn facts_count_in_a_sentence_and_numbers_by_the_last_one() {
        assert!(contains_words("The capital of France is Paris.", "Paris"));
        assert!(contains_words(
            "It is Mexico City, of course",
            "Mexico City"
        ));
        assert!(!contains_words("Parisian food", "Paris"));
        assert!(contains_words("paris!", "Paris"));
        assert!(!contains_words("Mexico is a city", "Mexico City"));
        assert!(!contains_words("anything", ""));
        assert_eq!(last_number("23 + 19 = 42"), Some(42.0));
        assert_eq!(last_number("It is -7."), Some(-7.0));
        assert_eq!(last_number("10-3 leaves 7"), Some(7.0));
        assert_eq!(last_number("it weighs 2.5 kg!"), Some(2.5));
        assert_eq!(last_number("३३ and none"), None);
        assert_eq!(last_number("no digits"), None);
    }

    #[test]
    fn the_last_answer_line_gives_the_letter() {
        assert_eq!(chosen_letter("I think A.\nANSWER: B"), Some('B'));
        assert_eq!(chosen_letter("answer: (c)"), Some('C'));
        assert_eq!(chosen_letter("**Answer:** D"), Some('D'));
        assert_eq!(chosen_letter("The answer is unclear"), None);
        assert_eq!(chosen_letter("ANSWER: Because"), None);
    }

    #[test]
    fn exact_answers_are_compared_normalised() {
        assert_eq!(normalise("  The  Paris. "), "the paris");
        assert_eq!(normalise("\"Paris\""), "paris");
    }

    #[test]
    fn code_comes_from_the_block_that_defines_the_entry_point() {
        let answer = "Here:\n```python\nimport math\n```\nand\n```python\ndef add(a, b):\n    return a + b\n```\n";
        assert_eq!(
            extract_code(answer, "add"),
            "def add(a, b):\n    return a + b\n"
        );
        assert_eq!(extract_code("```\nx = 1\n```", "add"), "x = 1\n");
        assert_eq!(extract_code("return a + b", "add"), "return a + b");
        // A bare completion is appended to the prompt.
        let program = humaneval_program(&item(Kind::Humaneval), "    return a + b\n");
        assert!(program.starts_with("from typing import List\n\nfrom typing import List"));
        assert!(program.contains("\"\"\"Sum.\"\"\"\n    return a + b"));
        assert!(program.ends_with("check(add)\n"));
    }

    #[tokio::test]
    async fn humaneval_answers_pass_or_fail_on_the_items_tests() {
        let sandbox = Sandbox {
            python: "python3".to_owned(),
            timeout: std::time::Duration::from_secs(5),
        };
        let good = "```python\ndef add(a, b):\n    return a + b\n```";
        let graded = grade(&item(Kind::Humaneval), good, &sandbox).await;
        assert_eq!(graded.score, 1.0, "{}", graded.detail);
        let wrong = "```python\ndef add(a, b):\n    return a - b\n```";
        let graded = grade(&item(Kind::Humaneval), wrong, &sandbox).await;
        assert_eq!(graded.score, 0.0);
        assert!(
            graded.detail.contains("AssertionError"),
            "{}",
            graded.detail
        );
    }
}
