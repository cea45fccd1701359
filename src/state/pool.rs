//! Requests in flight per model, as this replica forwarded them: a request counts from the
//! moment it is forwarded until its ext_proc stream ends (Envoy holds that stream open until
//! the response is complete, whether or not it sends the response phases), and a failover
//! attempt for as long as it runs. A backend that reports its own queue (`queueMetrics`) adds
//! what it sees: requests other replicas and other clients sent. Selection reads the larger of
//! the two against each model's declared slots to expect a wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A backend's report counts this long after it was read.
const REPORT_TTL: Duration = Duration::from_secs(5);

/// In-flight counts by model name.
#[derive(Debug, Default)]
pub struct Pool {
    counts: Mutex<HashMap<String, Arc<AtomicU32>>>,
    /// Requests running and waiting as each backend last reported them, and when.
    reported: Mutex<HashMap<String, (u32, Instant)>>,
}

/// One request in flight on a model; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicU32>);

impl Pool {
    /// Counts one more request on `model` until the returned guard is dropped.
    pub fn start(&self, model: &str) -> Option<InFlight> {
        let mut counts = self.counts.lock().ok()?;
        let count = match counts.get(model) {
            Some(count) => Arc::clone(count),
            None => {
                let count = Arc::new(AtomicU32::new(0));
                counts.insert(model.to_owned(), Arc::clone(&count));
                count
            }
        };
        count.fetch_add(1, Ordering::Relaxed);
        Some(InFlight(count))
    }

    /// Requests in flight on `model` now: this replica's count, or the backend's own report
    /// when that is larger and fresh.
    pub fn in_flight(&self, model: &str) -> u32 {
        let own = self
            .counts
            .lock()
            .ok()
            .and_then(|counts| counts.get(model).map(|c| c.load(Ordering::Relaxed)))
            .unwrap_or(0);
        let reported = self
            .reported
            .lock()
            .ok()
            .and_then(|reported| reported.get(model).copied())
            .filter(|(_, at)| at.elapsed() < REPORT_TTL)
            .map_or(0, |(queued, _)| queued);
        own.max(reported)
    }

    /// Records that `model`'s backend reports `queued` requests running or waiting.
    pub fn report(&self, model: &str, queued: u32) {
        if let Ok(mut reported) = self.reported.lock() {
            reported.insert(model.to_owned(), (queued, Instant::now()));
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_while_its_guard_lives() {
        let pool = Pool::default();
        assert_eq!(pool.in_flight("coder"), 0);
        let first = pool.start("coder");
        let second = pool.start("coder");
        let other = pool.start("small");
        assert_eq!(pool.in_flight("coder"), 2);
        assert_eq!(pool.in_flight("small"), 1);
        drop(first);
        assert_eq!(pool.in_flight("coder"), 1);
        drop((second, other));
        assert_eq!(pool.in_flight("coder"), 0);
        assert_eq!(pool.in_flight("small"), 0);
    }

    #[test]
    fn a_backends_report_counts_when_it_sees_more_than_this_replica() {
        let pool = Pool::default();
        let _mine = (pool.start("coder"), pool.start("coder"));
        pool.report("coder", 5);
        assert_eq!(pool.in_flight("coder"), 5);
        pool.report("coder", 1);
        assert_eq!(pool.in_flight("coder"), 2);
    }
}
