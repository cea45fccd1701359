//! Compiled tenants: how a request names its tenant, the tenants' API keys (by digest), and
//! the limits each tenant's requests draw on.

use std::collections::HashMap;
use std::time::Duration;

/// The `tenants` section, compiled.
#[derive(Debug, Clone)]
pub struct Tenants {
    /// How a request names its tenant.
    pub source: TenantSource,
    /// The tenant of a request that names none or an unknown one; `None`: refused with 401.
    pub default_tenant: Option<usize>,
    /// The tenants, in configuration order.
    pub list: Vec<Tenant>,
    /// Refuse with 503 when the shared budget store does not answer (else each replica's own
    /// buckets decide).
    pub fail_closed: bool,
    /// Tenant index by the SHA-256 of each API key.
    pub(super) keys: HashMap<[u8; 32], usize>,
    /// Tenant index by name.
    pub(super) names: HashMap<String, usize>,
}

impl Tenants {
    /// The tenant an API key with digest `digest` belongs to.
    pub fn by_key_digest(&self, digest: &[u8; 32]) -> Option<usize> {
        self.keys.get(digest).copied()
    }

    /// The tenant called `name`.
    pub fn by_name(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// Whether some tenant's requests count tokens or cost: answers are then read to their end
    /// for the usage they report.
    pub fn counts_usage(&self) -> bool {
        self.list
            .iter()
            .flat_map(|t| &t.limits)
            .any(|l| matches!(l.kind, LimitKind::TokensPerMinute | LimitKind::CostPerDay))
    }
}

/// Where a request's tenant is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantSource {
    /// The API key: `Authorization: Bearer KEY` or `x-api-key: KEY`.
    ApiKey,
    /// A header the mesh sets (and strips from clients), naming the tenant.
    Header(String),
    /// A claim in the forwarded dynamic metadata naming the tenant.
    Claim {
        /// The filter namespace.
        namespace: String,
        /// The keys from the namespace to the claim.
        path: Vec<String>,
    },
}

/// One tenant.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Its name.
    pub name: String,
    /// Its limits, in configuration order.
    pub limits: Vec<Limit>,
}

/// One limit of a tenant.
#[derive(Debug, Clone)]
pub struct Limit {
    /// What it counts.
    pub kind: LimitKind,
    /// How much a window holds (requests, tokens, cost) or how many at once.
    pub amount: f64,
    /// Only requests whose `model` is this name (an identity or a model).
    pub model: Option<String>,
    /// The limit's key in the budget store: tenant, kind and scope.
    pub key: String,
}

impl Limit {
    /// Whether a request naming `model` draws on this limit.
    pub fn applies_to(&self, model: &str) -> bool {
        self.model.as_deref().is_none_or(|scope| scope == model)
    }
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests a minute.
    RequestsPerMinute,
    /// Prompt and completion tokens a minute.
    TokensPerMinute,
    /// Cost a day.
    CostPerDay,
    /// Requests in flight at once.
    ConcurrentRequests,
}

impl LimitKind {
    /// The limit as the configuration, errors and metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::RequestsPerMinute => "requestsPerMinute",
            Self::TokensPerMinute => "tokensPerMinute",
            Self::CostPerDay => "costPerDay",
            Self::ConcurrentRequests => "concurrentRequests",
        }
    }

    /// The time a full bucket of this limit refills in; none for a count of requests at once.
    pub fn window(self) -> Option<Duration> {
        match self {
            Self::RequestsPerMinute | Self::TokensPerMinute => Some(Duration::from_secs(60)),
            Self::CostPerDay => Some(Duration::from_secs(86_400)),
            Self::ConcurrentRequests => None,
        }
    }
}
