//! `POST /v1/outcomes`: feedback on runs, credited to the statistics the learning algorithms
//! read. The body is one outcome object or an array of them:
//!
//! ```json
//! {"run_id": "…", "reward": 0.8}          // bandit: a reward in 0..1
//! {"run_id": "…", "thumbs": "up"}         // bandit: up = 1, down = 0
//! {"run_id": "…", "verified": true}       // automix: the answer passed verification
//! {"run_id": "…", "preferred_over": "…"}  // elo: this run's answer beat the other run's
//! {"run_id": "…", "tied_with": "…"}       // elo: a draw
//! ```
//!
//! Outside loopback the caller needs a bearer token (see [`OutcomesAuth`]).
//! Every outcome in a request is checked before any is applied; an unknown run id is a 404. A
//! run takes one outcome of each kind (one per other run for preferences): a repeat in the same
//! body is a 400 and one already credited a 409 `duplicate_outcome`, so one run id repeated
//! cannot take the statistics over.
//! With run records on, each applied outcome is also written as a record line joined to its run
//! by `run_id`.

use super::{AdminState, OutcomesAuth, OUTCOMES_TOKEN_ENV};
use crate::llm::error_body::openai_error;
use crate::observability::metrics::OutcomeLabels;
use crate::state::{Outcome, OutcomeError};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

/// One outcome as the client writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutcome {
    run_id: String,
    reward: Option<f64>,
    thumbs: Option<Thumbs>,
    verified: Option<bool>,
    preferred_over: Option<String>,
    tied_with: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Thumbs {
    Up,
    Down,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Body {
    One(RawOutcome),
    Many(Vec<RawOutcome>),
}

pub(super) fn error(status: StatusCode, message: &str, code: &str) -> Response {
    let kind = if status.is_client_error() {
        "invalid_request_error"
    } else {
        "server_error"
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        openai_error(message, kind, code),
    )
        .into_response()
}

/// Most outcomes one body may carry.
pub const MAX_OUTCOMES: usize = 1_000;

/// A body's outcomes, checked before anything is looked up: JSON of the right shape, at most
/// [`MAX_OUTCOMES`], each giving exactly one valid outcome, none repeating another of the same
/// run and kind. An error is the message and its code (`invalid_outcome`, `duplicate_outcome`).
pub fn parse(body: &[u8]) -> Result<Vec<(String, Outcome)>, (String, &'static str)> {
    let parsed = match serde_json::from_slice::<Body>(body) {
        Ok(Body::One(one)) => vec![one],
        Ok(Body::Many(many)) => many,
        Err(e) => {
            return Err((
                format!("the body must be an outcome object or an array of them: {e}"),
                "invalid_outcome",
            ))
        }
    };
    if parsed.is_empty() {
        return Err((
            "the body lists no outcome; send one outcome object or a non-empty array".to_owned(),
            "invalid_outcome",
        ));
    }
    if parsed.len() > MAX_OUTCOMES {
        return Err((
            format!(
                "{} outcomes in one body; send at most {MAX_OUTCOMES}",
                parsed.len()
            ),
            "invalid_outcome",
        ));
    }
    let mut outcomes = Vec::with_capacity(parsed.len());
    let mut keys = std::collections::HashSet::new();
    for (i, raw) in parsed.into_iter().enumerate() {
        let outcome = outcome_of(&raw, i).map_err(|message| (message, "invalid_outcome"))?;
        if !keys.insert(outcome.credit_key(&raw.run_id)) {
            return Err((
                format!(
                    "[{i}] repeats a {} outcome for run {:?} given earlier in this body",
                    outcome.kind(),
                    raw.run_id
                ),
                "duplicate_outcome",
            ));
        }
        outcomes.push((raw.run_id, outcome));
    }
    Ok(outcomes)
}

fn outcome_of(raw: &RawOutcome, index: usize) -> Result<Outcome, String> {
    let mut given = Vec::new();
    if let Some(reward) = raw.reward {
        if !(0.0..=1.0).contains(&reward) {
            return Err(format!(
                "[{index}].reward must be between 0 and 1, got {reward}"
            ));
        }
        given.push(Outcome::Reward(reward));
    }
    if let Some(thumbs) = raw.thumbs {
        given.push(Outcome::Reward(match thumbs {
            Thumbs::Up => 1.0,
            Thumbs::Down => 0.0,
        }));
    }
    if let Some(verified) = raw.verified {
        given.push(Outcome::Verified(verified));
    }
    for (other, draw) in [(&raw.preferred_over, false), (&raw.tied_with, true)] {
        if let Some(other_run) = other {
            given.push(Outcome::Preference {
                other_run: other_run.clone(),
                draw,
            });
        }
    }
    match given.len() {
        1 => Ok(given.remove(0)),
        0 => Err(format!(
            "[{index}] gives no outcome; add one of reward, thumbs, verified, preferred_over, tied_with"
        )),
        _ => Err(format!(
            "[{index}] gives several outcomes; send one of reward, thumbs, verified, preferred_over, tied_with per object"
        )),
    }
}

/// The run record line reporting `outcome` for `run_id`.
fn record_of(run_id: &str, outcome: &Outcome) -> crate::records::RunRecord {
    let (kind, value, other) = match outcome {
        Outcome::Reward(reward) => ("reward", *reward, ""),
        Outcome::Verified(verified) => ("verified", f64::from(u8::from(*verified)), ""),
        Outcome::Preference { other_run, draw } => (
            "preference",
            if *draw { 0.5 } else { 1.0 },
            other_run.as_str(),
        ),
    };
    crate::records::outcome_record(run_id, crate::state::now_ms(), kind, value, other)
}

/// The refusal for a caller `auth` does not admit, if any.
pub(super) fn refusal(auth: &OutcomesAuth, headers: &HeaderMap) -> Option<Response> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match auth {
        OutcomesAuth::Loopback => None,
        OutcomesAuth::Token(token)
            if presented.is_some_and(|p| crate::llm::client::token_matches(p.trim(), token)) =>
        {
            None
        }
        OutcomesAuth::Token(_) => Some(error(
            StatusCode::UNAUTHORIZED,
            "outcomes need `authorization: Bearer TOKEN` with the token the sidecar was started with",
            "unauthorized",
        )),
        OutcomesAuth::Refused => Some(error(
            StatusCode::FORBIDDEN,
            &format!(
                "the admin listener is not on loopback and {OUTCOMES_TOKEN_ENV} is not set: outcomes are refused"
            ),
            "outcomes_disabled",
        )),
    }
}

pub(super) async fn post(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&state.outcomes_auth, &headers) {
        return refused;
    }
    let outcomes = match parse(&body) {
        Ok(outcomes) => outcomes,
        Err((message, code)) => return error(StatusCode::BAD_REQUEST, &message, code),
    };
    for (run_id, outcome) in &outcomes {
        let run_id = run_id.as_str();
        if state.state.credited(run_id, outcome) {
            let message =
                OutcomeError::AlreadyCredited(run_id.to_owned(), outcome.kind()).to_string();
            return error(StatusCode::CONFLICT, &message, "duplicate_outcome");
        }
    }
    for (run_id, outcome) in &outcomes {
        let mut ids = vec![run_id.as_str()];
        if let Outcome::Preference { other_run, .. } = outcome {
            ids.push(other_run.as_str());
        }
        for id in ids {
            if state.state.find_run(id).await.is_none() {
                let message = OutcomeError::UnknownRun(id.to_owned()).to_string();
                return error(StatusCode::NOT_FOUND, &message, "unknown_run");
            }
        }
    }
    let mut applied = Vec::new();
    for (run_id, outcome) in &outcomes {
        match state.state.apply(run_id, outcome).await {
            Ok(run) => {
                let kind = outcome.kind();
                state
                    .metrics
                    .outcomes
                    .get_or_create(&OutcomeLabels { kind })
                    .inc();
                if let Some(records) = &state.records {
                    records.send(record_of(run_id, outcome));
                }
                applied.push(json!({
                "run_id": run_id, "identity": run.identity, "decision": run.decision,
                "model": run.model,
                }));
            }
            // The run expired between the check and now.
            Err(e @ OutcomeError::UnknownRun(_)) => {
                return error(StatusCode::NOT_FOUND, &e.to_string(), "unknown_run")
            }
            // Credited by a concurrent request since the check.
            Err(e @ OutcomeError::AlreadyCredited(..)) => {
                return error(StatusCode::CONFLICT, &e.to_string(), "duplicate_outcome")
            }
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "applied": applied }).to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            value.parse().unwrap_or_else(|_| panic!("{value}")),
        );
        headers
    }

    #[test]
    fn a_body_is_checked_whole_and_bounded() {
        let one = parse(br#"{"run_id": "a", "thumbs": "up"}"#).unwrap_or_default();
        assert_eq!(one, vec![("a".to_owned(), Outcome::Reward(1.0))]);
        let repeat = parse(br#"[{"run_id": "a", "reward": 1}, {"run_id": "a", "thumbs": "down"}]"#);
        assert_eq!(repeat.map_err(|(_, code)| code), Err("duplicate_outcome"));
        let many: Vec<String> = (0..=MAX_OUTCOMES)
            .map(|i| format!(r#"{{"run_id": "r{i}", "verified": true}}"#))
            .collect();
        let flood = parse(format!("[{}]", many.join(",")).as_bytes());
        let (message, code) = flood.err().unwrap_or_default();
        assert_eq!(code, "invalid_outcome");
        assert!(
            message.starts_with("1001 outcomes in one body"),
            "{message}"
        );
        // Found by fuzzing: an empty array used to be accepted, crediting nothing.
        let empty = parse(b"[]").err().unwrap_or_default();
        assert!(
            empty.0.starts_with("the body lists no outcome"),
            "{empty:?}"
        );
        let shape = parse(b"0").err().unwrap_or_default();
        assert!(
            shape.0.starts_with("the body must be an outcome object"),
            "{shape:?}"
        );
    }

    #[test]
    fn outcomes_need_loopback_or_the_token() {
        let none = HeaderMap::new();
        assert!(refusal(&OutcomesAuth::Loopback, &none).is_none());
        let token = OutcomesAuth::Token("s3cret".to_owned());
        assert!(refusal(&token, &bearer("Bearer s3cret")).is_none());
        for wrong in [none.clone(), bearer("Bearer s3cre"), bearer("Basic s3cret")] {
            let refused = refusal(&token, &wrong).map(|r| r.status());
            assert_eq!(refused, Some(StatusCode::UNAUTHORIZED));
        }
        let refused = refusal(&OutcomesAuth::Refused, &bearer("Bearer s3cret"));
        assert_eq!(refused.map(|r| r.status()), Some(StatusCode::FORBIDDEN));
        assert_eq!(OutcomesAuth::from_env(true), OutcomesAuth::Loopback);
    }
}
