//! Why a request is refused, and the one place that turns each reason into a reply: status,
//! OpenAI error type and code, and whose fault it is.

use super::Reply;
use crate::config::tenants::LimitKind;
use crate::llm::error_body::openai_error;
use crate::llm::RequestError;

/// Deepest sub-request nesting accepted (a looper's call is depth 1).
pub const MAX_DEPTH: u32 = 2;

/// Whose fault a refusal is; decides the log level and the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The client sent something mom-router cannot serve.
    Client,
    /// mom-router or its Envoy configuration is at fault.
    Internal,
}

/// Every reason mom-router answers a request itself with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The body is not a valid chat-completion request.
    #[error("{0}")]
    BadRequest(#[from] RequestError),
    /// A request in another protocol that cannot be read (a Messages body without
    /// `max_tokens`, a tool result without its tool use, …).
    #[error("{0}")]
    Untranslatable(#[from] crate::protocol::TranslateError),
    /// The `model` names neither an identity nor a configured model.
    #[error("unknown model {name:?}; valid models: {}", valid.join(", "))]
    UnknownModel {
        /// What the client asked for.
        name: String,
        /// Every callable name.
        valid: Vec<String>,
    },
    /// Every candidate model's declared queue is full: the request is shed, not queued.
    #[error("every model that could serve this request is at capacity ({detail}); retry in {retry_after_s} s")]
    Saturated {
        /// Each candidate's load, as the selection reason words it.
        detail: String,
        /// Seconds until the least-loaded candidate expects a free slot.
        retry_after_s: u64,
    },
    /// The body exceeds the configured limit.
    #[error("request body is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// Bytes received or announced.
        size: u64,
        /// Configured limit.
        limit: u64,
    },
    /// The path is not served.
    #[error(
        "no route for {path}; mom-router serves POST /v1/chat/completions, POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses and GET /v1/models"
    )]
    NotFound {
        /// The request path.
        path: String,
    },
    /// The path exists but not for this method.
    #[error("method {method} is not allowed on {path}; use {allowed}")]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
        /// The allowed method.
        allowed: &'static str,
    },
    /// A neural signal whose `onError` is `fail` had no answer (overload, model failure).
    #[error("signal {signal:?} is unavailable ({reason}); retry later")]
    SignalUnavailable {
        /// The signal.
        signal: String,
        /// Why.
        reason: String,
    },
    /// A guard (jailbreak or PII check) could not run; the request fails closed.
    #[error(
        "the {policy} guard of {identity} could not run ({reason}); nothing was sent upstream"
    )]
    PolicyUnavailable {
        /// The identity.
        identity: String,
        /// The policy.
        policy: &'static str,
        /// Why.
        reason: String,
    },
    /// A looper's sub-request failed and its `onError` is `fail`.
    #[error("the looper failed: {model} {reason}")]
    LooperFailed {
        /// The model whose call failed.
        model: String,
        /// Why.
        reason: String,
    },
    /// The answer broke the decision's output contract after its one repair, and the contract's
    /// `onViolation` is `fail`.
    #[error("the answer does not keep the {contract} output contract after one repair: {reason}")]
    ContractViolated {
        /// The contract kind.
        contract: &'static str,
        /// What is still wrong.
        reason: String,
    },
    /// A jailbreak guard refused the request.
    #[error("mom-router refused this request: the {signal} check found a likely jailbreak or prompt-injection attempt; nothing was sent to a model")]
    JailbreakBlocked {
        /// The signal that matched.
        signal: String,
    },
    /// A jailbreak guard withheld the answer.
    #[error("mom-router withheld the answer: the {signal} check found instructions aimed at whatever reads it next (a likely prompt injection)")]
    AnswerWithheld {
        /// The signal that matched.
        signal: String,
    },
    /// The pii plugin refused the request.
    #[error("this route does not accept personal data; the request contains: {}; nothing was sent to a model", types.join(", "))]
    PiiBlocked {
        /// The PII types found (never the values).
        types: Vec<String>,
    },
    /// A request carried mom-router's internal headers without the process's token.
    #[error("internal sub-request headers without a valid token")]
    InternalAuth,
    /// Sub-requests nested deeper than mom-router allows.
    #[error("sub-request depth {0} exceeds the limit of {limit}", limit = MAX_DEPTH)]
    TooDeep(u32),
    /// Tenants are required and the request names none mom-router knows.
    #[error("mom-router does not know who is calling: {reason}")]
    Unauthenticated {
        /// What was missing or unknown (never the key).
        reason: String,
    },
    /// A tenant's limit has nothing left for this request.
    #[error("{}", rate_limited(tenant, limit.name(), amount, scope.as_deref(), *needed, *retry_after_s))]
    RateLimited {
        /// The tenant.
        tenant: String,
        /// What the limit counts.
        limit: LimitKind,
        /// Its amount, as written.
        amount: String,
        /// The model or identity it is narrowed to.
        scope: Option<String>,
        /// The request's estimated prompt tokens.
        needed: u64,
        /// Seconds until the request would fit; `None` when it never can.
        retry_after_s: Option<u64>,
    },
    /// The shared budget store did not answer and the tenants fail closed.
    #[error("the budgets of tenant {tenant:?} cannot be read (the shared store is down) and tenants fail closed; retry shortly")]
    BudgetsUnavailable {
        /// The tenant.
        tenant: String,
    },
    /// Envoy delivered the request in a way mom-router cannot route safely.
    #[error("mom-router cannot route this request: {0}")]
    Protocol(&'static str),
}

impl RouteError {
    /// The metric label and OpenAI `code` for this refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(RequestError::Empty) => "empty_body",
            Self::BadRequest(RequestError::NotUtf8 { .. }) => "invalid_encoding",
            Self::BadRequest(RequestError::MalformedJson(_)) => "invalid_json",
            Self::BadRequest(RequestError::NotAnObject) => "invalid_json",
            Self::BadRequest(RequestError::MissingField(_)) => "missing_field",
            Self::BadRequest(RequestError::WrongType { .. }) => "invalid_type",
            Self::BadRequest(RequestError::TooMany { .. }) => "too_many_entries",
            Self::Untranslatable(_) => "invalid_request",
            Self::UnknownModel { .. } => "model_not_found",
            Self::TooLarge { .. } => "request_too_large",
            Self::Saturated { .. } => "model_overloaded",
            Self::NotFound { .. } => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::SignalUnavailable { .. } => "signal_unavailable",
            Self::PolicyUnavailable { .. } => "policy_unavailable",
            Self::LooperFailed { .. } => "looper_failed",
            Self::ContractViolated { .. } => "contract_violated",
            Self::JailbreakBlocked { .. } | Self::AnswerWithheld { .. } => "jailbreak_blocked",
            Self::PiiBlocked { .. } => "pii_blocked",
            Self::InternalAuth => "internal_auth_failed",
            Self::TooDeep(_) => "loop_detected",
            Self::Protocol(_) => "router_misconfigured",
            Self::Unauthenticated { .. } => "invalid_api_key",
            Self::BudgetsUnavailable { .. } => "budgets_unavailable",
            Self::RateLimited {
                limit: LimitKind::CostPerDay,
                ..
            } => "insufficient_quota",
            Self::RateLimited { .. } => "rate_limit_exceeded",
        }
    }

    /// Whose fault it is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Protocol(_)
            | Self::SignalUnavailable { .. }
            | Self::PolicyUnavailable { .. }
            | Self::LooperFailed { .. }
            | Self::ContractViolated { .. }
            | Self::Saturated { .. }
            | Self::BudgetsUnavailable { .. }
            | Self::TooDeep(_) => Fault::Internal,
            Self::InternalAuth
            | Self::JailbreakBlocked { .. }
            | Self::AnswerWithheld { .. }
            | Self::PiiBlocked { .. }
            | Self::Unauthenticated { .. }
            | Self::RateLimited { .. } => Fault::Client,
            Self::BadRequest(_)
            | Self::Untranslatable(_)
            | Self::UnknownModel { .. }
            | Self::TooLarge { .. }
            | Self::NotFound { .. }
            | Self::MethodNotAllowed { .. } => Fault::Client,
        }
    }

    /// The reply the client receives.
    pub fn reply(&self) -> Reply {
        let (status, error_type) = match self {
            Self::BadRequest(_) | Self::Untranslatable(_) | Self::UnknownModel { .. } => {
                (400, "invalid_request_error")
            }
            Self::TooLarge { .. } => (413, "invalid_request_error"),
            Self::NotFound { .. } => (404, "invalid_request_error"),
            Self::MethodNotAllowed { .. } => (405, "invalid_request_error"),
            Self::SignalUnavailable { .. }
            | Self::PolicyUnavailable { .. }
            | Self::Saturated { .. }
            | Self::BudgetsUnavailable { .. } => (503, "server_error"),
            Self::Protocol(_) => (500, "server_error"),
            Self::LooperFailed { .. } | Self::ContractViolated { .. } => (502, "server_error"),
            Self::InternalAuth
            | Self::JailbreakBlocked { .. }
            | Self::AnswerWithheld { .. }
            | Self::PiiBlocked { .. } => (403, "invalid_request_error"),
            Self::TooDeep(_) => (508, "server_error"),
            Self::Unauthenticated { .. } => (401, "invalid_request_error"),
            Self::RateLimited { limit, .. } => (
                429,
                match limit {
                    LimitKind::TokensPerMinute => "tokens",
                    LimitKind::CostPerDay => "insufficient_quota",
                    LimitKind::RequestsPerMinute | LimitKind::ConcurrentRequests => "requests",
                },
            ),
        };
        let mut headers = Vec::new();
        if let Self::MethodNotAllowed { allowed, .. } = self {
            headers.push(("allow".to_owned(), (*allowed).to_owned()));
        }
        if let Self::Saturated { retry_after_s, .. }
        | Self::RateLimited {
            retry_after_s: Some(retry_after_s),
            ..
        } = self
        {
            headers.push(("retry-after".to_owned(), retry_after_s.to_string()));
        }
        if let Self::RateLimited {
            limit,
            amount,
            retry_after_s,
            ..
        } = self
        {
            // The limit that refused, in OpenAI's headers: nothing left until it resets.
            let family = match limit {
                LimitKind::TokensPerMinute => Some("tokens"),
                LimitKind::RequestsPerMinute => Some("requests"),
                LimitKind::CostPerDay | LimitKind::ConcurrentRequests => None,
            };
            if let Some(family) = family {
                headers.push((format!("x-ratelimit-limit-{family}"), amount.clone()));
                headers.push((format!("x-ratelimit-remaining-{family}"), "0".to_owned()));
                if let Some(seconds) = retry_after_s {
                    headers.push((format!("x-ratelimit-reset-{family}"), format!("{seconds}s")));
                }
            }
        }
        if let Self::BudgetsUnavailable { .. } = self {
            headers.push(("retry-after".to_owned(), "1".to_owned()));
        }
        if let Self::Unauthenticated { .. } = self {
            headers.push(("www-authenticate".to_owned(), "Bearer".to_owned()));
        }
        Reply {
            status,
            body: openai_error(&self.to_string(), error_type, self.code()),
            headers,
            code: super::ReplyCode::Refusal(self.code()),
        }
    }
}

/// The message of a refusal for limit `limit` of `tenant`.
fn rate_limited(
    tenant: &str,
    limit: &str,
    amount: &str,
    scope: Option<&str>,
    needed: u64,
    retry_after_s: Option<u64>,
) -> String {
    let scope = scope.map(|s| format!(" for {s}")).unwrap_or_default();
    match retry_after_s {
        Some(seconds) => format!(
            "tenant {tenant:?} is over its {limit} limit of {amount}{scope}; retry in {seconds} s"
        ),
        None => format!(
            "this request needs about {needed} tokens, more than tenant {tenant:?}'s {limit} limit of {amount}{scope} allows; shorten it"
        ),
    }
}
