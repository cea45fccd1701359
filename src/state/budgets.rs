//! Tenants' budgets in this process: a token bucket per limit (requests, tokens or cost; full
//! at first, refilling continuously over its window) and a count of requests in flight per
//! concurrency limit. A request's draws on all its limits are checked and taken under one lock,
//! so it takes from every bucket or from none.
//!
//! Why token buckets: a bucket is two numbers per limit, refills smoothly (no burst at a
//! window's edge, as a fixed window allows), is checked in constant time, and lets a request's
//! tokens be corrected after the answer reports them (the bucket may go below zero: the tenant
//! waits until it refills). A sliding log would keep an entry per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One limit a request draws on at admission.
#[derive(Debug, Clone, Copy)]
pub struct Draw<'a> {
    /// The limit's key.
    pub key: &'a str,
    /// What a full bucket holds, or how many requests may be in flight at once.
    pub capacity: f64,
    /// The time an empty bucket takes to refill; `None` for a count of requests in flight.
    pub window: Option<Duration>,
    /// What the request takes now (one request, its prompt's tokens); 0 for a cost, whose
    /// bucket need only not be spent.
    pub need: f64,
}

/// A bucket after a draw, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// What is left (never below 0 as reported).
    pub remaining: f64,
    /// Time until the bucket is full again.
    pub reset: Duration,
}

/// Why a request was refused: the draw (by index) that did not fit, and when it would.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refused {
    /// The index of the draw that did not fit.
    pub index: usize,
    /// When the bucket will hold what the request needs; `None` when it never can (the
    /// request needs more than a full bucket).
    pub retry_after: Option<Duration>,
}

/// A request's places among its tenant's requests in flight; dropping it frees them (in this
/// process, or through the shared store).
#[derive(Default)]
pub struct Slots {
    local: Vec<Arc<AtomicU32>>,
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("local", &self.local.len())
            .field("shared", &self.release.is_some())
            .finish()
    }
}

impl Slots {
    /// Slots held in a shared store, freed by `release`.
    pub(super) fn shared(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            local: Vec::new(),
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for count in &self.local {
            count.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    /// The level at `now`, refilled at `capacity / window`.
    fn refill(&mut self, capacity: f64, window: Duration, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let rate = capacity / window.as_secs_f64().max(f64::EPSILON);
        self.level = (self.level + elapsed * rate).min(capacity);
        self.at = now;
    }
}

/// Token buckets and in-flight counts by limit key.
#[derive(Debug, Default)]
pub struct Budgets {
    buckets: Mutex<HashMap<String, Bucket>>,
    counts: Mutex<HashMap<String, Arc<AtomicU32>>>,
}

/// Runs `f` on the bucket of `key` refilled to `now`, a full one added when there is none (the
/// key is copied only then: a request's draws allocate nothing once its buckets exist).
fn with_bucket<R>(
    buckets: &mut HashMap<String, Bucket>,
    key: &str,
    (capacity, window): (f64, Duration),
    now: Instant,
    f: impl FnOnce(&mut Bucket) -> R,
) -> R {
    if let Some(bucket) = buckets.get_mut(key) {
        bucket.refill(capacity, window, now);
        return f(bucket);
    }
    let mut bucket = Bucket {
        level: capacity,
        at: now,
    };
    let result = f(&mut bucket);
    buckets.insert(key.to_owned(), bucket);
    result
}

/// Time until a bucket at `level` holds `target`, refilling `capacity` every `window`.
fn until(level: f64, target: f64, capacity: f64, window: Duration) -> Duration {
    let rate = capacity / window.as_secs_f64().max(f64::EPSILON);
    Duration::from_secs_f64(((target - level) / rate).max(0.0))
}

impl Budgets {
    /// Takes every draw, or none: the level of each bucket after the draw (in `draws`' order;
    /// a count of requests in flight reports what is left of it), and the request's slots; or
    /// the first draw that does not fit.
    pub fn admit(&self, draws: &[Draw<'_>]) -> Result<(Vec<Level>, Slots), Refused> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for (index, draw) in draws.iter().enumerate() {
            let refused = |retry_after| Err(Refused { index, retry_after });
            match draw.window {
                Some(window) => {
                    if draw.need > draw.capacity {
                        return refused(None);
                    }
                    let level =
                        with_bucket(&mut buckets, draw.key, (draw.capacity, window), now, |b| {
                            b.level
                        });
                    // A cost bucket needs something left; any other, what the request takes.
                    let short = if draw.need > 0.0 {
                        level < draw.need
                    } else {
                        level <= 0.0
                    };
                    if short {
                        let target = draw.need.max(draw.capacity * 1e-6);
                        return refused(Some(until(level, target, draw.capacity, window)));
                    }
                }
                None => {
                    let held = counts
                        .get(draw.key)
                        .map_or(0, |c| c.load(Ordering::Relaxed));
                    if f64::from(held) + 1.0 > draw.capacity {
                        // Requests in flight end at their own pace: try again shortly.
                        return refused(Some(Duration::from_secs(1)));
                    }
                }
            }
        }
        let mut levels = Vec::with_capacity(draws.len());
        let mut slots = Slots::default();
        for draw in draws {
            match draw.window {
                Some(window) => {
                    let Some(bucket) = buckets.get_mut(draw.key) else {
                        continue;
                    };
                    bucket.level -= draw.need;
                    levels.push(Level {
                        remaining: bucket.level.max(0.0),
                        reset: until(bucket.level, draw.capacity, draw.capacity, window),
                    });
                }
                None => {
                    if !counts.contains_key(draw.key) {
                        counts.insert(draw.key.to_owned(), Arc::default());
                    }
                    let Some(count) = counts.get(draw.key) else {
                        continue;
                    };
                    let held = count.fetch_add(1, Ordering::Relaxed) + 1;
                    slots.local.push(Arc::clone(count));
                    levels.push(Level {
                        remaining: (draw.capacity - f64::from(held)).max(0.0),
                        reset: Duration::ZERO,
                    });
                }
            }
        }
        Ok((levels, slots))
    }

    /// Adds `delta` to the bucket of `key` (a refund when positive, a charge when negative; a
    /// charge may take it below zero), refilled first.
    pub fn adjust(&self, key: &str, capacity: f64, window: Duration, delta: f64) {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        with_bucket(&mut buckets, key, (capacity, window), now, |bucket| {
            bucket.level = (bucket.level + delta).min(capacity);
        });
    }

    /// The bucket of `key` now, as [`Budgets::admit`] reports it (a full one when unused).
    pub fn level(&self, key: &str, capacity: f64, window: Duration) -> Level {
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut bucket = buckets.get(key).copied().unwrap_or(Bucket {
            level: capacity,
            at: now,
        });
        bucket.refill(capacity, window, now);
        Level {
            remaining: bucket.level.max(0.0),
            reset: until(bucket.level, capacity, capacity, window),
        }
    }

    /// Requests in flight under the concurrency limit `key`.
    pub fn in_flight(&self, key: &str) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(key).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Option<Duration> = Some(Duration::from_secs(60));

    fn tokens(need: f64) -> Draw<'static> {
        Draw {
            key: "t/tokens",
            capacity: 100.0,
            window: MINUTE,
            need,
        }
    }

    #[test]
    fn a_request_takes_from_every_bucket_or_from_none() {
        let budgets = Budgets::default();
        let requests = Draw {
            key: "t/requests",
            capacity: 1.0,
            window: MINUTE,
            need: 1.0,
        };
        let (levels, _) = budgets.admit(&[requests, tokens(30.0)]).unwrap();
        assert_eq!(levels[0].remaining, 0.0);
        assert!((levels[1].remaining - 70.0).abs() < 0.01, "{levels:?}");
        // The request bucket is spent: the token bucket is not touched.
        let refused = budgets.admit(&[tokens(30.0), requests]).unwrap_err();
        assert_eq!(refused.index, 1);
        let wait = refused.retry_after.unwrap().as_secs_f64();
        assert!(wait > 59.0 && wait <= 60.0, "{wait}");
        let left = budgets.level("t/tokens", 100.0, Duration::from_secs(60));
        assert!((left.remaining - 70.0).abs() < 0.01, "{left:?}");
    }

    #[test]
    fn a_charge_past_the_bucket_makes_the_tenant_wait_and_a_refund_gives_it_back() {
        let budgets = Budgets::default();
        budgets.admit(&[tokens(10.0)]).unwrap();
        // The answer reported 150 tokens, not the 10 reserved.
        budgets.adjust("t/tokens", 100.0, Duration::from_secs(60), -140.0);
        let refused = budgets.admit(&[tokens(10.0)]).unwrap_err();
        // From -50 to 10 at 100 a minute: 36 s.
        let wait = refused.retry_after.unwrap().as_secs_f64();
        assert!((wait - 36.0).abs() < 0.5, "{wait}");
        budgets.adjust("t/tokens", 100.0, Duration::from_secs(60), 140.0);
        assert!(budgets.admit(&[tokens(10.0)]).is_ok());
        assert_eq!(
            budgets.admit(&[tokens(101.0)]).unwrap_err().retry_after,
            None,
            "more than a full bucket never fits"
        );
    }

    #[test]
    fn requests_in_flight_are_counted_until_their_slots_drop() {
        let budgets = Budgets::default();
        let concurrent = Draw {
            key: "t/concurrent",
            capacity: 2.0,
            window: None,
            need: 1.0,
        };
        let (_, first) = budgets.admit(&[concurrent]).unwrap();
        let (levels, second) = budgets.admit(&[concurrent]).unwrap();
        assert_eq!(levels[0].remaining, 0.0);
        assert!(budgets.admit(&[concurrent]).is_err());
        assert_eq!(budgets.in_flight("t/concurrent"), 2);
        drop(first);
        assert!(budgets.admit(&[concurrent]).is_ok());
        drop(second);
        assert_eq!(budgets.in_flight("t/concurrent"), 0);
    }

    #[test]
    fn a_spent_cost_bucket_refuses_until_it_refills_above_zero() {
        let budgets = Budgets::default();
        let day = Duration::from_secs(86_400);
        let cost = Draw {
            key: "t/cost",
            capacity: 1.0,
            window: Some(day),
            need: 0.0,
        };
        assert!(budgets.admit(&[cost]).is_ok());
        budgets.adjust("t/cost", 1.0, day, -1.5);
        let refused = budgets.admit(&[cost]).unwrap_err();
        // From -0.5 back above 0 at 1 a day: half a day.
        let wait = refused.retry_after.unwrap().as_secs_f64();
        assert!((wait - 43_200.0).abs() < 10.0, "{wait}");
    }
}
