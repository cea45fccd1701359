//! The compiled configuration: one immutable snapshot that a request reads from start to end.
//! Every reference is an index that compilation checked, so run-time code never meets a
//! dangling name or an unset field.

use crate::decision::{self, Rule};
use crate::inference::{EncoderHandle, RouterHead, TokenClassifierHandle};
use crate::selection::{Algorithm, Candidate, KnnExemplar};
use crate::signals::{Needs, Signal};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// A name from the configuration (a model, an identity, a decision, a version): shared by
/// every request's evidence, headers, labels and runs that carry it, so carrying one copies
/// nothing.
pub type Name = Arc<str>;

/// Where the ext_proc gRPC server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket path.
    Unix(PathBuf),
}

/// Listener addresses and request limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// ext_proc gRPC address (read at start; a reload does not move the listener).
    pub grpc_listen: Listen,
    /// Admin HTTP address (read at start).
    pub admin_listen: SocketAddr,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: u64,
    /// Whether `GET /v1/models` lists concrete models after the identities.
    pub list_models: bool,
    /// Envoy's internal listener for loopers' sub-requests (read at start).
    pub internal_url: String,
    /// Envoy's admin listener, asked for its version by the resolution lock.
    pub envoy_admin: Option<String>,
}

/// Price per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pricing {
    /// Per million prompt tokens.
    pub input_per_million: f64,
    /// Per million completion tokens.
    pub output_per_million: f64,
}

/// A concrete model behind Envoy.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Logical name, the `x-selected-model` value Envoy routes on.
    pub name: Name,
    /// Model id the upstream expects in the body.
    pub provider_model: Name,
    /// Description for `/v1/models`.
    pub description: String,
    /// Context window in tokens, when known.
    pub context_window: Option<u64>,
    /// Pricing, when known.
    pub pricing: Option<Pricing>,
    /// Capability tags.
    pub capabilities: Vec<String>,
    /// Declared quality, 0..=1, when known.
    pub quality: Option<f64>,
    /// Declared power of the serving device while busy, in watts, when known.
    pub power_watts: Option<f64>,
    /// Protocols besides Chat Completions the backend answers natively.
    pub native: Vec<crate::protocol::Protocol>,
    /// Requests the backend serves at once, when declared.
    pub max_concurrency: Option<u32>,
    /// Requests that may wait beyond `max_concurrency` before the model counts as saturated,
    /// when declared.
    pub max_queue: Option<u32>,
    /// Where the backend reports its queue, and how often to read it.
    pub queue_metrics: Option<(crate::state::QueueFormat, std::time::Duration)>,
    /// Longest wait for the response's headers, when declared.
    pub first_byte_timeout: Option<std::time::Duration>,
}

impl Model {
    /// Estimated energy of a call that kept this model busy `busy_ms`, in joules (0 when the
    /// model declares no power).
    pub fn energy_joules(&self, busy_ms: f64) -> f64 {
        self.power_watts.unwrap_or(0.0) * busy_ms.max(0.0) / 1000.0
    }

    /// The price of a call that read `prompt` tokens and wrote `completion` (0 when the model
    /// declares no pricing).
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        self.pricing.as_ref().map_or(0.0, |p| {
            (p.input_per_million * prompt as f64 + p.output_per_million * completion as f64) / 1e6
        })
    }
}

/// What an identity optimises when no decision matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// The default model.
    Auto,
    /// The lowest observed latency.
    Latency,
    /// The cheapest model above the quality floor.
    Cost,
    /// The highest quality within the bounds.
    Quality,
}

impl Objective {
    /// The name in configuration and `GET /v1/models`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Latency => "latency",
            Self::Cost => "cost",
            Self::Quality => "quality",
        }
    }
}

/// A policy an identity requires before any upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Jailbreak detection.
    Jailbreak,
    /// PII detection.
    Pii,
    /// Grounding check of answers (not available yet: requests fail closed).
    Grounding,
}

impl Policy {
    /// The name in configuration and errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jailbreak => "jailbreak",
            Self::Pii => "pii",
            Self::Grounding => "grounding",
        }
    }
}

/// How an identity's forwarded request fails over to another model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// Upstream attempts in all, the first one included (at least 2).
    pub max_attempts: u32,
    /// Time all fallback attempts together may take.
    pub deadline: std::time::Duration,
    /// Models tried after the decision's own candidates, in order (indices into `models`).
    pub models: Vec<usize>,
    /// Decisions whose requests stay on their chosen model (policy: personal data stays on
    /// its designated model).
    pub except: Vec<String>,
    /// Consecutive failures after which a model is set aside.
    pub eject_after: u32,
    /// How long a set-aside model is skipped.
    pub cool_down: std::time::Duration,
}

impl Failover {
    /// True when the decision named `decision` keeps its requests on its chosen model.
    pub fn excepts(&self, decision: &str) -> bool {
        self.except.iter().any(|name| name == decision)
    }
}

/// Per-request bounds of an identity.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bounds {
    /// Largest expected cost of one request.
    pub max_cost: Option<f64>,
    /// p90 total latency objective in milliseconds.
    pub latency_slo_ms: Option<f64>,
    /// Lowest declared quality the cost objective accepts.
    pub min_quality: Option<f64>,
}

/// Who serves when no decision matches.
#[derive(Debug, Clone, PartialEq)]
pub enum Fallback {
    /// This model (index).
    Default(usize),
    /// The identity's objective, as a decision over its eligible models.
    Objective(Box<Decision>),
}

/// A model identity clients call by name: a versioned contract.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Name in the request's `model` field.
    pub name: Name,
    /// Contract version.
    pub version: Name,
    /// Description for `/v1/models`.
    pub description: String,
    /// What it optimises.
    pub objective: Objective,
    /// Indices of the models it may route to.
    pub eligible: Vec<usize>,
    /// Per-request bounds.
    pub bounds: Bounds,
    /// Policies evaluated (and failing closed) before any upstream call.
    pub requires: Vec<Policy>,
    /// Who serves when no decision matches.
    pub fallback: Fallback,
    /// Indices of the decisions this identity evaluates, in configuration order.
    pub decisions: Vec<usize>,
    /// Indices of the signals those decisions read: the only signals computed for it.
    pub signals: Vec<usize>,
    /// The models those signals read.
    pub needs: Needs,
    /// Request-phase actions on every request, before the decision's.
    pub plugins: Vec<super::Plugin>,
    /// Cross-model failover of forwarded requests (operational: not part of the contract).
    pub failover: Option<Arc<Failover>>,
    /// Hex SHA-256 of everything that gives the identity its meaning (itself without version
    /// and description, its decisions, the signals and models they use): a change without a
    /// version bump is refused.
    pub contract: String,
}

/// A compiled decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Name shown in headers and logs.
    pub name: Name,
    /// Description.
    pub description: String,
    /// Higher wins.
    pub priority: i32,
    /// Tree over signal indices.
    pub rule: Rule,
    /// Candidate models (never empty).
    pub candidates: Vec<Candidate>,
    /// How a candidate is picked.
    pub algorithm: Algorithm,
    /// What the embedding algorithms compare the query with.
    pub vectors: DecisionVectors,
    /// A bounded collaboration of models run instead of one pick.
    pub looper: Option<Looper>,
    /// The shape the looper's final answer must have.
    pub contract: Option<Contract>,
    /// Request-phase actions when this decision wins.
    pub plugins: Vec<super::Plugin>,
}

/// The `records` section: where run records go (read at start, like `state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSettings {
    /// The JSONL file, when records go to one.
    pub path: Option<std::path::PathBuf>,
    /// The Redis stream records are appended to, and about how many entries it keeps.
    pub redis_stream: Option<(String, u64)>,
    /// A file is rotated before it passes this size.
    pub max_bytes: u64,
    /// Rotated files kept.
    pub max_files: u32,
    /// Record the last user message.
    pub include_prompts: bool,
    /// Replace personal data in a recorded prompt by its type (`[EMAIL]`).
    pub redact: bool,
}

/// An output contract and what a still-broken answer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The shape.
    pub shape: crate::llm::contract::OutputContract,
    /// After the one repair.
    pub on_violation: OnViolation,
    /// A broken answer gets one repair call (always, for a decision's contract).
    pub repair: bool,
}

/// What an answer still broken after its repair does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnViolation {
    /// Returned, marked `violated`.
    Annotate,
    /// A 502 `contract_violated`.
    Fail,
}

/// What a looper does when a tentative call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCallError {
    /// Try the next model.
    Skip,
    /// Fail the request.
    Fail,
    /// Forward to the last model.
    Fallback,
}

/// A bounded collaboration of models (a looper).
#[derive(Debug, Clone, PartialEq)]
pub enum Looper {
    /// Cheapest first, escalating until an answer is confident.
    Confidence(ConfidenceLooper),
    /// Parallel answers, the best rating-weighted one returned.
    Ratings(RatingsLooper),
    /// A panel's answers synthesized by one model.
    Remom(RemomLooper),
    /// A panel judged, then finalized.
    Fusion(FusionLooper),
    /// A validated plan carried out by workers, checked, then finalized.
    Workflows(WorkflowsLooper),
}

/// The bounds every looper puts on the calls it makes before its answer or its forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Cap on `max_tokens` of each call (a client's smaller cap is kept).
    pub max_tokens: u64,
    /// Deadline of one call.
    pub per_call: std::time::Duration,
    /// Deadline of all its calls together.
    pub total: std::time::Duration,
}

/// Workflows' settings (model fields are candidate indices).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowsLooper {
    /// Writes the plan.
    pub planner: usize,
    /// Writes the final answer (forwarded).
    pub finalizer: usize,
    /// Checks the step results.
    pub verifier: Option<usize>,
    /// Models steps may be assigned to.
    pub workers: Vec<usize>,
    /// Steps a plan may hold.
    pub max_steps: usize,
    /// Steps run at once.
    pub max_parallel: usize,
    /// The bounds on its calls.
    pub limits: CallLimits,
    /// A failed step or an invalid plan.
    pub on_error: OnCallError,
}

/// Fusion's settings: a judge, and a panel whose synthesizer is the finalizer.
#[derive(Debug, Clone, PartialEq)]
pub struct FusionLooper {
    /// Candidate index of the judge.
    pub judge: usize,
    /// The panel and the finalizer (as the synthesizer).
    pub panel: RemomLooper,
}

/// ReMoM's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RemomLooper {
    /// Candidate index of the synthesizer.
    pub synthesizer: usize,
    /// Candidate indices of the panel.
    pub panel: Vec<usize>,
    /// Calls per round, spread over the panel in turn: the declared breadth schedule, or one
    /// round of `samples` calls per panel model.
    pub rounds: Vec<usize>,
    /// Panel calls in flight at once.
    pub max_concurrent: usize,
    /// Panel answers needed.
    pub min_successes: usize,
    /// The bounds on its calls.
    pub limits: CallLimits,
}

impl Looper {
    /// `confidence`, `ratings`, `remom`, `fusion` or `workflows`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Confidence(_) => "confidence",
            Self::Ratings(_) => "ratings",
            Self::Remom(_) => "remom",
            Self::Fusion(_) => "fusion",
            Self::Workflows(_) => "workflows",
        }
    }

    /// The deadline of all its calls.
    pub fn total(&self) -> std::time::Duration {
        match self {
            Self::Confidence(c) => c.limits.total,
            Self::Ratings(r) => r.limits.total,
            Self::Remom(r) => r.limits.total,
            Self::Fusion(f) => f.panel.limits.total,
            Self::Workflows(w) => w.limits.total,
        }
    }
}

/// The ratings ensemble's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RatingsLooper {
    /// Calls in flight at once.
    pub max_concurrent: usize,
    /// Answers needed.
    pub min_successes: usize,
    /// The bounds on its calls.
    pub limits: CallLimits,
}

/// The confidence cascade's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfidenceLooper {
    /// How confidence is measured.
    pub measure: crate::llm::logprobs::Measure,
    /// Confidence an answer needs.
    pub threshold: f64,
    /// Candidate indices in escalation order; the last is forwarded when none is confident.
    pub order: Vec<usize>,
    /// The bounds on its calls.
    pub limits: CallLimits,
    /// What a failed tentative call does.
    pub on_error: OnCallError,
}

/// Embedded or loaded at load for `knn`, `router_dc`, `hybrid` and `learned`; empty for the
/// other algorithms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecisionVectors {
    /// Labelled exemplars.
    pub knn: Vec<KnnExemplar>,
    /// Neighbours that vote.
    pub knn_k: usize,
    /// One description vector per candidate.
    pub descriptions: Vec<Vec<f32>>,
    /// The `learned` algorithm's router head.
    pub router: Option<Arc<RouterHead>>,
    /// Per candidate, its model's index in the router head.
    pub router_models: Vec<usize>,
}

impl decision::Candidate for Decision {
    fn priority(&self) -> i32 {
        self.priority
    }

    fn rule(&self) -> &Rule {
        &self.rule
    }
}

/// Session continuity policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Sessions {
    /// Headers naming the session, first present wins (lower-case).
    pub headers: Vec<String>,
    /// Turns a session stays on its model before a switch is considered.
    pub min_turns: u32,
    /// Score lead a newly chosen model needs over the pinned one.
    pub switch_margin: f64,
}

/// One validated configuration.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// `label@hash`: the document's `version` label and the first 12 hex digits of its SHA-256.
    pub version: Name,
    /// Listeners and limits.
    pub server: Server,
    /// Where learned state lives (read at start).
    pub state: crate::state::Settings,
    /// Session continuity, when configured.
    pub sessions: Option<Sessions>,
    /// Tenants and their limits, when configured.
    pub tenants: Option<Arc<super::tenants::Tenants>>,
    /// Run records (read at start, like `state`).
    pub records: Option<RecordSettings>,
    /// OTLP span export (read at start, like `state`).
    pub otlp: Option<crate::observability::otlp::OtlpSettings>,
    /// Concrete models.
    pub models: Vec<Model>,
    /// Identities.
    pub identities: Vec<Identity>,
    /// Signals.
    pub signals: Vec<Signal>,
    /// Every keyword signal matched in one pass (each keyword signal's `slot` points into it).
    pub keywords: Arc<crate::signals::keyword_index::KeywordIndex>,
    /// Decisions.
    pub decisions: Vec<Decision>,
    /// The shared sentence encoder, when `inference.encoder` is configured.
    pub encoder: Option<Arc<EncoderHandle>>,
    /// The longest looper deadline of any decision (or cache wait past what Envoy's default
    /// message timeout allows), when there is one: the body phase then first asks Envoy for that
    /// much time.
    pub looper_budget: Option<std::time::Duration>,
    /// Whether some decision's algorithm reads response latency or token counts, records
    /// estimate energy (records on, a model declaring `powerWatts`) or spans are exported (they
    /// carry token counts): forwarded responses are then observed to their end.
    pub observe_responses: bool,
    /// Whether some forwarded Chat Completions response may owe mom-router work: it is
    /// observed (above), recorded, checked, restored, kept by the cache, or a looper's final
    /// step that falls back on its evidence. When none may, the response phases are skipped
    /// for Envoys that add the `x-mom-*` headers themselves (`extproc::service`).
    pub response_work: bool,
    /// Some identity fails over to another model: a response that fails must reach mom-router,
    /// through its response phases or through Envoy's failover filter.
    pub fails_over: bool,
    /// The token classifier, when `inference.ner` is configured.
    pub ner: Option<Arc<TokenClassifierHandle>>,
    /// What the token classifier reads of fenced code blocks (`inference.ner.fencedCode`).
    pub ner_fenced_code: crate::signals::text::FencedCode,
    /// How long a request's call to each model may wait (`callTimeoutMs`), when serving.
    pub call_deadlines: CallDeadlines,
    /// The bundle and binding this snapshot was composed from; `None` for a plain
    /// configuration file.
    pub artifact: Option<super::binding::Artifact>,
    pub(super) model_index: NameIndex,
    pub(super) identity_index: NameIndex,
}

/// Positions by name (models and identities, looked up for every request; signals and
/// decisions while compiling): hashed with a fast hasher, as the names come from the
/// configuration (a client's name is only ever looked up).
pub(super) type NameIndex = HashMap<String, usize, foldhash::fast::RandomState>;

impl Snapshot {
    /// The identity called `name`.
    pub fn identity(&self, name: &str) -> Option<&Identity> {
        self.identity_index
            .get(name)
            .map(|&index| &self.identities[index])
    }

    /// The index of the model called `name`.
    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.model_index.get(name).copied()
    }

    /// The model called `name`.
    pub fn model(&self, name: &str) -> Option<&Model> {
        self.model_index(name).map(|index| &self.models[index])
    }

    /// Every name a client may put in `model`: identities first, then models.
    pub fn callable_names(&self) -> Vec<&str> {
        self.identities
            .iter()
            .map(|i| &*i.name)
            .chain(self.models.iter().map(|m| &*m.name))
            .collect()
    }
}

/// The longest a request's call waits for each model (`inference.*.callTimeoutMs`); none: as
/// long as it takes. Applied on the serving path, where Envoy's message timeout runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallDeadlines {
    /// For the sentence encoder.
    pub encoder: Option<std::time::Duration>,
    /// For the token classifier.
    pub ner: Option<std::time::Duration>,
}
