//! Any bytes as a `POST /v1/outcomes` body through its checks: an error with its code, or
//! outcomes that are each valid (a reward in 0..=1) and never repeat a run and kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::admin::{parse_outcomes, MAX_OUTCOMES};
use mom_router::state::Outcome;

fuzz_target!(|body: &[u8]| {
    match parse_outcomes(body) {
        Ok(outcomes) => {
            assert!(!outcomes.is_empty() && outcomes.len() <= MAX_OUTCOMES);
            let mut keys = std::collections::HashSet::new();
            for (run_id, outcome) in &outcomes {
                if let Outcome::Reward(reward) = outcome {
                    assert!((0.0..=1.0).contains(reward));
                }
                assert!(keys.insert(outcome.credit_key(run_id)));
            }
        }
        Err((message, code)) => {
            assert!(!message.is_empty());
            assert!(code == "invalid_outcome" || code == "duplicate_outcome");
        }
    }
});
