//! Decisions: AND/OR/NOT trees over signal facts, and the priority rule that picks one winner.
//! Pure and synchronous: no I/O, no async runtime, no knowledge of how facts were computed.

/// What one signal established, as the decision tree needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fact {
    /// Whether the signal's condition holds.
    pub matched: bool,
    /// Confidence in `matched`, 0..=1.
    pub confidence: f64,
}

/// A boolean tree whose leaves are signal indices into the snapshot's signal table.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// The signal at this index matched.
    Signal(usize),
    /// Every child holds; confidence is the weakest child's.
    All(Vec<Rule>),
    /// Some child holds; confidence is the strongest holding child's.
    Any(Vec<Rule>),
    /// The child does not hold; confidence is the child's.
    Not(Box<Rule>),
}

/// The value of a tree: whether it holds and how confidently.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Whether the tree holds.
    pub matched: bool,
    /// Confidence in `matched`.
    pub confidence: f64,
}

impl Rule {
    /// Evaluates the tree. A leaf whose fact is absent counts as not matched with confidence 0.
    pub fn evaluate(&self, facts: &[Option<Fact>]) -> Verdict {
        match self {
            Self::Signal(index) => match facts.get(*index).copied().flatten() {
                Some(Fact {
                    matched,
                    confidence,
                }) => Verdict {
                    matched,
                    confidence,
                },
                None => Verdict {
                    matched: false,
                    confidence: 0.0,
                },
            },
            Self::All(children) => {
                let mut confidence = 1.0_f64;
                for child in children {
                    let verdict = child.evaluate(facts);
                    if !verdict.matched {
                        return Verdict {
                            matched: false,
                            confidence: verdict.confidence,
                        };
                    }
                    confidence = confidence.min(verdict.confidence);
                }
                Verdict {
                    matched: true,
                    confidence,
                }
            }
            Self::Any(children) => {
                let best = children
                    .iter()
                    .map(|child| child.evaluate(facts))
                    .filter(|verdict| verdict.matched)
                    .map(|verdict| verdict.confidence)
                    .fold(None, |best: Option<f64>, c| {
                        Some(best.map_or(c, |b| b.max(c)))
                    });
                match best {
                    Some(confidence) => Verdict {
                        matched: true,
                        confidence,
                    },
                    None => Verdict {
                        matched: false,
                        confidence: 1.0,
                    },
                }
            }
            Self::Not(child) => {
                let verdict = child.evaluate(facts);
                Verdict {
                    matched: !verdict.matched,
                    confidence: verdict.confidence,
                }
            }
        }
    }

    /// Adds every signal index the tree reads to `out` (without duplicates).
    pub fn collect_signals(&self, out: &mut Vec<usize>) {
        match self {
            Self::Signal(index) => {
                if !out.contains(index) {
                    out.push(*index);
                }
            }
            Self::All(children) | Self::Any(children) => {
                for child in children {
                    child.collect_signals(out);
                }
            }
            Self::Not(child) => child.collect_signals(out),
        }
    }
}

/// A candidate for [`pick`]: its position, priority and tree.
pub trait Candidate {
    /// Higher wins.
    fn priority(&self) -> i32;
    /// The tree that must hold.
    fn rule(&self) -> &Rule;
}

/// Picks the matching candidate with the highest priority; ties go to the earliest.
/// Returns its index into `candidates` and its verdict.
pub fn pick<C: Candidate>(
    candidates: &[C],
    order: &[usize],
    facts: &[Option<Fact>],
) -> Option<(usize, Verdict)> {
    let mut best: Option<(usize, Verdict)> = None;
    for &index in order {
        let Some(candidate) = candidates.get(index) else {
            continue;
        };
        if best.is_some_and(|(b, _)| candidates[b].priority() >= candidate.priority()) {
            continue;
        }
        let verdict = candidate.rule().evaluate(facts);
        if verdict.matched {
            best = Some((index, verdict));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(matched: bool, confidence: f64) -> Option<Fact> {
        Some(Fact {
            matched,
            confidence,
        })
    }

    struct D(i32, Rule);
    impl Candidate for D {
        fn priority(&self) -> i32 {
            self.0
        }
        fn rule(&self) -> &Rule {
            &self.1
        }
    }

    #[test]
    fn trees_combine_matches_and_confidences() {
        let facts = [fact(true, 0.9), fact(true, 0.6), fact(false, 0.8), None];
        let all = Rule::All(vec![Rule::Signal(0), Rule::Signal(1)]);
        assert_eq!(all.evaluate(&facts).confidence, 0.6);
        let any = Rule::Any(vec![Rule::Signal(2), Rule::Signal(0)]);
        assert_eq!(
            any.evaluate(&facts),
            Verdict {
                matched: true,
                confidence: 0.9
            }
        );
        assert!(
            Rule::Not(Box::new(Rule::Signal(2)))
                .evaluate(&facts)
                .matched
        );
        assert!(!Rule::Signal(3).evaluate(&facts).matched);
        let mut used = Vec::new();
        Rule::All(vec![all, any]).collect_signals(&mut used);
        assert_eq!(used, vec![0, 1, 2]);
    }

    #[test]
    fn highest_priority_match_wins_and_ties_go_to_the_first() {
        let facts = [fact(true, 1.0), fact(true, 0.5)];
        let decisions = [
            D(1, Rule::Signal(0)),
            D(5, Rule::Signal(1)),
            D(5, Rule::Signal(0)),
            D(9, Rule::Not(Box::new(Rule::Signal(0)))),
        ];
        let (winner, verdict) = pick(&decisions, &[0, 1, 2, 3], &facts).unwrap();
        assert_eq!(winner, 1);
        assert_eq!(verdict.confidence, 0.5);
        assert_eq!(pick(&decisions, &[0], &facts).unwrap().0, 0);
        assert!(pick(&decisions, &[3], &facts).is_none());
    }
}
