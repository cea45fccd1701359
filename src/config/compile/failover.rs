//! An identity's `failover` section compiled: bounded attempts, one deadline for all fallback
//! attempts, the order of the models tried after the decision's own candidates, and when a
//! failing model is set aside.

use super::identities::{model_ref, Tables};
use crate::config::raw::RawFailover;
use crate::config::{Errors, Failover};
use std::time::Duration;

/// Attempts in all when `maxAttempts` is absent.
const DEFAULT_ATTEMPTS: u32 = 3;
/// The most attempts a request may make (each is a model call).
const MAX_ATTEMPTS: u32 = 8;
/// Fallback time when `deadlineMs` is absent.
const DEFAULT_DEADLINE_MS: i64 = 30_000;
/// Consecutive failures before a model is set aside, when `ejectAfter` is absent.
const DEFAULT_EJECT_AFTER: u32 = 3;
/// Time a model stays set aside, when `coolDownMs` is absent.
const DEFAULT_COOL_DOWN_MS: i64 = 30_000;

/// Compiles `raw` (at `path`) for an identity whose models are `eligible` and whose decisions
/// are `decisions`; `None` after
/// recording every error.
pub(super) fn compile_failover(
    raw: &RawFailover,
    path: &str,
    eligible: &[usize],
    decisions: &[usize],
    tables: &Tables<'_>,
    errors: &mut Errors,
) -> Option<Failover> {
    let RawFailover {
        max_attempts,
        deadline_ms,
        models,
        except,
        eject_after,
        cool_down_ms,
    } = raw;
    let mut ok = true;
    let max_attempts = max_attempts.unwrap_or(DEFAULT_ATTEMPTS);
    if !(2..=MAX_ATTEMPTS).contains(&max_attempts) {
        errors.push(
            format!("{path}.maxAttempts"),
            format!(
                "must be between 2 (the first attempt and one fallback) and {MAX_ATTEMPTS}, not {max_attempts}"
            ),
        );
        ok = false;
    }
    let mut millis = |field: &str, value: Option<i64>, default: i64| -> Duration {
        let value = value.unwrap_or(default);
        if value <= 0 {
            errors.push(
                format!("{path}.{field}"),
                format!("must be a positive number of milliseconds, not {value}"),
            );
            ok = false;
        }
        Duration::from_millis(u64::try_from(value).unwrap_or(0))
    };
    let deadline = millis("deadlineMs", *deadline_ms, DEFAULT_DEADLINE_MS);
    let cool_down = millis("coolDownMs", *cool_down_ms, DEFAULT_COOL_DOWN_MS);
    let eject_after = eject_after.unwrap_or(DEFAULT_EJECT_AFTER);
    if eject_after == 0 {
        errors.push(
            format!("{path}.ejectAfter"),
            "must be at least 1 consecutive failure",
        );
        ok = false;
    }
    let models = match models {
        None => eligible.to_vec(),
        Some(names) => {
            let mut found = Vec::with_capacity(names.len());
            for (j, name) in names.iter().enumerate() {
                let at = format!("{path}.models[{j}]");
                match model_ref(name, at.clone(), tables, errors) {
                    Some(index) if eligible.contains(&index) => found.push(index),
                    Some(_) => {
                        errors.push(
                            at,
                            format!("{name:?} is not one of the identity's models; add it to the identity's models or drop it here"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                }
            }
            found
        }
    };
    for (j, name) in except.iter().enumerate() {
        let found = tables.decision_index.get(name);
        if !found.is_some_and(|d| decisions.contains(d)) {
            errors.push(
                format!("{path}.except[{j}]"),
                format!("{name:?} is not one of the identity's decisions"),
            );
            ok = false;
        }
    }
    ok.then_some(Failover {
        max_attempts,
        deadline,
        models,
        except: except.clone(),
        eject_after,
        cool_down,
    })
}
