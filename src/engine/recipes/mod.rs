//! Recipes: the bounded collaborations a decision's `looper` names, each behind [`Recipe`] —
//! the confidence cascade (`looper`), the ratings ensemble, ReMoM, the fusion panel and
//! workflows. [`run`] cooks one and turns how it ended into the action: an answer in hand is an
//! immediate response, a final single-model step or a written synthesis is a forward (with the
//! evidence to fall back on), a failure is a refusal that still shows the steps taken.

pub(in crate::engine) mod fusion;
pub(in crate::engine) mod looper;
pub(in crate::engine) mod ratings;
pub(in crate::engine) mod remom;
pub(in crate::engine) mod workflows;

use crate::config::{
    ConfidenceLooper, Decision, FusionLooper, Looper, RatingsLooper, RemomLooper, Snapshot,
    WorkflowsLooper,
};
use crate::engine::{forward, refusal, Action, Reply, RouteError, Routed, Trace};
use crate::llm::{ChatRequest, LlmClient};
use crate::state::StateStore;

/// What a recipe reads besides the request: the policy, the way to Envoy's internal listener,
/// the learned state and the decision whose candidates it works with.
pub(in crate::engine) struct Kitchen<'a> {
    /// The policy that decided.
    pub snapshot: &'a Snapshot,
    /// Sub-requests through Envoy's internal listener.
    pub client: &'a LlmClient,
    /// Ratings and statistics.
    pub state: &'a StateStore,
    /// The winning decision.
    pub decision: &'a Decision,
}

/// How a recipe ended, when it did not fail.
pub(in crate::engine) enum Ended {
    /// An answer in hand, returned as it is.
    Answer(Reply),
    /// The client's own request goes to this model (an index into the snapshot's models).
    Forward(usize),
    /// A request the recipe wrote is forwarded, with the evidence to answer from if it fails.
    Synthesis(Box<remom::Synthesis>),
}

/// A bounded collaboration of models behind one decision. Each records its calls in
/// `trace.looper` as it goes, so a failure still shows the steps taken.
pub(in crate::engine) trait Recipe {
    /// Runs the recipe for `request`.
    async fn cook(
        &self,
        kitchen: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError>;
}

impl Recipe for ConfidenceLooper {
    async fn cook(
        &self,
        k: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        let ended =
            looper::confidence_cascade(k.snapshot, k.client, k.decision, self, request, trace)
                .await?;
        Ok(match ended {
            looper::Ending::Answer(reply) => Ended::Answer(reply),
            looper::Ending::Forward(model) => Ended::Forward(model),
        })
    }
}

impl Recipe for RatingsLooper {
    async fn cook(
        &self,
        k: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        let (snapshot, client, state, decision) = (k.snapshot, k.client, k.state, k.decision);
        ratings::ratings_ensemble(snapshot, client, state, decision, self, request, trace)
            .await
            .map(Ended::Answer)
    }
}

impl Recipe for RemomLooper {
    async fn cook(
        &self,
        k: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        remom::remom(k.snapshot, k.client, k.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl Recipe for FusionLooper {
    async fn cook(
        &self,
        k: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        fusion::fusion(k.snapshot, k.client, k.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl Recipe for WorkflowsLooper {
    async fn cook(
        &self,
        k: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        workflows::workflows(k.snapshot, k.client, k.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl Recipe for Looper {
    async fn cook(
        &self,
        kitchen: &Kitchen<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        match self {
            Self::Confidence(recipe) => recipe.cook(kitchen, request, trace).await,
            Self::Ratings(recipe) => recipe.cook(kitchen, request, trace).await,
            Self::Remom(recipe) => recipe.cook(kitchen, request, trace).await,
            Self::Fusion(recipe) => recipe.cook(kitchen, request, trace).await,
            Self::Workflows(recipe) => recipe.cook(kitchen, request, trace).await,
        }
    }
}

/// Runs `looper` of `decision` for `request`, and totals its calls' energy and its time.
pub(in crate::engine) async fn run(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    decision: &Decision,
    looper: &Looper,
    request: ChatRequest,
    mut trace: Trace,
) -> Routed {
    let started = std::time::Instant::now();
    let kitchen = Kitchen {
        snapshot,
        client,
        state,
        decision,
    };
    let ended = looper.cook(&kitchen, &request, &mut trace).await;
    if let Some(record) = trace.looper.as_mut() {
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
    match ended {
        Ok(Ended::Answer(reply)) => Routed {
            action: Action::Respond(reply),
            trace,
        },
        Ok(Ended::Forward(model)) => forward(trace, request, &snapshot.models[model]),
        Ok(Ended::Synthesis(synthesis)) => {
            let remom::Synthesis {
                mut forward,
                fallback,
            } = *synthesis;
            forward.fallback = fallback.map(Box::new);
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
fn failed(snapshot: &Snapshot, error: RouteError, trace: Trace) -> Routed {
    let mut refused = refusal(snapshot, error);
    refused.trace.looper = trace.looper;
    refused.trace.contract = trace.contract;
    refused
}
