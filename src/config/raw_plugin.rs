//! `plugins[]` on a decision or an identity: request-phase actions after the decision is made.

use serde::Deserialize;
use std::collections::BTreeMap;

/// One plugin as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum RawPlugin {
    /// Adds a system prompt (`insert`: a new first system message; `replace`: instead of every
    /// system message the client sent).
    SystemPrompt {
        /// The prompt.
        prompt: String,
        /// `insert` (default) or `replace`.
        #[serde(default)]
        mode: RawPromptMode,
    },
    /// Sets or removes headers of the forwarded upstream request.
    HeaderMutation {
        /// Headers set (replacing a value the client sent).
        #[serde(default)]
        set: BTreeMap<String, String>,
        /// Headers removed.
        #[serde(default)]
        remove: Vec<String>,
    },
    /// Caps and strips request parameters.
    RequestParams {
        /// Cap on `max_tokens` / `max_completion_tokens` (set when the client sent none).
        max_tokens: Option<u64>,
        /// Cap on `n`.
        max_n: Option<u64>,
        /// Parameters removed from the body (e.g. `logit_bias`, `tools`).
        #[serde(default)]
        strip: Vec<String>,
    },
    /// Acts on a jailbreak signal: `block` with a refusal, or `reroute` to a designated model.
    JailbreakGuard {
        /// The jailbreak signal read.
        signal: String,
        /// `block` (default) or `reroute`.
        #[serde(default)]
        action: RawGuardAction,
        /// The model a `reroute` sends the request to.
        model: Option<String>,
        /// Also run the signal on the answer, withheld (403) when it matches — an answer
        /// carrying injected instructions for whatever reads it next (default false).
        #[serde(default)]
        check_response: bool,
    },
    /// Keeps the `topK` tools closest in meaning to the last user message (and every tool the
    /// conversation already called or `tool_choice` names) when a request carries more.
    ToolSelection {
        /// Tools kept.
        top_k: usize,
    },
    /// Answers a request from earlier answers: the same conversation asked again (exact), or
    /// its last user message in other words (`threshold`: embedding cosine), never across
    /// different system prompts, history, tools, parameters, identity, model or scope.
    SemanticCache(RawCache),
    /// Checks each sentence of the answer against the context the request provided (system,
    /// user and tool messages) by meaning and by shared words; an answer not supported enough
    /// is flagged (`warn`) or replaced by the declared fallback answer (`fail`).
    Grounding(RawGrounding),
    /// Checks the forwarded answer against an output contract (when the winning decision has
    /// none of its own): annotated, repaired once through the same model, or refused.
    ResponseValidation {
        /// The contract, as a decision's `outputContract` is written.
        output_contract: super::raw_contract::RawOutputContract,
        /// Ask the model that broke the contract for one repair (default true); `false` only
        /// annotates (or refuses, with `onViolation: fail`).
        #[serde(default = "yes")]
        repair: bool,
    },
    /// Blocks a request carrying personal data, naming the types found (never the values), or
    /// masks the values before any model sees them and restores them in the answer.
    Pii {
        /// The pii signal read.
        signal: String,
        /// `block` or `mask`.
        mode: RawPiiMode,
        /// Types that block or are masked (every type when empty).
        #[serde(default)]
        deny: Vec<String>,
        /// Types that never block and are never masked.
        #[serde(default)]
        allow: Vec<String>,
    },
}

fn yes() -> bool {
    true
}

/// How a system prompt is added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawPromptMode {
    /// A new first system message; the client's system messages stay.
    #[default]
    Insert,
    /// The client's system messages are dropped.
    Replace,
}

/// What a guard does when its signal matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawGuardAction {
    /// Refuse the request before any upstream call.
    #[default]
    Block,
    /// Send it to the designated model instead (no looper).
    Reroute,
}

/// What the pii plugin does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawPiiMode {
    /// Refuse the request before any upstream call.
    Block,
    /// Replace the values with placeholders upstream; restore them in the answer.
    Mask,
}

/// What the grounding plugin does with an unsupported answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawGroundingAction {
    /// Deliver it with `x-mom-grounding` saying it failed.
    #[default]
    Warn,
    /// Deliver the declared fallback answer instead.
    Fail,
}

/// The semantic cache plugin as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCache {
    /// Cosine at or above which a stored answer serves a paraphrase; exact matches only when
    /// absent.
    pub threshold: Option<f64>,
    /// How long an answer is kept; default 600.
    pub ttl_seconds: Option<u64>,
    /// Also keep answers in Redis for every replica (needs `state.backend: redis`).
    #[serde(default)]
    pub shared: bool,
    /// Request headers whose values scope answers (tenant, user); default `x-tenant-id`,
    /// `x-user-id`.
    pub scope_headers: Option<Vec<String>>,
    /// How long an identical request waits for one already upstream; default 1000.
    pub wait_ms: Option<u64>,
}

/// The grounding plugin as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawGrounding {
    /// Score at or above which a sentence counts as supported; default 0.65.
    pub threshold: Option<f64>,
    /// Weight of word overlap in a sentence's score (the rest is cosine); default 0.4.
    pub lexical_weight: Option<f64>,
    /// Share of the answer's sentences that must be supported; default 1.
    pub min_supported: Option<f64>,
    /// `warn` (default): `x-mom-grounding` says so; `fail`: the fallback answer instead.
    #[serde(default)]
    pub on_fail: RawGroundingAction,
    /// The answer given instead of an unsupported one (`onFail: fail`).
    pub fallback: Option<String>,
}
