//! Request spans. Each chat request gets a W3C trace context: the client's `traceparent` when it
//! sent a valid one (its trace id, its span as our parent), a fresh trace otherwise. While the
//! request is routed, the calls it makes (sub-requests, encoder and token-classifier passes)
//! add their spans to the request's [`Calls`], reached through a task-local so no call site
//! threads it; a sub-request carries a `traceparent` naming its own span. When the request ends
//! its spans are assembled from the instants measured as it went and handed to the OTLP
//! exporter ([`super::otlp`]).

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// Spans one request keeps beyond its own; later calls are counted, not kept.
pub const MAX_CALL_SPANS: usize = 64;

/// A trace id: 16 bytes, never all zero.
pub type TraceId = [u8; 16];
/// A span id: 8 bytes, never all zero.
pub type SpanId = [u8; 8];

/// Where one request sits in a distributed trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace, the client's or a new one.
    pub trace_id: TraceId,
    /// The client's span, when it sent a `traceparent`.
    pub parent: Option<SpanId>,
    /// The request's own span.
    pub span_id: SpanId,
    /// Whether the trace is sampled: the client's flag, or true for a new trace.
    pub sampled: bool,
}

impl TraceContext {
    /// The context of a request carrying `traceparent` (or none); a malformed value starts a new
    /// trace, as the W3C specification asks.
    pub fn from_traceparent(traceparent: Option<&str>) -> Self {
        let span_id = new_span_id();
        match traceparent.and_then(parse_traceparent) {
            Some((trace_id, parent, sampled)) => Self {
                trace_id,
                parent: Some(parent),
                span_id,
                sampled,
            },
            None => Self {
                trace_id: nonzero(rand::random()),
                parent: None,
                span_id,
                sampled: true,
            },
        }
    }

    /// The `traceparent` a call made as span `span_id` of this trace carries.
    pub fn traceparent(&self, span_id: SpanId) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&span_id),
            u8::from(self.sampled)
        )
    }
}

/// `version-traceid-spanid-flags`, version `00` (or a later one, read the same way), ids not
/// all zero, lower-case hex.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, bool)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if ![version, trace, span, flags].iter().all(|s| lower_hex(s)) || flags.len() != 2 {
        return None;
    }
    let trace_id: TraceId = unhex(trace)?;
    let span_id: SpanId = unhex(span)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace_id, span_id, flags & 1 == 1))
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn nonzero<const N: usize>(mut id: [u8; N]) -> [u8; N] {
    if id == [0; N] {
        id[N - 1] = 1;
    }
    id
}

/// A fresh span id.
pub fn new_span_id() -> SpanId {
    nonzero(rand::random())
}

/// What a span describes, as OTLP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside mom-router (a model pass).
    Internal,
    /// The request mom-router serves.
    Server,
    /// A call mom-router (or Envoy, for the forwarded request) makes.
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A real number.
    Float(f64),
    /// A list of strings.
    Strs(Vec<String>),
}

/// `gen_ai.usage.input_tokens` and `output_tokens`, for the counts that are known.
pub fn usage_attributes(input: Option<u64>, output: Option<u64>) -> Vec<(&'static str, Value)> {
    [
        ("gen_ai.usage.input_tokens", input),
        ("gen_ai.usage.output_tokens", output),
    ]
    .into_iter()
    .filter_map(|(key, count)| Some((key, Value::Int(i64::try_from(count?).ok()?))))
    .collect()
}

/// The GenAI attributes of one chat call to a backend (a sub-request, or the call Envoy
/// forwards): mom-router speaks Chat Completions to backends, so the provider is `openai`.
pub fn chat_call_attributes(
    requested_model: &str,
    status: Option<u16>,
    usage: (Option<u64>, Option<u64>),
    finish_reason: Option<&str>,
) -> Vec<(&'static str, Value)> {
    let mut attributes = vec![
        ("gen_ai.operation.name", Value::Str("chat".to_owned())),
        ("gen_ai.provider.name", Value::Str("openai".to_owned())),
        (
            "gen_ai.request.model",
            Value::Str(requested_model.to_owned()),
        ),
    ];
    if let Some(status) = status {
        attributes.push(("http.response.status_code", Value::Int(i64::from(status))));
    }
    attributes.extend(usage_attributes(usage.0, usage.1));
    if let Some(reason) = finish_reason {
        let reasons = Value::Strs(vec![reason.to_owned()]);
        attributes.push(("gen_ai.response.finish_reasons", reasons));
    }
    attributes
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Its id.
    pub span_id: SpanId,
    /// Its parent's id; `None` for a root.
    pub parent: Option<SpanId>,
    /// `chat mom/auto`, `encoder`, …
    pub name: String,
    /// What it describes.
    pub kind: SpanKind,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes (GenAI conventions and `mom.*`).
    pub attributes: Vec<(&'static str, Value)>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// One request's finished spans, for the exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestTrace {
    /// The trace they belong to.
    pub trace_id: TraceId,
    /// The spans: the request's own first.
    pub spans: Vec<Span>,
}

/// The spans of the calls one request makes, collected as they finish.
#[derive(Debug)]
pub struct Calls {
    context: TraceContext,
    spans: Mutex<Vec<Span>>,
    dropped: std::sync::atomic::AtomicUsize,
    /// When spans are not exported: the client's `traceparent`, passed on to every call as it
    /// came (no span of ours would ever reach a collector to be a parent).
    relay: Option<String>,
}

tokio::task_local! {
    static CALLS: Arc<Calls>;
}

impl Calls {
    /// A collector for the request in `context`.
    pub fn new(context: TraceContext) -> Arc<Self> {
        Arc::new(Self {
            context,
            spans: Mutex::new(Vec::new()),
            dropped: std::sync::atomic::AtomicUsize::new(0),
            relay: None,
        })
    }

    /// A request whose spans are not exported but whose client sent `traceparent`: its calls
    /// carry that header unchanged, and keep no span.
    pub fn relaying(traceparent: &str) -> Arc<Self> {
        Arc::new(Self {
            context: TraceContext::from_traceparent(Some(traceparent)),
            spans: Mutex::new(Vec::new()),
            dropped: std::sync::atomic::AtomicUsize::new(0),
            relay: Some(traceparent.trim().to_owned()),
        })
    }

    /// The request's trace context.
    pub fn context(&self) -> TraceContext {
        self.context
    }

    fn push(&self, span: Span) {
        if self.relay.is_some() {
            return;
        }
        let mut spans = self
            .spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if spans.len() < MAX_CALL_SPANS {
            spans.push(span);
        } else {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The spans collected so far, and how many were over [`MAX_CALL_SPANS`].
    pub fn take(&self) -> (Vec<Span>, usize) {
        let spans = std::mem::take(
            &mut *self
                .spans
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        (
            spans,
            self.dropped.swap(0, std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// Runs `work` with `calls` collecting the spans of the calls it makes. Not an `async fn`: one
/// would hold `work` twice (as its argument and as the future it awaits).
pub fn collecting<F: std::future::Future>(
    calls: Option<Arc<Calls>>,
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    match calls {
        Some(calls) => futures_util::future::Either::Left(CALLS.scope(calls, work)),
        None => futures_util::future::Either::Right(work),
    }
}

/// A call being timed as a span of the current request.
#[derive(Debug)]
pub struct CallSpan {
    calls: Arc<Calls>,
    span_id: SpanId,
    start: SystemTime,
    started: Instant,
}

/// Starts timing a call when the current task routes a request whose spans are collected.
pub fn start_call() -> Option<CallSpan> {
    let calls = CALLS.try_with(Arc::clone).ok()?;
    Some(CallSpan {
        calls,
        span_id: new_span_id(),
        start: SystemTime::now(),
        started: Instant::now(),
    })
}

impl CallSpan {
    /// The `traceparent` the call carries: this span as the callee's parent.
    pub fn traceparent(&self) -> String {
        match &self.calls.relay {
            Some(traceparent) => traceparent.clone(),
            None => self.calls.context.traceparent(self.span_id),
        }
    }

    /// Ends the span as a child of the request's.
    pub fn finish(
        self,
        name: String,
        kind: SpanKind,
        attributes: Vec<(&'static str, Value)>,
        error: Option<String>,
    ) {
        let span = Span {
            span_id: self.span_id,
            parent: Some(self.calls.context.span_id),
            name,
            kind,
            start: self.start,
            end: self.start + self.started.elapsed(),
            attributes,
            error,
        };
        self.calls.push(span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_continued_and_a_malformed_one_starts_a_new_trace() {
        let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = TraceContext::from_traceparent(Some(sent));
        assert_eq!(hex(&context.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            context.parent.map(|p| hex(&p)).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert!(context.sampled);
        let carried = context.traceparent(context.span_id);
        assert!(carried.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(carried.ends_with("-01"));
        assert_ne!(context.span_id, [0; 8]);

        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!TraceContext::from_traceparent(Some(unsampled)).sampled);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47३६-00f067aa0ba902b7-01",
            "",
        ] {
            let context = TraceContext::from_traceparent(Some(bad));
            assert_eq!(context.parent, None, "{bad}");
            assert_ne!(hex(&context.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        }
        // A later version may append fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-whatever";
        assert!(TraceContext::from_traceparent(Some(later)).parent.is_some());
    }

    #[tokio::test]
    async fn calls_made_while_collecting_become_children_of_the_request_span() {
        assert!(start_call().is_none(), "no request is collecting");
        let calls = Calls::new(TraceContext::from_traceparent(None));
        let root = calls.context().span_id;
        collecting(Some(Arc::clone(&calls)), async {
            for i in 0..MAX_CALL_SPANS + 3 {
                let call = start_call().unwrap_or_else(|| panic!("collecting"));
                assert!(call.traceparent().contains(&hex(&call.span_id)));
                call.finish(format!("call {i}"), SpanKind::Client, Vec::new(), None);
            }
        })
        .await;
        let (spans, dropped) = calls.take();
        assert_eq!((spans.len(), dropped), (MAX_CALL_SPANS, 3));
        assert!(spans
            .iter()
            .all(|s| s.parent == Some(root) && s.end >= s.start));
    }
}
