//! Session continuity: a request naming a session (`x-session-id`, `x-conversation-id` or the
//! configured headers) stays on the model that served the session's earlier turns unless
//! policy says it must move. In order:
//!
//! 1. no pin yet: the fresh choice serves and is pinned;
//! 2. a tool loop is open (the model's tool calls await their results): the pin holds;
//! 3. the pinned model is not a candidate of the winning decision (policy sends the request
//!    elsewhere, e.g. a guard): switch;
//! 4. fewer than `minTurns` turns on the pinned model: the pin holds;
//! 5. the fresh choice leads the pinned model's score by more than `switchMargin`: switch;
//!    otherwise the pin holds.
//!
//! The outcome (`new`, `kept`, `held`, `switched`) and its reason reach `explain`, the
//! `x-mom-session*` headers and the metadata.

use crate::config::{Identity, Sessions, Snapshot};
use crate::engine::Trace;
use crate::llm::{ChatRequest, Headers};
use crate::state::{Pin, StateStore};

/// What session continuity did for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTrace {
    /// The session id.
    pub id: String,
    /// `new`, `kept` (the fresh choice was the pinned model), `held` or `switched`.
    pub status: &'static str,
    /// Why, in one line.
    pub reason: String,
}

/// Applies the session's pin to the fresh choice `chosen`; returns the model that serves.
pub(in crate::engine) async fn continue_session(
    snapshot: &Snapshot,
    state: &StateStore,
    identity: &Identity,
    headers: &Headers,
    request: &ChatRequest,
    trace: &mut Trace,
    chosen: usize,
) -> usize {
    let Some(policy) = &snapshot.sessions else {
        return chosen;
    };
    let Some(id) = session_id(policy, headers) else {
        return chosen;
    };
    let key = format!("{}\u{1f}{id}", identity.name);
    let pin = state.pin(&key).await;
    let (serving, status, reason) = decide(snapshot, policy, pin.as_ref(), request, trace, chosen);
    let turns = match (&pin, status) {
        (Some(pin), "held" | "kept") => pin.turns.saturating_add(1),
        _ => 1,
    };
    state
        .set_pin(
            &key,
            Pin {
                model: snapshot.models[serving].name.to_string(),
                turns,
            },
        )
        .await;
    trace.session = Some(SessionTrace {
        id: id.to_owned(),
        status,
        reason,
    });
    serving
}

fn session_id<'a>(policy: &Sessions, headers: &'a Headers) -> Option<&'a str> {
    policy
        .headers
        .iter()
        .find_map(|name| headers.get(name))
        .map(str::trim)
        .filter(|id| !id.is_empty())
}

fn decide(
    snapshot: &Snapshot,
    policy: &Sessions,
    pin: Option<&Pin>,
    request: &ChatRequest,
    trace: &Trace,
    chosen: usize,
) -> (usize, &'static str, String) {
    let Some(pin) = pin else {
        return (chosen, "new", "first turn of the session".to_owned());
    };
    let Some(pinned) = snapshot.model_index(&pin.model) else {
        return (
            chosen,
            "switched",
            format!("pinned model {} is no longer configured", pin.model),
        );
    };
    if pinned == chosen {
        return (
            chosen,
            "kept",
            format!("policy still chooses {}", pin.model),
        );
    }
    let fresh = &snapshot.models[chosen].name;
    if request.tool_loop_active() {
        return (
            pinned,
            "held",
            format!("tool loop active: {} must read its tool results", pin.model),
        );
    }
    let score_of = |model: &str| {
        trace
            .scores
            .iter()
            .find(|(name, _)| &**name == model)
            .map(|(_, score)| *score)
    };
    let candidate = if trace.scores.is_empty() {
        // No decision matched: the identity's default is the only eligible model.
        None
    } else {
        score_of(&pin.model)
    };
    let Some(pinned_score) = candidate else {
        return (
            chosen,
            "switched",
            format!(
                "decision {} does not allow {}",
                trace.decision_label(),
                pin.model
            ),
        );
    };
    if pin.turns < policy.min_turns {
        return (
            pinned,
            "held",
            format!(
                "{} has served {} of {} turns before a switch is considered",
                pin.model, pin.turns, policy.min_turns
            ),
        );
    }
    let fresh_score = score_of(fresh).unwrap_or(pinned_score);
    let lead = fresh_score - pinned_score;
    if lead > policy.switch_margin {
        (
            chosen,
            "switched",
            format!(
                "{fresh} leads {} by {lead:.3} > margin {}",
                pin.model, policy.switch_margin
            ),
        )
    } else {
        (
            pinned,
            "held",
            format!(
                "{fresh} leads {} by {lead:.3}, within margin {}",
                pin.model, policy.switch_margin
            ),
        )
    }
}
