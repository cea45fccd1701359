//! What the pipeline decides for one request, as every part of the engine produces it: a
//! [`Reply`] mom-router sends itself, or a [`Forward`] Envoy sends upstream, with the evidence
//! ([`Routed`]); and the two ways to build one, [`forward`] and [`refusal`].

use crate::config::{Model, Name, Snapshot};
use crate::engine::{failover, Obligations, RouteError, Trace};
use crate::llm::ChatRequest;

/// A reply mom-router sends itself instead of forwarding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body (JSON).
    pub body: Vec<u8>,
    /// Extra headers (content-type is always JSON).
    pub headers: Vec<(String, String)>,
    /// An answer, or a refusal with its error code.
    pub code: ReplyCode,
}

/// What a reply mom-router gives itself is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyCode {
    /// An answer (a model's list, a cached or composed answer, another model's after failover).
    Answer,
    /// A refusal, with its OpenAI error code.
    Refusal(&'static str),
}

impl ReplyCode {
    /// The metric label and `details` suffix: `ok` for an answer, the error code otherwise.
    pub fn label(self) -> &'static str {
        match self {
            Self::Answer => "ok",
            Self::Refusal(code) => code,
        }
    }
}

impl Reply {
    /// A 200 answer with a JSON body.
    pub fn json(body: Vec<u8>) -> Self {
        Self {
            status: 200,
            body,
            headers: Vec::new(),
            code: ReplyCode::Answer,
        }
    }

    /// A chat completion mom-router answers with itself: JSON, or server-sent events when the
    /// client asked to stream.
    pub fn completion(body: &serde_json::Value, stream: bool) -> Self {
        if !stream {
            return Self::json(body.to_string().into_bytes());
        }
        Self {
            status: 200,
            body: crate::llm::sse::events(body),
            headers: vec![
                ("content-type".to_owned(), "text/event-stream".to_owned()),
                ("cache-control".to_owned(), "no-cache".to_owned()),
            ],
            code: ReplyCode::Answer,
        }
    }

    /// True for an answer (not a refusal): the code a success carries.
    pub fn succeeded(&self) -> bool {
        self.code == ReplyCode::Answer
    }

    /// True when the body is server-sent events.
    pub fn streams(&self) -> bool {
        self.headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream"))
    }
}

/// The upstream request mom-router hands back to Envoy.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    /// Logical model: the `x-selected-model` value.
    pub model: Name,
    /// Provider model id written into the body.
    pub provider_model: Name,
    /// The rewritten body.
    pub body: Vec<u8>,
    /// The client asked for server-sent events.
    pub stream: bool,
    /// mom-router's prompt-token estimate of the client's request (compared with the usage the
    /// upstream reports, to learn each model's tokenizer ratio).
    pub estimated_prompt_tokens: u64,
    /// An answer to give instead when the upstream response is not a success (ReMoM's best
    /// panel answer when its synthesis fails).
    pub fallback: Option<Box<Reply>>,
    /// Header edits plugins made for the upstream request.
    pub headers: HeaderEdits,
    /// What the answer owes before the client gets it, settled in the response phase.
    pub obligations: Obligations,
    /// How the request is served by another model when its upstream fails before the first
    /// byte; `None` when it is not (a concrete model, no failover declared).
    pub failover: Option<Box<failover::Plan>>,
}

/// What happens to the request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Rewrite and let Envoy route it.
    Forward(Forward),
    /// Answer it directly.
    Respond(Reply),
}

impl Action {
    /// `forward` or `respond`, as `explain` prints it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Forward(_) => "forward",
            Self::Respond(_) => "respond",
        }
    }
}

/// The outcome of the request phases: the action and the evidence behind it.
#[derive(Debug, Clone)]
pub struct Routed {
    /// What happens.
    pub action: Action,
    /// Why.
    pub trace: Trace,
}

/// Header edits for the forwarded request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// Set (lower-case name, value).
    pub set: Vec<(String, String)>,
    /// Removed (lower-case names).
    pub remove: Vec<String>,
}

/// The action forwarding `request` to `model`, with the evidence in `trace`.
pub(in crate::engine) fn forward(mut trace: Trace, request: ChatRequest, model: &Model) -> Routed {
    trace.model = Some(model.name.clone());
    trace.provider_model = Some(model.provider_model.clone());
    if trace.identity.is_none() {
        trace.identity = Some(request.model.as_str().into());
    }
    let stream = request.stream;
    let estimated_prompt_tokens = crate::signals::estimate_tokens(&request);
    Routed {
        action: Action::Forward(Forward {
            estimated_prompt_tokens,
            model: model.name.clone(),
            provider_model: model.provider_model.clone(),
            body: request.into_body_for(&model.provider_model),
            stream,
            fallback: None,
            headers: HeaderEdits::default(),
            obligations: Obligations::default(),
            failover: None,
        }),
        trace,
    }
}

/// The refusal of a request with `error`, before any evidence was gathered.
pub(in crate::engine) fn refusal(snapshot: &Snapshot, error: RouteError) -> Routed {
    refusal_after(error, Trace::empty(snapshot))
}

/// A refusal that keeps the evidence gathered before it (identity, signals — the one that
/// failed included —, decision, plugins): metrics count the failed signal, records show it.
pub(in crate::engine) fn refusal_after(error: RouteError, mut evidence: Trace) -> Routed {
    evidence.error = Some((error.code(), error.fault()));
    Routed {
        action: Action::Respond(error.reply()),
        trace: evidence,
    }
}
