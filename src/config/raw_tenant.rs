//! Raw tenant declarations as written in the YAML document (`tenants`): how a caller is known,
//! who the callers are, and what each may spend.

use serde::Deserialize;

/// The `tenants` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTenants {
    /// How a request names its tenant: `apiKey` (the `Authorization: Bearer` or `x-api-key`
    /// value, matched by its SHA-256), `header` (a header the mesh sets and strips from
    /// clients) or `claim` (a verified token's claim in the forwarded metadata).
    pub identify_by: RawIdentifyBy,
    /// The header naming the tenant, with `identifyBy: header`.
    pub header: Option<String>,
    /// Where the claim naming the tenant is, with `identifyBy: claim`.
    pub claim: Option<RawClaim>,
    /// The tenant of a request that names none or an unknown one. Without it such a request is
    /// refused with 401.
    pub default_tenant: Option<String>,
    /// When budgets are shared through Redis and Redis does not answer: `open` (each replica's
    /// own buckets decide; the default) or `closed` (503).
    pub when_store_down: Option<RawStoreDown>,
    /// The tenants.
    pub list: Vec<RawTenant>,
}

/// What admission does when the shared budget store is down.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RawStoreDown {
    /// Each replica's own buckets decide.
    Open,
    /// Refuse with 503.
    Closed,
}

/// How a request names its tenant.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum RawIdentifyBy {
    /// An API key.
    ApiKey,
    /// A trusted header.
    Header,
    /// A verified token's claim.
    Claim,
}

/// A claim in the dynamic metadata a filter in front of mom-router wrote (`jwt_authn`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawClaim {
    /// The filter namespace (`envoy.filters.http.jwt_authn`).
    pub namespace: String,
    /// The keys from the namespace to the claim (`[jwt_payload, sub]`).
    pub path: Vec<String>,
}

/// One tenant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTenant {
    /// The tenant's name, in metrics, logs, records and the usage API.
    pub name: String,
    /// The tenant's API keys, with `identifyBy: apiKey`.
    pub api_keys: Option<RawApiKeys>,
    /// What the tenant may spend.
    #[serde(default)]
    pub limits: Vec<RawLimit>,
}

/// Where a tenant's API keys come from; the keys themselves never sit in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawApiKeys {
    /// SHA-256 digests of the keys, 64 hex digits each.
    #[serde(default)]
    pub sha256: Vec<String>,
    /// An environment variable holding keys, separated by commas.
    pub env: Option<String>,
    /// A file holding keys, one a line.
    pub file: Option<String>,
}

/// One limit: exactly one amount, optionally for the requests naming one model or identity.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLimit {
    /// Requests a minute.
    pub requests_per_minute: Option<f64>,
    /// Tokens a minute (prompt and completion).
    pub tokens_per_minute: Option<f64>,
    /// Cost a day, in the unit of the models' pricing.
    pub cost_per_day: Option<f64>,
    /// Requests in flight at once.
    pub concurrent_requests: Option<f64>,
    /// Only requests whose `model` names this identity or model.
    pub model: Option<String>,
}
