//! One stream's spans: the request's own (a server span, `chat mom/auto`), the forwarded call
//! Envoy makes for it (a client span whose id the upstream request carries in `traceparent`),
//! and the calls made while routing and settling it (collected by [`spans::Calls`]). Assembled
//! from the run record when the stream ends and sent to the OTLP exporter.

use crate::llm::Headers;
use crate::observability::otlp::SpanSink;
use crate::observability::spans::{self, Calls, RequestTrace, Span, SpanId, SpanKind, Value};
use crate::records::RunRecord;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Session headers read for `gen_ai.conversation.id` when `sessions` is not configured.
const CONVERSATION_HEADERS: [&str; 2] = ["x-session-id", "x-conversation-id"];

/// The longest `gen_ai.conversation.id` kept; a longer header value is cut to it.
const MAX_CONVERSATION_ID: usize = 128;

/// A stream whose spans are exported.
pub(super) struct Traced {
    sink: SpanSink,
    calls: Arc<Calls>,
    start: SystemTime,
    started: Instant,
    conversation: Option<String>,
    upstream: Option<Upstream>,
}

/// The forwarded call, once there is one.
struct Upstream {
    span_id: SpanId,
    at: Instant,
    end: Option<Instant>,
    finish_reason: Option<String>,
}

impl Traced {
    /// Starts the request's span now, continuing the client's `traceparent`.
    pub(super) fn new(sink: SpanSink, headers: &Headers, session_headers: &[String]) -> Self {
        let context = spans::TraceContext::from_traceparent(headers.get("traceparent"));
        let named: Vec<&str> = if session_headers.is_empty() {
            CONVERSATION_HEADERS.to_vec()
        } else {
            session_headers.iter().map(String::as_str).collect()
        };
        let conversation = named
            .iter()
            .find_map(|name| headers.get(name))
            .map(|id| cut(id, MAX_CONVERSATION_ID).to_owned());
        Self {
            sink,
            calls: Calls::new(context),
            start: SystemTime::now(),
            started: Instant::now(),
            conversation,
            upstream: None,
        }
    }

    /// The collector the request's calls report to.
    pub(super) fn calls(&self) -> Arc<Calls> {
        Arc::clone(&self.calls)
    }

    /// Starts the forwarded call's span; the `traceparent` the upstream request carries.
    pub(super) fn forward(&mut self) -> String {
        let span_id = spans::new_span_id();
        self.upstream = Some(Upstream {
            span_id,
            at: Instant::now(),
            end: None,
            finish_reason: None,
        });
        self.calls.context().traceparent(span_id)
    }

    /// The forwarded call's answer ended, for `finish_reason` when it said.
    pub(super) fn answered(&mut self, finish_reason: Option<String>) {
        if let Some(upstream) = &mut self.upstream {
            upstream.end = Some(Instant::now());
            upstream.finish_reason = finish_reason;
        }
    }

    /// Sends the stream's spans, described by its finished run record; an unsampled trace
    /// sends none.
    pub(super) fn send(self, record: &RunRecord) {
        let context = self.calls.context();
        if !context.sampled {
            return;
        }
        let at = |instant: Instant| self.start + instant.saturating_duration_since(self.started);
        let end = SystemTime::now().max(self.start);
        let (calls, over) = self.calls.take();
        let mut spans = Vec::with_capacity(calls.len() + 2);
        let mut root = Span {
            span_id: context.span_id,
            parent: context.parent,
            name: format!("chat {}", non_empty(&record.identity, &record.model)),
            kind: SpanKind::Server,
            start: self.start,
            end,
            attributes: request_attributes(record, self.conversation.as_deref()),
            error: (!record.error.is_empty()).then(|| record.error.clone()),
        };
        if let Some(reason) = self.upstream.as_ref().and_then(|u| u.finish_reason.clone()) {
            let reasons = Value::Strs(vec![reason]);
            root.attributes
                .push(("gen_ai.response.finish_reasons", reasons));
        }
        if over > 0 {
            let over = i64::try_from(over).unwrap_or(i64::MAX);
            root.attributes
                .push(("mom.spans_dropped", Value::Int(over)));
        }
        spans.push(root);
        if let Some(upstream) = self.upstream {
            let finished = upstream.end.map_or(end, at);
            spans.push(Span {
                span_id: upstream.span_id,
                parent: Some(context.span_id),
                name: format!("chat {}", non_empty(&record.provider_model, &record.model)),
                kind: SpanKind::Client,
                start: at(upstream.at),
                end: finished.max(at(upstream.at)),
                attributes: upstream_attributes(record, upstream.finish_reason),
                error: (record.status >= 400)
                    .then(|| format!("upstream answered {}", record.status)),
            });
        }
        spans.extend(calls);
        self.sink.send(RequestTrace {
            trace_id: context.trace_id,
            spans,
        });
    }
}

fn non_empty<'a>(first: &'a str, otherwise: &'a str) -> &'a str {
    if first.is_empty() {
        otherwise
    } else {
        first
    }
}

fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn string(value: &str) -> Value {
    Value::Str(value.to_owned())
}

/// The request span's attributes: the GenAI conventions (the identity asked for, the model
/// that answered) and what mom-router decided.
fn request_attributes(
    record: &RunRecord,
    conversation: Option<&str>,
) -> Vec<(&'static str, Value)> {
    let mut attributes = vec![
        ("gen_ai.operation.name", string("chat")),
        ("gen_ai.provider.name", string("mom-router")),
        ("mom.run_id", string(&record.run_id)),
        ("mom.config_version", string(&record.config_version)),
        ("mom.response_path", string(&record.response_path)),
    ];
    let optional = [
        ("gen_ai.request.model", &record.identity),
        ("gen_ai.response.model", &record.model),
        ("mom.identity_version", &record.identity_version),
        ("mom.decision", &record.decision),
        ("mom.algorithm", &record.algorithm),
        ("mom.selection_reason", &record.selection_reason),
        ("mom.contract", &record.contract),
        ("mom.grounding", &record.grounding),
        ("error.type", &record.error),
    ];
    for (key, value) in optional {
        if !value.is_empty() {
            attributes.push((key, string(value)));
        }
    }
    if let Some(id) = conversation {
        attributes.push(("gen_ai.conversation.id", string(id)));
    }
    if record.status != 0 {
        attributes.push((
            "http.response.status_code",
            Value::Int(i64::from(record.status)),
        ));
    }
    attributes.extend(spans::usage_attributes(
        record.prompt_tokens,
        record.completion_tokens,
    ));
    if let Some(looper) = &record.looper {
        attributes.push(("mom.recipe", string(&looper.kind)));
        let calls = i64::try_from(looper.calls.len()).unwrap_or(i64::MAX);
        attributes.push(("mom.recipe.calls", Value::Int(calls)));
    }
    if !record.plugins.is_empty() {
        let plugins = record
            .plugins
            .iter()
            .map(|p| format!("{}: {}", p.plugin, p.action))
            .collect();
        attributes.push(("mom.plugins", Value::Strs(plugins)));
    }
    if record.energy_joules > 0.0 {
        attributes.push(("mom.energy_joules", Value::Float(record.energy_joules)));
    }
    attributes
}

/// The forwarded call's attributes: the model asked and what it answered.
fn upstream_attributes(
    record: &RunRecord,
    finish_reason: Option<String>,
) -> Vec<(&'static str, Value)> {
    let requested = non_empty(&record.provider_model, &record.model);
    let status = u16::try_from(record.status).ok().filter(|s| *s != 0);
    let usage = (record.prompt_tokens, record.completion_tokens);
    let mut attributes =
        spans::chat_call_attributes(requested, status, usage, finish_reason.as_deref());
    attributes.push(("mom.model", string(&record.model)));
    attributes
}
