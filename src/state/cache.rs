//! Answers the semantic cache plugin keeps: a bounded in-process tier (moka, each answer with its
//! rule's lifetime), a partition index for lookups by meaning, and the requests in flight so
//! identical misses on one replica go upstream once.
//!
//! An answer lives under two keys: its partition (everything a reuse must share — system
//! prompt, history, tools, parameters, identity, decision, model, scope) and its exact key (the
//! partition plus the last user message). A lookup by meaning only reads answers of the
//! request's own partition, newest first, at most [`PARTITION_SCAN`] of them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Answers of one partition a lookup by meaning compares with.
pub const PARTITION_SCAN: usize = 64;

/// Where an answer is kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Hex digest of everything a reuse must share.
    pub partition: String,
    /// Hex digest of the partition and the last user message.
    pub exact: String,
}

/// One kept answer.
#[derive(Debug)]
pub struct Kept {
    /// The answer as a JSON chat completion.
    pub body: Arc<Vec<u8>>,
    /// The last user message's embedding, for lookups by meaning.
    pub embedding: Option<Arc<Vec<f32>>>,
    /// How long it is kept.
    pub ttl: Duration,
}

/// A lookup's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The same conversation was answered.
    Exact(Arc<Vec<u8>>),
    /// A paraphrase of the last user message was, with this cosine.
    Similar(Arc<Vec<u8>>, f32),
}

impl Found {
    /// The kept answer.
    pub fn body(&self) -> &Arc<Vec<u8>> {
        match self {
            Self::Exact(body) | Self::Similar(body, _) => body,
        }
    }
}

/// Whether this request goes upstream for its key or waits for one that already does.
#[derive(Debug)]
pub enum Flight {
    /// Go upstream; followers wait until the guard drops (answer kept or not).
    Lead(FlightGuard),
    /// Another request with the same key is upstream: wait for it.
    Follow(watch::Receiver<()>),
}

type Flights = Mutex<HashMap<String, watch::Receiver<()>>>;

/// Held by the request that went upstream for a key; dropping it wakes the followers.
#[derive(Debug)]
pub struct FlightGuard {
    exact: String,
    flights: Arc<Flights>,
    _done: watch::Sender<()>,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        flights.remove(&self.exact);
    }
}

/// The exact keys of one partition, newest last.
#[derive(Debug)]
struct Partition {
    keys: Mutex<VecDeque<String>>,
    ttl: Duration,
}

/// Gives each entry its own lifetime.
struct Lifetime;

impl moka::Expiry<String, Arc<Kept>> for Lifetime {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<Kept>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl)
    }
}

impl moka::Expiry<String, Arc<Partition>> for Lifetime {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<Partition>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl)
    }

    fn expire_after_update(
        &self,
        _key: &String,
        value: &Arc<Partition>,
        _updated_at: std::time::Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// The in-process tier.
pub(super) struct LocalAnswers {
    entries: moka::sync::Cache<String, Arc<Kept>>,
    partitions: moka::sync::Cache<String, Arc<Partition>>,
    flights: Arc<Flights>,
}

impl LocalAnswers {
    pub(super) fn new(capacity: u64) -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .expire_after(Lifetime)
                .build(),
            partitions: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .expire_after(Lifetime)
                .build(),
            flights: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The answer kept for `key`, or the closest by meaning at or above `threshold`.
    pub(super) fn find(
        &self,
        key: &CacheKey,
        query: Option<&[f32]>,
        threshold: Option<f32>,
    ) -> Option<Found> {
        if let Some(kept) = self.entries.get(&key.exact) {
            return Some(Found::Exact(Arc::clone(&kept.body)));
        }
        let (query, threshold) = (query?, threshold?);
        let partition = self.partitions.get(&key.partition)?;
        let keys: Vec<String> = {
            let keys = partition.keys.lock().unwrap_or_else(|p| p.into_inner());
            keys.iter().rev().take(PARTITION_SCAN).cloned().collect()
        };
        keys.iter()
            .filter_map(|exact| self.entries.get(exact))
            .filter_map(|kept| {
                let stored = kept.embedding.as_deref()?;
                // Embeddings are unit vectors from the same encoder; another length is not.
                let similarity = if stored.len() == query.len() {
                    crate::inference::cosine(query, stored)
                } else {
                    return None;
                };
                (similarity >= threshold).then(|| (similarity, Arc::clone(&kept.body)))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(similarity, body)| Found::Similar(body, similarity))
    }

    /// Keeps `kept` under `key`.
    pub(super) fn keep(&self, key: &CacheKey, kept: Arc<Kept>) {
        let ttl = kept.ttl;
        self.entries.insert(key.exact.clone(), kept);
        let partition = self.partitions.get_with(key.partition.clone(), || {
            Arc::new(Partition {
                keys: Mutex::new(VecDeque::new()),
                ttl,
            })
        });
        let mut keys = partition.keys.lock().unwrap_or_else(|p| p.into_inner());
        keys.retain(|k| k != &key.exact && self.entries.contains_key(k));
        keys.push_back(key.exact.clone());
        while keys.len() > PARTITION_SCAN {
            keys.pop_front();
        }
    }

    /// Joins the flight for `exact`, or leads it.
    pub(super) fn flight(&self, exact: &str) -> Flight {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(waiting) = flights.get(exact) {
            return Flight::Follow(waiting.clone());
        }
        let (done, waiting) = watch::channel(());
        flights.insert(exact.to_owned(), waiting);
        Flight::Lead(FlightGuard {
            exact: exact.to_owned(),
            flights: Arc::clone(&self.flights),
            _done: done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(partition: &str, exact: &str) -> CacheKey {
        CacheKey {
            partition: partition.to_owned(),
            exact: exact.to_owned(),
        }
    }

    fn kept(body: &str, embedding: Option<Vec<f32>>) -> Arc<Kept> {
        Arc::new(Kept {
            body: Arc::new(body.as_bytes().to_vec()),
            embedding: embedding.map(Arc::new),
            ttl: Duration::from_secs(60),
        })
    }

    #[test]
    fn exact_and_similar_lookups_stay_in_their_partition() {
        let answers = LocalAnswers::new(100);
        answers.keep(&key("p", "a"), kept("A", Some(vec![1.0, 0.0])));
        answers.keep(&key("q", "b"), kept("B", Some(vec![0.0, 1.0])));
        assert_eq!(
            answers.find(&key("p", "a"), None, None),
            Some(Found::Exact(Arc::new(b"A".to_vec())))
        );
        // Close to "a" by meaning, same partition: found with its cosine.
        let query = [0.96f32, 0.28]; // a unit vector
        match answers.find(&key("p", "x"), Some(&query), Some(0.9)) {
            Some(Found::Similar(body, similarity)) => {
                assert_eq!(body.as_slice(), b"A");
                assert!((similarity - 0.96).abs() < 1e-4, "{similarity}");
            }
            other => panic!("expected a similar answer, got {other:?}"),
        }
        // Below the threshold, or another partition: nothing.
        assert_eq!(answers.find(&key("p", "x"), Some(&query), Some(0.97)), None);
        assert_eq!(answers.find(&key("q", "x"), Some(&query), Some(0.9)), None);
        // No threshold: exact matches only.
        assert_eq!(answers.find(&key("p", "x"), Some(&query), None), None);
    }

    #[test]
    fn a_flight_has_one_leader_and_wakes_its_followers_when_it_lands() {
        let answers = LocalAnswers::new(10);
        let Flight::Lead(guard) = answers.flight("k") else {
            panic!("the first request leads");
        };
        let Flight::Follow(mut waiting) = answers.flight("k") else {
            panic!("the second request follows");
        };
        assert!(matches!(answers.flight("other"), Flight::Lead(_)));
        drop(guard);
        // The sender is gone: the follower's wait ends at once.
        let woke = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map(|rt| rt.block_on(async { waiting.changed().await.is_err() }));
        assert_eq!(woke.ok(), Some(true));
        assert!(matches!(answers.flight("k"), Flight::Lead(_)));
    }
}
