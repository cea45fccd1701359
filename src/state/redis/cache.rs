//! The semantic cache's Redis tier, under the prefix `P`:
//! - `P:answer:EXACT`: `{"expires_ms", "embedding", "body"}`, expiring with the answer;
//! - `P:answers:PARTITION`: sorted set of exact keys scored by their expiry (ms), so a lookup
//!   by meaning reads the partition's newest live answers; trimmed of expired keys on each
//!   write and expiring with its newest answer.

use super::RedisTier;
use crate::state::cache::{CacheKey, Found, Kept, PARTITION_SCAN};
use crate::state::now_ms;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// An answer as Redis holds it.
#[derive(Serialize, Deserialize)]
struct Stored {
    expires_ms: u64,
    embedding: Option<Vec<f32>>,
    body: String,
}

impl Stored {
    fn kept(self, now: u64) -> Option<Kept> {
        let left = self.expires_ms.checked_sub(now).filter(|ms| *ms > 0)?;
        Some(Kept {
            body: Arc::new(self.body.into_bytes()),
            embedding: self.embedding.map(Arc::new),
            ttl: Duration::from_millis(left),
        })
    }
}

impl RedisTier {
    fn answer_key(&self, exact: &str) -> String {
        self.key(&format!("answer:{exact}"))
    }

    fn partition_key(&self, partition: &str) -> String {
        self.key(&format!("answers:{partition}"))
    }

    /// An answer another replica kept: what the lookup found, its exact key and the answer
    /// (for this replica's own tier). Bounded by twice the timeout; a failure is counted and
    /// reads as a miss.
    pub(in crate::state) async fn find_answer(
        &self,
        key: &CacheKey,
        query: Option<&[f32]>,
        threshold: Option<f32>,
    ) -> Option<(Found, String, Kept)> {
        let lookup = self.lookup_answer(key, query, threshold);
        match tokio::time::timeout(self.timeout * 2, lookup).await {
            Ok(Ok(found)) => found,
            _ => {
                self.fell_back("answer_lookup");
                None
            }
        }
    }

    async fn lookup_answer(
        &self,
        key: &CacheKey,
        query: Option<&[f32]>,
        threshold: Option<f32>,
    ) -> redis::RedisResult<Option<(Found, String, Kept)>> {
        let mut connection = self.connection.clone();
        let now = now_ms();
        let exact: Option<String> = connection.get(self.answer_key(&key.exact)).await?;
        if let Some(kept) = exact.and_then(|v| parse(&v, now)) {
            let found = Found::Exact(Arc::clone(&kept.body));
            return Ok(Some((found, key.exact.clone(), kept)));
        }
        let (Some(query), Some(threshold)) = (query, threshold) else {
            return Ok(None);
        };
        let keys: Vec<String> = connection
            .zrevrangebyscore_limit(
                self.partition_key(&key.partition),
                "+inf",
                now,
                0,
                PARTITION_SCAN as isize,
            )
            .await?;
        if keys.is_empty() {
            return Ok(None);
        }
        let names: Vec<String> = keys.iter().map(|k| self.answer_key(k)).collect();
        let values: Vec<Option<String>> = connection.mget(names).await?;
        let best = keys
            .into_iter()
            .zip(values)
            .filter_map(|(exact, value)| {
                let kept = parse(&value?, now)?;
                let stored = kept.embedding.as_deref()?;
                if stored.len() != query.len() {
                    return None;
                }
                let similarity = crate::inference::cosine(query, stored);
                (similarity >= threshold).then_some((similarity, exact, kept))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        Ok(best.map(|(similarity, exact, kept)| {
            let found = Found::Similar(Arc::clone(&kept.body), similarity);
            (found, exact, kept)
        }))
    }

    /// Writes an answer and its place in the partition.
    pub(super) async fn write_answer(&self, key: &CacheKey, kept: &Kept) -> redis::RedisResult<()> {
        let mut connection = self.connection.clone();
        let now = now_ms();
        let ttl_ms = kept.ttl.as_millis().max(1) as u64;
        let stored = Stored {
            expires_ms: now + ttl_ms,
            embedding: kept.embedding.as_deref().cloned(),
            body: String::from_utf8_lossy(&kept.body).into_owned(),
        };
        let value = serde_json::to_string(&stored).map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::Client, "answer", e.to_string()))
        })?;
        let partition = self.partition_key(&key.partition);
        redis::pipe()
            .pset_ex(self.answer_key(&key.exact), value, ttl_ms)
            .ignore()
            .zadd(&partition, &key.exact, now + ttl_ms)
            .ignore()
            .zrembyscore(&partition, "-inf", now)
            .ignore()
            .pexpire(&partition, ttl_ms as i64)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
    }
}

fn parse(value: &str, now: u64) -> Option<Kept> {
    serde_json::from_str::<Stored>(value).ok()?.kept(now)
}
