//! The `tenants` section compiled: the source of a request's tenant, each tenant's API keys
//! read (from digests, an environment variable or a file) and kept only as SHA-256 digests, and
//! limits with one positive amount each, scoped to a name a client can call.

use crate::config::raw_tenant::{RawApiKeys, RawIdentifyBy, RawLimit, RawStoreDown, RawTenants};
use crate::config::tenants::{Limit, LimitKind, Tenant, TenantSource, Tenants};
use crate::config::Errors;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Compiles `raw`; `callable` says whether a name is an identity or a model. `None` after
/// recording every error.
pub(super) fn compile_tenants(
    raw: &RawTenants,
    callable: &dyn Fn(&str) -> bool,
    errors: &mut Errors,
) -> Option<Tenants> {
    let mut ok = true;
    let mut fail = |errors: &mut Errors, path: String, message: String| {
        errors.push(path, message);
        ok = false;
    };
    let source = match (raw.identify_by, &raw.header, &raw.claim) {
        (RawIdentifyBy::ApiKey, None, None) => TenantSource::ApiKey,
        (RawIdentifyBy::Header, Some(header), None) if !header.trim().is_empty() => {
            TenantSource::Header(header.trim().to_ascii_lowercase())
        }
        (RawIdentifyBy::Claim, None, Some(claim))
            if !claim.namespace.trim().is_empty() && !claim.path.is_empty() =>
        {
            TenantSource::Claim {
                namespace: claim.namespace.clone(),
                path: claim.path.clone(),
            }
        }
        (by, _, _) => {
            let wants = match by {
                RawIdentifyBy::ApiKey => "each tenant's apiKeys, and neither header nor claim",
                RawIdentifyBy::Header => "a non-empty header (the one the mesh sets), and no claim",
                RawIdentifyBy::Claim => {
                    "a claim with a namespace and a non-empty path, and no header"
                }
            };
            fail(
                errors,
                "tenants.identifyBy".to_owned(),
                format!("{by:?} takes {wants}"),
            );
            TenantSource::ApiKey
        }
    };
    let mut names = HashMap::new();
    let mut keys = HashMap::new();
    let mut list = Vec::with_capacity(raw.list.len());
    if raw.list.is_empty() {
        fail(
            errors,
            "tenants.list".to_owned(),
            "declare at least one tenant".to_owned(),
        );
    }
    for (t, tenant) in raw.list.iter().enumerate() {
        let path = format!("tenants.list[{t}]");
        if tenant.name.trim().is_empty() {
            fail(errors, format!("{path}.name"), "name the tenant".to_owned());
        } else if names.insert(tenant.name.clone(), t).is_some() {
            fail(
                errors,
                format!("{path}.name"),
                format!("tenant {:?} is declared twice", tenant.name),
            );
        }
        match (&tenant.api_keys, raw.identify_by) {
            (Some(api_keys), RawIdentifyBy::ApiKey) => {
                let path = format!("{path}.apiKeys");
                match read_keys(api_keys, &path) {
                    Ok(digests) if digests.is_empty() => fail(
                        errors,
                        path,
                        "no key: list sha256 digests or name an env variable or file that holds keys"
                            .to_owned(),
                    ),
                    Ok(digests) => {
                        for digest in digests {
                            if let Some(other) = keys.insert(digest, t) {
                                let other: &str = &raw.list[other].name;
                                fail(
                                    errors,
                                    path.clone(),
                                    format!("a key is also {other:?}'s; a key names one tenant"),
                                );
                            }
                        }
                    }
                    Err((path, message)) => fail(errors, path, message),
                }
            }
            (None, RawIdentifyBy::ApiKey) => fail(
                errors,
                format!("{path}.apiKeys"),
                "tenants are identified by API key: give this tenant its keys".to_owned(),
            ),
            (Some(_), _) => fail(
                errors,
                format!("{path}.apiKeys"),
                "API keys are read only with identifyBy: apiKey".to_owned(),
            ),
            (None, _) => {}
        }
        let mut limits = Vec::with_capacity(tenant.limits.len());
        for (l, limit) in tenant.limits.iter().enumerate() {
            let path = format!("{path}.limits[{l}]");
            match compile_limit(limit, &tenant.name, callable) {
                Ok(limit) => limits.push(limit),
                Err((field, message)) => fail(errors, format!("{path}{field}"), message),
            }
        }
        list.push(Tenant {
            name: tenant.name.clone(),
            limits,
        });
    }
    let default_tenant = match &raw.default_tenant {
        None => None,
        Some(name) => {
            let found = names.get(name).copied();
            if found.is_none() {
                fail(
                    errors,
                    "tenants.defaultTenant".to_owned(),
                    format!("{name:?} is not a tenant in tenants.list"),
                );
            }
            found
        }
    };
    ok.then_some(Tenants {
        source,
        default_tenant,
        list,
        fail_closed: raw.when_store_down == Some(RawStoreDown::Closed),
        keys,
        names,
    })
}

/// One limit, or the field (after the limit's path) and what is wrong with it.
fn compile_limit(
    raw: &RawLimit,
    tenant: &str,
    callable: &dyn Fn(&str) -> bool,
) -> Result<Limit, (String, String)> {
    let amounts = [
        (LimitKind::RequestsPerMinute, raw.requests_per_minute),
        (LimitKind::TokensPerMinute, raw.tokens_per_minute),
        (LimitKind::CostPerDay, raw.cost_per_day),
        (LimitKind::ConcurrentRequests, raw.concurrent_requests),
    ];
    let mut given = amounts.iter().filter_map(|(k, a)| a.map(|a| (*k, a)));
    let (kind, amount) = match (given.next(), given.next()) {
        (Some(one), None) => one,
        _ => {
            return Err((
                String::new(),
                "give exactly one of requestsPerMinute, tokensPerMinute, costPerDay, concurrentRequests"
                    .to_owned(),
            ))
        }
    };
    let whole = kind != LimitKind::CostPerDay;
    if !(amount.is_finite() && amount > 0.0) || (whole && amount.fract() != 0.0) {
        let what = if whole { "a whole number" } else { "a number" };
        return Err((
            format!(".{}", kind.name()),
            format!("must be {what} above 0 (got {amount}); to lift the limit, remove it"),
        ));
    }
    if let Some(model) = &raw.model {
        if !callable(model) {
            return Err((
                ".model".to_owned(),
                format!("{model:?} is neither an identity nor a model"),
            ));
        }
    }
    let scope = raw.model.as_deref().unwrap_or("*");
    Ok(Limit {
        kind,
        amount,
        model: raw.model.clone(),
        key: format!("{tenant}/{}/{scope}", kind.name()),
    })
}

/// The digests of a tenant's keys, or the path and what is wrong.
fn read_keys(raw: &RawApiKeys, path: &str) -> Result<Vec<[u8; 32]>, (String, String)> {
    let mut digests = Vec::new();
    for (i, hex) in raw.sha256.iter().enumerate() {
        match parse_digest(hex.trim()) {
            Some(digest) => digests.push(digest),
            None => {
                return Err((
                    format!("{path}.sha256[{i}]"),
                    "not a SHA-256 digest: 64 hex digits (`printf %s KEY | sha256sum`)".to_owned(),
                ))
            }
        }
    }
    let hash = |key: &str| -> [u8; 32] { Sha256::digest(key.as_bytes()).into() };
    if let Some(variable) = &raw.env {
        match std::env::var(variable) {
            Ok(keys) if !keys.trim().is_empty() => digests.extend(
                keys.split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(hash),
            ),
            _ => {
                return Err((
                    format!("{path}.env"),
                    format!("environment variable {variable} is not set or empty"),
                ))
            }
        }
    }
    if let Some(file) = &raw.file {
        match std::fs::read_to_string(file) {
            Ok(text) => digests.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|k| !k.is_empty() && !k.starts_with('#'))
                    .map(hash),
            ),
            Err(error) => {
                return Err((
                    format!("{path}.file"),
                    format!("cannot read {file}: {error}"),
                ))
            }
        }
    }
    Ok(digests)
}

/// 64 hex digits as 32 bytes.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}
