//! Which models are failing: failures in a row per model, counted by failover. Successes of a
//! request whose response phases are skipped are never seen, so "in a row" means each failure
//! came less than a cool-down after the one before; a success seen (a fallback's answer)
//! clears the count. A model with enough failures in a row is skipped by selection and
//! failover until a cool-down has passed since its last failure. Kept in this process (each
//! replica learns from the failures it sees).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One model's recent failures.
#[derive(Debug, Clone, Copy)]
struct Failing {
    /// Failures since the last success.
    consecutive: u32,
    /// When the last one happened.
    last: Instant,
}

/// Consecutive failures per model name.
#[derive(Debug, Default)]
pub struct Health {
    failing: Mutex<HashMap<String, Failing>>,
}

impl Health {
    /// Counts a failure of `model` at `now`; one more in a row unless the last came more than
    /// `cool_down` before.
    pub fn failed(&self, model: &str, cool_down: Duration, now: Instant) {
        let Ok(mut failing) = self.failing.lock() else {
            return;
        };
        match failing.get_mut(model) {
            Some(entry) => {
                let fresh = now.saturating_duration_since(entry.last) < cool_down;
                entry.consecutive = if fresh {
                    entry.consecutive.saturating_add(1)
                } else {
                    1
                };
                entry.last = now;
            }
            None => {
                let entry = Failing {
                    consecutive: 1,
                    last: now,
                };
                failing.insert(model.to_owned(), entry);
            }
        }
    }

    /// Clears `model`'s failures: it answered.
    pub fn succeeded(&self, model: &str) {
        if let Ok(mut failing) = self.failing.lock() {
            failing.remove(model);
        }
    }

    /// When `model` failed at least `after` times in a row and its last failure is less than
    /// `cool_down` before `now`: its failures and the time left before it is tried again.
    pub fn set_aside(
        &self,
        model: &str,
        after: u32,
        cool_down: Duration,
        now: Instant,
    ) -> Option<(u32, Duration)> {
        let failing = self.failing.lock().ok()?;
        let entry = failing.get(model)?;
        let since = now.saturating_duration_since(entry.last);
        (entry.consecutive >= after && since < cool_down)
            .then(|| (entry.consecutive, cool_down - since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_set_aside_after_consecutive_failures_until_its_cool_down_ends() {
        let health = Health::default();
        let start = Instant::now();
        let cool = Duration::from_secs(30);
        health.failed("coder", cool, start);
        health.failed("coder", cool, start);
        assert_eq!(health.set_aside("coder", 3, cool, start), None);
        health.failed("coder", cool, start);
        let later = start + Duration::from_secs(10);
        assert_eq!(
            health.set_aside("coder", 3, cool, later),
            Some((3, Duration::from_secs(20)))
        );
        assert_eq!(health.set_aside("other", 3, cool, later), None);
        // The cool-down ends: tried again.
        assert_eq!(health.set_aside("coder", 3, cool, start + cool), None);
        // A success clears the count.
        health.succeeded("coder");
        assert_eq!(health.set_aside("coder", 1, cool, later), None);
    }

    #[test]
    fn failures_further_apart_than_the_cool_down_are_not_in_a_row() {
        let health = Health::default();
        let start = Instant::now();
        let cool = Duration::from_secs(30);
        for minute in 0..5 {
            health.failed("coder", cool, start + Duration::from_secs(60 * minute));
        }
        let now = start + Duration::from_secs(241);
        assert_eq!(health.set_aside("coder", 2, cool, now), None);
        health.failed("coder", cool, now);
        assert!(health.set_aside("coder", 2, cool, now).is_some());
    }
}
