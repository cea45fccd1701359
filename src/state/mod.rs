//! Statistics the learning and measuring algorithms read, and the runs outcomes refer to:
//! latency windows and token counts per model, Elo ratings and reward and verification
//! posteriors per decision and model, and recent run ids. The hot path only reads them (a map
//! lookup under a short lock); responses add observations, and `POST /v1/outcomes` adds
//! feedback. Nothing here can change a decision, a threshold or an identity.
//!
//! State lives in this process by default. With `state.backend: redis` every write is also sent
//! to Redis (in the background, never on the request path) and a refresher replaces the local
//! copy with Redis's merged view, so every replica reads what all of them learned.

mod outcome;
mod stats;
mod window;

pub use outcome::{Outcome, OutcomeError};
pub use stats::{ModelView, Observation};
pub use window::{Timing, Window};

use crate::selection::LatencyMetric;
use stats::Stats;
use std::sync::Mutex;
use std::time::Duration;

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
        }
    }
}

/// What an outcome is credited to: one forwarded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The identity called.
    pub identity: String,
    /// The winning decision (`none` when the default served).
    pub decision: String,
    /// The model that served.
    pub model: String,
}

/// The state store.
pub struct StateStore {
    settings: Settings,
    stats: Mutex<Stats>,
    runs: moka::sync::Cache<String, Run>,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl StateStore {
    /// A store in this process.
    pub fn new(settings: Settings) -> Self {
        let runs = moka::sync::Cache::builder()
            .max_capacity(settings.max_runs)
            .time_to_live(settings.run_ttl)
            .build();
        Self {
            settings,
            stats: Mutex::new(Stats::default()),
            runs,
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
        let since = now_ms().saturating_sub(self.settings.latency_max_age.as_millis() as u64);
        self.with_stats(|stats| stats.view(decision, model, latency, since))
    }

    /// Records one finished response of `model`.
    pub fn observe(&self, model: &str, observation: Observation) {
        let capacity = self.settings.latency_window;
        self.with_stats(|stats| stats.observe(model, observation, capacity));
    }

    /// Remembers a forwarded request so outcomes can refer to it.
    pub fn remember_run(&self, id: String, run: Run) {
        self.runs.insert(id, run);
    }

    /// The run with this id, while it is remembered.
    pub fn run(&self, id: &str) -> Option<Run> {
        self.runs.get(id)
    }

    /// Credits an outcome to the run `id`; returns the run it was credited to.
    pub fn apply(&self, id: &str, outcome: &Outcome) -> Result<Run, OutcomeError> {
        let run = self
            .run(id)
            .ok_or_else(|| OutcomeError::UnknownRun(id.to_owned()))?;
        let other = match outcome {
            Outcome::Preference { other_run, .. } => Some(
                self.run(other_run)
                    .ok_or_else(|| OutcomeError::UnknownRun(other_run.clone()))?,
            ),
            _ => None,
        };
        let k = self.settings.elo_k;
        self.with_stats(|stats| stats.apply(&run, other.as_ref(), outcome, k));
        Ok(run)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
