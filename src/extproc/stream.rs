//! One ext_proc stream (one HTTP request) as a state struct with one function per phase.

mod checked;
mod failover;
mod observed;
mod response_headers;
mod settle;
mod traced;

use super::convert;
use crate::config::Snapshot;
use crate::engine::Services;
use crate::engine::{self, Action, Fault, ResponsePath, RouteError, Routed, Trace};
use crate::llm::{Headers, UsageScanner};
use crate::observability::metrics::{
    FallbackLabels, PhaseLabels, PluginLabels, ReplyLabels, RouteLabels, SignalLabels,
};
use crate::observability::Metrics;
use crate::state::{now_ms, Run};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use std::sync::Arc;
use std::time::Instant;

/// Time added to a looper's deadline when asking Envoy to wait, for routing and rewriting.
const LOOPER_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The header that bounds Envoy's wait for the upstream's response headers (its per-try
/// timeout); needs `mutation_rules: { allow_envoy: true }` on the ext_proc filter.
const FIRST_BYTE_HEADER: &str = "x-envoy-upstream-rq-per-try-timeout-ms";

/// The longest wait asked of Envoy: the `max_message_timeout` of `envoy/quickstart.yaml`. Envoy
/// ignores a larger override, so a looper deadline above it is cut to fit.
pub const MAX_MESSAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A fresh run id: 32 hex digits.
fn new_run_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// State of one HTTP request as it moves through the phases.
pub struct StreamState {
    snapshot: Arc<Snapshot>,
    metrics: Arc<Metrics>,
    services: Services,
    headers: Headers,
    /// Set once the request was forwarded: the evidence, the chosen model and stream flag.
    forwarded: Option<Forwarded>,
    /// A complete body held while Envoy is asked for more time: a request body of a policy
    /// with loopers, or a response body whose contract repair needs a model call. Handled by
    /// [`StreamState::resume`] before the next message is read.
    pending: Option<Pending>,
    /// The run record, filled as the request goes and sent when the stream ends.
    record: Option<crate::records::RunRecord>,
    /// The last user message, for the run record, when prompts are recorded.
    prompt: Option<String>,
    /// Where the run record goes, when records are on.
    records: Option<crate::records::RecordSink>,
    /// Where the stream's spans go, when they are exported.
    spans: Option<crate::observability::otlp::SpanSink>,
    /// The stream's spans, once its request headers came (when spans are exported).
    traced: Option<traced::Traced>,
    /// The client's trace context, passed on to sub-requests when spans are not exported.
    relay: Option<Arc<crate::observability::spans::Calls>>,
    /// Envoy adds the `x-mom-*` response headers from dynamic metadata (its ext_proc stream
    /// said so), so a response that owes nothing need not come back here.
    envoy_adds_headers: bool,
    /// This request's response phases are skipped: its headers travel in the metadata.
    unwatched: bool,
    /// Envoy runs the failover filter: a failed response whose phases are skipped still
    /// reaches mom-router, on a stream of its own.
    failover_filter: bool,
    /// This stream is the failover filter's: it sees one failed response.
    failover_stream: bool,
    /// This request, parked for the failover filter while its response phases are skipped.
    ticket: Option<crate::engine::failover::Ticket>,
    /// This request's place in its model's in-flight count (a model that declares its slots),
    /// until the stream ends or the model fails.
    in_flight: Option<crate::state::InFlight>,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        if let Some(forwarded) = &self.forwarded {
            // Set in the response phase.
            record.contract = forwarded.trace.contract_label().unwrap_or_default();
            record.grounding = forwarded.trace.grounding_label().unwrap_or_default();
        }
        if let Some(traced) = self.traced.take() {
            traced.send(&record);
        }
        if let Some(sink) = &self.records {
            record.prompt = self.prompt.take();
            sink.send(record);
        }
    }
}

/// A body waiting for [`StreamState::resume`].
enum Pending {
    /// Route it (loopers may run).
    Request(HttpBody),
    /// Settle it: contract repair, answer guard, grounding check (the answer parsed once).
    Settle(crate::engine::answer::held::Held),
    /// Serve a failed response by the next model.
    FailOver(failover::Failure),
}

/// The deadline of a contract repair made in the response phase.
const REPAIR_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Bytes of a streamed response collected for its contract check; past this, the check reads
/// what was collected.
const MAX_COLLECTED: usize = 4 << 20;

struct Forwarded {
    trace: Trace,
    model: String,
    stream: bool,
    at: Instant,
    estimated_prompt_tokens: u64,
    first_chunk: Option<Instant>,
    /// Set while a 2xx response body is observed for latency and usage.
    scanner: Option<UsageScanner>,
    /// The answer to give instead of a failed upstream response (ReMoM's evidence).
    fallback: Option<Box<crate::engine::Reply>>,
    /// What the answer owes, settled in the order [`crate::engine::answer::obligations`] declares;
    /// each is taken once settled.
    obligations: crate::engine::Obligations,
    /// The forwarded request body, while a contract repair may continue its conversation.
    repair_request: Vec<u8>,
    /// How the response body comes: BUFFERED when a contract check may repair it.
    body_mode: convert::BodyMode,
    /// A streamed response's bytes, collected for its contract check.
    collected: Vec<u8>,
    /// The stream's restorer (of the masked values), once the response streams.
    restorer: Option<crate::engine::answer::pii_mask::SseRestorer>,
    /// The upstream's status, once its headers came.
    status: u16,
    /// The stream's translator into the client's protocol, once the response streams.
    translator: Option<crate::protocol::StreamTranslator>,
    /// The answer as the client received it, collected for the cache.
    answer: Vec<u8>,
    /// How a failure before the first byte is served by another model.
    failover: Option<Box<crate::engine::failover::Plan>>,
}

impl StreamState {
    /// A new stream reading one snapshot for its whole life.
    pub fn new(snapshot: Arc<Snapshot>, metrics: Arc<Metrics>, services: Services) -> Self {
        Self {
            snapshot,
            metrics,
            services,
            headers: Headers::default(),
            forwarded: None,
            pending: None,
            record: None,
            prompt: None,
            records: None,
            spans: None,
            traced: None,
            relay: None,
            envoy_adds_headers: false,
            unwatched: false,
            failover_filter: false,
            failover_stream: false,
            ticket: None,
            in_flight: None,
        }
    }

    /// Envoy runs the failover filter (its ext_proc stream said so): a request whose response
    /// phases are skipped still fails over.
    pub fn with_failover_filter(mut self, present: bool) -> Self {
        self.failover_filter = present;
        self
    }

    /// This stream is the failover filter's own.
    pub fn as_failover_stream(mut self, failover: bool) -> Self {
        self.failover_stream = failover;
        self
    }

    /// Envoy adds the `x-mom-*` response headers from the `headers` field of the dynamic
    /// metadata: a Chat Completions request whose response can owe nothing skips the response
    /// phases (one ext_proc round trip fewer, none per streamed chunk).
    pub fn with_envoy_adding_headers(mut self, adds: bool) -> Self {
        self.envoy_adds_headers = adds;
        self
    }

    /// Sends this request's run record to `records` when the stream ends.
    pub fn with_records(mut self, records: Option<crate::records::RecordSink>) -> Self {
        self.records = records;
        self
    }

    /// Sends this request's spans to `spans` when the stream ends.
    pub fn with_spans(mut self, spans: Option<crate::observability::otlp::SpanSink>) -> Self {
        self.spans = spans;
        self
    }

    /// A run record is built when records or spans want it.
    fn keeps_record(&self) -> bool {
        self.records.is_some() || self.spans.is_some()
    }

    /// The collector of this request's call spans (when spans are exported), or the relay of
    /// the client's trace context.
    fn calls(&self) -> Option<Arc<crate::observability::spans::Calls>> {
        match &self.traced {
            Some(traced) => Some(traced.calls()),
            None => self.relay.clone(),
        }
    }

    /// Handles a body held back by [`StreamState::handle`]; `None` when nothing is held.
    pub async fn resume(&mut self) -> Option<ProcessingResponse> {
        let started = Instant::now();
        let calls = self.calls();
        let (phase, response) = match self.pending.take()? {
            Pending::Request(body) => ("request_body", self.on_request_body(body).await),
            Pending::Settle(answer) => (
                "response_body",
                crate::observability::spans::collecting(calls, self.settle(answer)).await,
            ),
            Pending::FailOver(failure) => ("response_headers", self.fail_over(failure).await),
        };
        self.note_refusal(&response);
        self.metrics
            .phase_seconds
            .get_or_create(&PhaseLabels { phase })
            .observe(started.elapsed().as_secs_f64());
        Some(response)
    }

    /// Handles one message from Envoy. `None` when the message carries no phase (nothing to
    /// answer).
    pub async fn handle(&mut self, message: ProcessingRequest) -> Option<ProcessingResponse> {
        let started = Instant::now();
        let metadata = message.metadata_context;
        let (phase, response) = match message.request? {
            Request::RequestHeaders(h) => (
                "request_headers",
                self.on_request_headers(h, metadata.as_ref()),
            ),
            Request::RequestBody(b) => match self.snapshot.looper_budget {
                // A looper may run: ask Envoy for its deadline first, route on the next poll.
                Some(budget) if b.end_of_stream => {
                    self.pending = Some(Pending::Request(b));
                    let wait = (budget + LOOPER_MARGIN).min(MAX_MESSAGE_TIMEOUT);
                    return Some(convert::extend_timeout(wait));
                }
                _ => ("request_body", self.on_request_body(b).await),
            },
            Request::ResponseHeaders(h) => match self.hold_failure(h, metadata.as_ref()) {
                // The failed response waits for the next model: Envoy is asked for the time.
                Ok(wait) => return Some(wait),
                Err(h) => ("response_headers", self.on_response_headers(h)),
            },
            Request::ResponseBody(b) => {
                let response = match self.held(b) {
                    Ok(answer) if self.must_wait(&answer) => {
                        // A repair call, the answer guard or the grounding check: ask Envoy to
                        // wait for it.
                        self.pending = Some(Pending::Settle(answer));
                        return Some(convert::extend_timeout(
                            (REPAIR_DEADLINE + LOOPER_MARGIN).min(MAX_MESSAGE_TIMEOUT),
                        ));
                    }
                    Ok(answer) => self.settle(answer).await,
                    Err(chunk) => self.on_response_body(&chunk),
                };
                self.note_refusal(&response);
                ("response_body", response)
            }
            Request::RequestTrailers(_) => {
                ("request_trailers", convert::continue_request_trailers())
            }
            Request::ResponseTrailers(_) => {
                ("response_trailers", convert::continue_response_trailers())
            }
        };
        self.metrics
            .phase_seconds
            .get_or_create(&PhaseLabels { phase })
            .observe(started.elapsed().as_secs_f64());
        Some(response)
    }

    fn on_request_headers(
        &mut self,
        message: HttpHeaders,
        metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>,
    ) -> ProcessingResponse {
        self.headers = convert::headers_from(message.headers.as_ref())
            .with_metadata(convert::metadata_from(metadata));
        if let Some(sink) = &self.spans {
            let sessions = self.snapshot.sessions.as_ref();
            let named = sessions.map_or(&[][..], |s| s.headers.as_slice());
            self.traced = Some(traced::Traced::new(sink.clone(), &self.headers, named));
        } else if let Some(traceparent) = self.headers.get("traceparent") {
            self.relay = Some(crate::observability::spans::Calls::relaying(traceparent));
        }
        match engine::on_request_headers(&self.snapshot, &self.headers, message.end_of_stream) {
            Some(routed) => self.finish(routed),
            None if self.envoy_adds_headers
                && !self.snapshot.response_work
                && (self.failover_filter || !self.snapshot.fails_over)
                && self.headers.path() == engine::CHAT_PATH =>
            {
                self.unwatched = true;
                convert::continue_request_headers_unwatched()
            }
            None => convert::continue_request_headers(),
        }
    }

    async fn on_request_body(&mut self, message: HttpBody) -> ProcessingResponse {
        if !message.end_of_stream {
            // Header changes only apply to a buffered body; routing a partial body would
            // silently mis-route, so refuse loudly instead.
            let error = RouteError::Protocol(
                "Envoy sent a partial request body; set request_body_mode: BUFFERED on the ext_proc filter",
            );
            let mut trace = Trace::empty(&self.snapshot);
            trace.error = Some((error.code(), error.fault()));
            return self.finish(Routed {
                action: Action::Respond(error.reply()),
                trace,
            });
        }
        if let Some(sink) = self.records.as_ref().filter(|sink| sink.include_prompts) {
            self.prompt = crate::records::prompt_of(&message.body, sink.redact);
        }
        let routing =
            engine::on_request_body(&self.snapshot, &self.services, &self.headers, &message.body);
        let routed = crate::observability::spans::collecting(self.calls(), routing).await;
        self.finish(routed)
    }

    fn finish(&mut self, routed: Routed) -> ProcessingResponse {
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
        for result in trace.signals.iter().filter(|r| r.error.is_some()) {
            self.metrics
                .signal_errors
                .get_or_create(&SignalLabels {
                    signal: result.name.clone(),
                })
                .inc();
        }
        match action {
            Action::Forward(mut forward) => {
                self.metrics
                    .routed
                    .get_or_create(&RouteLabels {
                        identity: trace.identity.clone().unwrap_or_default(),
                        decision: trace.decision_label().to_owned(),
                        model: forward.model.clone(),
                    })
                    .inc();
                tracing::debug!(
                    identity = trace.identity.as_deref().unwrap_or_default(),
                    decision = trace.decision_label(),
                    model = %forward.model,
                    algorithm = trace.algorithm,
                    "routed"
                );
                let run_id = new_run_id();
                self.services.state.remember_run(
                    run_id.clone(),
                    Run {
                        identity: trace.identity.clone().unwrap_or_default(),
                        decision: trace.decision_label().to_owned(),
                        model: forward.model.clone(),
                    },
                );
                trace.run_id = Some(run_id);
                if let Some(traced) = &mut self.traced {
                    let traceparent = traced.forward();
                    forward
                        .headers
                        .set
                        .push(("traceparent".to_owned(), traceparent));
                }
                if self.keeps_record() {
                    self.record = Some(crate::records::from_trace(
                        &self.snapshot,
                        &trace,
                        now_ms(),
                        ResponsePath::Upstream,
                    ));
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
                if let (true, Some(run_id)) = (self.unwatched, &trace.run_id) {
                    if let Some(plan) = failover.take() {
                        // No response phase will see a failure: the failover filter's will.
                        let trace = trace.clone();
                        let in_flight = self.in_flight.take();
                        let waiting = crate::engine::failover::Waiting {
                            plan,
                            trace,
                            in_flight,
                        };
                        self.ticket = Some(self.services.parked.park(run_id.clone(), waiting));
                    }
                }
                let response = convert::forward(forward, &trace, self.unwatched);
                self.forwarded = Some(Forwarded {
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
                    body_mode: convert::BodyMode::Unchanged,
                    collected: Vec::new(),
                    restorer: None,
                    status: 0,
                    translator: None,
                    answer: Vec::new(),
                    failover,
                });
                response
            }
            Action::Respond(reply) => {
                let chat = trace.identity.is_some() || trace.error.is_some();
                if chat {
                    // A chat answer mom-router gives itself (a cache hit, a looper's answer) can
                    // receive outcomes like a forwarded one; a refusal's id finds its record.
                    let run_id = new_run_id();
                    if let (Some(model), true) = (&trace.model, reply.succeeded()) {
                        let run = Run {
                            identity: trace.identity.clone().unwrap_or_default(),
                            decision: trace.decision_label().to_owned(),
                            model: model.clone(),
                        };
                        self.services.state.remember_run(run_id.clone(), run);
                    }
                    trace.run_id = Some(run_id);
                }
                if self.keeps_record() && chat {
                    let mut record = crate::records::from_trace(
                        &self.snapshot,
                        &trace,
                        now_ms(),
                        ResponsePath::Immediate,
                    );
                    record.status = u32::from(reply.status);
                    self.record = Some(record);
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
                convert::immediate(&reply, &trace)
            }
        }
    }
}
