//! Every keyword signal of a policy matched in one pass per text: the signals are grouped by
//! scope and case sensitivity, and each group's literals go into one Aho-Corasick automaton and
//! its distinct regular expressions into a few `RegexSet`s. A request's text is folded once per group
//! and scanned by one automaton whatever the number of literals, and every signal reads its
//! terms' hits from the result. A policy of 1,000 keyword rules costs about as much to match as one of 100.

use super::keyword::{fold, is_whole_word, KeywordSignal};
use super::text::Scope;
use crate::llm::ChatRequest;
use aho_corasick::AhoCorasick;
use regex::RegexSet;
use std::collections::HashMap;

/// Where a matched literal or pattern counts: a signal's slot and the term's position in it.
#[derive(Debug, Clone, Copy)]
struct Term {
    slot: usize,
    term: usize,
    whole_words: bool,
}

/// The signals of one scope and case sensitivity.
#[derive(Debug)]
struct Group {
    scope: Scope,
    case_sensitive: bool,
    literals: Option<AhoCorasick>,
    /// Per distinct literal, every term it stands for.
    literal_terms: Vec<Vec<Term>>,
    /// The distinct patterns in sets of at most [`PATTERNS_PER_SET`], each with, per pattern,
    /// every term it stands for.
    patterns: Vec<(RegexSet, Vec<Vec<Term>>)>,
}

/// Patterns compiled into one `RegexSet`. One set of a thousand patterns outgrows the lazy
/// DFA's cache and falls back to a slower engine; one regex per pattern pays each one's
/// prefilter (32 literals for a case-insensitive `case1-`) on every text. Sets of this size sit
/// between the two.
const PATTERNS_PER_SET: usize = 128;

/// The combined matcher of a policy's keyword signals.
#[derive(Debug, Default)]
pub struct KeywordIndex {
    groups: Vec<Group>,
    /// Where each slot's hits start in [`KeywordHits`]; one more entry than slots.
    offsets: std::sync::Arc<[usize]>,
}

/// One request's keyword hits: per slot, per term, whether it occurred.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeywordHits {
    hits: Vec<bool>,
    offsets: std::sync::Arc<[usize]>,
}

impl KeywordHits {
    /// The hits of the signal in `slot`, in term order (literals, then patterns).
    pub fn of(&self, slot: usize) -> Option<&[bool]> {
        let (&start, &end) = (self.offsets.get(slot)?, self.offsets.get(slot + 1)?);
        self.hits.get(start..end)
    }
}

/// Distinct literals or patterns of a group, each with every term it stands for.
#[derive(Default)]
struct Distinct {
    items: Vec<String>,
    terms: Vec<Vec<Term>>,
    index: HashMap<String, usize>,
}

impl Distinct {
    /// Counts `term` for `item`, adding the item the first time it is seen.
    fn add(&mut self, item: String, term: Term) {
        let index = match self.index.get(&item) {
            Some(&index) => index,
            None => {
                self.index.insert(item.clone(), self.items.len());
                self.items.push(item);
                self.terms.push(Vec::new());
                self.items.len() - 1
            }
        };
        self.terms[index].push(term);
    }
}

impl KeywordIndex {
    /// Indexes `signals`; the n-th signal gets slot n. An automaton or set that cannot be built
    /// (it compiled per signal, so this is not expected) is the error.
    pub fn new(signals: &[&KeywordSignal]) -> Result<Self, String> {
        let mut offsets = vec![0];
        #[derive(Default)]
        struct Pending {
            literals: Distinct,
            patterns: Distinct,
        }
        let mut pending: Vec<((Scope, bool), Pending)> = Vec::new();
        for (slot, signal) in signals.iter().enumerate() {
            let key = (signal.scope, signal.case_sensitive);
            let at = match pending.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    pending.push((key, Pending::default()));
                    pending.len() - 1
                }
            };
            let group = &mut pending[at].1;
            for (term, keyword) in signal.keywords().iter().enumerate() {
                let whole_words = signal.whole_words;
                let term = Term {
                    slot,
                    term,
                    whole_words,
                };
                group
                    .literals
                    .add(fold(keyword, signal.case_sensitive), term);
            }
            let literal_count = signal.keywords().len();
            for (i, pattern) in signal.patterns().iter().enumerate() {
                let (term, whole_words) = (literal_count + i, false);
                group.patterns.add(
                    pattern.clone(),
                    Term {
                        slot,
                        term,
                        whole_words,
                    },
                );
            }
            let last = offsets.last().copied().unwrap_or(0);
            offsets.push(last + literal_count + signal.patterns().len());
        }
        let groups = pending
            .into_iter()
            .map(|((scope, case_sensitive), group)| {
                // A full DFA without a prefilter: with many literals a prefilter fires at
                // nearly every byte, while the DFA reads each byte once whatever their number.
                let literals = (!group.literals.items.is_empty())
                    .then(|| {
                        AhoCorasick::builder()
                            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                            .prefilter(false)
                            .build(&group.literals.items)
                    })
                    .transpose()
                    .map_err(|e| e.to_string())?;
                let mut terms = group.patterns.terms.into_iter();
                let patterns = group
                    .patterns
                    .items
                    .chunks(PATTERNS_PER_SET)
                    .map(|chunk| {
                        let set = regex::RegexSetBuilder::new(chunk)
                            .case_insensitive(!case_sensitive)
                            .build()
                            .map_err(|e| e.to_string())?;
                        Ok((set, terms.by_ref().take(chunk.len()).collect()))
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok(Group {
                    scope,
                    case_sensitive,
                    literals,
                    literal_terms: group.literals.terms,
                    patterns,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            groups,
            offsets: offsets.into(),
        })
    }

    /// True when the policy has no keyword signal.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every keyword signal's hits on `request`: each text of each group's scope folded and
    /// scanned once.
    pub fn hits(&self, request: &ChatRequest) -> KeywordHits {
        let total = self.offsets.last().copied().unwrap_or(0);
        let mut hits = vec![false; total];
        let mut mark = |term: &Term| {
            if let Some(start) = self.offsets.get(term.slot) {
                if let Some(hit) = hits.get_mut(start + term.term) {
                    *hit = true;
                }
            }
        };
        for group in &self.groups {
            for text in group.scope.texts(request) {
                if let Some(ac) = &group.literals {
                    let folded = fold(text, group.case_sensitive);
                    for found in ac.find_overlapping_iter(&folded) {
                        let whole = is_whole_word(&folded, found.start(), found.end());
                        let terms = &group.literal_terms[found.pattern().as_usize()];
                        terms
                            .iter()
                            .filter(|t| whole || !t.whole_words)
                            .for_each(&mut mark);
                    }
                }
                // Most texts match no pattern: a plain search says so without the set of
                // matches an overlapping one builds.
                for (set, terms) in group.patterns.iter().filter(|(set, _)| set.is_match(text)) {
                    for index in set.matches(text).iter() {
                        terms[index].iter().for_each(&mut mark);
                    }
                }
            }
        }
        KeywordHits {
            hits,
            offsets: std::sync::Arc::clone(&self.offsets),
        }
    }
}
