//! Raw configuration: the YAML document as written, before validation. Every struct denies
//! unknown fields so a typo is an error, never a silently ignored setting. These types are
//! compiled into [`super::Snapshot`]; nothing at run time reads them.

use serde::Deserialize;

pub use super::raw_contract::{RawContractKind, RawOnViolation, RawOutputContract};
pub use super::raw_identity::{RawBounds, RawFailover, RawIdentity, RawObjective, RawPolicy};
pub use super::raw_inference::{
    RawBackend, RawEncoder, RawFencedCode, RawInference, RawNer, RawSpelling,
};
pub use super::raw_model::{RawModel, RawPricing, RawQueueMetrics};
pub use super::raw_plugin::{
    RawCache, RawGrounding, RawGroundingAction, RawGuardAction, RawPiiMode, RawPlugin,
    RawPromptMode,
};
pub use super::raw_selection::{
    RawAlgorithm, RawHybridWeights, RawKnnExemplar, RawLatencyMetric, RawLooper, RawLooperOnError,
    RawMeasure, RawOrder, RawRecords, RawRedis, RawSessions, RawState, RawStateBackend,
};

/// Listener addresses and request limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawServer {
    /// ext_proc gRPC listen address: `HOST:PORT` or `unix:/path/to.sock`.
    pub grpc_listen: Option<String>,
    /// Admin HTTP listen address (`/live`, `/ready`, `/metrics`, `/config`).
    pub admin_listen: Option<String>,
    /// Largest request body mom-router accepts, in bytes; larger gets 413. Keep it below
    /// Envoy's `per_connection_buffer_limit_bytes` so the client sees mom-router's JSON error.
    pub max_body_bytes: Option<u64>,
    /// List concrete models (not only identities) in `GET /v1/models`; default true.
    pub list_models: Option<bool>,
    /// Envoy's internal listener, where loopers send their sub-requests (default
    /// `http://127.0.0.1:10001`).
    pub internal_url: Option<String>,
    /// Envoy's admin listener (`http://127.0.0.1:9901`): the resolution lock records the Envoy
    /// version it reports.
    pub envoy_admin: Option<String>,
}

/// What a neural signal reports when its model gives no answer (overload, failure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawOnError {
    /// Treat as not matched (the default); the error is recorded.
    #[default]
    NoMatch,
    /// Treat as matched; the error is recorded.
    Match,
    /// Refuse the request with 503.
    Fail,
}

/// An exemplar signal: the label whose example phrases the last user message is closest to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawExemplar {
    /// Signal name.
    pub name: String,
    /// Labels that make the signal match.
    #[serde(rename = "match")]
    pub matching: Vec<String>,
    /// The winning label's softmax probability must reach this; default 0.
    #[serde(default)]
    pub min_confidence: f64,
    /// Example phrases by label, replacing the built-in ones for the labels given.
    #[serde(default)]
    pub exemplars: std::collections::BTreeMap<String, Vec<String>>,
    /// `no_match` (default), `match` or `fail` when the encoder gives no answer.
    #[serde(default)]
    pub on_error: RawOnError,
}

/// A trained-head classifier over the request embedding (the `domain` signal).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawClassifier {
    /// Signal name.
    pub name: String,
    /// The head file written by `mom-router train` (safetensors).
    pub head: String,
    /// Labels that make the signal match; any label when empty.
    #[serde(rename = "match", default)]
    pub matching: Vec<String>,
    /// The winning label's probability must reach this; default 0.
    #[serde(default)]
    pub min_confidence: f64,
    /// Below this top probability the label is `abstain` (`match` may name it); 0: never.
    #[serde(default)]
    pub abstain_below: f64,
    /// `no_match` (default), `match` or `fail` when the encoder gives no answer.
    #[serde(default)]
    pub on_error: RawOnError,
}

/// A named regular expression added to the jailbreak signal's rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNamedPattern {
    /// Rule name, reported in the signal's label when it fires.
    pub name: String,
    /// Regular expression (Rust `regex` syntax), matched case-insensitively.
    pub regex: String,
}

/// Jailbreak and prompt-injection detection: trained head over text windows plus pattern rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawJailbreak {
    /// Signal name.
    pub name: String,
    /// The head file written by `mom-router train`; rules only when absent.
    pub head: Option<String>,
    /// Head labels that count as an attack; default `[jailbreak]`.
    #[serde(default = "default_attack_labels")]
    pub attack_labels: Vec<String>,
    /// Attack probability (highest over the windows) at which the head fires; default 0.5.
    #[serde(default = "half")]
    pub threshold: f64,
    /// Use the built-in pattern rules; default true.
    #[serde(default = "yes")]
    pub builtin_patterns: bool,
    /// Extra pattern rules.
    #[serde(default)]
    pub patterns: Vec<RawNamedPattern>,
    /// `fail` (the default: a guard fails closed with 503 `policy_unavailable`), `no_match` or
    /// `match` when the encoder gives no answer.
    #[serde(default)]
    pub on_error: Option<RawOnError>,
}

fn default_attack_labels() -> Vec<String> {
    vec!["jailbreak".to_owned()]
}

fn half() -> f64 {
    0.5
}

fn yes() -> bool {
    true
}

/// How an embedding signal combines its candidate similarities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawAggregate {
    /// The best candidate (the default).
    #[default]
    Max,
    /// The mean over candidates.
    Mean,
}

/// Which messages a text signal reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RawScope {
    /// The last user message (the default).
    #[default]
    LastUser,
    /// Every user message.
    AllUser,
    /// Every message, whatever its role.
    All,
}

/// How a keyword signal combines its terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RawKeywordOperator {
    /// Matches when any term occurs (the default).
    #[default]
    Any,
    /// Matches when every term occurs.
    All,
    /// Matches when no term occurs.
    None,
}

/// A rule signal: cheap evidence computed from the request.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSignal {
    /// Literal keywords (Aho-Corasick) and regular expressions over message text.
    #[serde(rename_all = "camelCase")]
    Keyword {
        /// Signal name referenced by decisions.
        name: String,
        /// Literal terms.
        #[serde(default)]
        keywords: Vec<String>,
        /// Regular expressions (Rust `regex` syntax).
        #[serde(default)]
        patterns: Vec<String>,
        /// `any` (default), `all` or `none` of the terms.
        #[serde(default)]
        operator: RawKeywordOperator,
        /// Case-sensitive matching; default false.
        #[serde(default)]
        case_sensitive: bool,
        /// Literal keywords match whole words only; default true.
        #[serde(default = "default_true")]
        whole_words: bool,
        /// Which messages are scanned.
        #[serde(default)]
        scope: RawScope,
    },
    /// Estimated prompt length in tokens (about four characters per token).
    #[serde(rename_all = "camelCase")]
    ContextLength {
        /// Signal name.
        name: String,
        /// Matches at or above this many tokens.
        min_tokens: Option<u64>,
        /// Matches at or below this many tokens.
        max_tokens: Option<u64>,
    },
    /// Shape of the conversation: user turns, tools, images.
    #[serde(rename_all = "camelCase")]
    Conversation {
        /// Signal name.
        name: String,
        /// At least this many user turns.
        min_turns: Option<u64>,
        /// At most this many user turns.
        max_turns: Option<u64>,
        /// Tools present (true) or absent (false).
        has_tools: Option<bool>,
        /// Image parts present (true) or absent (false).
        has_images: Option<bool>,
    },
    /// Language of the scanned text (whatlang, ISO 639-3 codes such as `eng`, `fra`, `cmn`).
    #[serde(rename_all = "camelCase")]
    Language {
        /// Signal name.
        name: String,
        /// Languages that match.
        languages: Vec<String>,
        /// Detection confidence below this never matches; default 0.
        #[serde(default)]
        min_confidence: f64,
        /// Which messages are scanned.
        #[serde(default)]
        scope: RawScope,
    },
    /// Roles from a trusted source: Envoy metadata a filter wrote, or an identity header.
    #[serde(rename_all = "camelCase")]
    Authz {
        /// Signal name.
        name: String,
        /// Header holding comma-separated roles (default `x-mom-user-roles` when `metadata`
        /// is not set); Envoy must strip it from client requests.
        #[serde(default)]
        header: Option<String>,
        /// Forwarded dynamic metadata holding the roles (a verified token's claims).
        #[serde(default)]
        metadata: Option<RawMetadataSource>,
        /// Matches when the caller holds any of these roles.
        roles: Vec<String>,
    },
    /// Cosine similarity of the last user message to candidate phrases (needs `inference.encoder`).
    #[serde(rename_all = "camelCase")]
    Embedding {
        /// Signal name.
        name: String,
        /// Phrases the request is compared with.
        candidates: Vec<String>,
        /// Matches when the aggregated similarity reaches this value (-1..=1).
        threshold: f64,
        /// `max` (default) or `mean` over the candidates.
        #[serde(default)]
        aggregate: RawAggregate,
        /// `no_match` (default), `match` or `fail` when the encoder gives no answer.
        #[serde(default)]
        on_error: RawOnError,
    },
    /// Personal data found by validated detectors (e-mail, phone, card with Luhn, IBAN mod-97,
    /// US SSN, IP address) and, when `inference.ner` is set, by the token classifier (names,
    /// addresses, …; a house number, postal code or flat number only beside a street, city or
    /// state); reports the types, never the values.
    #[serde(rename_all = "camelCase")]
    Pii {
        /// Signal name.
        name: String,
        /// Types that make the signal match; every type when empty.
        #[serde(default)]
        entities: Vec<String>,
        /// Types that never count.
        #[serde(default)]
        allow: Vec<String>,
        /// Which messages the validated detectors scan; default every message. The token
        /// classifier, when configured, reads every message.
        #[serde(default = "scope_all")]
        scope: RawScope,
        /// `fail` (the default: a guard fails closed with 503 `policy_unavailable`), `no_match`
        /// or `match` when the token classifier gives no answer.
        #[serde(default)]
        on_error: Option<RawOnError>,
    },
    /// Subject area (fourteen MMLU-Pro categories) by a trained head; needs `inference.encoder`.
    Domain(RawClassifier),
    /// Jailbreak and prompt-injection attempts: trained head plus pattern rules.
    Jailbreak(RawJailbreak),
    /// Request difficulty: `easy`, `medium` or `hard` (built-in examples; needs `inference.encoder`).
    Complexity(RawExemplar),
    /// The operator's own labelled preferences (examples required; needs `inference.encoder`).
    Preference(RawExemplar),
    /// Whether the answer rests on checkable facts: `needs_fact_check` or `no_fact_check`.
    FactCheck(RawExemplar),
    /// The user's reaction to the previous answer: `satisfied`, `need_clarification`,
    /// `wrong_answer` or `want_different`.
    UserFeedback(RawExemplar),
    /// What the user wants back: `text` or `image_generation` (image *inputs* are the
    /// conversation signal's `hasImages`).
    Modality(RawExemplar),
    /// A predicate on one request header.
    #[serde(rename_all = "camelCase")]
    Metadata {
        /// Signal name.
        name: String,
        /// Header name (case-insensitive).
        header: String,
        /// Matches when the header equals one of these values.
        equals: Option<Vec<String>>,
        /// Matches when the header matches this regular expression.
        pattern: Option<String>,
        /// Matches when the header is present (true) or absent (false).
        present: Option<bool>,
    },
    /// The share the request's tenant has left of its tightest budget (`tenants`).
    #[serde(rename_all = "camelCase")]
    Budget {
        /// Signal name.
        name: String,
        /// Matches while the share left is below this, in (0, 1].
        below: f64,
    },
}

fn scope_all() -> RawScope {
    RawScope::All
}

fn default_true() -> bool {
    true
}

/// Where in Envoy's forwarded dynamic metadata a value is read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetadataSource {
    /// The filter namespace, e.g. `envoy.filters.http.jwt_authn`.
    pub namespace: String,
    /// Keys from the namespace to the value, e.g. `[jwt_payload, roles]`.
    pub path: Vec<String>,
}

/// A boolean tree over signal names: each node sets exactly one of its four keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// True when the named signal matched.
    pub signal: Option<String>,
    /// True when every child is true.
    pub all: Option<Vec<RawRule>>,
    /// True when any child is true.
    pub any: Option<Vec<RawRule>>,
    /// True when the child is false.
    pub not: Option<Box<RawRule>>,
}

/// One model a decision may send traffic to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawModelRef {
    /// Logical model name.
    pub model: String,
    /// Relative share for the `weighted` algorithm; default 1.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

fn default_weight() -> f64 {
    1.0
}

/// A policy rule: when its tree holds, its models serve the request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDecision {
    /// Decision name, shown in headers, metadata and access logs.
    pub name: String,
    /// Human description.
    #[serde(default)]
    pub description: String,
    /// Higher wins when several decisions match; ties go to the earlier one.
    #[serde(default)]
    pub priority: i32,
    /// The boolean tree over signals.
    pub rules: RawRule,
    /// Models that may serve the request.
    pub model_refs: Vec<RawModelRef>,
    /// How one of `modelRefs` is picked.
    #[serde(default)]
    pub algorithm: RawAlgorithm,
    /// A bounded collaboration of `modelRefs` instead of one pick.
    pub looper: Option<RawLooper>,
    /// The shape the looper's final answer must have, enforced at the end of the looper and
    /// repaired once when broken.
    pub output_contract: Option<RawOutputContract>,
    /// Request-phase actions when this decision wins (after the identity's plugins).
    #[serde(default)]
    pub plugins: Vec<RawPlugin>,
}

/// A projection: evidence derived from other signals, referenced in rules as `NAME.OUTPUT`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawProjection {
    /// A weighted sum of signal readings cut into named bands.
    #[serde(rename_all = "camelCase")]
    Score {
        /// Projection name.
        name: String,
        /// The signals summed.
        inputs: Vec<RawProjectionInput>,
        /// Bands in rising order; the last one whose `atLeast` the score reaches holds.
        bands: Vec<RawBand>,
    },
    /// A softmax over competing signals: only the most confident matching one holds.
    #[serde(rename_all = "camelCase")]
    Partition {
        /// Projection name.
        name: String,
        /// The competing signals; each is also an output name.
        members: Vec<String>,
        /// Softmax temperature over confidences; default 0.1.
        #[serde(default = "tenth")]
        temperature: f64,
    },
}

fn tenth() -> f64 {
    0.1
}

/// One term of a score projection.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProjectionInput {
    /// Signal name.
    pub signal: String,
    /// Weight of its reading.
    pub weight: f64,
    /// `confidence` (default), `value` or `matched` (1 or 0).
    #[serde(default)]
    pub read: RawReading,
}

/// Which part of a signal's result a score reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawReading {
    /// Its confidence.
    #[default]
    Confidence,
    /// Its measured value.
    Value,
    /// 1 when matched, else 0.
    Matched,
}

/// One named band of a score projection.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBand {
    /// Output name.
    pub name: String,
    /// Lowest score in the band; the first band may omit it (no lower bound).
    pub at_least: Option<f64>,
}
