//! Raw identity contracts as written in the YAML document (`identities[]`).

use serde::Deserialize;

/// A model identity (`mom/auto`, …) that applications call by name: a versioned contract
/// stating what it optimises, within which bounds, over which models, under which policies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawIdentity {
    /// The name clients put in the request's `model` field.
    pub name: String,
    /// Contract version, sent back in `x-mom-identity-version`. Bump it whenever the contract's
    /// meaning changes; a reload or `check-config --previous` refuses a silent change.
    #[serde(default = "default_version")]
    pub version: String,
    /// Human description, listed by `GET /v1/models`.
    #[serde(default)]
    pub description: String,
    /// What the identity optimises when no decision matches: `auto` (the default model),
    /// `latency`, `cost` or `quality`.
    #[serde(default)]
    pub objective: RawObjective,
    /// Models the identity may route to; every model when absent.
    pub models: Option<Vec<String>>,
    /// Model used when no decision matches (required for `objective: auto`).
    pub default_model: Option<String>,
    /// Per-request bounds.
    #[serde(default)]
    pub bounds: RawBounds,
    /// Policies that must run before any upstream call: `jailbreak`, `pii`, `grounding`.
    #[serde(default)]
    pub requires: Vec<RawPolicy>,
    /// Decisions this identity evaluates, by name; all decisions when absent.
    pub decisions: Option<Vec<String>>,
    /// Request-phase actions on every request of the identity, before the decision's own.
    #[serde(default)]
    pub plugins: Vec<super::raw::RawPlugin>,
    /// What happens when the chosen model fails before its first byte (a 5xx, a 429, a refused
    /// or reset connection): the request is served by the next candidate. Absent: the failure
    /// reaches the client.
    pub failover: Option<RawFailover>,
}

/// Cross-model failover of an identity's forwarded requests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFailover {
    /// Upstream attempts in all, the first one included (2 to 8; default 3).
    pub max_attempts: Option<u32>,
    /// Time all fallback attempts together may take, in milliseconds (default 30000).
    pub deadline_ms: Option<i64>,
    /// Models tried after the decision's own candidates (in the algorithm's order), in this
    /// order; each must be one of the identity's models. Default: the identity's other models,
    /// as declared.
    pub models: Option<Vec<String>>,
    /// Decisions whose requests never leave their chosen model (a policy keeping personal
    /// data on one model, say), by name.
    #[serde(default)]
    pub except: Vec<String>,
    /// Consecutive failures after which a model is set aside (default 3).
    pub eject_after: Option<u32>,
    /// How long a set-aside model is skipped, in milliseconds (default 30000).
    pub cool_down_ms: Option<i64>,
}

/// What an identity optimises when no decision matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawObjective {
    /// The default model (the default).
    #[default]
    Auto,
    /// The lowest observed latency among its models.
    Latency,
    /// The cheapest model above `bounds.minQuality`.
    Cost,
    /// The highest quality within `bounds.maxCostPerRequest` and `bounds.latencySloMs`.
    Quality,
}

/// Per-request bounds of an identity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBounds {
    /// Largest expected cost of one request; costlier candidates are not chosen.
    pub max_cost_per_request: Option<f64>,
    /// Latency objective in milliseconds (p90 of observed total latency); slower candidates
    /// are not chosen once measured.
    pub latency_slo_ms: Option<f64>,
    /// Lowest declared model quality the `cost` objective accepts.
    pub min_quality: Option<f64>,
}

/// A policy an identity requires before any upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawPolicy {
    /// A jailbreak signal is evaluated; when it cannot answer, the request fails closed.
    Jailbreak,
    /// A PII signal is evaluated; when it cannot answer, the request fails closed.
    Pii,
    /// Answers are checked against the provided context (not available yet: fails closed).
    Grounding,
}

fn default_version() -> String {
    "1".to_owned()
}
