//! Every metric mom-router exports, declared once with typed labels, encoded in the Prometheus
//! text format at `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

/// Labels of a routed request: the configuration's shared names, so counting one copies no
/// string.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Identity or concrete model requested.
    pub identity: Arc<str>,
    /// Winning decision or `none`.
    pub decision: Arc<str>,
    /// Logical model chosen.
    pub model: Arc<str>,
}

/// Labels of a model call in the OpenTelemetry GenAI conventions (`gen_ai.*` attributes, dots as
/// underscores): names from the configuration only, so the label sets stay few.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenAiLabels {
    /// `chat`: every forwarded request is a chat call in mom-router's pipeline.
    pub gen_ai_operation_name: &'static str,
    /// The identity the client asked for (or the model, for pass-through).
    pub gen_ai_request_model: String,
    /// The logical model that answered.
    pub gen_ai_response_model: String,
}

/// [`GenAiLabels`] with the kind of token counted.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenAiTokenLabels {
    /// The call.
    #[prometheus(flatten)]
    pub call: GenAiLabels,
    /// `input` or `output`.
    pub gen_ai_token_type: &'static str,
}

/// Labels of a request mom-router answered itself.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplyLabels {
    /// `ok` (model list) or the error code.
    pub code: String,
    /// HTTP status.
    pub status: u16,
}

/// An ext_proc phase, as `mom_extproc_phase_seconds` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The request headers.
    RequestHeaders,
    /// The request body.
    RequestBody,
    /// The response headers.
    ResponseHeaders,
    /// The response body.
    ResponseBody,
    /// The request trailers.
    RequestTrailers,
    /// The response trailers.
    ResponseTrailers,
}

impl Phase {
    /// How many phases there are.
    const COUNT: usize = 6;

    /// Its `phase` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::RequestHeaders => "request_headers",
            Self::RequestBody => "request_body",
            Self::ResponseHeaders => "response_headers",
            Self::ResponseBody => "response_body",
            Self::RequestTrailers => "request_trailers",
            Self::ResponseTrailers => "response_trailers",
        }
    }
}

/// Labels naming an ext_proc phase.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// `request_headers`, `request_body`, `response_headers`, `response_body`.
    pub phase: &'static str,
}

/// Labels of a configuration reload.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `applied` or `rejected`.
    pub result: &'static str,
}

/// Labels naming a signal.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    /// Signal name.
    pub signal: String,
}

/// Labels of an upstream response seen by mom-router.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// Logical model that answered.
    pub model: String,
    /// Status class: `2xx`, `4xx`, `5xx`, …
    pub class: String,
}

/// Labels of one model failing over to another.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FallbackLabels {
    /// The model that failed.
    pub from: String,
    /// The model tried next.
    pub to: String,
    /// Why `from` failed: its status (`503`, `429`), `timeout` or `transport`.
    pub reason: String,
}

/// Labels of a shared-state operation that fell back to this process's copy.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `write`, `refresh`, `run_lookup`, `pin_lookup`, `pin_write` or `queue_full`.
    pub operation: &'static str,
}

/// Labels of an outcome credited through `POST /v1/outcomes`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `reward`, `verified` or `preference`.
    pub kind: &'static str,
}

/// Labels of an output-contract check.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContractLabels {
    /// `multiple_choice`, `code`, `json_schema` or `regex`.
    pub contract: &'static str,
    /// `kept`, `repaired` or `violated`.
    pub outcome: &'static str,
}

/// Labels of a plugin's action.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// The plugin type.
    pub plugin: &'static str,
    /// `passed`, `blocked`, `rerouted` or `applied`.
    pub outcome: &'static str,
}

/// Labels of a tenant's requests.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// The tenant.
    pub tenant: String,
}

/// Labels of a tenant's refused requests.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantRefusalLabels {
    /// The tenant.
    pub tenant: String,
    /// The error code (`rate_limit_exceeded`, `insufficient_quota`).
    pub code: &'static str,
}

/// The registry and every metric in it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests forwarded upstream.
    pub routed: Family<RouteLabels, Counter>,
    /// Requests answered by mom-router itself.
    pub replied: Family<ReplyLabels, Counter>,
    /// Time mom-router spends on each ext_proc message.
    pub phase_seconds: Family<PhaseLabels, Histogram>,
    /// Each [`Phase`]'s histogram in `phase_seconds`, found once (a family lookup locks and
    /// hashes); a phase's series appears once it is first observed.
    phase_histograms: [OnceLock<Histogram>; Phase::COUNT],
    /// Upstream response statuses.
    pub upstream_status: Family<StatusLabels, Counter>,
    /// Requests served by another model after theirs failed, one per hand-over.
    pub fallbacks: Family<FallbackLabels, Counter>,
    /// Seconds from forwarding a streaming request to its first response chunk.
    pub first_chunk_seconds: Histogram,
    /// Configuration reload attempts.
    pub reloads: Family<ReloadLabels, Counter>,
    /// ext_proc streams open now.
    pub active_streams: Gauge,
    /// Threads of the async runtime serving ext_proc and admin traffic.
    pub runtime_workers: Gauge,
    /// ext_proc streams that ended with a gRPC error from Envoy's side.
    pub stream_errors: Counter,
    /// Neural signals that had no answer (encoder overloaded or failed), by signal.
    pub signal_errors: Family<SignalLabels, Counter>,
    /// Shared-state operations that failed and fell back to the local copy.
    pub state_fallbacks: Family<StateLabels, Counter>,
    /// Outcomes credited.
    pub outcomes: Family<OutcomeLabels, Counter>,
    /// Run records dropped because the writer fell behind.
    pub records_dropped: Counter,
    /// Spans not exported: the exporter's queue was full or the collector failed.
    pub spans_dropped: Counter,
    /// Answers checked against an output contract, by outcome.
    pub contract_checks: Family<ContractLabels, Counter>,
    /// Plugin actions, by plugin and outcome.
    pub plugin_actions: Family<PluginLabels, Counter>,
    /// Requests admitted, by tenant.
    pub tenant_requests: Family<TenantLabels, Counter>,
    /// Tokens used (prompt and completion, looper calls included), by tenant.
    pub tenant_tokens: Family<TenantLabels, Counter<f64>>,
    /// Cost of the calls made, by tenant, in the unit of the models' pricing.
    pub tenant_cost: Family<TenantLabels, Counter<f64>>,
    /// Requests refused over a limit, by tenant and code.
    pub tenant_refusals: Family<TenantRefusalLabels, Counter>,
    /// The GenAI conventions' metrics, named without mom-router's prefix.
    gen_ai: Registry,
    /// `gen_ai.client.operation.duration`: seconds from forwarding a request to its answer's
    /// end, per successful call.
    pub gen_ai_duration: Family<GenAiLabels, Histogram>,
    /// `gen_ai.client.token.usage`: tokens per call as the upstream reported them.
    pub gen_ai_tokens: Family<GenAiTokenLabels, Histogram>,
}

/// The bucket boundaries the GenAI conventions advise for call durations (seconds).
fn gen_ai_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// The bucket boundaries the GenAI conventions advise for token counts.
fn gen_ai_token_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 14))
}

fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 20))
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mom");
        let routed = Family::<RouteLabels, Counter>::default();
        registry.register(
            "routed_requests",
            "Requests forwarded upstream",
            routed.clone(),
        );
        let replied = Family::<ReplyLabels, Counter>::default();
        registry.register(
            "immediate_replies",
            "Requests answered by mom-router itself (model list, errors)",
            replied.clone(),
        );
        let phase_seconds =
            Family::<PhaseLabels, Histogram>::new_with_constructor(phase_histogram as fn() -> _);
        registry.register(
            "extproc_phase_seconds",
            "Time spent handling one ext_proc message",
            phase_seconds.clone(),
        );
        let upstream_status = Family::<StatusLabels, Counter>::default();
        registry.register(
            "upstream_responses",
            "Upstream responses by model and status class",
            upstream_status.clone(),
        );
        let fallbacks = Family::<FallbackLabels, Counter>::default();
        registry.register(
            "fallback",
            "Hand-overs from a failed model to the next one tried",
            fallbacks.clone(),
        );
        let first_chunk_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "stream_first_chunk_seconds",
            "Seconds from forwarding a streaming request to its first response chunk",
            first_chunk_seconds.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reload attempts",
            reloads.clone(),
        );
        let active_streams = Gauge::default();
        registry.register(
            "extproc_active_streams",
            "ext_proc streams open now",
            active_streams.clone(),
        );
        let runtime_workers = Gauge::default();
        registry.register(
            "runtime_worker_threads",
            "Threads of the async runtime serving ext_proc and admin traffic (--worker-threads)",
            runtime_workers.clone(),
        );
        let stream_errors = Counter::default();
        registry.register(
            "extproc_stream_errors",
            "ext_proc streams that ended with a transport error",
            stream_errors.clone(),
        );
        let signal_errors = Family::<SignalLabels, Counter>::default();
        registry.register(
            "signal_errors",
            "Neural signal evaluations without a model answer (overload, failure), by signal",
            signal_errors.clone(),
        );
        let state_fallbacks = Family::<StateLabels, Counter>::default();
        registry.register(
            "state_fallbacks",
            "Shared-state (Redis) operations that failed; the local copy served instead",
            state_fallbacks.clone(),
        );
        let records_dropped = Counter::default();
        registry.register(
            "run_records_dropped",
            "Run records dropped because the writer fell behind (its queue was full)",
            records_dropped.clone(),
        );
        let spans_dropped = Counter::default();
        registry.register(
            "spans_dropped",
            "Spans not exported over OTLP: the exporter's queue was full or the collector failed",
            spans_dropped.clone(),
        );
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "outcomes",
            "Outcomes credited through POST /v1/outcomes",
            outcomes.clone(),
        );
        let contract_checks = Family::<ContractLabels, Counter>::default();
        registry.register(
            "contract_checks",
            "Answers checked against a decision's output contract: kept, repaired or violated",
            contract_checks.clone(),
        );
        let plugin_actions = Family::<PluginLabels, Counter>::default();
        registry.register(
            "plugin_actions",
            "Plugin actions in the request phase: passed, blocked, rerouted or applied",
            plugin_actions.clone(),
        );
        let tenant_requests = Family::<TenantLabels, Counter>::default();
        registry.register(
            "tenant_requests",
            "Requests admitted, by tenant",
            tenant_requests.clone(),
        );
        let tenant_tokens = Family::<TenantLabels, Counter<f64>>::default();
        registry.register(
            "tenant_tokens",
            "Tokens used by a tenant's requests: prompt and completion, looper calls included",
            tenant_tokens.clone(),
        );
        let tenant_cost = Family::<TenantLabels, Counter<f64>>::default();
        registry.register(
            "tenant_cost",
            "Cost of a tenant's model calls, in the unit of the models' pricing",
            tenant_cost.clone(),
        );
        let tenant_refusals = Family::<TenantRefusalLabels, Counter>::default();
        registry.register(
            "tenant_refusals",
            "A tenant's requests refused over a limit (429), by code",
            tenant_refusals.clone(),
        );
        let mut gen_ai = Registry::default();
        let gen_ai_duration = Family::<GenAiLabels, Histogram>::new_with_constructor(
            gen_ai_duration_histogram as fn() -> _,
        );
        gen_ai.register_with_unit(
            "gen_ai_client_operation_duration",
            "Duration of a model call, from forwarding the request to the end of its answer",
            prometheus_client::registry::Unit::Seconds,
            gen_ai_duration.clone(),
        );
        let gen_ai_tokens = Family::<GenAiTokenLabels, Histogram>::new_with_constructor(
            gen_ai_token_histogram as fn() -> _,
        );
        gen_ai.register(
            "gen_ai_client_token_usage",
            "Tokens used by a model call, as its upstream reported them",
            gen_ai_tokens.clone(),
        );
        Self {
            registry,
            gen_ai,
            gen_ai_duration,
            gen_ai_tokens,
            plugin_actions,
            tenant_requests,
            tenant_tokens,
            tenant_cost,
            tenant_refusals,
            contract_checks,
            signal_errors,
            state_fallbacks,
            records_dropped,
            spans_dropped,
            outcomes,
            routed,
            replied,
            phase_seconds,
            phase_histograms: Default::default(),
            upstream_status,
            fallbacks,
            first_chunk_seconds,
            reloads,
            active_streams,
            runtime_workers,
            stream_errors,
        }
    }

    /// Times one ext_proc message of `phase`.
    pub fn observe_phase(&self, phase: Phase, seconds: f64) {
        let labels = PhaseLabels {
            phase: phase.name(),
        };
        self.phase_histograms[phase as usize]
            .get_or_init(|| self.phase_seconds.get_or_create(&labels).clone())
            .observe(seconds);
    }

    /// Counts what a tenant's request used once it is settled.
    pub fn observe_tenant(&self, tenant: &str, tokens: f64, cost: f64) {
        let labels = TenantLabels {
            tenant: tenant.to_owned(),
        };
        self.tenant_tokens.get_or_create(&labels).inc_by(tokens);
        self.tenant_cost.get_or_create(&labels).inc_by(cost);
    }

    /// Counts one finished model call in the GenAI metrics: its duration and the input and
    /// output tokens its upstream reported.
    pub fn observe_call(
        &self,
        identity: &str,
        model: &str,
        seconds: f64,
        tokens: [Option<u64>; 2],
    ) {
        let call = GenAiLabels {
            gen_ai_operation_name: "chat",
            gen_ai_request_model: identity.to_owned(),
            gen_ai_response_model: model.to_owned(),
        };
        self.gen_ai_duration.get_or_create(&call).observe(seconds);
        for (kind, tokens) in ["input", "output"].into_iter().zip(tokens) {
            if let Some(tokens) = tokens {
                let labels = GenAiTokenLabels {
                    call: call.clone(),
                    gen_ai_token_type: kind,
                };
                self.gen_ai_tokens
                    .get_or_create(&labels)
                    .observe(tokens as f64);
            }
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        let encoded = text::encode_registry(&mut out, &self.registry)
            .and_then(|()| text::encode_registry(&mut out, &self.gen_ai))
            .and_then(|()| text::encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
