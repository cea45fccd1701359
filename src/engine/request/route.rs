//! The chat pipeline for one body: the sub-request check, parsing, then for an identity its
//! signals, decision and selection ([`route_identity`]) before what happens once decided; a
//! concrete model passes through; anything else is refused naming what can be called.

use super::decided;
use crate::config::{Decision, Fallback, Identity, Policy, Snapshot};
use crate::decision::{self, Fact};
use crate::engine::neural::neural_inputs;
use crate::engine::{failover, forward, refusal, refusal_after, RouteError, Routed, Services};
use crate::engine::{Trace, MAX_DEPTH};
use crate::llm::{ChatRequest, Headers, LlmClient};
use crate::selection::{request_key, Algorithm};
use crate::signals::{Input, Neural, OnError, SignalKind, SignalResult};
use crate::state::StateStore;

/// Routes a complete chat-completion body (within the size limit): a client's request is
/// admitted for its tenant first (a sub-request was, with the request that made it).
pub(in crate::engine) async fn route_chat(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
) -> Routed {
    let depth = match sub_request_depth(services, headers) {
        Ok(depth) => depth,
        Err(error) => return refusal(snapshot, error),
    };
    let mut request = match ChatRequest::parse(body) {
        Ok(request) => request,
        Err(e) => return refusal(snapshot, e.into()),
    };
    let admission = match depth {
        0 => super::admission::admit(snapshot, &services.state, headers, &mut request).await,
        _ => Ok(None),
    };
    match admission {
        Ok(admission) => {
            let budget = admission.as_ref().and_then(|a| a.share);
            let parsed = Parsed {
                request,
                depth,
                budget,
            };
            let mut routed = route_request(snapshot, services, headers, body, parsed).await;
            let by_key = snapshot
                .tenants
                .as_ref()
                .is_some_and(|t| t.source == crate::config::tenants::TenantSource::ApiKey);
            if let (true, crate::engine::Action::Forward(forward)) = (by_key, &mut routed.action) {
                // The key names the tenant to mom-router; no model server is given it.
                let remove = &mut forward.headers.remove;
                remove.extend(["authorization", "x-api-key"].map(str::to_owned));
            }
            routed.trace.tenant = admission.as_ref().map(|a| a.tenant.clone());
            routed.trace.admission = admission;
            routed
        }
        Err(error) => {
            let tenant = match &error {
                RouteError::RateLimited { tenant, .. }
                | RouteError::BudgetsUnavailable { tenant } => Some(tenant.clone()),
                _ => None,
            };
            let mut refused = refusal(snapshot, error);
            refused.trace.tenant = tenant;
            refused
        }
    }
}

/// A parsed chat request with what admission learned of it.
struct Parsed {
    request: ChatRequest,
    /// How deep a sub-request it is (0: a client's).
    depth: u32,
    /// The share its tenant has left of its tightest budget, for the `budget` signal.
    budget: Option<f64>,
}

/// Routes a parsed chat request: an identity's through its signals, decision and selection, a
/// concrete model's as it is; any other name is refused.
async fn route_request(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
    parsed: Parsed,
) -> Routed {
    let Parsed {
        request,
        depth,
        budget,
    } = parsed;
    let state = services.state.as_ref();
    if let Some(identity) = snapshot.identity(&request.model) {
        let deadlines = services.model_deadlines;
        let mut neural = neural_inputs(snapshot, identity.needs, &request, deadlines).await;
        neural.budget = budget;
        let context = Context {
            snapshot,
            state,
            headers,
            body,
        };
        return match route_identity(&context, identity, &request, &neural) {
            Ok((mut trace, chosen, decision)) => {
                let chosen =
                    failover::healthy(snapshot, state, identity, decision, &mut trace, chosen);
                let query = neural
                    .embedding
                    .as_ref()
                    .and_then(|e| e.as_ref().ok())
                    .cloned();
                let decided = decided::Decided {
                    trace,
                    chosen,
                    decision,
                    depth,
                    query,
                };
                decided::carry_out(snapshot, services, identity, headers, request, decided).await
            }
            Err(refused) => {
                let (error, evidence) = *refused;
                refusal_after(error, evidence)
            }
        };
    }
    if let Some(index) = snapshot.model_index(&request.model) {
        let mut trace = Trace::empty(snapshot);
        trace.algorithm = "passthrough";
        return forward(trace, request, &snapshot.models[index]);
    }
    let valid = snapshot
        .callable_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    refusal(
        snapshot,
        RouteError::UnknownModel {
            name: request.model.clone(),
            valid,
        },
    )
}

/// What one request is routed against.
struct Context<'a> {
    snapshot: &'a Snapshot,
    state: &'a StateStore,
    headers: &'a Headers,
    body: &'a [u8],
}

/// The depth of a sub-request carrying mom-router's internal headers (0 for a client request);
/// the headers without the process's token, or too deep a nesting, are refused.
fn sub_request_depth(services: &Services, headers: &Headers) -> Result<u32, RouteError> {
    let token = headers.get(crate::llm::client::TOKEN_HEADER);
    let depth = headers.get(crate::llm::client::DEPTH_HEADER);
    if token.is_none() && depth.is_none() {
        return Ok(0);
    }
    let expected = services.client.as_ref().map(LlmClient::token);
    match (token, expected) {
        (Some(token), Some(expected)) if crate::llm::client::token_matches(token, expected) => {}
        _ => return Err(RouteError::InternalAuth),
    }
    let depth = depth
        .and_then(|d| d.trim().parse::<u32>().ok())
        .ok_or(RouteError::InternalAuth)?;
    if depth > MAX_DEPTH {
        return Err(RouteError::TooDeep(depth));
    }
    Ok(depth)
}

/// Why a request is refused, with the evidence gathered up to then.
type Refused = (RouteError, Trace);

/// Runs the identity's signals and decisions; returns the evidence, the chosen model index and
/// the decision that chose it (none for the identity's default).
fn route_identity<'s>(
    context: &Context<'s>,
    identity: &'s Identity,
    request: &ChatRequest,
    neural: &Neural,
) -> Result<(Trace, usize, Option<&'s Decision>), Box<Refused>> {
    let Context {
        snapshot,
        state,
        headers,
        body,
    } = *context;
    let mut facts: Vec<Option<Fact>> = vec![None; snapshot.signals.len()];
    let mut results: Vec<SignalResult> = Vec::with_capacity(identity.signals.len());
    // Signal indices are sorted and projections come after the signals they read, so an
    // earlier signal's result sits at its place in the identity's list.
    for &index in &identity.signals {
        let signal = &snapshot.signals[index];
        let earlier = |i: usize| {
            let fact = facts.get(i).copied().flatten()?;
            let at = identity.signals.binary_search(&i).ok()?;
            Some(Input {
                matched: fact.matched,
                confidence: fact.confidence,
                value: results.get(at).and_then(|r| r.value),
            })
        };
        let result = signal.evaluate(request, headers, neural, &earlier);
        // A guard that cannot answer fails closed when the identity requires it or its own
        // `onError` is `fail` (the default for guards).
        let on_error = signal.kind.on_error();
        let closed = match signal.kind {
            SignalKind::Jailbreak(_) => Some(Policy::Jailbreak),
            SignalKind::Pii(_) => Some(Policy::Pii),
            _ => None,
        }
        .filter(|policy| identity.requires.contains(policy) || on_error == Some(OnError::Fail));
        let refused = match (&result.error, closed, on_error) {
            (Some(reason), Some(policy), _) => Some(RouteError::PolicyUnavailable {
                identity: identity.name.to_string(),
                policy: policy.name(),
                reason: format!("signal {}: {reason}", signal.name),
            }),
            (Some(reason), None, Some(OnError::Fail)) => Some(RouteError::SignalUnavailable {
                signal: signal.name.to_string(),
                reason: reason.clone(),
            }),
            _ => None,
        };
        if let Some(error) = refused {
            results.push(result);
            let mut evidence = Trace::empty(snapshot);
            evidence.identity = Some(identity.name.clone());
            evidence.identity_version = Some(identity.version.clone());
            evidence.signals = results;
            return Err(Box::new((error, evidence)));
        }
        facts[index] = Some(Fact {
            matched: result.matched,
            confidence: result.confidence,
        });
        results.push(result);
    }
    let mut trace = Trace::empty(snapshot);
    trace.identity = Some(identity.name.clone());
    trace.identity_version = Some(identity.version.clone());
    trace.signals = results;
    let winner = decision::pick(&snapshot.decisions, &identity.decisions, &facts);
    let key = headers
        .get("x-request-id")
        .map_or_else(|| request_key(body), |id| request_key(id.as_bytes()));
    let query = neural
        .embedding
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|v| v.as_slice());
    let (decision, confidence) = match (winner, &identity.fallback) {
        (Some((index, verdict)), _) => (&snapshot.decisions[index], verdict.confidence),
        (None, Fallback::Objective(decision)) => (decision.as_ref(), 1.0),
        (None, Fallback::Default(model)) => {
            trace.algorithm = Algorithm::Static.name();
            trace.selection_reason = "no decision matched: the identity's default model".into();
            return Ok((trace, *model, None));
        }
    };
    let chosen = super::select::choose(
        snapshot,
        state,
        decision,
        &identity.bounds,
        request,
        query,
        key,
    );
    trace.decision = Some(decision.name.clone());
    let selection = match chosen {
        Ok(selection) => selection,
        Err(error) => return Err(Box::new((error, trace))),
    };
    trace.selection_reason = selection.reason.into();
    trace.confidence = confidence;
    trace.algorithm = decision.algorithm.name();
    trace.scores = decision
        .candidates
        .iter()
        .zip(&selection.scores)
        .map(|(c, s)| (snapshot.models[c.model].name.clone(), *s))
        .collect();
    let model_index = decision.candidates[selection.chosen].model;
    Ok((trace, model_index, Some(decision)))
}
