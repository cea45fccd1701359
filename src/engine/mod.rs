//! The pipeline for one request, as two short linear functions matching the two request phases:
//! [`on_request_headers`] (path, method, size) and [`on_request_body`]
//! (parse → signals → decision → selection → action). The only await is the shared encoder's
//! answer, when a neural signal needs it; `explain` runs exactly what the sidecar runs.
//!
//! What the engine owns, by folder: [`request`] — the request pipeline after parsing (ingress per
//! protocol, the models signals read, plugins, selection inputs, sessions, the cache's lookup,
//! what happens once decided); [`recipes`] — the collaborations behind one [`recipes::Recipe`]
//! trait (cascade, ratings ensemble, ReMoM, fusion panel, workflows); [`answer`] — the
//! obligations an answer owes (contract, answer guard, grounding, masked values) and their
//! settling.

pub mod answer;
mod error;
pub mod failover;
pub mod recipes;
pub mod request;
mod trace;

pub use answer::answer_guard::matches as answer_matches;
pub use answer::obligations::Obligations;
pub use error::{Fault, RouteError, MAX_DEPTH};
pub use recipes::looper::{LooperTrace, Step};
pub use request::ingress::in_protocol;
pub use request::neural::neural_inputs;
pub use request::plugins::HeaderEdits;
pub use request::select::DEFAULT_COMPLETION_TOKENS;
pub use request::session::SessionTrace;
pub use trace::{PluginAction, PluginOutcome, ResponsePath, Trace};

use crate::config::{Decision, Fallback, Identity, Model, Policy, Snapshot};
use crate::decision::{self, Fact};
use crate::llm::{ChatRequest, Headers, LlmClient};
use crate::protocol::{messages, responses, Protocol};
use crate::selection::{request_key, Algorithm};
use crate::signals::{Input, Neural, OnError, SignalKind};
use crate::state::StateStore;
use std::sync::Arc;

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
    pub model: String,
    /// Provider model id written into the body.
    pub provider_model: String,
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
    pub headers: request::plugins::HeaderEdits,
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

/// What the pipeline reads and calls besides the snapshot: learned state, and the client for
/// loopers' sub-requests (absent offline, where loopers are planned but not run).
#[derive(Debug, Clone)]
pub struct Services {
    /// Statistics, run ids, session pins.
    pub state: Arc<StateStore>,
    /// Sub-requests through Envoy's internal listener.
    pub client: Option<LlmClient>,
    /// Model calls give up at their configured `callTimeoutMs` (serving, where Envoy's
    /// message timeout runs); offline tools wait as long as the models take.
    pub model_deadlines: bool,
    /// Forwarded requests waiting in case their upstream fails (failover).
    pub parked: Arc<failover::Parked>,
}

impl Services {
    /// In-process state and no client: `explain`, tests, benchmarks.
    pub fn offline(snapshot: &Snapshot) -> Self {
        Self {
            state: Arc::new(StateStore::new(snapshot.state.clone())),
            client: None,
            model_deadlines: false,
            parked: Arc::default(),
        }
    }
}

/// The chat-completions path.
pub const CHAT_PATH: &str = "/v1/chat/completions";
/// The paths that take a request body (POST), one per protocol.
const BODY_PATHS: [&str; 4] = [
    CHAT_PATH,
    messages::PATH,
    messages::COUNT_TOKENS_PATH,
    responses::PATH,
];
/// The model-list path.
pub const MODELS_PATH: &str = "/v1/models";

/// Decides from the headers alone: answer now (model list, bad path or method, announced
/// oversize body) or wait for the body (`None`).
pub fn on_request_headers(
    snapshot: &Snapshot,
    headers: &Headers,
    end_of_stream: bool,
) -> Option<Routed> {
    let path = headers.path();
    let method = headers.method();
    let refuse = |error: RouteError| Some(refusal(snapshot, error));
    match path {
        MODELS_PATH if method == "GET" => Some(Routed {
            action: Action::Respond(request::models::list(snapshot)),
            trace: Trace::empty(snapshot),
        }),
        MODELS_PATH => refuse(method_not_allowed(method, path, "GET")),
        _ if BODY_PATHS.contains(&path) && method != "POST" => {
            refuse(method_not_allowed(method, path, "POST"))
        }
        _ if BODY_PATHS.contains(&path) && end_of_stream => {
            refuse(RouteError::BadRequest(crate::llm::RequestError::Empty))
        }
        _ if BODY_PATHS.contains(&path) => {
            let limit = snapshot.server.max_body_bytes;
            let announced = headers
                .get("content-length")
                .and_then(|v| v.trim().parse::<u64>().ok());
            match announced {
                Some(size) if size > limit => refuse(RouteError::TooLarge { size, limit }),
                _ => None,
            }
        }
        _ => refuse(RouteError::NotFound {
            path: path.to_owned(),
        }),
    }
}

/// Routes a complete request body in the protocol its path names.
pub async fn on_request_body(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
) -> Routed {
    let limit = snapshot.server.max_body_bytes;
    if body.len() as u64 > limit {
        let size = body.len() as u64;
        return refusal(snapshot, RouteError::TooLarge { size, limit });
    }
    match headers.path() {
        messages::PATH => {
            request::ingress::translated(snapshot, services, headers, body, Protocol::Messages)
                .await
        }
        responses::PATH => {
            request::ingress::translated(snapshot, services, headers, body, Protocol::Responses)
                .await
        }
        messages::COUNT_TOKENS_PATH => request::ingress::count_tokens(snapshot, body),
        _ => route_chat(snapshot, services, headers, body).await,
    }
}

/// Routes a complete chat-completion body (within the size limit).
async fn route_chat(
    snapshot: &Snapshot,
    services: &Services,
    headers: &Headers,
    body: &[u8],
) -> Routed {
    let state = services.state.as_ref();
    let depth = match sub_request_depth(services, headers) {
        Ok(depth) => depth,
        Err(error) => return refusal(snapshot, error),
    };
    let request = match ChatRequest::parse(body) {
        Ok(request) => request,
        Err(e) => return refusal(snapshot, e.into()),
    };
    if let Some(identity) = snapshot.identity(&request.model) {
        let deadlines = services.model_deadlines;
        let neural = neural_inputs(snapshot, identity.needs, &request, deadlines).await;
        let context = Context {
            snapshot,
            state,
            headers,
            body,
        };
        return match route_identity(&context, identity, &request, &neural) {
            Ok((mut trace, chosen, decision)) => {
                let chosen =
                    failover::healthy(snapshot, state, identity, decision, &mut trace, chosen);
                let query = neural
                    .embedding
                    .as_ref()
                    .and_then(|e| e.as_ref().ok())
                    .cloned();
                let decided = request::decided::Decided {
                    trace,
                    chosen,
                    decision,
                    depth,
                    query,
                };
                request::decided::carry_out(snapshot, services, identity, headers, request, decided)
                    .await
            }
            Err(refused) => {
                let (error, evidence) = *refused;
                refusal_after(error, evidence)
            }
        };
    }
    if let Some(index) = snapshot.model_index(&request.model) {
        let mut trace = Trace::empty(snapshot);
        trace.algorithm = "passthrough";
        return forward(trace, request, &snapshot.models[index]);
    }
    let valid = snapshot
        .callable_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    refusal(
        snapshot,
        RouteError::UnknownModel {
            name: request.model.clone(),
            valid,
        },
    )
}

/// What one request is routed against.
struct Context<'a> {
    snapshot: &'a Snapshot,
    state: &'a StateStore,
    headers: &'a Headers,
    body: &'a [u8],
}

/// The depth of a sub-request carrying mom-router's internal headers (0 for a client request);
/// the headers without the process's token, or too deep a nesting, are refused.
fn sub_request_depth(services: &Services, headers: &Headers) -> Result<u32, RouteError> {
    let token = headers.get(crate::llm::client::TOKEN_HEADER);
    let depth = headers.get(crate::llm::client::DEPTH_HEADER);
    if token.is_none() && depth.is_none() {
        return Ok(0);
    }
    let expected = services.client.as_ref().map(LlmClient::token);
    match (token, expected) {
        (Some(token), Some(expected)) if crate::llm::client::token_matches(token, expected) => {}
        _ => return Err(RouteError::InternalAuth),
    }
    let depth = depth
        .and_then(|d| d.trim().parse::<u32>().ok())
        .ok_or(RouteError::InternalAuth)?;
    if depth > MAX_DEPTH {
        return Err(RouteError::TooDeep(depth));
    }
    Ok(depth)
}

/// Why a request is refused, with the evidence gathered up to then.
type Refused = (RouteError, Trace);

/// Runs the identity's signals and decisions; returns the evidence, the chosen model index and
/// the decision that chose it (none for the identity's default).
fn route_identity<'s>(
    context: &Context<'s>,
    identity: &'s Identity,
    request: &ChatRequest,
    neural: &Neural,
) -> Result<(Trace, usize, Option<&'s Decision>), Box<Refused>> {
    let Context {
        snapshot,
        state,
        headers,
        body,
    } = *context;
    let mut facts: Vec<Option<Fact>> = vec![None; snapshot.signals.len()];
    let mut values: Vec<Option<f64>> = vec![None; snapshot.signals.len()];
    let mut results = Vec::with_capacity(identity.signals.len());
    // Signal indices are sorted and projections come after the signals they read.
    for &index in &identity.signals {
        let signal = &snapshot.signals[index];
        let earlier = |i: usize| {
            facts.get(i).copied().flatten().map(|fact| Input {
                matched: fact.matched,
                confidence: fact.confidence,
                value: values.get(i).copied().flatten(),
            })
        };
        let result = signal.evaluate(request, headers, neural, &earlier);
        // A guard that cannot answer fails closed when the identity requires it or its own
        // `onError` is `fail` (the default for guards).
        let on_error = signal.kind.on_error();
        let closed = match signal.kind {
            SignalKind::Jailbreak(_) => Some(Policy::Jailbreak),
            SignalKind::Pii(_) => Some(Policy::Pii),
            _ => None,
        }
        .filter(|policy| identity.requires.contains(policy) || on_error == Some(OnError::Fail));
        let refused = match (&result.error, closed, on_error) {
            (Some(reason), Some(policy), _) => Some(RouteError::PolicyUnavailable {
                identity: identity.name.clone(),
                policy: policy.name(),
                reason: format!("signal {}: {reason}", signal.name),
            }),
            (Some(reason), None, Some(OnError::Fail)) => Some(RouteError::SignalUnavailable {
                signal: signal.name.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        };
        if let Some(error) = refused {
            results.push(result);
            let mut evidence = Trace::empty(snapshot);
            evidence.identity = Some(identity.name.clone());
            evidence.identity_version = Some(identity.version.clone());
            evidence.signals = results;
            return Err(Box::new((error, evidence)));
        }
        facts[index] = Some(Fact {
            matched: result.matched,
            confidence: result.confidence,
        });
        values[index] = result.value;
        results.push(result);
    }
    let mut trace = Trace::empty(snapshot);
    trace.identity = Some(identity.name.clone());
    trace.identity_version = Some(identity.version.clone());
    trace.signals = results;
    let winner = decision::pick(&snapshot.decisions, &identity.decisions, &facts);
    let key = headers
        .get("x-request-id")
        .map_or_else(|| request_key(body), |id| request_key(id.as_bytes()));
    let query = neural
        .embedding
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|v| v.as_slice());
    let (decision, confidence) = match (winner, &identity.fallback) {
        (Some((index, verdict)), _) => (&snapshot.decisions[index], verdict.confidence),
        (None, Fallback::Objective(decision)) => (decision.as_ref(), 1.0),
        (None, Fallback::Default(model)) => {
            trace.algorithm = Algorithm::Static.name();
            trace.selection_reason = "no decision matched: the identity's default model".to_owned();
            return Ok((trace, *model, None));
        }
    };
    let chosen = request::select::choose(
        snapshot,
        state,
        decision,
        &identity.bounds,
        request,
        query,
        key,
    );
    trace.decision = Some(decision.name.clone());
    let selection = match chosen {
        Ok(selection) => selection,
        Err(error) => return Err(Box::new((error, trace))),
    };
    trace.selection_reason = selection.reason;
    trace.confidence = confidence;
    trace.algorithm = decision.algorithm.name();
    trace.scores = decision
        .candidates
        .iter()
        .zip(&selection.scores)
        .map(|(c, s)| (snapshot.models[c.model].name.clone(), *s))
        .collect();
    let model_index = decision.candidates[selection.chosen].model;
    Ok((trace, model_index, Some(decision)))
}

fn forward(mut trace: Trace, request: ChatRequest, model: &Model) -> Routed {
    trace.model = Some(model.name.clone());
    trace.provider_model = Some(model.provider_model.clone());
    if trace.identity.is_none() {
        trace.identity = Some(request.model.clone());
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
            headers: request::plugins::HeaderEdits::default(),
            obligations: Obligations::default(),
            failover: None,
        }),
        trace,
    }
}

fn refusal(snapshot: &Snapshot, error: RouteError) -> Routed {
    refusal_after(error, Trace::empty(snapshot))
}

/// A refusal that keeps the evidence gathered before it (identity, signals — the one that
/// failed included —, decision, plugins): metrics count the failed signal, records show it.
fn refusal_after(error: RouteError, mut evidence: Trace) -> Routed {
    evidence.error = Some((error.code(), error.fault()));
    Routed {
        action: Action::Respond(error.reply()),
        trace: evidence,
    }
}

fn method_not_allowed(method: &str, path: &str, allowed: &'static str) -> RouteError {
    RouteError::MethodNotAllowed {
        method: method.to_owned(),
        path: path.to_owned(),
        allowed,
    }
}

#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
