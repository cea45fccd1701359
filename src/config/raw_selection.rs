//! Raw settings of selection algorithms and of the state they learn from, as written in the
//! YAML document (`decisions[].algorithm`, `state`).

use serde::Deserialize;

/// How a decision picks among its models. Each variant is documented with its parameters in
/// `docs/selection.md`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum RawAlgorithm {
    /// The first model reference (the default).
    #[default]
    Static,
    /// A deterministic weighted split keyed by the request id.
    Weighted,
    /// The cheapest expected cost among models whose `quality` reaches the floor.
    CostAware {
        /// Minimum declared model quality, 0..=1.
        quality_floor: f64,
    },
    /// The lowest observed latency percentile; unmeasured models are measured first.
    LatencyAware {
        /// `ttft` or `total` (default).
        #[serde(default)]
        metric: RawLatencyMetric,
        /// Percentile, 0..=100 (default 90).
        #[serde(default = "default_percentile")]
        percentile: f64,
        /// Observations needed before a model's latency counts (default 3).
        #[serde(default = "default_min_samples")]
        min_samples: u32,
    },
    /// The highest declared quality within a cost and latency budget.
    QualityBudget {
        /// Largest expected cost per request.
        max_cost: Option<f64>,
        /// Largest latency percentile in milliseconds.
        max_latency_ms: Option<f64>,
        /// `ttft` or `total` (default).
        #[serde(default)]
        metric: RawLatencyMetric,
        /// Percentile, 0..=100 (default 90).
        #[serde(default = "default_percentile")]
        percentile: f64,
    },
    /// The highest Elo rating from pairwise preferences (`POST /v1/outcomes`).
    Elo,
    /// Thompson sampling on outcome rewards per decision and model.
    Bandit,
    /// Nearest labelled exemplars in embedding space vote for their model.
    Knn {
        /// Neighbours that vote (default 5).
        #[serde(default = "default_k")]
        k: usize,
        /// Labelled queries.
        exemplars: Vec<RawKnnExemplar>,
    },
    /// The model whose description and capabilities embed nearest the query.
    RouterDc {
        /// Softmax temperature (default 0.05).
        #[serde(default = "default_temperature")]
        temperature: f64,
    },
    /// The cheapest model expected to pass self-verification, else the most expensive.
    Automix {
        /// Minimum estimated verification probability (default 0.7).
        #[serde(default = "default_automix_threshold")]
        threshold: f64,
    },
    /// A weighted combination of the other algorithms' scores.
    Hybrid {
        /// Weight per component; absent components weigh 0.
        weights: RawHybridWeights,
        /// Neighbours that vote for the `knn` component (default 5).
        #[serde(default = "default_k")]
        k: usize,
        /// Labelled queries for the `knn` component.
        #[serde(default)]
        exemplars: Vec<RawKnnExemplar>,
    },
    /// The router head's predicted P(correct) and latency per model (`mom-router
    /// train-router`), placed on the learned frontier by the settings below.
    Learned {
        /// The router head file (safetensors), relative to the configuration.
        router: String,
        /// Utility lost per predicted second: utility = P(correct) − latencyWeight × seconds
        /// (default 0: the most probable model).
        #[serde(default)]
        latency_weight: f64,
        /// A quality floor: the fastest model predicted at least this likely to be right.
        min_correct: Option<f64>,
        /// A latency budget: models predicted slower are set aside.
        max_latency_ms: Option<f64>,
        /// How many outcomes the head's prediction is worth when reported outcomes adjust it
        /// (default 20; 0: outcomes never adjust it).
        #[serde(default = "default_prior_outcomes")]
        prior_outcomes: f64,
        /// The P(correct) a request may give up to be served at once by a model with a free
        /// slot rather than wait for a busy one (default 0.05).
        #[serde(default = "default_busy_max_loss")]
        busy_max_loss: f64,
    },
}

/// Which latency an algorithm reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawLatencyMetric {
    /// Time to the first response chunk.
    Ttft,
    /// Time to the end of the response (the default).
    #[default]
    Total,
}

/// One labelled query for the `knn` algorithm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawKnnExemplar {
    /// The query text.
    pub text: String,
    /// The model (one of the decision's `modelRefs`) that serves it best.
    pub model: String,
}

/// Component weights of the `hybrid` algorithm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHybridWeights {
    /// Declared quality.
    #[serde(default)]
    pub quality: f64,
    /// Expected cost (cheaper is better).
    #[serde(default)]
    pub cost: f64,
    /// Observed latency (faster is better).
    #[serde(default)]
    pub latency: f64,
    /// Elo rating.
    #[serde(default)]
    pub elo: f64,
    /// Bandit posterior mean.
    #[serde(default)]
    pub bandit: f64,
    /// Query-to-description similarity.
    #[serde(default)]
    pub router_dc: f64,
    /// Nearest-exemplar vote (needs `exemplars`).
    #[serde(default)]
    pub knn: f64,
}

fn default_percentile() -> f64 {
    90.0
}

fn default_min_samples() -> u32 {
    3
}

fn default_k() -> usize {
    5
}

fn default_temperature() -> f64 {
    0.05
}

fn default_automix_threshold() -> f64 {
    0.7
}

/// Where learned statistics, latency windows and run ids live (read at start; a reload does
/// not move state).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawState {
    /// `memory` (default: this process) or `redis` (shared by replicas).
    #[serde(default)]
    pub backend: RawStateBackend,
    /// Redis connection, for `backend: redis`.
    pub redis: Option<RawRedis>,
    /// Latency observations kept per model (default 256).
    pub latency_window: Option<usize>,
    /// Seconds an observation counts (default 300).
    pub latency_max_age_seconds: Option<u64>,
    /// Elo step size (default 32).
    pub elo_k: Option<f64>,
    /// Seconds a run id can receive outcomes (default 3600).
    pub run_ttl_seconds: Option<u64>,
    /// Most run ids remembered (default 100000).
    pub max_runs: Option<u64>,
    /// Seconds a session pin lives after its last turn (default 3600).
    pub session_ttl_seconds: Option<u64>,
    /// Answers the semantic cache keeps in this process (default 10000).
    pub cache_entries: Option<u64>,
}

/// Observability settings beyond the always-on metrics (read at start, like `state`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawObservability {
    /// OTLP trace export, off when absent.
    pub otlp: Option<RawOtlp>,
}

/// OTLP trace export: one span per chat request, with its calls as children.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawOtlp {
    /// The collector's URL: `http://host:4317` for gRPC, `http://host:4318` for HTTP.
    pub endpoint: String,
    /// `grpc` (default) or `http` (protobuf bodies to `…/v1/traces`).
    pub protocol: Option<RawOtlpProtocol>,
    /// `service.name` of the exported spans (default `mom-router`).
    pub service_name: Option<String>,
    /// One export's deadline in milliseconds (default 5000).
    pub timeout_ms: Option<u64>,
}

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RawOtlpProtocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP, protobuf.
    Http,
}

/// Run records: one JSON record per chat request (read at start, like `state`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRecords {
    /// The JSONL file (relative paths resolve against the configuration's folder).
    pub path: Option<String>,
    /// A Redis stream (under `state.redis.keyPrefix`) records are also appended to, for
    /// replicas writing to one place; needs `state.backend: redis`.
    pub redis_stream: Option<String>,
    /// Entries the stream keeps, about (default 100000).
    pub stream_max_len: Option<u64>,
    /// A file is rotated before it passes this many bytes (default 67108864).
    pub max_bytes: Option<u64>,
    /// Rotated files kept (default 5).
    pub max_files: Option<u32>,
    /// Record the last user message (default false).
    #[serde(default)]
    pub include_prompts: bool,
    /// Replace personal data in a recorded prompt by its type (default true).
    pub redact: Option<bool>,
}

/// Session continuity: requests carrying a session header stay on the model that served the
/// session, unless policy says otherwise.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSessions {
    /// Headers naming the session, first present wins (default `x-session-id`,
    /// `x-conversation-id`).
    pub headers: Option<Vec<String>>,
    /// Turns a session stays on its model before a switch is considered (default 2).
    pub min_turns: Option<u32>,
    /// Score a newly chosen model must lead the pinned one by to take over (default 0.1).
    pub switch_margin: Option<f64>,
}

/// Where state lives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawStateBackend {
    /// This process.
    #[default]
    Memory,
    /// A Redis server shared by every replica.
    Redis,
}

/// A Redis server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRedis {
    /// `redis://HOST:PORT[/DB]`.
    pub url: String,
    /// Prefix of every key (default `mom`), so deployments can share a server.
    pub key_prefix: Option<String>,
    /// Milliseconds between refreshes of the local copy (default 250).
    pub refresh_ms: Option<u64>,
    /// Milliseconds a Redis command may take before the fallback counts it failed (default 100).
    pub timeout_ms: Option<u64>,
    /// The environment variable holding the Redis password (`AUTH`), read when `serve` starts,
    /// so no secret sits in the configuration.
    pub password_env: Option<String>,
}

/// A bounded collaboration of models a decision runs instead of a single call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum RawLooper {
    /// Cheapest first: ask each model in turn through Envoy's internal listener, return the first
    /// answer whose confidence reaches `threshold`, and forward the request to the last model
    /// (streamed by Envoy) when none does.
    Confidence {
        /// `avg_logprob` (default) or `margin`.
        #[serde(default)]
        measure: RawMeasure,
        /// Confidence an answer needs to be returned.
        threshold: f64,
        /// Escalation order: `declared` (modelRefs order, default) or `cost` (cheapest first).
        #[serde(default)]
        order: RawOrder,
        /// Cap on `max_tokens` of the tentative calls (default 512).
        #[serde(default = "default_looper_max_tokens")]
        max_tokens: u64,
        /// Deadline of one tentative call in milliseconds (default 20000).
        #[serde(default = "default_per_call_ms")]
        per_call_timeout_ms: u64,
        /// Deadline of all tentative calls together in milliseconds (default 60000); also the
        /// time mom-router asks Envoy to wait for it (`override_message_timeout`, capped by the
        /// filter's `max_message_timeout`).
        #[serde(default = "default_total_ms")]
        total_timeout_ms: u64,
        /// A failed tentative call: `skip` to the next model (default), `fail` the request with
        /// 502, or `fallback` straight to the last model.
        #[serde(default)]
        on_error: RawLooperOnError,
    },
    /// Ask the models in parallel (at most `maxConcurrent` at once) and return the answer with
    /// the best rating-weighted confidence: Elo weight from outcomes × the answer's mean token
    /// probability.
    Ratings {
        /// Calls in flight at once (default 3).
        #[serde(default = "default_max_concurrent")]
        max_concurrent: usize,
        /// Answers needed; fewer is a 502 (default 1).
        #[serde(default = "default_min_successes")]
        min_successes: usize,
        /// Cap on `max_tokens` of each call (default 512).
        #[serde(default = "default_looper_max_tokens")]
        max_tokens: u64,
        /// Deadline of one call in milliseconds (default 20000).
        #[serde(default = "default_per_call_ms")]
        per_call_timeout_ms: u64,
        /// Deadline of all calls together in milliseconds (default 60000).
        #[serde(default = "default_total_ms")]
        total_timeout_ms: u64,
    },
    /// A panel answers in parallel, a judge writes a structured comparison (agreement,
    /// contradictions, unique insights), and the finalizer writes the answer from both,
    /// forwarded through Envoy so it streams; the best panel answer is the fallback.
    Fusion {
        /// The model (one of `modelRefs`) that compares the answers.
        judge: String,
        /// The model (one of `modelRefs`, may be the judge) that writes the final answer; the
        /// other models form the panel.
        finalizer: String,
        /// Panel calls in flight at once (default 3).
        #[serde(default = "default_max_concurrent")]
        max_concurrent: usize,
        /// Panel answers needed before judging (default 2).
        #[serde(default = "default_fusion_min_successes")]
        min_successes: usize,
        /// Cap on `max_tokens` of panel and judge calls (default 512).
        #[serde(default = "default_looper_max_tokens")]
        max_tokens: u64,
        /// Deadline of one call in milliseconds (default 20000).
        #[serde(default = "default_per_call_ms")]
        per_call_timeout_ms: u64,
        /// Deadline of the panel in milliseconds (default 60000).
        #[serde(default = "default_total_ms")]
        total_timeout_ms: u64,
    },
    /// A planner writes a JSON plan of steps for the workers, validated before it runs; the
    /// workers carry it out (independent steps in parallel), a verifier may check their results,
    /// and the finalizer writes the answer from them, forwarded through Envoy so it streams.
    Workflows {
        /// The model (one of `modelRefs`) that writes the plan.
        planner: String,
        /// The model (one of `modelRefs`) that writes the final answer.
        finalizer: String,
        /// The model (one of `modelRefs`) that checks the step results, when one is named.
        verifier: Option<String>,
        /// Models a plan may assign steps to (default: every modelRef that is not the planner,
        /// the finalizer or the verifier).
        workers: Option<Vec<String>>,
        /// Steps a plan may hold (default 4).
        #[serde(default = "default_max_steps")]
        max_steps: usize,
        /// Steps run at once (default 3).
        #[serde(default = "default_max_concurrent")]
        max_parallel: usize,
        /// Cap on `max_tokens` of the planner, worker and verifier calls (default 512).
        #[serde(default = "default_looper_max_tokens")]
        max_tokens: u64,
        /// Deadline of one call in milliseconds (default 20000).
        #[serde(default = "default_per_call_ms")]
        per_call_timeout_ms: u64,
        /// Deadline of planning, steps and verification together in milliseconds (default 60000).
        #[serde(default = "default_total_ms")]
        total_timeout_ms: u64,
        /// A failed step, or a plan still invalid after its repair: `skip` (default: a failed
        /// step is left out; an invalid plan leaves the finalizer the request alone), `fail`
        /// (502), or `fallback` (stop and hand the finalizer what is done).
        #[serde(default)]
        on_error: RawLooperOnError,
    },
    /// A panel of models answers in parallel; the synthesizer writes the final answer from
    /// theirs, forwarded through Envoy so it streams; the best panel answer is the fallback.
    Remom {
        /// The model (one of `modelRefs`) that writes the final answer; the others form the panel.
        synthesizer: String,
        /// Answers asked of each panel model (default 1).
        #[serde(default = "default_samples")]
        samples: usize,
        /// Breadth schedule: calls per round, spread over the panel in turn (e.g. `[4, 2]`).
        /// Every round after the first sees the previous round's answers. Replaces `samples`.
        breadth: Option<Vec<usize>>,
        /// Panel calls in flight at once (default 3).
        #[serde(default = "default_max_concurrent")]
        max_concurrent: usize,
        /// Panel answers needed before synthesis (default 1); fewer is a 502.
        #[serde(default = "default_min_successes")]
        min_successes: usize,
        /// Cap on `max_tokens` of each panel call (default 512).
        #[serde(default = "default_looper_max_tokens")]
        max_tokens: u64,
        /// Deadline of one panel call in milliseconds (default 20000).
        #[serde(default = "default_per_call_ms")]
        per_call_timeout_ms: u64,
        /// Deadline of the panel in milliseconds (default 60000).
        #[serde(default = "default_total_ms")]
        total_timeout_ms: u64,
    },
}

fn default_max_steps() -> usize {
    4
}

fn default_fusion_min_successes() -> usize {
    2
}

fn default_samples() -> usize {
    1
}

fn default_max_concurrent() -> usize {
    3
}

fn default_min_successes() -> usize {
    1
}

/// How a confidence looper measures an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawMeasure {
    /// Mean token log-probability.
    #[default]
    AvgLogprob,
    /// Mean gap to the best alternative token.
    Margin,
    /// The model's own probability that its answer is correct, asked in a second call.
    SelfVerify,
}

/// Escalation order of a confidence looper.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawOrder {
    /// `modelRefs` order.
    #[default]
    Declared,
    /// Cheapest expected cost first (needs `pricing`).
    Cost,
}

/// What a looper does when a tentative call fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawLooperOnError {
    /// Try the next model.
    #[default]
    Skip,
    /// Fail the request.
    Fail,
    /// Forward to the last model.
    Fallback,
}

fn default_looper_max_tokens() -> u64 {
    512
}

fn default_per_call_ms() -> u64 {
    20_000
}

fn default_total_ms() -> u64 {
    60_000
}

fn default_prior_outcomes() -> f64 {
    20.0
}

fn default_busy_max_loss() -> f64 {
    crate::selection::DEFAULT_BUSY_MAX_LOSS
}
