//! Loopers: the bounded collaborations a decision's `looper` names, each behind [`RunLooper`] —
//! the confidence cascade, the ratings ensemble, ReMoM, the fusion panel and workflows.
//! [`run`] runs one and turns how it ended into the action: an answer in hand is an immediate
//! response, a final single-model step or a written synthesis is a forward (with the evidence
//! to fall back on), a failure is a refusal that still shows the steps taken. Every sub-call a
//! looper makes to one of its models fails over like a forwarded request ([`calls::Caller`]).

pub(in crate::engine) mod calls;
pub(in crate::engine) mod cascade;
pub(in crate::engine) mod fusion;
pub(in crate::engine) mod plan;
pub(in crate::engine) mod ratings;
pub(in crate::engine) mod remom;
pub(in crate::engine) mod workflows;

use crate::config::{
    ConfidenceLooper, Decision, Failover, FusionLooper, Looper, RatingsLooper, RemomLooper,
    Snapshot, WorkflowsLooper,
};
use crate::engine::{forward, refusal, Action, Reply, RouteError, Routed, Trace};
use crate::llm::{ChatRequest, LlmClient};
use crate::state::StateStore;
use calls::Caller;

/// What a looper reads besides the request: the policy, its sub-calls, the learned state and
/// the decision whose candidates it works with.
pub(in crate::engine) struct LooperContext<'a> {
    /// The policy that decided.
    pub snapshot: &'a Snapshot,
    /// Sub-requests through Envoy's internal listener, failing over per the identity.
    pub caller: Caller<'a>,
    /// Ratings and statistics.
    pub state: &'a StateStore,
    /// The winning decision.
    pub decision: &'a Decision,
}

/// How a looper ended, when it did not fail.
pub(in crate::engine) enum Ended {
    /// An answer in hand, returned as it is.
    Answer(Reply),
    /// The client's own request goes to this model (an index into the snapshot's models).
    Forward(usize),
    /// A request the looper wrote is forwarded, with the evidence to answer from if it fails.
    Synthesis(Box<remom::Synthesis>),
}

/// A bounded collaboration of models behind one decision. Each records its calls in
/// `trace.looper` as it goes, so a failure still shows the steps taken.
pub(in crate::engine) trait RunLooper {
    /// Runs the looper for `request`.
    async fn run(
        &self,
        with: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError>;
}

impl RunLooper for ConfidenceLooper {
    async fn run(
        &self,
        w: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        let ended =
            cascade::confidence_cascade(w.snapshot, &w.caller, w.decision, self, request, trace)
                .await?;
        Ok(match ended {
            cascade::Ending::Answer(reply) => Ended::Answer(reply),
            cascade::Ending::Forward(model) => Ended::Forward(model),
        })
    }
}

impl RunLooper for RatingsLooper {
    async fn run(
        &self,
        w: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        let (snapshot, caller, state, decision) = (w.snapshot, &w.caller, w.state, w.decision);
        ratings::ratings_ensemble(snapshot, caller, state, decision, self, request, trace)
            .await
            .map(Ended::Answer)
    }
}

impl RunLooper for RemomLooper {
    async fn run(
        &self,
        w: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        remom::remom(w.snapshot, &w.caller, w.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl RunLooper for FusionLooper {
    async fn run(
        &self,
        w: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        fusion::fusion(w.snapshot, &w.caller, w.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl RunLooper for WorkflowsLooper {
    async fn run(
        &self,
        w: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        workflows::workflows(w.snapshot, &w.caller, w.decision, self, request, trace)
            .await
            .map(|s| Ended::Synthesis(Box::new(s)))
    }
}

impl RunLooper for Looper {
    async fn run(
        &self,
        with: &LooperContext<'_>,
        request: &ChatRequest,
        trace: &mut Trace,
    ) -> Result<Ended, RouteError> {
        match self {
            Self::Confidence(looper) => looper.run(with, request, trace).await,
            Self::Ratings(looper) => looper.run(with, request, trace).await,
            Self::Remom(looper) => looper.run(with, request, trace).await,
            Self::Fusion(looper) => looper.run(with, request, trace).await,
            Self::Workflows(looper) => looper.run(with, request, trace).await,
        }
    }
}

/// Runs `looper` of `decision` for `request` (its sub-calls failing over per the identity's
/// `failover`), and totals its calls' energy and its time.
#[allow(
    clippy::too_many_arguments,
    reason = "the looper's inputs, each borrowed as it is"
)]
pub(in crate::engine) async fn run(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    failover: Option<&Failover>,
    decision: &Decision,
    looper: &Looper,
    request: ChatRequest,
    mut trace: Trace,
) -> Routed {
    let started = std::time::Instant::now();
    let own: Vec<usize> = decision.candidates.iter().map(|c| c.model).collect();
    let with = LooperContext {
        snapshot,
        caller: Caller::new(snapshot, client, state, failover, &own),
        state,
        decision,
    };
    let ended = looper.run(&with, &request, &mut trace).await;
    with.caller.settle(&mut trace);
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

/// The refusal for a failed looper, keeping the steps it took and the contract check.
fn failed(snapshot: &Snapshot, error: RouteError, trace: Trace) -> Routed {
    let mut refused = refusal(snapshot, error);
    refused.trace.looper = trace.looper;
    refused.trace.contract = trace.contract;
    refused.trace.failover = trace.failover;
    refused.trace.handovers = trace.handovers;
    refused
}
