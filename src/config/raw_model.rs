//! Raw model declarations as written in the YAML document (`models[]`): what a backend is
//! called, what it costs, and how much it serves at once.

use serde::Deserialize;

/// A concrete model served behind Envoy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawModel {
    /// Logical name; Envoy routes on it through the `x-selected-model` header.
    pub name: String,
    /// The model id the upstream server expects in the request body.
    pub provider_model: String,
    /// Human description, listed by `GET /v1/models`.
    #[serde(default)]
    pub description: String,
    /// Context window in tokens.
    pub context_window: Option<u64>,
    /// Price per million tokens.
    pub pricing: Option<RawPricing>,
    /// Free-form capability tags (`code`, `math`, `chat`, …).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Declared quality, 0..=1 (e.g. a benchmark pass rate), read by `cost_aware`,
    /// `quality_budget` and `hybrid`.
    pub quality: Option<f64>,
    /// Power drawn by the device serving this model while it answers, in watts: each call's
    /// energy is estimated as power × busy time, in run records and the scorecard.
    pub power_watts: Option<f64>,
    /// The protocols the backend answers natively (`chat`, `messages`, `responses`); default
    /// `[chat]`. A request in one of them that no plugin rewrote reaches it untranslated.
    #[serde(default)]
    pub protocols: Vec<crate::protocol::Protocol>,
    /// Requests the backend serves at once (its slots, e.g. llama.cpp's `--parallel`). Past it a
    /// request waits: selection adds the expected wait to the model's latency and sets a busy
    /// model aside when another candidate has a free slot. Default: unbounded.
    pub max_concurrency: Option<i64>,
    /// Requests that may wait beyond `maxConcurrency`; when every candidate of a decision has
    /// this many waiting, the request is refused with 503 and `Retry-After` instead of joining
    /// a queue. Default: unbounded.
    pub max_queue: Option<i64>,
    /// The backend's own queue metrics, read from its `/metrics` through Envoy's internal
    /// listener: requests running and waiting there count as in flight (requests other replicas
    /// or other clients sent included). Needs `maxConcurrency`.
    pub queue_metrics: Option<RawQueueMetrics>,
    /// Longest wait for the response's headers, in milliseconds (for a JSON answer, the whole
    /// answer; for a stream, its start). Past it Envoy answers 504 (the ext_proc filter must
    /// allow `x-envoy-*` mutations) and an identity with failover moves to its next model.
    pub first_byte_timeout_ms: Option<i64>,
}

/// Where a backend reports its queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawQueueMetrics {
    /// `llamacpp` (`llamacpp:requests_processing`, `llamacpp:requests_deferred`) or `vllm`
    /// (`vllm:num_requests_running`, `vllm:num_requests_waiting`).
    pub format: crate::state::QueueFormat,
    /// Time between reads, in milliseconds (default 1000).
    pub interval_ms: Option<i64>,
}

/// Price per million input and output tokens, in the operator's currency.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPricing {
    /// Price per million prompt tokens.
    pub input_per_million: f64,
    /// Price per million completion tokens.
    pub output_per_million: f64,
}
