//! The runs outcomes can refer to, in this process: two generations of a map. Every forwarded
//! request adds one, so an insert is a lock and a map insert; eviction is a whole generation
//! dropped at once rather than bookkeeping per entry. A run is found for its time to live
//! (checked on read), and the newest half of the capacity is always kept.

use super::{Run, RunId};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Runs by id, bounded in number and age.
pub struct Runs {
    generations: Mutex<Generations>,
    /// Entries in the current generation before it becomes the previous one.
    per_generation: usize,
    ttl: Duration,
}

/// Runs by id: the ids are mom-router's own random ones, so a fast hasher serves.
type RunMap = HashMap<RunId, (Instant, Run), foldhash::fast::RandomState>;

#[derive(Default)]
struct Generations {
    current: RunMap,
    previous: RunMap,
    /// When the current generation began.
    began: Option<Instant>,
}

impl Runs {
    /// At most `capacity` runs, each found for `ttl`.
    pub fn new(capacity: u64, ttl: Duration) -> Self {
        let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
        Self {
            generations: Mutex::new(Generations::default()),
            per_generation: (capacity / 2).max(1),
            ttl,
        }
    }

    /// Remembers `run` under `id`.
    pub fn insert(&self, id: RunId, run: Run) {
        let now = Instant::now();
        let retired = {
            let mut g = self.lock();
            let began = *g.began.get_or_insert(now);
            let retired = (g.current.len() >= self.per_generation
                || now.duration_since(began) >= self.ttl)
                .then(|| {
                    g.began = Some(now);
                    let current = std::mem::take(&mut g.current);
                    std::mem::replace(&mut g.previous, current)
                });
            g.current.insert(id, (now, run));
            retired
        };
        // The retired generation is freed outside the lock.
        drop(retired);
    }

    /// The run with this id, while it is remembered and younger than the time to live.
    pub fn get(&self, id: RunId) -> Option<Run> {
        let g = self.lock();
        let (at, run) = g.current.get(&id).or_else(|| g.previous.get(&id))?;
        (at.elapsed() < self.ttl).then(|| run.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock leaves maps that are still whole.
        self.generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(model: &str) -> Run {
        Run {
            identity: "mom/auto".into(),
            decision: "none".into(),
            model: model.into(),
        }
    }

    #[test]
    fn keeps_the_newest_half_of_its_capacity_and_at_most_all_of_it() {
        let runs = Runs::new(10, Duration::from_secs(60));
        let ids: Vec<RunId> = (0..23).map(|_| RunId::random()).collect();
        for (i, id) in ids.iter().enumerate() {
            runs.insert(*id, run(&format!("m{i}")));
        }
        let kept: Vec<usize> = (0..23).filter(|&i| runs.get(ids[i]).is_some()).collect();
        assert!(kept.len() <= 10, "{kept:?}");
        assert!((18..23).all(|i| kept.contains(&i)), "{kept:?}");
        assert_eq!(runs.get(ids[22]).map(|r| r.model), Some("m22".into()));
        assert_eq!(runs.get(ids[0]), None);
    }

    #[test]
    fn a_run_past_its_time_to_live_is_not_found() {
        let runs = Runs::new(100, Duration::from_millis(300));
        let (old, new) = (RunId::random(), RunId::random());
        runs.insert(old, run("a"));
        assert!(runs.get(old).is_some());
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(runs.get(old), None);
        runs.insert(new, run("b"));
        assert!(runs.get(new).is_some());
    }
}
