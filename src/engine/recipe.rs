//! Runs a decision's looper and turns how it ended into the action: an answer in hand is an
//! immediate response, a final single-model step is a forward (with the evidence to fall back
//! on), a failure is a refusal that still shows the steps taken.

use super::{forward, fusion, looper, ratings, refusal, remom, workflows};
use super::{Action, Routed, Trace};
use crate::config::{Decision, Looper, Snapshot};
use crate::llm::{ChatRequest, LlmClient};
use crate::state::StateStore;

/// Runs `looper` of `decision` for `request`, and totals its calls' energy and its time.
pub(super) async fn run(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    decision: &Decision,
    looper: &Looper,
    request: ChatRequest,
    trace: Trace,
) -> Routed {
    let started = std::time::Instant::now();
    let mut routed = run_recipe(snapshot, client, state, decision, looper, request, trace).await;
    if let Some(record) = routed.trace.looper.as_mut() {
        record.wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        record.step_energy = record
            .steps
            .iter()
            .map(|step| {
                snapshot
                    .model(&step.model)
                    .map_or(0.0, |model| model.energy_joules(step.latency_ms))
            })
            .collect();
        record.energy_joules = record.step_energy.iter().sum();
    }
    routed
}

async fn run_recipe(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    decision: &Decision,
    looper: &Looper,
    request: ChatRequest,
    mut trace: Trace,
) -> Routed {
    let synthesized = match looper {
        Looper::Remom(settings) => {
            remom::remom(snapshot, client, decision, settings, &request, &mut trace).await
        }
        Looper::Fusion(settings) => {
            fusion::fusion(snapshot, client, decision, settings, &request, &mut trace).await
        }
        Looper::Workflows(settings) => {
            workflows::workflows(snapshot, client, decision, settings, &request, &mut trace).await
        }
        Looper::Ratings(settings) => {
            let ended = ratings::ratings_ensemble(
                snapshot, client, state, decision, settings, &request, &mut trace,
            )
            .await;
            return match ended {
                Ok(reply) => Routed {
                    action: Action::Respond(reply),
                    trace,
                },
                Err(error) => failed(snapshot, error, trace),
            };
        }
        Looper::Confidence(settings) => {
            let ended = looper::confidence_cascade(
                snapshot, client, decision, settings, &request, &mut trace,
            )
            .await;
            return match ended {
                Ok(looper::Ending::Answer(reply)) => Routed {
                    action: Action::Respond(reply),
                    trace,
                },
                Ok(looper::Ending::Forward(model)) => {
                    forward(trace, request, &snapshot.models[model])
                }
                Err(error) => failed(snapshot, error, trace),
            };
        }
    };
    match synthesized {
        Ok(synthesis) => {
            let mut forward = synthesis.forward;
            forward.fallback = synthesis.fallback.map(Box::new);
            trace.model = Some(forward.model.clone());
            trace.provider_model = Some(forward.provider_model.clone());
            Routed {
                action: Action::Forward(forward),
                trace,
            }
        }
        Err(error) => failed(snapshot, error, trace),
    }
}

/// The refusal for a failed recipe, keeping the steps it took and the contract check.
fn failed(snapshot: &Snapshot, error: super::RouteError, trace: Trace) -> Routed {
    let mut refused = refusal(snapshot, error);
    refused.trace.looper = trace.looper;
    refused.trace.contract = trace.contract;
    refused
}
