//! What happens once the decision is made: the plugins (guards may refuse or reroute, rewrites
//! change the request), the semantic cache (a hit answers now), then the decision's looper or its
//! single model (with session continuity); last, the answer's obligations (output contract,
//! answer guard, grounding check, masked values, cache ticket) are bound to the forwarded
//! request with its header edits, or settled at once on an answer already in hand.

use super::cache::{self, Consulted};
use super::plugins;
use super::session;
use super::tools;
use crate::config::{Decision, Identity, Snapshot};
use crate::engine::answer::contract;
use crate::engine::answer::grounding::GroundingCheck;
use crate::engine::answer::obligations::{settle_in_hand, Obligations};
use crate::engine::failover;
use crate::engine::forward;
use crate::engine::loopers;
use crate::engine::refusal;
use crate::engine::Action;
use crate::engine::HeaderEdits;
use crate::engine::LooperTrace;
use crate::engine::Routed;
use crate::engine::Services;
use crate::engine::Trace;
use crate::engine::{PluginAction, PluginOutcome};
use crate::llm::{ChatRequest, Headers};
use std::sync::Arc;

/// What the decision phase settled.
pub(in crate::engine) struct Decided<'s> {
    /// The evidence so far.
    pub trace: Trace,
    /// The model chosen (the identity's default when no decision matched).
    pub chosen: usize,
    /// The winning decision.
    pub decision: Option<&'s Decision>,
    /// Sub-request depth (0 for a client).
    pub depth: u32,
    /// The last user message's embedding, when the identity computes it.
    pub query: Option<Arc<Vec<f32>>>,
}

/// Carries out the decision (none: the identity's default) for `request`.
pub(in crate::engine) async fn carry_out(
    snapshot: &Snapshot,
    services: &Services,
    identity: &Identity,
    headers: &Headers,
    mut request: ChatRequest,
    decided: Decided<'_>,
) -> Routed {
    let Decided {
        mut trace,
        chosen,
        decision,
        depth,
        query,
    } = decided;
    let state = services.state.as_ref();
    let mut edits = HeaderEdits::default();
    let decision_plugins = decision.map_or(&[][..], |d| d.plugins.as_slice());
    let plugins = identity.plugins.iter().chain(decision_plugins);
    let deferred = plugins::Deferred::of(plugins.clone());
    // The cache keys the client's request as sent, before any plugin rewrites it.
    let model = &snapshot.models[chosen];
    let cache_key = deferred
        .cache
        .map(|rule| cache::key(rule, &trace, &model.name, headers, &request));
    let stream = request.stream;
    let applied = match plugins::apply(snapshot, plugins, &mut request, &mut edits, &mut trace) {
        Ok(applied) => applied,
        Err(error) => {
            let mut refused = refusal(snapshot, error);
            refused.trace.identity = trace.identity;
            refused.trace.identity_version = trace.identity_version;
            refused.trace.signals = trace.signals;
            refused.trace.decision = trace.decision;
            refused.trace.plugins = trace.plugins;
            return refused;
        }
    };
    if let Some(top_k) = applied.tool_top_k {
        let query = query.as_deref().map(Vec::as_slice);
        let action = tools::select(snapshot, &mut request, query, top_k).await;
        let action = PluginAction::new("tool_selection", PluginOutcome::Applied, action);
        trace.plugins.push(action);
    }
    // The context an answer must be grounded in, as the models see it.
    let grounding = deferred
        .grounding
        .map(|rule| GroundingCheck::new(rule, &request));
    let mut ticket = None;
    let (mut routed, contract) = if let Some(model) = applied.reroute {
        // A guard sends the request to its designated model: no looper, no session pin.
        trace.selection_reason = format!(
            "rerouted by a guard plugin to {}",
            snapshot.models[model].name
        )
        .into();
        (forward(trace, request, &snapshot.models[model]), None)
    } else {
        // Personal data is never cached: a request whose values were masked is neither looked
        // up nor kept (the kept answer would hold the restored values).
        let masked = applied.masker.is_some();
        if let (Some(_), true) = (deferred.cache, masked) {
            let detail = "personal data";
            let action = PluginAction::new(cache::PLUGIN, PluginOutcome::Bypassed, detail);
            trace.plugins.push(action);
        }
        if let (Some(rule), Some(key), false) = (deferred.cache, cache_key, masked) {
            let query = query.clone();
            let consulted = cache::consult(state, rule, key, query, headers, stream).await;
            let (found, action) = match consulted {
                Consulted::Hit(reply, action) => (Some(reply), action),
                Consulted::Miss(miss, action) => {
                    ticket = miss;
                    (None, action)
                }
            };
            trace.plugins.push(action);
            if let Some(reply) = found {
                trace.model = Some(model.name.clone());
                trace.provider_model = Some(model.provider_model.clone());
                return Routed {
                    action: Action::Respond(reply),
                    trace,
                };
            }
        }
        // The contract's instruction joins the request once: every later call — tentative,
        // panel, synthesis, escalation, a plain forward — carries it.
        let contract = decision
            .and_then(|d| d.contract.as_ref())
            .or(deferred.contract);
        if let Some(contract) = contract {
            contract::instruct(request.object_mut(), &contract.shape);
        }
        let looper = decision.and_then(|d| d.looper.as_ref().map(|l| (d, l)));
        let routed = match (looper, &services.client, depth) {
            (Some((decision, looper)), Some(client), 0) => {
                // A decision the failover excepts keeps its sub-calls on their models too.
                let failover = identity
                    .failover
                    .as_deref()
                    .filter(|policy| !policy.excepts(&decision.name));
                // Boxed, as every rarely taken path that awaits calls: the future of a plain
                // forward stays small, and it is moved and copied on every request.
                Box::pin(loopers::run(
                    snapshot, client, state, failover, decision, looper, request, trace,
                ))
                .await
            }
            (planned, _, _) => {
                if let (Some((_, looper)), None) = (planned, &services.client) {
                    // Offline (`explain`): the looper is shown, not run.
                    trace.looper = Some(LooperTrace::new(looper.name()));
                }
                let model = session::continue_session(
                    snapshot, state, identity, headers, &request, &mut trace, chosen,
                )
                .await;
                forward(trace, request, &snapshot.models[model])
            }
        };
        (routed, contract.cloned().map(Box::new))
    };
    if let (Action::Forward(forward), 0) = (&mut routed.action, depth) {
        // A looper's last step and a guard's reroute stay where they were sent.
        let planned = routed.trace.looper.is_none()
            && forward.fallback.is_none()
            && applied.reroute.is_none();
        if let (true, Some(index)) = (planned, snapshot.model_index(&forward.model)) {
            let scores = &routed.trace.scores;
            let (body, stream) = (&forward.body, forward.stream);
            forward.failover =
                failover::plan(snapshot, identity, decision, scores, index, body, stream);
        }
    }
    let obligations = Obligations {
        contract,
        answer_guard: deferred.answer_guard,
        grounding: grounding.map(Box::new),
        restore: applied.masker,
        keep: ticket,
        translate: None,
    };
    // The obligations (and header edits) go with a forwarded request, or are settled now on an
    // answer already in hand (whose contract was enforced where it was made). That settling is
    // boxed: held inline, its future would size every request's routing future.
    match &mut routed.action {
        Action::Forward(forward) => {
            forward.headers = edits;
            forward.obligations = obligations;
        }
        Action::Respond(reply) => {
            let trace = &mut routed.trace;
            Box::pin(settle_in_hand(snapshot, state, obligations, reply, trace)).await;
        }
    }
    routed
}
