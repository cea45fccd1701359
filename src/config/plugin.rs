//! Compiled plugins: request-phase actions a decision or an identity runs once the decision is
//! made — guards that refuse or reroute, and rewrites of the upstream request.

/// One plugin, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Plugin {
    /// Adds a system prompt.
    SystemPrompt {
        /// The prompt.
        prompt: String,
        /// Drop the client's system messages first.
        replace: bool,
    },
    /// Sets and removes upstream request headers (lower-case names).
    HeaderMutation {
        /// Headers set.
        set: Vec<(String, String)>,
        /// Headers removed.
        remove: Vec<String>,
    },
    /// Caps and strips request parameters.
    RequestParams {
        /// Cap on `max_tokens` / `max_completion_tokens`.
        max_tokens: Option<u64>,
        /// Cap on `n`.
        max_n: Option<u64>,
        /// Parameters removed.
        strip: Vec<String>,
    },
    /// Refuses or reroutes when a jailbreak signal matched.
    JailbreakGuard {
        /// Index of the jailbreak signal.
        signal: usize,
        /// Model index a reroute goes to; `None` blocks.
        reroute: Option<usize>,
        /// The answer is checked too, and withheld when the signal matches it.
        response: bool,
    },
    /// Masks personal data of the accepted types before any model sees it (validated pattern
    /// types: masking needs each value's position).
    PiiMask {
        /// Index of the pii signal (masking runs only when it matched).
        signal: usize,
        /// Types masked (all when empty).
        deny: Vec<String>,
        /// Types never masked.
        allow: Vec<String>,
    },
    /// Keeps the `top_k` tools closest to the last user message, and every tool already called.
    ToolSelection {
        /// Tools kept.
        top_k: usize,
    },
    /// Answers from earlier answers of the same conversation.
    SemanticCache(CacheRule),
    /// Checks the answer against the request's context.
    Grounding(GroundingRule),
    /// Checks the forwarded answer against an output contract.
    ResponseValidation(super::Contract),
    /// Refuses a request whose pii signal found a blocking type.
    PiiBlock {
        /// Index of the pii signal.
        signal: usize,
        /// Types that block (all reported types when empty).
        deny: Vec<String>,
        /// Types that never block.
        allow: Vec<String>,
    },
}

impl Plugin {
    /// The configuration name (`system_prompt`, `jailbreak_guard`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::SystemPrompt { .. } => "system_prompt",
            Self::HeaderMutation { .. } => "header_mutation",
            Self::RequestParams { .. } => "request_params",
            Self::JailbreakGuard { .. } => "jailbreak_guard",
            Self::PiiBlock { .. } | Self::PiiMask { .. } => "pii",
            Self::ToolSelection { .. } => "tool_selection",
            Self::SemanticCache(_) => "semantic_cache",
            Self::Grounding(_) => "grounding",
            Self::ResponseValidation(_) => "response_validation",
        }
    }

    /// True when the plugin has work on the answer too (it checks, restores or keeps it), so
    /// a forwarded response must come back through mom-router.
    pub fn reads_answer(&self) -> bool {
        match self {
            Self::JailbreakGuard { response, .. } => *response,
            Self::PiiMask { .. }
            | Self::SemanticCache(_)
            | Self::Grounding(_)
            | Self::ResponseValidation(_) => true,
            Self::SystemPrompt { .. }
            | Self::HeaderMutation { .. }
            | Self::RequestParams { .. }
            | Self::ToolSelection { .. }
            | Self::PiiBlock { .. } => false,
        }
    }

    /// The signal a guard reads.
    pub fn signal(&self) -> Option<usize> {
        match self {
            Self::JailbreakGuard { signal, .. }
            | Self::PiiBlock { signal, .. }
            | Self::PiiMask { signal, .. } => Some(*signal),
            _ => None,
        }
    }
}

/// How the semantic cache plugin looks up and keeps answers.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheRule {
    /// Cosine at or above which a stored answer serves a paraphrase (`None`: exact only).
    pub threshold: Option<f32>,
    /// How long an answer is kept.
    pub ttl: std::time::Duration,
    /// Answers are kept in Redis too, for every replica.
    pub shared: bool,
    /// Request headers (lower-case) whose values partition answers.
    pub scope_headers: Vec<String>,
    /// How long an identical request waits for one already upstream.
    pub wait: std::time::Duration,
}

impl CacheRule {
    /// Longest wait for an identical request in flight that fits Envoy's default message timeout
    /// (2 s in `envoy/quickstart.yaml`); a longer wait asks Envoy for more time on every request.
    pub const UNEXTENDED_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
}

/// How the grounding plugin judges an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct GroundingRule {
    /// Score at or above which a sentence counts as supported.
    pub threshold: f32,
    /// Weight of word overlap in a sentence's score; the rest is the best cosine.
    pub lexical_weight: f32,
    /// Share of the answer's sentences that must be supported.
    pub min_supported: f32,
    /// The answer given instead of an unsupported one; `None` only warns.
    pub fallback: Option<String>,
}
