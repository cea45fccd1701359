//! Admission of a tenant's request, before any model is called: the tenant named (by API key,
//! trusted header or verified claim), then every limit that applies drawn on at once — one
//! request, the prompt's estimated tokens, a cost budget not yet spent, a place among the
//! requests in flight — or the request refused with 429 naming the limit. The tokens reserved
//! are corrected when the answer reports its usage, and cost is charged then.

use crate::config::tenants::{LimitKind, TenantSource, Tenants};
use crate::config::Snapshot;
use crate::engine::RouteError;
use crate::llm::{ChatRequest, Headers};
use crate::state::budgets::{Draw, Level, Slots};
use crate::state::{Admit, StateStore};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A budget a request drew on, to correct once its usage is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    /// The limit's key.
    pub key: String,
    /// A full bucket.
    pub capacity: f64,
    /// Its refill window.
    pub window: Duration,
}

/// A tenant's request let through: what it drew and the `x-ratelimit-*` headers.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The tenant.
    pub tenant: String,
    /// The token budgets drawn on, each by `reserved` tokens.
    pub tokens: Vec<Drawn>,
    /// The tokens reserved on each token budget (the prompt's estimate).
    pub reserved: f64,
    /// The cost budgets the answer is charged to.
    pub costs: Vec<Drawn>,
    /// The `x-ratelimit-*` headers, OpenAI's names.
    pub headers: Vec<(&'static str, String)>,
    /// The share left of the tightest windowed limit after this request's draw (what the
    /// `budget` signal reads); `None` without one.
    pub share: Option<f64>,
    /// mom-router asked the streamed answer for its usage: the client, who did not, does not
    /// get the usage chunk.
    pub strip_usage: bool,
    /// What the request holds until it is settled or every copy drops: its places among its
    /// tenant's requests in flight, and whether its draws were settled.
    held: Arc<Held>,
}

impl PartialEq for Admission {
    fn eq(&self, other: &Self) -> bool {
        self.tenant == other.tenant && self.headers == other.headers
    }
}

/// What every copy of an admission shares.
#[derive(Debug)]
struct Held {
    slots: Mutex<Option<Slots>>,
    settled: AtomicBool,
}

impl Admission {
    /// Corrects the token budgets to `tokens` used (prompt and completion) and charges `cost`,
    /// once for all the admission's copies; false when it was settled already. The request's
    /// answer is complete then, so its places among the requests in flight are given back now,
    /// before the client has the answer's last bytes: a client that waits for one answer before
    /// it asks again is never refused for a place its previous request still held.
    pub fn settle(&self, state: &StateStore, tokens: f64, cost: f64) -> bool {
        let slots = self.held.slots.lock().ok().and_then(|mut held| held.take());
        drop(slots);
        if self.held.settled.swap(true, Ordering::Relaxed) {
            return false;
        }
        for drawn in &self.tokens {
            let delta = self.reserved - tokens;
            if delta != 0.0 {
                state.adjust_budget(&drawn.key, drawn.capacity, drawn.window, delta);
            }
        }
        for drawn in self.costs.iter().filter(|_| cost > 0.0) {
            state.adjust_budget(&drawn.key, drawn.capacity, drawn.window, -cost);
        }
        true
    }
}

/// Admits `request` for its tenant, or refuses it: `None` when no tenants are configured. A
/// streamed request whose tokens or cost are counted asks for its usage.
pub async fn admit(
    snapshot: &Snapshot,
    state: &StateStore,
    headers: &Headers,
    request: &mut ChatRequest,
) -> Result<Option<Admission>, RouteError> {
    let Some(tenants) = snapshot.tenants.as_deref() else {
        return Ok(None);
    };
    let index = identify(tenants, headers)?;
    let tenant = &tenants.list[index];
    let estimate = crate::signals::estimate_tokens(request) as f64;
    let limits: Vec<_> = tenant
        .limits
        .iter()
        .filter(|l| l.applies_to(&request.model))
        .collect();
    let draws: Vec<Draw<'_>> = limits
        .iter()
        .map(|limit| Draw {
            key: &limit.key,
            capacity: limit.amount,
            window: limit.kind.window(),
            need: match limit.kind {
                LimitKind::TokensPerMinute => estimate,
                LimitKind::CostPerDay => 0.0,
                LimitKind::RequestsPerMinute | LimitKind::ConcurrentRequests => 1.0,
            },
        })
        .collect();
    let admitted = state.admit(&draws, tenants.fail_closed).await;
    let (levels, slots) = admitted.map_err(|refused| match refused {
        Admit::Refused(refused) => {
            let limit = limits[refused.index];
            RouteError::RateLimited {
                tenant: tenant.name.clone(),
                limit: limit.kind,
                amount: limit.amount.to_string(),
                scope: limit.model.clone(),
                needed: estimate as u64,
                retry_after_s: refused.retry_after.map(|d| d.as_secs_f64().ceil() as u64),
            }
        }
        Admit::StoreDown => RouteError::BudgetsUnavailable {
            tenant: tenant.name.clone(),
        },
    })?;
    let drawn = |kind: LimitKind| -> Vec<Drawn> {
        limits
            .iter()
            .filter(|l| l.kind == kind)
            .filter_map(|l| {
                Some(Drawn {
                    key: l.key.clone(),
                    capacity: l.amount,
                    window: l.kind.window()?,
                })
            })
            .collect()
    };
    let (tokens, costs) = (
        drawn(LimitKind::TokensPerMinute),
        drawn(LimitKind::CostPerDay),
    );
    let strip_usage = !(tokens.is_empty() && costs.is_empty()) && request.ask_for_usage();
    let share = limits
        .iter()
        .zip(&levels)
        .filter(|(limit, _)| limit.kind.window().is_some())
        .map(|(limit, level)| level.remaining / limit.amount)
        .min_by(f64::total_cmp);
    Ok(Some(Admission {
        tenant: tenant.name.clone(),
        tokens,
        reserved: estimate,
        costs,
        headers: ratelimit_headers(&limits, &levels),
        share,
        strip_usage,
        held: Arc::new(Held {
            slots: Mutex::new(Some(slots)),
            settled: AtomicBool::new(false),
        }),
    }))
}

/// The tenant a request names, the default tenant, or a 401 saying what was missing.
fn identify(tenants: &Tenants, headers: &Headers) -> Result<usize, RouteError> {
    let found = match &tenants.source {
        TenantSource::ApiKey => {
            let bearer = headers.get("authorization").and_then(|value| {
                let (scheme, key) = value.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(key.trim())
            });
            match bearer.or_else(|| headers.get("x-api-key").map(str::trim)) {
                None | Some("") => Err("no API key (Authorization: Bearer KEY)".to_owned()),
                Some(key) => {
                    let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
                    tenants.by_key_digest(&digest).ok_or_else(|| {
                        // Never the key: the first bytes of its digest, to match a log line.
                        let prefix: String =
                            digest[..4].iter().map(|b| format!("{b:02x}")).collect();
                        format!("unknown API key (sha256 {prefix}...)")
                    })
                }
            }
        }
        TenantSource::Header(name) => match headers.get(name) {
            Some(value) => tenants
                .by_name(value.trim())
                .ok_or_else(|| format!("unknown tenant in {name}")),
            None => Err(format!("no {name} header")),
        },
        TenantSource::Claim { namespace, path } => {
            match headers.metadata(namespace, path).and_then(|v| v.as_str()) {
                Some(value) => tenants
                    .by_name(value)
                    .ok_or_else(|| format!("unknown tenant in claim {}", path.join("."))),
                None => Err(format!("no verified claim {}", path.join("."))),
            }
        }
    };
    found.or_else(|reason| {
        tenants
            .default_tenant
            .ok_or(RouteError::Unauthenticated { reason })
    })
}

/// OpenAI's `x-ratelimit-*` headers: for requests and for tokens, the limit with the least left.
fn ratelimit_headers(
    limits: &[&crate::config::tenants::Limit],
    levels: &[Level],
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::new();
    let families = [
        (
            LimitKind::RequestsPerMinute,
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
            ],
        ),
        (
            LimitKind::TokensPerMinute,
            [
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ],
        ),
    ];
    for (kind, [limit, remaining, reset]) in families {
        let tightest = limits
            .iter()
            .zip(levels)
            .filter(|(l, _)| l.kind == kind)
            .min_by(|(a, x), (b, y)| (x.remaining / a.amount).total_cmp(&(y.remaining / b.amount)));
        if let Some((l, level)) = tightest {
            headers.push((limit, format!("{}", l.amount as u64)));
            headers.push((remaining, format!("{}", level.remaining.floor() as u64)));
            headers.push((reset, duration_text(level.reset)));
        }
    }
    headers
}

/// A duration as OpenAI writes it in `x-ratelimit-reset-*`: `0s`, `1.5s`, `6m0s`.
fn duration_text(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 60.0 {
        let text = format!("{seconds:.3}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        return format!("{text}s");
    }
    let whole = seconds.ceil() as u64;
    format!("{}m{}s", whole / 60, whole % 60)
}

#[cfg(test)]
mod tests {
    use super::{admit, duration_text, identify};
    use crate::config::compile_str;
    use crate::config::tenants::LimitKind;
    use crate::engine::RouteError;
    use crate::llm::ChatRequest;
    use crate::llm::Headers;
    use crate::state::StateStore;
    use std::time::Duration;

    fn tenants(source: &str, default: &str) -> crate::config::Snapshot {
        compile_str(&format!(
            "models: [{{ name: m, providerModel: m }}]\nidentities: [{{ name: mom/auto, defaultModel: m }}]\n\
             tenants:\n  {source}\n  {default}\n  list: [{{ name: alpha }}, {{ name: guests }}]\n"
        ))
        .unwrap()
    }

    fn header(name: &str, value: &str) -> Headers {
        Headers::new([(name.to_owned(), value.to_owned())])
    }

    #[test]
    fn a_trusted_header_names_the_tenant_and_the_default_pays_for_the_rest() {
        let snapshot = tenants(
            "identifyBy: header\n  header: X-Tenant",
            "defaultTenant: guests",
        );
        let tenants = snapshot.tenants.as_deref().unwrap();
        let name = |headers: &Headers| {
            tenants.list[identify(tenants, headers).unwrap()]
                .name
                .clone()
        };
        assert_eq!(name(&header("x-tenant", "alpha")), "alpha");
        assert_eq!(name(&header("x-tenant", "mallory")), "guests");
        assert_eq!(name(&Headers::default()), "guests");
    }

    #[test]
    fn a_verified_claim_names_the_tenant_and_without_a_default_the_rest_get_401() {
        let snapshot = tenants(
            "identifyBy: claim\n  claim: { namespace: envoy.filters.http.jwt_authn, path: [jwt_payload, sub] }",
            "",
        );
        let tenants = snapshot.tenants.as_deref().unwrap();
        let serde_json::Value::Object(metadata) = serde_json::json!({
            "envoy.filters.http.jwt_authn": {"jwt_payload": {"sub": "alpha"}}
        }) else {
            unreachable!("an object literal")
        };
        let verified = Headers::default().with_metadata(metadata);
        assert_eq!(
            tenants.list[identify(tenants, &verified).unwrap()].name,
            "alpha"
        );
        // A header a client wrote is not a verified claim.
        let unverified = header("sub", "alpha");
        match identify(tenants, &unverified) {
            Err(RouteError::Unauthenticated { reason }) => {
                assert_eq!(reason, "no verified claim jwt_payload.sub");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A request gives its place among its tenant's requests in flight back when it is settled
    /// (its answer complete), not when the last copy of its admission drops: the next request of
    /// a tenant allowed one at a time is let through while the exchange of the first still ends.
    #[tokio::test]
    async fn a_settled_request_gives_its_place_in_flight_back() {
        let snapshot = compile_str(
            "models: [{ name: m, providerModel: m }]\nidentities: [{ name: mom/auto, defaultModel: m }]\n\
             tenants:\n  identifyBy: header\n  header: X-Tenant\n  \
             list: [{ name: alpha, limits: [{ concurrentRequests: 1 }] }]\n",
        )
        .unwrap();
        let state = StateStore::new(snapshot.state.clone());
        let headers = header("x-tenant", "alpha");
        let admit_one = || async {
            let mut request = ChatRequest::parse(
                br#"{"model":"mom/auto","messages":[{"role":"user","content":"hi"}]}"#,
            )
            .unwrap();
            admit(&snapshot, &state, &headers, &mut request).await
        };
        let first = admit_one().await.unwrap().unwrap();
        assert!(
            matches!(
                admit_one().await,
                Err(RouteError::RateLimited {
                    limit: LimitKind::ConcurrentRequests,
                    ..
                })
            ),
            "one at a time"
        );
        assert!(first.settle(&state, 12.0, 0.0));
        let second = admit_one().await.unwrap().unwrap();
        // Settling again gives back nothing more and charges nothing twice.
        assert!(!first.settle(&state, 12.0, 0.0));
        assert!(admit_one().await.is_err(), "the second holds the place");
        drop(second);
        assert!(admit_one().await.unwrap().is_some());
    }

    #[test]
    fn reset_times_read_as_openai_writes_them() {
        assert_eq!(duration_text(Duration::ZERO), "0s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration_text(Duration::from_secs(360)), "6m0s");
        assert_eq!(duration_text(Duration::from_millis(59_999)), "59.999s");
    }
}
