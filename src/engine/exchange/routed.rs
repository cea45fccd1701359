//! A routed request becoming a step: forwarded upstream (the forwarded request's state kept for
//! its response phases, or parked for the failover filter when they are skipped), or answered
//! now. Either way it is counted, its run remembered for outcomes, and its record begun.

use super::record::from_trace;
use super::{BodyMode, Exchange, Outcome, Step};
use crate::engine::{Action, Fault, ResponsePath, Routed, Trace};
use crate::llm::UsageScanner;
use crate::observability::metrics::{
    FallbackLabels, PluginLabels, ReplyLabels, RouteLabels, SignalLabels, TenantLabels,
    TenantRefusalLabels,
};
use crate::state::{now_ms, Run, RunId};
use std::sync::Arc;
use std::time::Instant;

/// The header that bounds Envoy's wait for the upstream's response headers (its per-try
/// timeout); needs `mutation_rules: { allow_envoy: true }` on the ext_proc filter.
const FIRST_BYTE_HEADER: &str = "x-envoy-upstream-rq-per-try-timeout-ms";

/// A forwarded request, while its response comes.
pub(super) struct Forwarded {
    /// Shared with the request parked for the failover filter (when the response phases are
    /// skipped), so parking copies nothing; written through `Arc::make_mut`.
    pub(super) trace: Arc<Trace>,
    pub(super) model: crate::config::Name,
    pub(super) stream: bool,
    pub(super) at: Instant,
    pub(super) estimated_prompt_tokens: u64,
    pub(super) first_chunk: Option<Instant>,
    /// Set while a 2xx response body is observed for latency and usage.
    pub(super) scanner: Option<UsageScanner>,
    /// The answer to give instead of a failed upstream response (ReMoM's evidence).
    pub(super) fallback: Option<Box<crate::engine::Reply>>,
    /// What the answer owes, settled in the order [`crate::engine::answer::obligations`] declares;
    /// each is taken once settled.
    pub(super) obligations: crate::engine::Obligations,
    /// The forwarded request body, while a contract repair may continue its conversation.
    pub(super) repair_request: Vec<u8>,
    /// How the response body comes: BUFFERED when a contract check may repair it.
    pub(super) body_mode: BodyMode,
    /// A streamed response's bytes, collected for its contract check.
    pub(super) collected: Vec<u8>,
    /// The stream's restorer (of the masked values), once the response streams.
    pub(super) restorer: Option<crate::engine::answer::pii_mask::SseRestorer>,
    /// Takes out the usage chunk mom-router asked for and the client did not, once the
    /// response streams.
    pub(super) stripper: Option<crate::llm::usage_strip::UsageStripper>,
    /// The upstream's status, once its headers came.
    pub(super) status: u16,
    /// The stream's translator into the client's protocol, once the response streams.
    pub(super) translator: Option<crate::protocol::StreamTranslator>,
    /// The answer as the client received it, collected for the cache.
    pub(super) answer: Vec<u8>,
    /// How a failure before the first byte is served by another model.
    pub(super) failover: Option<Box<crate::engine::failover::Plan>>,
}

impl Exchange {
    /// The step a routed request takes: forwarded (its response then watched, or parked for
    /// the failover filter), or answered now; counted, remembered and recorded either way.
    pub(super) fn finish(&mut self, routed: Routed) -> Step {
        let Routed { action, mut trace } = routed;
        for action in &trace.plugins {
            let labels = PluginLabels {
                plugin: action.plugin,
                outcome: action.outcome.name(),
            };
            self.metrics.plugin_actions.get_or_create(&labels).inc();
        }
        for handover in &trace.handovers {
            let labels = FallbackLabels {
                from: handover.from.clone(),
                to: handover.to.clone(),
                reason: handover.reason.clone(),
            };
            self.metrics.fallbacks.get_or_create(&labels).inc();
        }
        self.count_tenant(&trace);
        for result in trace.signals.iter().filter(|r| r.error.is_some()) {
            self.metrics
                .signal_errors
                .get_or_create(&SignalLabels {
                    signal: result.name.to_string(),
                })
                .inc();
        }
        match action {
            Action::Forward(mut forward) => {
                let labels = RouteLabels {
                    identity: trace.identity.clone().unwrap_or_default(),
                    decision: trace.decision_name(),
                    model: forward.model.clone(),
                };
                self.metrics.routed.get_or_create(&labels).inc();
                tracing::debug!(
                    identity = trace.identity.as_deref().unwrap_or_default(),
                    decision = trace.decision_label(),
                    model = %forward.model,
                    algorithm = trace.algorithm,
                    "routed"
                );
                let run_id = RunId::random();
                // The run is credited to what the request was counted under.
                let run = Run {
                    identity: labels.identity,
                    decision: labels.decision,
                    model: labels.model,
                };
                self.services.state.remember_run(run_id, run);
                trace.run_id = Some(run_id);
                if let Some(traced) = &mut self.traced {
                    let traceparent = traced.forward();
                    forward
                        .headers
                        .set
                        .push(("traceparent".to_owned(), traceparent));
                }
                if self.keeps_record() {
                    self.record = Some(Box::new(from_trace(
                        &self.snapshot,
                        &trace,
                        now_ms(),
                        ResponsePath::Upstream,
                    )));
                }
                let (model, stream) = (forward.model.clone(), forward.stream);
                let fallback = forward.fallback.take();
                let obligations = std::mem::take(&mut forward.obligations);
                let repair_request = match &obligations.contract {
                    Some(contract) if contract.repair => forward.body.clone(),
                    _ => Vec::new(),
                };
                let estimated_prompt_tokens = forward.estimated_prompt_tokens;
                let mut failover = forward.failover.take();
                let declared = self.snapshot.model(&model);
                if let Some(timeout) = declared.and_then(|m| m.first_byte_timeout) {
                    // Envoy answers 504 when the headers take longer (a failover then runs).
                    let ms = timeout.as_millis().to_string();
                    forward.headers.set.push((FIRST_BYTE_HEADER.to_owned(), ms));
                }
                let capacity = declared.and_then(|m| m.max_concurrency);
                let pool = &self.services.state.pool;
                self.in_flight = capacity.and_then(|_| pool.start(&model));
                let trace = Arc::new(trace);
                if let (true, Some(run_id)) = (self.unwatched, &trace.run_id) {
                    if let Some(plan) = failover.take() {
                        // No response phase will see a failure: the failover filter's will.
                        let trace = Arc::clone(&trace);
                        let in_flight = self.in_flight.take();
                        let waiting = crate::engine::failover::Waiting {
                            plan,
                            trace,
                            in_flight,
                        };
                        self.ticket = Some(self.services.parked.park(*run_id, waiting));
                    }
                }
                let outcome = if self.unwatched {
                    Outcome::with_headers(&trace)
                } else {
                    Outcome::of(&trace, ResponsePath::Upstream)
                };
                self.forwarded = Some(Box::new(Forwarded {
                    trace,
                    model,
                    stream,
                    at: Instant::now(),
                    estimated_prompt_tokens,
                    first_chunk: None,
                    scanner: None,
                    fallback,
                    obligations,
                    repair_request,
                    body_mode: BodyMode::Unchanged,
                    collected: Vec::new(),
                    restorer: None,
                    stripper: None,
                    status: 0,
                    translator: None,
                    answer: Vec::new(),
                    failover,
                }));
                Step::Forward { forward, outcome }
            }
            Action::Respond(reply) => {
                // No upstream call: the tenant pays for any looper calls made.
                self.settle_admission(&trace, None);
                let chat = trace.identity.is_some() || trace.error.is_some();
                if chat {
                    // A chat answer mom-router gives itself (a cache hit, a looper's answer) can
                    // receive outcomes like a forwarded one; a refusal's id finds its record.
                    let run_id = RunId::random();
                    if let (Some(model), true) = (&trace.model, reply.succeeded()) {
                        let run = Run {
                            identity: trace.identity.clone().unwrap_or_default(),
                            decision: trace.decision_name(),
                            model: model.clone(),
                        };
                        self.services.state.remember_run(run_id, run);
                    }
                    trace.run_id = Some(run_id);
                }
                if self.keeps_record() && chat {
                    let mut record =
                        from_trace(&self.snapshot, &trace, now_ms(), ResponsePath::Immediate);
                    record.status = u32::from(reply.status);
                    self.record = Some(Box::new(record));
                }
                self.count_contract(&trace);
                self.metrics
                    .replied
                    .get_or_create(&ReplyLabels {
                        code: reply.code.label().to_owned(),
                        status: reply.status,
                    })
                    .inc();
                match trace.error {
                    Some((code @ "router_misconfigured", Fault::Internal)) => {
                        tracing::error!(code, "refused request: mom-router or Envoy misconfigured");
                    }
                    Some((code, Fault::Internal)) => {
                        // Overload, a failing model or upstream: counted in mom_immediate_replies_total.
                        tracing::warn!(
                            code,
                            "refused request: a model, guard or looper could not answer"
                        );
                    }
                    Some((code, Fault::Client)) => tracing::debug!(code, "refused request"),
                    None => {}
                }
                Step::reply(reply, &trace, ResponsePath::Immediate)
            }
        }
    }

    /// Counts a tenant's request: admitted, or refused over a limit.
    fn count_tenant(&self, trace: &Trace) {
        let Some(tenant) = &trace.tenant else {
            return;
        };
        match (&trace.admission, trace.error) {
            (Some(_), _) => {
                let labels = TenantLabels {
                    tenant: tenant.clone(),
                };
                self.metrics.tenant_requests.get_or_create(&labels).inc();
            }
            (None, Some((code, _))) => {
                let labels = TenantRefusalLabels {
                    tenant: tenant.clone(),
                    code,
                };
                self.metrics.tenant_refusals.get_or_create(&labels).inc();
            }
            (None, None) => {}
        }
    }
}
