//! A bounded window of recent latency observations for one model, read as a percentile. A read
//! is cached until the window changes or a second passes, so the hot path does not sort the
//! window for every request.

use crate::selection::LatencyMetric;
use std::collections::VecDeque;

/// How long a computed percentile is reused while the window is unchanged.
const REUSE_MS: u64 = 1000;

/// One response's timings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// When it finished, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Time to the first response chunk.
    pub ttft_ms: f64,
    /// Time to the end of the response.
    pub total_ms: f64,
}

/// The newest `capacity` timings.
#[derive(Debug, Clone, Default)]
pub struct Window {
    timings: VecDeque<Timing>,
    /// Bumped by every push.
    generation: u64,
    cached: Vec<Cached>,
}

#[derive(Debug, Clone, Copy)]
struct Cached {
    metric: LatencyMetric,
    percentile: f64,
    generation: u64,
    at_ms: u64,
    result: (Option<f64>, u32),
}

impl Window {
    /// Adds a timing, dropping the oldest beyond `capacity`.
    pub fn push(&mut self, timing: Timing, capacity: usize) {
        self.timings.push_back(timing);
        while self.timings.len() > capacity.max(1) {
            self.timings.pop_front();
        }
        self.generation += 1;
    }

    /// Timings newer than `since_ms`.
    pub fn count(&self, since_ms: u64) -> u32 {
        self.timings.iter().filter(|t| t.at_ms >= since_ms).count() as u32
    }

    /// [`Window::percentile`] of `metric`, reusing a result computed less than a second ago
    /// (`now_ms`) on the same timings.
    pub fn percentile_cached(
        &mut self,
        now_ms: u64,
        since_ms: u64,
        percentile: f64,
        metric: LatencyMetric,
    ) -> (Option<f64>, u32) {
        let fresh = self.cached.iter().find(|c| {
            c.metric == metric
                && c.percentile == percentile
                && c.generation == self.generation
                && now_ms.saturating_sub(c.at_ms) < REUSE_MS
        });
        if let Some(cached) = fresh {
            return cached.result;
        }
        let read: fn(&Timing) -> f64 = match metric {
            LatencyMetric::Ttft => |t| t.ttft_ms,
            LatencyMetric::Total => |t| t.total_ms,
        };
        let result = self.percentile(since_ms, percentile, read);
        self.cached
            .retain(|c| !(c.metric == metric && c.percentile == percentile));
        self.cached.push(Cached {
            metric,
            percentile,
            generation: self.generation,
            at_ms: now_ms,
            result,
        });
        result
    }

    /// The `percentile` (nearest rank) of the timings newer than `since_ms`, read by `value`,
    /// with the number of timings it covers; `None` when there are none.
    pub fn percentile(
        &self,
        since_ms: u64,
        percentile: f64,
        value: fn(&Timing) -> f64,
    ) -> (Option<f64>, u32) {
        let mut values: Vec<f64> = self
            .timings
            .iter()
            .filter(|t| t.at_ms >= since_ms)
            .map(value)
            .collect();
        if values.is_empty() {
            return (None, 0);
        }
        values.sort_by(f64::total_cmp);
        let rank = ((percentile / 100.0) * values.len() as f64).ceil() as usize;
        let index = rank.clamp(1, values.len()) - 1;
        (Some(values[index]), values.len() as u32)
    }

    /// Every timing, oldest first.
    pub fn timings(&self) -> impl Iterator<Item = &Timing> {
        self.timings.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_ms: u64, total_ms: f64) -> Timing {
        Timing {
            at_ms,
            ttft_ms: total_ms / 2.0,
            total_ms,
        }
    }

    #[test]
    fn percentile_is_nearest_rank_over_recent_timings() {
        let mut window = Window::default();
        for (i, ms) in [50.0, 10.0, 40.0, 20.0, 30.0].into_iter().enumerate() {
            window.push(at(1000 + i as u64, ms), 10);
        }
        assert_eq!(window.percentile(0, 50.0, |t| t.total_ms), (Some(30.0), 5));
        assert_eq!(window.percentile(0, 90.0, |t| t.total_ms), (Some(50.0), 5));
        assert_eq!(window.percentile(0, 90.0, |t| t.ttft_ms), (Some(25.0), 5));
        // Only the last two are newer than 1003.
        assert_eq!(
            window.percentile(1003, 100.0, |t| t.total_ms),
            (Some(30.0), 2)
        );
        assert_eq!(window.percentile(2000, 50.0, |t| t.total_ms), (None, 0));
    }

    #[test]
    fn cached_reads_follow_new_timings_and_time() {
        let mut window = Window::default();
        window.push(at(1000, 10.0), 10);
        let read = |w: &mut Window, now| w.percentile_cached(now, 0, 50.0, LatencyMetric::Total);
        assert_eq!(read(&mut window, 2000), (Some(10.0), 1));
        window.push(at(1001, 30.0), 10);
        assert_eq!(
            read(&mut window, 2000),
            (Some(10.0), 2),
            "a push invalidates"
        );
        assert_eq!(window.count(1001), 1);
        // Older than one second, a result is recomputed with the caller's `since`.
        assert_eq!(
            window.percentile_cached(3500, 1001, 50.0, LatencyMetric::Total),
            (Some(30.0), 1)
        );
    }

    #[test]
    fn capacity_keeps_the_newest() {
        let mut window = Window::default();
        for i in 0..10 {
            window.push(at(i, i as f64), 3);
        }
        let kept: Vec<f64> = window.timings().map(|t| t.total_ms).collect();
        assert_eq!(kept, vec![7.0, 8.0, 9.0]);
    }
}
