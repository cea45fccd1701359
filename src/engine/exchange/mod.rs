//! One HTTP exchange through the router, phase by phase, whatever proxy sends it: the
//! request's headers and body routed by the engine, then the forwarded request's response —
//! its status (a failure served by the next model), its headers, its body observed, checked,
//! repaired, restored and translated — and the run record and spans written when it ends.
//! The proxy's adapter turns its wire messages into a [`Message`] and each [`Step`] back.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the exchange's state, the request phases, what is held for [`Exchange::resume`] |
//! | `routed.rs` | a routed request becoming a forward or a reply; the forwarded request's state |
//! | `response_headers.rs` | the response's status and headers, how its body is read |
//! | `checked.rs`, `settle.rs` | a streamed body chunk by chunk; a held body settled whole |
//! | `failover.rs` | a failed response served by the next model |
//! | `observed.rs`, `record.rs`, `traced.rs` | timings and usage; the run record; the spans |
//! | `step.rs` | the messages and steps exchanged with the proxy |

mod checked;
mod failover;
mod observed;
mod record;
mod response_headers;
mod routed;
mod settle;
mod step;
mod traced;

pub use step::{Body, BodyMode, Field, Head, HeaderSet, Message, Outcome, Step};

use super::{Action, RouteError, Routed, Services, Trace};
use crate::config::{ConfigStore, Snapshot};
use crate::llm::Headers;
use crate::observability::metrics::Phase;
use crate::observability::Metrics;
use crate::records::RecordSink;
use routed::Forwarded;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time added to a looper's deadline when asking the proxy to wait, for routing and rewriting.
const LOOPER_MARGIN: Duration = Duration::from_secs(2);

/// The longest wait asked of the proxy: the `max_message_timeout` of `envoy/quickstart.yaml`.
/// Envoy ignores a larger override, so a looper deadline above it is cut to fit.
pub const MAX_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline of a contract repair made in the response phase.
const REPAIR_DEADLINE: Duration = Duration::from_secs(20);

/// Bytes of a streamed response collected for its contract check; past this, the check reads
/// what was collected.
const MAX_COLLECTED: usize = 4 << 20;

/// What the proxy says of itself when it opens an exchange.
#[derive(Debug, Clone, Copy, Default)]
pub struct Proxy {
    /// The proxy adds the `x-mom-*` response headers from the outcome's `headers` field, so a
    /// response that owes nothing need not come back (its response phases are skipped).
    pub adds_headers: bool,
    /// This exchange's part in failover.
    pub failover: FailoverPart,
}

/// An exchange's part in failover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailoverPart {
    /// The proxy runs no failover filter: only a watched response fails over.
    #[default]
    None,
    /// The proxy runs the failover filter: a failed response whose phases are skipped still
    /// reaches mom-router, on an exchange of its own.
    Filter,
    /// This exchange is the failover filter's: it sees one failed response.
    Stream,
}

/// What every exchange shares: the configuration, metrics, services, and where run records and
/// spans go.
#[derive(Clone)]
pub struct Exchanges {
    store: Arc<ConfigStore>,
    metrics: Arc<Metrics>,
    services: Services,
    records: Option<RecordSink>,
    spans: Option<crate::observability::otlp::SpanSink>,
}

impl Exchanges {
    /// Exchanges reading policy from `store`, with `services` for state and sub-requests.
    pub fn new(store: Arc<ConfigStore>, metrics: Arc<Metrics>, services: Services) -> Self {
        Self {
            store,
            metrics,
            services,
            records: None,
            spans: None,
        }
    }

    /// Sends a run record of every chat request to `records`.
    pub fn with_records(mut self, records: Option<RecordSink>) -> Self {
        self.records = records;
        self
    }

    /// Sends the spans of every chat request to `spans`.
    pub fn with_spans(mut self, spans: Option<crate::observability::otlp::SpanSink>) -> Self {
        self.spans = spans;
        self
    }

    /// A new exchange on the current snapshot, counted among the active ones until dropped.
    pub fn open(&self, proxy: Proxy) -> Exchange {
        self.metrics.active_streams.inc();
        let mut exchange = Exchange::new(
            self.store.snapshot(),
            self.metrics.clone(),
            self.services.clone(),
        )
        .with_records(self.records.clone())
        .with_spans(self.spans.clone())
        .with_proxy(proxy);
        exchange.counted = true;
        exchange
    }
}

/// One HTTP request as it moves through the phases.
pub struct Exchange {
    snapshot: Arc<Snapshot>,
    metrics: Arc<Metrics>,
    services: Services,
    headers: Headers,
    /// Set once the request was forwarded: the evidence, the chosen model and stream flag.
    forwarded: Option<Box<Forwarded>>,
    /// A complete body held while Envoy is asked for more time: a request body of a policy
    /// with loopers, or a response body whose contract repair needs a model call. Handled by
    /// [`Exchange::resume`] before the next message is read.
    pending: Option<Pending>,
    /// The run record, filled as the request goes and sent when the stream ends.
    record: Option<Box<crate::records::RunRecord>>,
    /// The last user message, for the run record, when prompts are recorded.
    prompt: Option<String>,
    /// Where the run record goes, when records are on.
    records: Option<crate::records::RecordSink>,
    /// Where the stream's spans go, when they are exported.
    spans: Option<crate::observability::otlp::SpanSink>,
    /// The stream's spans, once its request headers came (when spans are exported).
    traced: Option<Box<traced::Traced>>,
    /// The client's trace context, passed on to sub-requests when spans are not exported.
    relay: Option<Arc<crate::observability::spans::Calls>>,
    /// What the proxy said of itself.
    proxy: Proxy,
    /// This request's response phases are skipped: its headers travel in the outcome.
    unwatched: bool,
    /// This request, parked for the failover filter while its response phases are skipped.
    ticket: Option<crate::engine::failover::Ticket>,
    /// This request's place in its model's in-flight count (a model that declares its slots),
    /// until the stream ends or the model fails.
    in_flight: Option<crate::state::InFlight>,
    /// Counted among the active exchanges (opened by [`Exchanges::open`]).
    counted: bool,
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.counted {
            self.metrics.active_streams.dec();
        }
        if let Some(forwarded) = &self.forwarded {
            // An answer whose usage was not read keeps its reservation; a failed call used
            // nothing (unless its failover settled for the model that answered).
            if !(200..300).contains(&forwarded.status) {
                self.settle_admission(&forwarded.trace, None);
            }
        }
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
            sink.send(*record);
        }
    }
}

/// A message waiting for [`Exchange::resume`].
enum Pending {
    /// Route it (loopers may run).
    Request(Body),
    /// Settle it: contract repair, answer guard, grounding check (the answer parsed once).
    Settle(crate::engine::answer::held::Held),
    /// Serve a failed response by the next model.
    FailOver(failover::Failure),
}

impl Exchange {
    /// A new exchange reading one snapshot for its whole life.
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
            proxy: Proxy::default(),
            unwatched: false,
            ticket: None,
            in_flight: None,
            counted: false,
        }
    }

    /// What the proxy said of itself when it opened the exchange.
    pub fn with_proxy(mut self, proxy: Proxy) -> Self {
        self.proxy = proxy;
        self
    }

    /// The proxy's stream broke before the exchange ended (counted).
    pub fn broke(&self) {
        self.metrics.stream_errors.inc();
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

    /// Handles a message held back by [`Exchange::handle`]; `None` when nothing is held.
    pub async fn resume(&mut self) -> Option<Step> {
        let started = Instant::now();
        let calls = self.calls();
        let (phase, step) = match self.pending.take()? {
            Pending::Request(body) => (Phase::RequestBody, self.on_request_body(body).await),
            Pending::Settle(answer) => (
                Phase::ResponseBody,
                crate::observability::spans::collecting(calls, self.settle(answer)).await,
            ),
            Pending::FailOver(failure) => (
                Phase::ResponseHeaders,
                Box::pin(self.fail_over(failure)).await,
            ),
        };
        self.note_refusal(&step);
        self.observe_phase(phase, started);
        Some(step)
    }

    /// Handles one message from the proxy. A message whose handling calls models is held for
    /// [`Exchange::resume`]: the step asks the proxy to wait for it.
    pub async fn handle(&mut self, message: Message) -> Step {
        let started = Instant::now();
        let (phase, step) = match message {
            Message::RequestHeaders(head) => (Phase::RequestHeaders, self.on_request_headers(head)),
            Message::RequestBody(body) => match self.snapshot.looper_budget {
                // A looper may run: ask for its deadline first, route on the next poll.
                Some(budget) if body.end_of_stream => {
                    self.pending = Some(Pending::Request(body));
                    return Step::Wait((budget + LOOPER_MARGIN).min(MAX_MESSAGE_TIMEOUT));
                }
                _ => (Phase::RequestBody, self.on_request_body(body).await),
            },
            Message::ResponseHeaders(head) => match self.hold_failure(head) {
                // The failed response waits for the next model.
                Ok(wait) => return wait,
                Err(head) => (Phase::ResponseHeaders, self.on_response_headers(head)),
            },
            Message::ResponseBody(body) => {
                let step = match self.held(body) {
                    Ok(answer) if self.must_wait(&answer) => {
                        // A repair call, the answer guard or the grounding check: ask the
                        // proxy to wait for it.
                        self.pending = Some(Pending::Settle(answer));
                        return Step::Wait(
                            (REPAIR_DEADLINE + LOOPER_MARGIN).min(MAX_MESSAGE_TIMEOUT),
                        );
                    }
                    Ok(answer) => self.settle(answer).await,
                    Err(chunk) => self.on_response_body(&chunk),
                };
                self.note_refusal(&step);
                (Phase::ResponseBody, step)
            }
            Message::RequestTrailers => (Phase::RequestTrailers, Step::PassRequestTrailers),
            Message::ResponseTrailers => (Phase::ResponseTrailers, Step::PassResponseTrailers),
        };
        self.observe_phase(phase, started);
        step
    }

    /// Times one phase's handling.
    fn observe_phase(&self, phase: Phase, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.observe_phase(phase, seconds);
    }

    fn on_request_headers(&mut self, head: Head) -> Step {
        self.headers = head.headers;
        if let Some(sink) = &self.spans {
            let sessions = self.snapshot.sessions.as_ref();
            let named = sessions.map_or(&[][..], |s| s.headers.as_slice());
            let traced = traced::Traced::new(sink.clone(), &self.headers, named);
            self.traced = Some(Box::new(traced));
        } else if let Some(traceparent) = self.headers.get("traceparent") {
            self.relay = Some(crate::observability::spans::Calls::relaying(traceparent));
        }
        match super::on_request_headers(&self.snapshot, &self.headers, head.end_of_stream) {
            Some(routed) => self.finish(routed),
            None if self.proxy.adds_headers
                && !self.snapshot.response_work
                && (self.proxy.failover == FailoverPart::Filter || !self.snapshot.fails_over)
                && self.headers.path() == super::CHAT_PATH =>
            {
                self.unwatched = true;
                Step::PassRequestHeaders {
                    watch_response: false,
                }
            }
            None => Step::PassRequestHeaders {
                watch_response: true,
            },
        }
    }

    async fn on_request_body(&mut self, body: Body) -> Step {
        if !body.end_of_stream {
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
            self.prompt = crate::records::prompt_of(&body.bytes, sink.redact);
        }
        // Boxed: routing is the stream's one large future (its signals, decision, plugins and
        // loopers nest inside it). Held inline, it would size every future that awaits it —
        // each step of the stream, the reply stream itself — and be copied with each of them.
        let routing = Box::pin(super::on_request_body(
            &self.snapshot,
            &self.services,
            &self.headers,
            &body.bytes,
        ));
        let routed = crate::observability::spans::collecting(self.calls(), routing).await;
        self.finish(routed)
    }
}
