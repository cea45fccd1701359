//! A spelling corrector in front of the sentence encoder. A misspelt word reaches the encoder as
//! unfamiliar word pieces and can move a request's subject ("grvity" is not "gravity" to it), so
//! the words of English prose that no word list knows are replaced by their most frequent
//! neighbour one edit away (a letter dropped, added, replaced or two swapped). What is changed is
//! only the text the encoder reads: the request sent upstream is never touched.
//!
//! The corrector changes as little as it can: text that is not English prose (too few English
//! function words) is left whole, as are fenced and inline code, words of fewer than four letters,
//! capitalised words inside a sentence (names), words with anything but ASCII letters around
//! their surrounding punctuation (`\frac`, `sqrt(x)`, `x_1`, e-mail addresses), and every word
//! the dictionary, the encoder's vocabulary or a `keep` list holds.

use super::{Encoder, InferenceError};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Where the corrector's word lists come from; equal specs share one loaded encoder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpellingSpec {
    /// Lines of `word count`.
    pub dictionary: PathBuf,
    /// Files of words that are right as they are, one per line.
    pub keep: Vec<PathBuf>,
}

/// English function words: prose with too few of them is not corrected.
const FUNCTION_WORDS: [&str; 69] = [
    "the", "a", "an", "of", "and", "or", "to", "in", "on", "at", "for", "with", "by", "from", "is",
    "are", "was", "were", "be", "been", "it", "this", "that", "these", "those", "what", "which",
    "who", "whom", "how", "why", "when", "where", "do", "does", "did", "can", "could", "should",
    "would", "will", "not", "no", "as", "if", "than", "then", "there", "their", "they", "we",
    "you", "your", "i", "my", "me", "he", "she", "his", "her", "its", "our", "us", "has", "have",
    "had", "into", "about", "but",
];
/// Least share of a text's words that are function words for it to count as English prose.
const ENGLISH_SHARE: f64 = 0.15;
/// Fewest words a text needs before it is judged English at all.
const FEWEST_WORDS: usize = 4;
/// Shortest word that is corrected.
const SHORTEST: usize = 4;

/// The word lists and the rules above.
pub struct Speller {
    frequency: HashMap<Box<str>, u64>,
    known: HashSet<Box<str>>,
}

impl Speller {
    /// Reads the dictionary and keep lists of `spec`; the whole lower-case words of `vocabulary`
    /// (the encoder's) are known too.
    pub fn load<'v>(
        spec: &SpellingSpec,
        vocabulary: impl IntoIterator<Item = &'v str>,
    ) -> Result<Self, InferenceError> {
        let fail = |path: &Path, e: &dyn std::fmt::Display| {
            InferenceError::Load(format!("spelling: {}: {e}", path.display()))
        };
        let text =
            std::fs::read_to_string(&spec.dictionary).map_err(|e| fail(&spec.dictionary, &e))?;
        let mut frequency = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let mut fields = line.split_whitespace();
            let (Some(word), Some(count), None) = (fields.next(), fields.next(), fields.next())
            else {
                if line.trim().is_empty() {
                    continue;
                }
                return Err(fail(
                    &spec.dictionary,
                    &format!("line {}: expected `word count`", i + 1),
                ));
            };
            let count: u64 = count.parse().map_err(|_| {
                fail(
                    &spec.dictionary,
                    &format!("line {}: {count:?} is not a count", i + 1),
                )
            })?;
            frequency.insert(word.to_lowercase().into_boxed_str(), count);
        }
        if frequency.is_empty() {
            return Err(fail(&spec.dictionary, &"no words"));
        }
        let mut known = HashSet::new();
        for path in &spec.keep {
            let text = std::fs::read_to_string(path).map_err(|e| fail(path, &e))?;
            known.extend(
                text.split_whitespace()
                    .map(|w| w.to_lowercase().into_boxed_str()),
            );
        }
        known.extend(
            vocabulary
                .into_iter()
                .filter(|w| w.chars().all(|c| c.is_ascii_lowercase()))
                .map(Into::into),
        );
        Ok(Self { frequency, known })
    }

    /// `text` with its misspelt prose words corrected, borrowed when nothing changed.
    pub fn correct<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let prose = crate::llm::markdown::prose_spans(text);
        if !is_english(prose.iter().map(|span| &text[span.clone()])) {
            return Cow::Borrowed(text);
        }
        let mut out = String::new();
        let mut copied = 0;
        let mut sentence_start = true;
        for span in prose {
            let mut at = span.start;
            for token in text[span].split_inclusive(char::is_whitespace) {
                let word = token.trim_end();
                if word.is_empty() {
                    at += token.len();
                    continue;
                }
                if let Some((offset, core)) = core_word(word) {
                    if let Some(fixed) = self.corrected(core, sentence_start) {
                        out.push_str(&text[copied..at + offset]);
                        out.push_str(&fixed);
                        copied = at + offset + core.len();
                    }
                }
                sentence_start = word.ends_with(['.', '?', '!', ':']);
                at += token.len();
            }
        }
        if copied == 0 {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }

    /// The correction of one word, when it needs one and has one.
    fn corrected(&self, word: &str, sentence_start: bool) -> Option<String> {
        let capitalised = word.starts_with(|c: char| c.is_ascii_uppercase())
            && word[1..].chars().all(|c| c.is_ascii_lowercase());
        let lower = word.chars().all(|c| c.is_ascii_lowercase());
        if word.len() < SHORTEST || !(lower || (capitalised && sentence_start)) {
            return None;
        }
        let word = word.to_ascii_lowercase();
        if self.frequency.contains_key(word.as_str()) || self.known.contains(word.as_str()) {
            return None;
        }
        let mut best: Option<(u64, String)> = None;
        for_each_edit(&word, |candidate| {
            let Some(&count) = self.frequency.get(candidate) else {
                return;
            };
            // The most frequent; among equals, the first in alphabetical order.
            let better = best.as_ref().is_none_or(|(most, chosen)| {
                count > *most || (count == *most && candidate < chosen.as_str())
            });
            if better {
                best = Some((count, candidate.to_owned()));
            }
        });
        let best = best?.1;
        Some(if capitalised {
            let mut fixed = best;
            fixed[..1].make_ascii_uppercase();
            fixed
        } else {
            best
        })
    }
}

/// The letters of a whitespace-delimited token without the punctuation around it, and where they
/// start; `None` when anything but ASCII letters is left.
fn core_word(token: &str) -> Option<(usize, &str)> {
    let core = token.trim_start_matches(['"', '\'', '(', '[']);
    let offset = token.len() - core.len();
    let core = core.trim_end_matches(['"', '\'', ')', ']', ',', '.', ';', ':', '!', '?']);
    (!core.is_empty() && core.chars().all(|c| c.is_ascii_alphabetic())).then_some((offset, core))
}

/// True when enough of the words in `prose` are English function words.
fn is_english<'t>(prose: impl Iterator<Item = &'t str>) -> bool {
    let (mut words, mut function) = (0usize, 0usize);
    for token in prose.flat_map(str::split_whitespace) {
        if let Some((_, core)) = core_word(token) {
            words += 1;
            function += usize::from(FUNCTION_WORDS.contains(&core.to_ascii_lowercase().as_str()));
        }
    }
    words >= FEWEST_WORDS && function as f64 >= ENGLISH_SHARE * words as f64
}

/// Calls `visit` with every lower-case string one edit from `word` (ASCII lower case): a letter
/// dropped, two neighbours swapped, a letter replaced or one added; one buffer serves them all.
fn for_each_edit(word: &str, mut visit: impl FnMut(&str)) {
    let word = word.as_bytes();
    let n = word.len();
    let mut buffer: Vec<u8> = Vec::with_capacity(n + 1);
    let mut visit_bytes = |bytes: &[u8]| {
        if let Ok(candidate) = std::str::from_utf8(bytes) {
            visit(candidate);
        }
    };
    for i in 0..n {
        buffer.clear();
        buffer.extend_from_slice(&word[..i]);
        buffer.extend_from_slice(&word[i + 1..]);
        visit_bytes(&buffer);
    }
    for i in 0..n.saturating_sub(1) {
        buffer.clear();
        buffer.extend_from_slice(word);
        buffer.swap(i, i + 1);
        visit_bytes(&buffer);
    }
    buffer.clear();
    buffer.extend_from_slice(word);
    for i in 0..n {
        for letter in b'a'..=b'z' {
            buffer[i] = letter;
            visit_bytes(&buffer);
        }
        buffer[i] = word[i];
    }
    for i in 0..=n {
        buffer.clear();
        buffer.extend_from_slice(&word[..i]);
        buffer.push(b'a');
        buffer.extend_from_slice(&word[i..]);
        for letter in b'a'..=b'z' {
            buffer[i] = letter;
            visit_bytes(&buffer);
        }
    }
}

/// An encoder that reads the corrected text.
pub struct Spelled {
    /// The encoder.
    pub inner: Box<dyn Encoder>,
    /// The corrector.
    pub speller: Speller,
}

impl Encoder for Spelled {
    fn encode(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError> {
        let corrected: Vec<Cow<'_, str>> = texts.iter().map(|t| self.speller.correct(t)).collect();
        let changed = corrected
            .iter()
            .filter(|c| matches!(c, Cow::Owned(_)))
            .count();
        if changed > 0 {
            tracing::debug!(texts = texts.len(), changed, "spelling corrected");
        }
        let corrected: Vec<&str> = corrected.iter().map(AsRef::as_ref).collect();
        self.inner.encode(&corrected)
    }

    fn describe(&self) -> String {
        format!("{} (spelling corrected)", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speller(keep: &[&str]) -> Speller {
        let frequency = [
            ("gravity", 900),
            ("grant", 50),
            ("explain", 800),
            ("winter", 700),
            ("results", 600),
            ("franc", 30),
            ("sort", 400),
        ]
        .into_iter()
        .map(|(w, n)| (w.into(), n))
        .collect();
        let mut known: HashSet<Box<str>> = ["the", "how", "works", "does", "what"]
            .into_iter()
            .map(Into::into)
            .collect();
        known.extend(keep.iter().map(|w| (*w).into()));
        Speller { frequency, known }
    }

    #[test]
    fn misspelt_prose_words_get_their_most_frequent_neighbour() {
        let s = speller(&[]);
        assert_eq!(
            s.correct("Explian how the grvity works."),
            "Explain how the gravity works."
        );
        assert_eq!(
            s.correct("what does the resuls show?"),
            "what does the results show?"
        );
        // Nothing to change: the very same text, not a copy.
        assert!(matches!(
            s.correct("how does the gravity work"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn code_names_notation_other_languages_and_kept_words_stay() {
        let s = speller(&["linter"]);
        for text in [
            // A kept technical word with a frequent neighbour.
            "how does the linter work in the build",
            // A name inside a sentence, notation, identifiers, code.
            "how does the Grvity engine work",
            "what does the \\frac{a}{b} and sqrt(x) do to grvity_1",
            "what does the `grvity` flag do",
            "what does this do\n```\ngrvity = 1\n```\n",
            "what does this do\n~~~\ngrvity = 1\n~~~\n",
            // Too few English function words.
            "Ignora las instrucciones anteriores grvity",
            // Too short to judge.
            "grvity",
        ] {
            assert_eq!(s.correct(text), text);
        }
        // Prose around code is still corrected.
        assert_eq!(
            s.correct("what does the `x` do to grvity"),
            "what does the `x` do to gravity"
        );
    }

    #[test]
    fn the_word_lists_load_from_files_and_bad_lines_are_errors_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("mom-spelling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vocabulary = ["the", "how", "##ing"];
        let dictionary = dir.join("words.txt");
        std::fs::write(&dictionary, "gravity 900\nexplain 800\n\n").unwrap();
        let keep = dir.join("keep.txt");
        std::fs::write(&keep, "linter\n").unwrap();
        let spec = SpellingSpec {
            dictionary: dictionary.clone(),
            keep: vec![keep],
        };
        let s = Speller::load(&spec, vocabulary).unwrap();
        assert_eq!(
            s.correct("how the grvity and the lintr"),
            "how the gravity and the lintr"
        );
        assert!(s.known.contains("linter") && !s.known.contains("##ing"));
        std::fs::write(&dictionary, "gravity nine\n").unwrap();
        let error = Speller::load(&spec, vocabulary).err().unwrap().to_string();
        assert!(error.contains("words.txt: line 1"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
