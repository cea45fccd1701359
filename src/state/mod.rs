//! Statistics the learning and measuring algorithms read, and the runs outcomes refer to:
//! latency windows and token counts per model, Elo ratings and reward and verification
//! posteriors per decision and model, and recent run ids. The hot path only reads them (a map
//! lookup under a short lock); responses add observations, and `POST /v1/outcomes` adds
//! feedback. Nothing here can change a decision, a threshold or an identity.
//!
//! State lives in this process by default. With `state.backend: redis` every write is also sent
//! to Redis (in the background, never on the request path) and a refresher replaces the local
//! copy with Redis's merged view, so every replica reads what all of them learned.

pub mod budgets;
mod cache;
mod health;
mod outcome;
mod pool;
mod queue_metrics;
mod redis;
mod run_id;
mod runs;
mod stats;
mod window;

pub use cache::{CacheKey, Flight, FlightGuard, Found, Kept};
pub use health::Health;
pub use outcome::{Outcome, OutcomeError};
pub use pool::{InFlight, Pool};
pub use queue_metrics::QueueFormat;
pub use run_id::{RunId, RunIdText};
pub use stats::{ModelView, Observation};
pub use window::{Timing, Window};

use self::redis::{RedisTier, Write};
use crate::observability::metrics::StateLabels;
use crate::selection::LatencyMetric;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use stats::Stats;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where shared state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// This process only.
    Memory,
    /// A Redis server shared by replicas.
    Redis(RedisSettings),
}

/// How to reach Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://HOST:PORT[/DB]`.
    pub url: String,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Time between refreshes of the local copy.
    pub refresh: Duration,
    /// Longest a Redis command may take.
    pub timeout: Duration,
    /// The environment variable holding the password, when Redis requires one.
    pub password_env: Option<String>,
}

/// State settings (the `state` section; read at start, like the listeners).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Where state lives.
    pub backend: Backend,
    /// Latency observations kept per model.
    pub latency_window: usize,
    /// Observations older than this no longer count.
    pub latency_max_age: Duration,
    /// Elo step size.
    pub elo_k: f64,
    /// How long a run id can receive outcomes.
    pub run_ttl: Duration,
    /// Most run ids remembered.
    pub max_runs: u64,
    /// How long a session pin lives after its last turn.
    pub session_ttl: Duration,
    /// Answers the semantic cache keeps in this process.
    pub cache_entries: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            backend: Backend::Memory,
            latency_window: 256,
            latency_max_age: Duration::from_secs(300),
            elo_k: 32.0,
            run_ttl: Duration::from_secs(3600),
            max_runs: 100_000,
            session_ttl: Duration::from_secs(3600),
            cache_entries: 10_000,
        }
    }
}

/// What an outcome is credited to: one forwarded request, named by the configuration's shared
/// names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The identity called.
    pub identity: std::sync::Arc<str>,
    /// The winning decision (`none` when the default served).
    pub decision: std::sync::Arc<str>,
    /// The model that served.
    pub model: std::sync::Arc<str>,
}

/// What [`StateStore::start`] gives: the store, the tasks that end at `stop`, and the writers
/// that end at `flush`.
pub type Started = (Arc<StateStore>, Vec<JoinHandle<()>>, Vec<JoinHandle<()>>);

/// Why shared state could not start.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The Redis URL was refused by the client.
    #[error("state.redis.url: {0}")]
    Redis(String),
}

/// Why a tenant's request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admit {
    /// A limit has nothing left for it.
    Refused(budgets::Refused),
    /// The shared store did not answer and the tenants fail closed.
    StoreDown,
}

/// The model a session is pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The model serving the session.
    pub model: String,
    /// Turns served by it since the session started or last switched.
    pub turns: u32,
}

/// The state store.
pub struct StateStore {
    settings: Settings,
    stats: Mutex<Stats>,
    runs: runs::Runs,
    /// Outcomes already credited, by run id and kind, for as long as runs are remembered.
    credited: moka::sync::Cache<String, ()>,
    pins: moka::sync::Cache<String, Pin>,
    answers: cache::LocalAnswers,
    redis: Option<RedisTier>,
    /// Consecutive failures per model (failover's cool-down), in this process.
    pub health: Health,
    /// Requests in flight per model, in this process.
    pub pool: Pool,
    /// Tenants' budgets, in this process.
    pub budgets: budgets::Budgets,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl StateStore {
    /// A store in this process only, whatever `settings.backend` says (`explain`, tests).
    pub fn new(settings: Settings) -> Self {
        let runs = runs::Runs::new(settings.max_runs, settings.run_ttl);
        let pins = moka::sync::Cache::builder()
            .max_capacity(settings.max_runs)
            .time_to_idle(settings.session_ttl)
            .build();
        let credited = moka::sync::Cache::builder()
            .max_capacity(settings.max_runs.saturating_mul(4))
            .time_to_live(settings.run_ttl)
            .build();
        Self {
            answers: cache::LocalAnswers::new(settings.cache_entries),
            settings,
            stats: Mutex::new(Stats::default()),
            runs,
            credited,
            pins,
            redis: None,
            health: Health::default(),
            pool: Pool::default(),
            budgets: budgets::Budgets::default(),
        }
    }

    /// The store `serve` runs: with `backend: redis`, connected (lazily: start-up never waits
    /// for Redis), with its refresher running until `stop` and its writer until `flush`: given
    /// once the servers have stopped, so the writes of streams that finished during a drain
    /// are applied before the writer ends. Returns the store, the tasks that end at `stop` and
    /// the writers that end at `flush`. Failed Redis operations are counted in `fallbacks`.
    pub fn start(
        settings: Settings,
        fallbacks: Family<StateLabels, Counter>,
        stop: watch::Receiver<bool>,
        flush: watch::Receiver<bool>,
    ) -> Result<Started, StateError> {
        let Backend::Redis(redis) = settings.backend.clone() else {
            return Ok((Arc::new(Self::new(settings)), Vec::new(), Vec::new()));
        };
        let (tier, mut queue) =
            RedisTier::connect(&redis, fallbacks).map_err(|e| StateError::Redis(e.to_string()))?;
        let mut store = Self::new(settings);
        store.redis = Some(tier);
        let store = Arc::new(store);
        let window = store.settings.latency_window;
        let writer = {
            let store = store.clone();
            let mut flushing = flush;
            tokio::spawn(async move {
                let Some(tier) = &store.redis else { return };
                loop {
                    let write = tokio::select! {
                        write = queue.recv() => write,
                        _ = flushing.wait_for(|f| *f) => break,
                    };
                    match write {
                        Some(write) => tier.apply(write, window).await,
                        None => return,
                    }
                }
                // The servers have stopped: what is queued now is all there will be.
                while let Ok(write) = queue.try_recv() {
                    tier.apply(write, window).await;
                }
            })
        };
        let refresher = {
            let store = store.clone();
            let mut stopped = stop;
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(redis.refresh);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = stopped.wait_for(|s| *s) => return,
                    }
                    if let Some(tier) = &store.redis {
                        tier.refresh(&store.stats, window).await;
                    }
                }
            })
        };
        Ok((store, vec![refresher], vec![writer]))
    }

    /// Whether state is shared through Redis.
    pub fn shared(&self) -> bool {
        self.redis.is_some()
    }

    /// Takes every draw of a tenant's request or none: through Redis, one script call, when
    /// state is shared, else in this process. When Redis does not answer, `fail_closed` refuses
    /// the request ([`Admit::StoreDown`]); otherwise this process's own buckets decide. Either
    /// way the failure is counted in `mom_state_fallbacks_total{operation="budget"}`.
    pub async fn admit(
        &self,
        draws: &[budgets::Draw<'_>],
        fail_closed: bool,
    ) -> Result<(Vec<budgets::Level>, budgets::Slots), Admit> {
        let Some(tier) = &self.redis else {
            return self.budgets.admit(draws).map_err(Admit::Refused);
        };
        match tier.admit(draws).await {
            Ok(Ok(levels)) => {
                let held: Vec<String> = draws
                    .iter()
                    .filter(|d| d.window.is_none())
                    .map(|d| d.key.to_owned())
                    .collect();
                let slots = match held.is_empty() {
                    true => budgets::Slots::default(),
                    false => {
                        let writer = tier.writer();
                        budgets::Slots::shared(move || {
                            let _ = writer.try_send(Write::Release(held));
                        })
                    }
                };
                Ok((levels, slots))
            }
            Ok(Err(refused)) => Err(Admit::Refused(refused)),
            Err(()) if fail_closed => Err(Admit::StoreDown),
            Err(()) => self.budgets.admit(draws).map_err(Admit::Refused),
        }
    }

    /// A tenant's bucket now (what is left, when it is full again), or for a concurrency limit
    /// (`window` none) the requests in flight as `remaining`: read from Redis when state is
    /// shared (this process's copy when Redis does not answer).
    pub async fn budget(&self, key: &str, capacity: f64, window: Option<Duration>) -> f64 {
        if let Some(tier) = &self.redis {
            if let Some(value) = tier.peek(key, capacity, window).await {
                return value.max(0.0);
            }
        }
        match window {
            Some(window) => self.budgets.level(key, capacity, window).remaining,
            None => f64::from(self.budgets.in_flight(key)),
        }
    }

    /// Adds `delta` to a tenant's bucket (a refund, or a charge when negative): in Redis, off
    /// the request path, when state is shared, else in this process.
    pub fn adjust_budget(&self, key: &str, capacity: f64, window: Duration, delta: f64) {
        match &self.redis {
            Some(tier) => tier.queue(Write::Budget {
                key: key.to_owned(),
                capacity,
                window,
                delta,
            }),
            None => self.budgets.adjust(key, capacity, window, delta),
        }
    }

    /// The settings the store runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn with_stats<T>(&self, f: impl FnOnce(&mut Stats) -> T) -> T {
        // A panic while holding the lock cannot leave the maps half-written in a way that
        // matters (each write is one field), so a poisoned lock is taken over.
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut stats)
    }

    /// What the algorithms read about `model` under `decision`; `latency` names the metric
    /// and percentile to read, when the algorithm reads one.
    pub fn view(
        &self,
        decision: &str,
        model: &str,
        latency: Option<(LatencyMetric, f64)>,
    ) -> ModelView {
        let now = now_ms();
        let since = now.saturating_sub(self.settings.latency_max_age.as_millis() as u64);
        self.with_stats(|stats| stats.view(decision, model, latency, now, since))
    }

    /// Records one finished response of `model`.
    pub fn observe(&self, model: &str, observation: Observation) {
        let capacity = self.settings.latency_window;
        self.with_stats(|stats| stats.observe(model, observation, capacity));
        if let Some(redis) = &self.redis {
            redis.queue(Write::Observe(model.to_owned(), observation));
        }
    }

    /// Remembers a forwarded request so outcomes can refer to it (on any replica, when shared).
    pub fn remember_run(&self, id: RunId, run: Run) {
        if let Some(redis) = &self.redis {
            redis.queue(Write::Run(id, run.clone(), self.settings.run_ttl));
        }
        self.runs.insert(id, run);
    }

    /// The run with this id, while it is remembered here or, when shared, by any replica.
    /// Only an id mom-router writes names a run.
    pub async fn find_run(&self, id: &str) -> Option<Run> {
        let id = RunId::parse(id)?;
        if let Some(run) = self.runs.get(id) {
            return Some(run);
        }
        let run = self.redis.as_ref()?.find_run(id).await?;
        self.runs.insert(id, run.clone());
        Some(run)
    }

    /// The pin of session `key` (identity and session id), read from Redis when shared (so a
    /// session can move between replicas) and from this process otherwise or when Redis
    /// does not answer.
    pub async fn pin(&self, key: &str) -> Option<Pin> {
        if let Some(redis) = &self.redis {
            if let Some(shared) = redis.find_pin(key).await {
                return shared;
            }
        }
        self.pins.get(key)
    }

    /// Records the pin of session `key`. When shared, the write reaches Redis before this
    /// returns (bounded by the timeout; a failure is counted and the pin stays local), so the
    /// session's next turn finds it on any replica.
    pub async fn set_pin(&self, key: &str, pin: Pin) {
        if let Some(redis) = &self.redis {
            redis.store_pin(key, &pin, self.settings.session_ttl).await;
        }
        self.pins.insert(key.to_owned(), pin);
    }

    /// The semantic cache's answer for `key`: this process's, or (`shared`) any replica's
    /// from Redis, which this process then keeps too. By meaning (`query` at or above
    /// `threshold`) within the key's partition when there is no exact answer.
    pub async fn find_answer(
        &self,
        key: &CacheKey,
        query: Option<&[f32]>,
        threshold: Option<f32>,
        shared: bool,
    ) -> Option<Found> {
        if let Some(found) = self.answers.find(key, query, threshold) {
            return Some(found);
        }
        let redis = self.redis.as_ref().filter(|_| shared)?;
        let (found, exact, kept) = redis.find_answer(key, query, threshold).await?;
        let own = CacheKey {
            partition: key.partition.clone(),
            exact,
        };
        self.answers.keep(&own, Arc::new(kept));
        Some(found)
    }

    /// Keeps an answer here and, when `shared`, in Redis (in the background).
    pub fn keep_answer(&self, key: &CacheKey, kept: Kept, shared: bool) {
        let kept = Arc::new(kept);
        if let Some(redis) = self.redis.as_ref().filter(|_| shared) {
            redis.queue(Write::Answer(key.clone(), Arc::clone(&kept)));
        }
        self.answers.keep(key, kept);
    }

    /// Appends a run record (JSON) to the Redis stream `stream` in the background; `false` when
    /// state is not shared (no Redis to append to).
    pub fn append_record(&self, stream: &str, max_len: u64, json: String) -> bool {
        let Some(redis) = &self.redis else {
            return false;
        };
        redis.queue(Write::Record {
            stream: stream.to_owned(),
            max_len,
            json,
        });
        true
    }

    /// Leads the flight of requests for `exact` on this replica, or joins it.
    pub fn answer_flight(&self, exact: &str) -> Flight {
        self.answers.flight(exact)
    }

    /// True when an outcome like `outcome` was already credited to run `id`.
    pub fn credited(&self, id: &str, outcome: &Outcome) -> bool {
        self.credited.contains_key(&outcome.credit_key(id))
    }

    /// Credits an outcome to the run `id`; returns the run it was credited to.
    pub async fn apply(&self, id: &str, outcome: &Outcome) -> Result<Run, OutcomeError> {
        let run = self
            .find_run(id)
            .await
            .ok_or_else(|| OutcomeError::UnknownRun(id.to_owned()))?;
        let other = match outcome {
            Outcome::Preference { other_run, .. } => Some(
                self.find_run(other_run)
                    .await
                    .ok_or_else(|| OutcomeError::UnknownRun(other_run.clone()))?,
            ),
            _ => None,
        };
        // One outcome of each kind per run (and per pair for preferences): a client repeating
        // one run id cannot take the statistics over.
        let key = outcome.credit_key(id);
        if self.credited.contains_key(&key) {
            return Err(OutcomeError::AlreadyCredited(id.to_owned(), outcome.kind()));
        }
        self.credited.insert(key, ());
        let k = self.settings.elo_k;
        self.with_stats(|stats| stats.apply(&run, other.as_ref(), outcome, k));
        if let Some(redis) = &self.redis {
            redis.queue(Write::Outcome {
                run: run.clone(),
                other,
                outcome: outcome.clone(),
                elo_k: k,
            });
        }
        Ok(run)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
