//! A failed upstream response served by another model. Two streams see failures: the
//! forwarding stream itself when it watches the response (its response-headers phase), and the
//! stream Envoy's failover filter opens for a failed response whose forwarding stream skipped
//! the response phases (it finds the parked request by run id). Both run the engine's
//! [`crate::engine::failover::fail_over`] and answer with the fallback's response, or pass the
//! failure on when no model answered.

use super::{Exchange, FailoverPart, Head, Pending, Step, LOOPER_MARGIN, MAX_MESSAGE_TIMEOUT};
use crate::engine::failover::{self, FailedOver, Plan, Waiting};
use crate::engine::{Reply, ResponsePath, Trace};
use crate::observability::metrics::FallbackLabels;
use std::sync::Arc;

/// A failed response waiting for its failover, and its status.
pub(super) struct Failure {
    /// Which stream saw it, and what it holds.
    seen: Seen,
    /// The failed response's status.
    status: u16,
}

/// Where a failed response was seen.
enum Seen {
    /// Seen by the forwarding stream: its plan, the failed response's headers.
    Watched(Box<Plan>, Head),
    /// Seen by the failover filter's stream: the parked request.
    Parked(Box<Waiting>),
}

impl Exchange {
    /// The failover a response's headers call for, held for [`Exchange::resume`]: Envoy is
    /// asked to wait for its deadline. `Err` gives the headers back when there is none.
    #[allow(
        clippy::result_large_err,
        reason = "the headers come back by value on every response: boxing them would allocate"
    )]
    pub(super) fn hold_failure(&mut self, message: Head) -> Result<Step, Head> {
        let status = message.headers.get(":status");
        let status = status.and_then(|s| s.parse::<u16>().ok());
        if self.services.client.is_none() || !status.is_some_and(failover::fails_over) {
            return Err(message);
        }
        let seen = if self.proxy.failover == FailoverPart::Stream {
            match message.run_id.and_then(|id| self.services.parked.take(id)) {
                Some(mut waiting) => {
                    // The failed model is no longer busy with it.
                    waiting.in_flight = None;
                    Seen::Parked(Box::new(waiting))
                }
                None => return Err(message),
            }
        } else {
            match self.forwarded.as_mut().and_then(|f| f.failover.take()) {
                Some(plan) => Seen::Watched(plan, message),
                None => return Err(message),
            }
        };
        // The failed model is no longer busy with it.
        self.in_flight = None;
        let deadline = match &seen {
            Seen::Watched(plan, _) => plan.policy.deadline,
            Seen::Parked(waiting) => waiting.plan.policy.deadline,
        };
        let status = status.unwrap_or_default();
        self.pending = Some(Pending::FailOver(Failure { seen, status }));
        Ok(Step::Wait(
            (deadline + LOOPER_MARGIN).min(MAX_MESSAGE_TIMEOUT),
        ))
    }

    /// Runs a held failover: the fallback's answer, or the failure passed on.
    pub(super) async fn fail_over(&mut self, failure: Failure) -> Step {
        let snapshot = Arc::clone(&self.snapshot);
        let Some(client) = self.services.client.clone() else {
            return Step::pass_response_headers();
        };
        let state = Arc::clone(&self.services.state);
        let Failure { seen, status } = failure;
        let reason = status.to_string();
        match seen {
            Seen::Watched(plan, message) => {
                let ended = failover::fail_over(&snapshot, &client, &state, &plan, reason).await;
                self.count_fallbacks(&ended);
                let chain = ended.label(&snapshot);
                let Some(forwarded) = &mut self.forwarded else {
                    return self.on_response_headers(message);
                };
                // A looper's sub-calls may have failed over before: both chains are shown.
                let shown = Arc::make_mut(&mut forwarded.trace);
                let chain = match shown.failover.take() {
                    Some(earlier) => format!("{earlier}; {chain}"),
                    None => chain,
                };
                shown.failover = Some(chain.clone());
                if let Some(record) = &mut self.record {
                    record.fallback = chain;
                }
                let Some((model, relayed)) = ended.answered else {
                    // No model answered: the failure goes on, translated as any failure is.
                    return self.on_response_headers(message);
                };
                let trace = Arc::make_mut(&mut forwarded.trace);
                set_model(&snapshot, trace, model);
                let usage = usage_of(&relayed);
                let mut reply = reply_of(relayed);
                let obligations = std::mem::take(&mut forwarded.obligations);
                crate::engine::answer::obligations::settle_in_hand(
                    &snapshot,
                    &state,
                    obligations,
                    &mut reply,
                    trace,
                )
                .await;
                if let Some(protocol) = plan.protocol {
                    crate::engine::in_protocol(&mut reply, protocol);
                }
                if let Some(record) = &mut self.record {
                    record.model = snapshot.models[model].name.to_string();
                    record.provider_model = snapshot.models[model].provider_model.to_string();
                    record.status = u32::from(reply.status);
                    record.response_path = ResponsePath::Fallback.name().to_owned();
                }
                let step = Step::reply(reply, trace, ResponsePath::Fallback);
                // The tenant pays for the model that answered, as it reported.
                if let Some(forwarded) = &self.forwarded {
                    let answered = (&*snapshot.models[model].name, usage);
                    self.settle_admission(&forwarded.trace, Some(answered));
                }
                step
            }
            Seen::Parked(waiting) => {
                let plan = &waiting.plan;
                let ended = failover::fail_over(&snapshot, &client, &state, plan, reason).await;
                self.count_fallbacks(&ended);
                let chain = ended.label(&snapshot);
                let mut trace = Arc::unwrap_or_clone(waiting.trace);
                trace.failover = Some(chain.clone());
                match ended.answered {
                    Some((model, relayed)) => {
                        set_model(&snapshot, &mut trace, model);
                        Step::reply(reply_of(relayed), &trace, ResponsePath::Fallback)
                    }
                    None => Step::PassResponseHeaders {
                        set: vec![("x-mom-fallback", chain)],
                        remove: Vec::new(),
                        body: super::BodyMode::Unchanged,
                    },
                }
            }
        }
    }

    /// Counts each hand-over of `ended` in `mom_fallback_total`.
    fn count_fallbacks(&self, ended: &FailedOver) {
        let next = ended.failed.iter().skip(1).map(|a| a.model.clone()).chain(
            ended
                .answered
                .iter()
                .map(|(m, _)| self.snapshot.models[*m].name.to_string()),
        );
        for (attempt, to) in ended.failed.iter().zip(next) {
            let labels = FallbackLabels {
                from: attempt.model.clone(),
                to,
                reason: attempt.failure.clone(),
            };
            self.metrics.fallbacks.get_or_create(&labels).inc();
        }
    }
}

/// `trace` naming model `model` (an index into the snapshot's models) as the one that answered.
fn set_model(snapshot: &crate::config::Snapshot, trace: &mut Trace, model: usize) {
    let model = &snapshot.models[model];
    trace.model = Some(model.name.clone());
    trace.provider_model = Some(model.provider_model.clone());
}

/// The usage a fallback's answer reports (JSON or events), read as a forwarded answer's is.
fn usage_of(relayed: &crate::llm::client::Relayed) -> crate::llm::Usage {
    let events = relayed
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let mut scanner = crate::llm::UsageScanner::new(events);
    scanner.push(&relayed.body);
    scanner.finish().0
}

/// The fallback's answer as mom-router gives it: its status, content type and body.
fn reply_of(relayed: crate::llm::client::Relayed) -> Reply {
    let content_type = relayed
        .content_type
        .unwrap_or_else(|| "application/json".to_owned());
    let mut headers = vec![("content-type".to_owned(), content_type)];
    if headers[0].1.starts_with("text/event-stream") {
        headers.push(("cache-control".to_owned(), "no-cache".to_owned()));
    }
    Reply {
        status: relayed.status,
        body: relayed.body,
        headers,
        code: crate::engine::ReplyCode::Answer,
    }
}
