//! The Redis tier: every local write is queued to a writer task that applies it to Redis, and a
//! refresher replaces the local statistics with Redis's merged view every `refresh` interval, so
//! replicas read what all of them learned. Requests never wait on Redis: they read the local
//! copy. When Redis is unreachable the local copy keeps serving (each failure is counted in
//! `mom_state_fallbacks_total`); writes made during the outage stay local to the replica that
//! made them and are not replayed.
//!
//! Keys, under the configured prefix `P`:
//! - `P:lat:MODEL`: list of `at_ms ttft_ms total_ms`, newest first, trimmed to the window;
//!   `P:lat-models`: the set of models with timings.
//! - `P:tokens`: hash of `MODEL␟field` sums (prompt ratio sum and count, completion sum and
//!   count).
//! - `P:elo`, `P:reward`, `P:verified`: hashes keyed `DECISION␟MODEL` (posteriors add `␟s` /
//!   `␟f` for successes and failures); Elo updates run as one Lua script so concurrent
//!   preferences on different replicas compose.
//! - `P:run:ID`: `IDENTITY␟DECISION␟MODEL`, expiring after the run TTL.
//! - `P:pin:IDENTITY␟SESSION`: `MODEL␟TURNS`, expiring after the session TTL. Pins are read
//!   on the request path (one GET, bounded by the timeout) so a session keeps its model on
//!   whichever replica its next turn lands.
//! - `P:answer:…` and `P:answers:…`: the semantic cache's answers (see `cache`).
//! - `P:budget:…`, `P:inflight:…`: tenants' budgets (see `budgets`), drawn on the request path
//!   in one script call.
//! - `P:STREAM`: run records (`XADD … MAXLEN ~ N * record JSON`) when `records.redisStream`
//!   names the stream.

mod budgets;
mod cache;

use super::cache::{CacheKey, Kept};
use super::stats::{Posterior, Stats, TokenSums};
use super::{Observation, Outcome, Pin, RedisSettings, Run, Timing};
use crate::observability::metrics::StateLabels;
use crate::selection::ELO_START;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

const SEP: char = '\u{1f}';

/// One write for the writer task.
#[derive(Debug)]
pub(super) enum Write {
    Observe(String, Observation),
    Outcome {
        run: Run,
        other: Option<Run>,
        outcome: Outcome,
        elo_k: f64,
    },
    Run(super::RunId, Run, Duration),
    Answer(CacheKey, std::sync::Arc<Kept>),
    /// A run record (JSON) appended to a stream trimmed to about `max_len` entries.
    Record {
        stream: String,
        max_len: u64,
        json: String,
    },
    /// A tenant's bucket corrected by `delta`.
    Budget {
        key: String,
        capacity: f64,
        window: Duration,
        delta: f64,
    },
    /// Requests that ended, under these concurrency limits.
    Release(Vec<String>),
}

/// Queued writes beyond this are dropped (and counted): Redis is too slow or gone.
const QUEUE: usize = 4096;

/// A connection and the queue feeding the writer.
pub(super) struct RedisTier {
    connection: ConnectionManager,
    prefix: String,
    timeout: Duration,
    writes: mpsc::Sender<Write>,
    fallbacks: Family<StateLabels, Counter>,
}

const ELO_SCRIPT: &str = r"
local start = ARGV[3]
local w = tonumber(redis.call('HGET', KEYS[1], ARGV[4]) or start)
local l = tonumber(redis.call('HGET', KEYS[1], ARGV[5]) or start)
local expected = 1 / (1 + 10 ^ ((l - w) / 400))
local actual = 1
if ARGV[2] == '1' then actual = 0.5 end
local change = tonumber(ARGV[1]) * (actual - expected)
redis.call('HSET', KEYS[1], ARGV[4], tostring(w + change), ARGV[5], tostring(l - change))
return 1
";

impl RedisTier {
    /// Connects lazily (start-up never waits for Redis) and returns the tier with the
    /// receiving end of its write queue.
    pub(super) fn connect(
        settings: &RedisSettings,
        fallbacks: Family<StateLabels, Counter>,
    ) -> Result<(Self, mpsc::Receiver<Write>), redis::RedisError> {
        let mut info = redis::IntoConnectionInfo::into_connection_info(settings.url.as_str())?;
        if let Some(name) = &settings.password_env {
            let password = std::env::var(name)
                .ok()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "state.redis.passwordEnv names an environment variable that is not set",
                        name.clone(),
                    ))
                })?;
            let auth = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(auth);
        }
        let client = redis::Client::open(info)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_lazy_with_config(client, config)?;
        let (writes, queue) = mpsc::channel(QUEUE);
        Ok((
            Self {
                connection,
                prefix: settings.key_prefix.clone(),
                timeout: settings.timeout,
                writes,
                fallbacks,
            },
            queue,
        ))
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    fn fell_back(&self, operation: &'static str) {
        self.fallbacks
            .get_or_create(&StateLabels { operation })
            .inc();
    }

    /// Queues a write; a full queue drops it (counted).
    pub(super) fn queue(&self, write: Write) {
        if self.writes.try_send(write).is_err() {
            self.fell_back("queue_full");
        }
    }

    /// Applies one queued write, bounded by the timeout (a failure is counted).
    pub(super) async fn apply(&self, write: Write, window: usize) {
        let result = tokio::time::timeout(self.timeout * 4, self.write(write, window)).await;
        if !matches!(result, Ok(Ok(()))) {
            self.fell_back("write");
        }
    }

    async fn write(&self, write: Write, window: usize) -> redis::RedisResult<()> {
        let mut connection = self.connection.clone();
        match write {
            Write::Observe(model, o) => {
                let list = self.key(&format!("lat:{model}"));
                let mut pipe = redis::pipe();
                pipe.lpush(
                    &list,
                    format!(
                        "{} {} {}",
                        o.timing.at_ms, o.timing.ttft_ms, o.timing.total_ms
                    ),
                )
                .ltrim(&list, 0, window as isize - 1)
                .sadd(self.key("lat-models"), &model);
                let tokens = self.key("tokens");
                if let (Some(reported), true) = (o.prompt_tokens, o.estimated_prompt_tokens > 0) {
                    let ratio = reported as f64 / o.estimated_prompt_tokens as f64;
                    pipe.hincr(&tokens, format!("{model}{SEP}ratio_sum"), ratio)
                        .hincr(&tokens, format!("{model}{SEP}ratio_n"), 1);
                }
                if let Some(completion) = o.completion_tokens {
                    pipe.hincr(&tokens, format!("{model}{SEP}completion_sum"), completion)
                        .hincr(&tokens, format!("{model}{SEP}completion_n"), 1);
                }
                pipe.query_async::<()>(&mut connection).await
            }
            Write::Outcome {
                run,
                other,
                outcome,
                elo_k,
            } => {
                let pair = format!("{}{SEP}{}", run.decision, run.model);
                match outcome {
                    Outcome::Reward(reward) => {
                        let key = self.key("reward");
                        redis::pipe()
                            .hincr(&key, format!("{pair}{SEP}s"), reward)
                            .hincr(&key, format!("{pair}{SEP}f"), 1.0 - reward)
                            .query_async::<()>(&mut connection)
                            .await
                    }
                    Outcome::Verified(passed) => {
                        let field = if passed { "s" } else { "f" };
                        connection
                            .hincr::<_, _, _, f64>(
                                self.key("verified"),
                                format!("{pair}{SEP}{field}"),
                                1.0,
                            )
                            .await
                            .map(|_| ())
                    }
                    Outcome::Preference { draw, .. } => {
                        let Some(other) = other.filter(|o| o.model != run.model) else {
                            return Ok(());
                        };
                        let loser = format!("{}{SEP}{}", run.decision, other.model);
                        redis::Script::new(ELO_SCRIPT)
                            .key(self.key("elo"))
                            .arg(elo_k)
                            .arg(if draw { "1" } else { "0" })
                            .arg(ELO_START)
                            .arg(pair)
                            .arg(loser)
                            .invoke_async::<()>(&mut connection)
                            .await
                    }
                }
            }
            Write::Run(id, run, ttl) => {
                let value = format!("{}{SEP}{}{SEP}{}", run.identity, run.decision, run.model);
                connection
                    .set_ex::<_, _, ()>(self.key(&format!("run:{id}")), value, ttl.as_secs().max(1))
                    .await
            }
            Write::Answer(key, kept) => self.write_answer(&key, &kept).await,
            Write::Budget {
                key,
                capacity,
                window,
                delta,
            } => self.adjust_budget(&key, capacity, window, delta).await,
            Write::Release(keys) => self.release(&keys).await,
            Write::Record {
                stream,
                max_len,
                json,
            } => {
                redis::cmd("XADD")
                    .arg(self.key(&stream))
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(max_len)
                    .arg("*")
                    .arg("record")
                    .arg(json)
                    .query_async::<()>(&mut connection)
                    .await
            }
        }
    }

    /// The shared pin of a session: `Some(None)` when Redis answered that there is none,
    /// `None` when Redis did not answer (counted; the caller falls back to its own copy).
    pub(super) async fn find_pin(&self, key: &str) -> Option<Option<Pin>> {
        let mut connection = self.connection.clone();
        let read = connection.get::<_, Option<String>>(self.key(&format!("pin:{key}")));
        match tokio::time::timeout(self.timeout, read).await {
            Ok(Ok(value)) => Some(value.and_then(|v| {
                let (model, turns) = v.split_once(SEP)?;
                Some(Pin {
                    model: model.to_owned(),
                    turns: turns.parse().ok()?,
                })
            })),
            _ => {
                self.fell_back("pin_lookup");
                None
            }
        }
    }

    /// Writes a session pin, waiting at most the timeout (a failure is counted).
    pub(super) async fn store_pin(&self, key: &str, pin: &Pin, ttl: Duration) {
        let mut connection = self.connection.clone();
        let write = connection.set_ex::<_, _, ()>(
            self.key(&format!("pin:{key}")),
            format!("{}{SEP}{}", pin.model, pin.turns),
            ttl.as_secs().max(1),
        );
        if !matches!(tokio::time::timeout(self.timeout, write).await, Ok(Ok(()))) {
            self.fell_back("pin_write");
        }
    }

    /// A run another replica made, when Redis knows it.
    pub(super) async fn find_run(&self, id: super::RunId) -> Option<Run> {
        let mut connection = self.connection.clone();
        let read = connection.get::<_, Option<String>>(self.key(&format!("run:{id}")));
        match tokio::time::timeout(self.timeout * 2, read).await {
            Ok(Ok(value)) => {
                let value = value?;
                let mut parts = value.split(SEP);
                Some(Run {
                    identity: parts.next()?.into(),
                    decision: parts.next()?.into(),
                    model: parts.next()?.into(),
                })
            }
            _ => {
                self.fell_back("run_lookup");
                None
            }
        }
    }

    /// Replaces `stats` with Redis's view; on failure leaves it as it is (counted).
    pub(super) async fn refresh(&self, stats: &Mutex<Stats>, window: usize) {
        match tokio::time::timeout(self.timeout * 4, self.read_all(window)).await {
            Ok(Ok(fresh)) => {
                let mut stats = stats.lock().unwrap_or_else(|p| p.into_inner());
                *stats = fresh;
            }
            _ => self.fell_back("refresh"),
        }
    }

    async fn read_all(&self, window: usize) -> redis::RedisResult<Stats> {
        let mut connection = self.connection.clone();
        type Hash = HashMap<String, f64>;
        let (models, tokens, elo, reward, verified): (Vec<String>, Hash, Hash, Hash, Hash) =
            redis::pipe()
                .smembers(self.key("lat-models"))
                .hgetall(self.key("tokens"))
                .hgetall(self.key("elo"))
                .hgetall(self.key("reward"))
                .hgetall(self.key("verified"))
                .query_async(&mut connection)
                .await?;
        let mut pipe = redis::pipe();
        for model in &models {
            pipe.lrange(self.key(&format!("lat:{model}")), 0, window as isize - 1);
        }
        let lists: Vec<Vec<String>> = if models.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut connection).await?
        };
        let mut stats = Stats::default();
        for (model, entries) in models.iter().zip(lists) {
            let mut timings: Vec<Timing> = entries.iter().filter_map(|e| timing(e)).collect();
            timings.reverse();
            stats.set_timings(model, timings, window);
        }
        let mut sums: HashMap<&str, TokenSums> = HashMap::new();
        for (field, value) in &tokens {
            let Some((model, name)) = field.split_once(SEP) else {
                continue;
            };
            let entry = sums.entry(model).or_default();
            match name {
                "ratio_sum" => entry.prompt_ratio_sum = *value,
                "ratio_n" => entry.prompt_ratio_count = *value as u64,
                "completion_sum" => entry.completion_sum = *value,
                "completion_n" => entry.completion_count = *value as u64,
                _ => {}
            }
        }
        for (model, sum) in sums {
            stats.set_tokens(model, sum);
        }
        for (field, value) in &elo {
            if let Some((decision, model)) = field.split_once(SEP) {
                stats.set_elo(decision, model, *value);
            }
        }
        for (hash, which) in [
            (&reward, Posterior::Reward),
            (&verified, Posterior::Verified),
        ] {
            let mut counts: HashMap<(&str, &str), (f64, f64)> = HashMap::new();
            for (field, value) in hash {
                let mut parts = field.split(SEP);
                let (Some(decision), Some(model), Some(kind)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let entry = counts.entry((decision, model)).or_default();
                if kind == "s" {
                    entry.0 = *value;
                } else {
                    entry.1 = *value;
                }
            }
            for ((decision, model), pair) in counts {
                stats.set_posterior(decision, model, which, pair);
            }
        }
        Ok(stats)
    }
}

fn timing(entry: &str) -> Option<Timing> {
    let mut parts = entry.split(' ');
    Some(Timing {
        at_ms: parts.next()?.parse().ok()?,
        ttft_ms: parts.next()?.parse().ok()?,
        total_ms: parts.next()?.parse().ok()?,
    })
}
