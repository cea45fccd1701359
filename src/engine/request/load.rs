//! The pool's state as selection reads it: each candidate's requests in flight against the
//! slots its model declares (`maxConcurrency`), the wait a new request would expect, whether
//! the model is busy (no free slot) and whether it is saturated (its declared queue full).

use crate::config::{Model, Snapshot};
use crate::selection::Candidate;
use crate::state::StateStore;

/// Service time assumed for a model whose latency was neither predicted nor observed.
pub const DEFAULT_SERVICE_MS: f64 = 1000.0;

/// One candidate's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::engine) struct Load {
    /// Requests in flight on the model now.
    pub in_flight: u32,
    /// Requests it serves at once.
    pub slots: u32,
    /// Requests that may wait beyond the slots, when bounded.
    pub queue: Option<u32>,
}

impl Load {
    /// No free slot: a new request would wait.
    pub fn busy(&self) -> bool {
        self.in_flight >= self.slots
    }

    /// Its declared queue is full.
    pub fn saturated(&self) -> bool {
        self.queue
            .is_some_and(|queue| self.in_flight >= self.slots.saturating_add(queue))
    }

    /// The wait a new request expects, in milliseconds, when one request takes `service_ms`:
    /// the requests ahead of it beyond the free slots, served `slots` at a time.
    pub fn wait_ms(&self, service_ms: f64) -> f64 {
        let ahead = (self.in_flight + 1).saturating_sub(self.slots);
        f64::from(ahead) * service_ms / f64::from(self.slots.max(1))
    }

    /// `coder busy: 6 in flight on 1 slot, wait ~7 s`, plain ASCII.
    pub fn describe(&self, model: &Model, service_ms: f64) -> String {
        let plural = if self.slots == 1 { "" } else { "s" };
        format!(
            "{} busy: {} in flight on {} slot{plural}, wait ~{:.0} s",
            model.name,
            self.in_flight,
            self.slots,
            (self.wait_ms(service_ms) / 1000.0).ceil()
        )
    }
}

/// The load of each of `candidates` whose model declares its slots (`None` for the others).
pub(in crate::engine) fn loads(
    snapshot: &Snapshot,
    state: &StateStore,
    candidates: &[Candidate],
) -> Vec<Option<Load>> {
    candidates
        .iter()
        .map(|candidate| {
            let model = &snapshot.models[candidate.model];
            model.max_concurrency.map(|slots| Load {
                in_flight: state.pool.in_flight(&model.name),
                slots,
                queue: model.max_queue,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(in_flight: u32, slots: u32, queue: Option<u32>) -> Load {
        Load {
            in_flight,
            slots,
            queue,
        }
    }

    #[test]
    fn a_request_waits_for_those_ahead_of_it_beyond_the_free_slots() {
        // A free slot: no wait.
        assert_eq!(load(0, 1, None).wait_ms(1000.0), 0.0);
        assert_eq!(load(1, 2, None).wait_ms(1000.0), 0.0);
        assert!(!load(1, 2, None).busy());
        // Six in flight on one slot: this one is seventh, behind six one-second requests.
        assert_eq!(load(6, 1, None).wait_ms(1000.0), 6000.0);
        // Two slots drain the queue twice as fast.
        assert_eq!(load(6, 2, None).wait_ms(1000.0), 2500.0);
        assert!(load(2, 2, None).busy());
    }

    #[test]
    fn a_model_is_saturated_once_its_queue_is_full() {
        assert!(!load(6, 1, None).saturated());
        assert!(!load(2, 1, Some(2)).saturated());
        assert!(load(3, 1, Some(2)).saturated());
        assert!(load(1, 1, Some(0)).saturated());
    }
}
