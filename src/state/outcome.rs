//! Feedback on a run, as `POST /v1/outcomes` delivers it.

/// One piece of feedback on a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A reward in 0..=1 (thumbs up is 1, thumbs down 0): feeds the bandit posterior.
    Reward(f64),
    /// Whether the answer passed verification: feeds the automix posterior.
    Verified(bool),
    /// This run's answer was preferred to `other_run`'s (or tied with it): feeds Elo, under
    /// this run's decision.
    Preference {
        /// The run it was compared with.
        other_run: String,
        /// A tie rather than a win.
        draw: bool,
    },
}

impl Outcome {
    /// The kind, as metrics, records and errors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Reward(_) => "reward",
            Self::Verified(_) => "verified",
            Self::Preference { .. } => "preference",
        }
    }

    /// What makes this outcome of run `run_id` a repeat: its kind (a reward and a thumbs are
    /// both rewards), and for a preference the other run too.
    pub fn credit_key(&self, run_id: &str) -> String {
        match self {
            Self::Preference { other_run, .. } => {
                format!("{run_id}\u{0}preference\u{0}{other_run}")
            }
            other => format!("{run_id}\u{0}{}", other.kind()),
        }
    }
}

/// Why an outcome was not credited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomeError {
    /// The run id is unknown or expired.
    #[error("unknown run id {0:?}: it never existed here or its outcome window expired")]
    UnknownRun(String),
    /// An outcome of this kind was already credited to the run.
    #[error("run {0:?} already has a {1} outcome; each run takes one outcome of each kind")]
    AlreadyCredited(String, &'static str),
}
