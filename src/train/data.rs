//! Labelled examples: JSON Lines with `text` and `label`, and the deterministic held-out split
//! both `train` and `eval` use (by a hash of the text, so it does not depend on file order).

use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::Path;

/// One labelled text.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    /// The text.
    pub text: String,
    /// Its label.
    pub label: String,
}

/// Reads a JSON Lines file of examples; blank lines are skipped, a bad line is an error naming
/// its number.
pub fn read_examples(path: &Path) -> anyhow::Result<Vec<Example>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut examples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let example: Example = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: expected {{\"text\": …, \"label\": …}}",
                path.display(),
                i + 1
            )
        })?;
        if example.text.trim().is_empty() {
            bail!("{}:{}: empty text", path.display(), i + 1);
        }
        examples.push(example);
    }
    if examples.is_empty() {
        bail!("{}: no examples", path.display());
    }
    Ok(examples)
}

/// True when `text` belongs to the held-out share (`percent` of 100) of any data set.
pub fn is_held_out(text: &str, percent: u32) -> bool {
    crate::records::traces::is_held_out(text, percent)
}

/// The sorted distinct labels of `examples`.
pub fn label_set(examples: &[Example]) -> Vec<String> {
    let mut labels: Vec<String> = examples.iter().map(|e| e.label.clone()).collect();
    labels.sort();
    labels.dedup();
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_stable_and_close_to_the_share() {
        let held = (0..10_000)
            .filter(|i| is_held_out(&format!("question {i}"), 20))
            .count();
        assert!((1_800..2_200).contains(&held), "{held}");
        assert_eq!(is_held_out("abc", 20), is_held_out("abc", 20));
    }

    #[test]
    fn bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        std::fs::write(&path, "{\"text\":\"a\",\"label\":\"x\"}\n\n{\"text\":1}\n").unwrap();
        let error = format!("{:#}", read_examples(&path).unwrap_err());
        assert!(error.contains("d.jsonl:3"), "{error}");
    }
}
