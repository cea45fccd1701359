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

/// Why an outcome was not credited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomeError {
    /// The run id is unknown or expired.
    #[error("unknown run id {0:?}: it never existed here or its outcome window expired")]
    UnknownRun(String),
}
