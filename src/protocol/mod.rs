//! The protocols clients speak, and their translation to and from the one mom-router's pipeline
//! reads. Chat Completions is the pipeline's own form: a request in another protocol is
//! translated into it at ingress (signals, decisions, plugins, loopers, the cache and records
//! then read one request), and the answer is translated back at egress — JSON whole, a stream
//! event by event, errors in the client's protocol's shape.

use serde_json::{Map, Value};

pub mod messages;
pub mod messages_sse;
pub mod responses;
pub mod responses_sse;
pub mod sse;

/// The protocol of a client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`): the pipeline's own form.
    #[default]
    Chat,
    /// Anthropic Messages (`POST /v1/messages`).
    Messages,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
}

impl Protocol {
    /// The protocol's name in headers, records and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Messages => "messages",
            Self::Responses => "responses",
        }
    }
}

/// How a request in another protocol than Chat Completions reached its model.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// The client's protocol.
    pub protocol: Protocol,
    /// Fields of the client's request the translation dropped.
    pub dropped: Vec<&'static str>,
    /// The model's backend answers the protocol itself: the client's body went to it with only
    /// `model` rewritten, and its answer comes back untranslated.
    pub native: bool,
}

impl Translation {
    /// A request of `protocol` translated into Chat Completions, `dropped` left behind.
    pub fn to_chat(protocol: Protocol, dropped: Vec<&'static str>) -> Self {
        Self {
            protocol,
            dropped,
            native: false,
        }
    }

    /// The `x-mom-translation` header's value: `messages native`, `messages to chat`, or
    /// `lossy: top_k dropped`.
    pub fn label(&self) -> String {
        match (self.native, self.dropped.is_empty()) {
            (true, _) => format!("{} native", self.protocol.name()),
            (false, true) => format!("{} to chat", self.protocol.name()),
            (false, false) => format!("lossy: {} dropped", self.dropped.join(",")),
        }
    }
}

/// A request translated into Chat Completions, with what could not be carried.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The Chat Completions body.
    pub body: Vec<u8>,
    /// Fields of the client's request the translation dropped (`x-mom-translation: lossy`).
    pub dropped: Vec<&'static str>,
}

/// Why a request cannot be translated: a 400 in the client's protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TranslateError {
    /// What is wrong, naming the field.
    pub message: String,
}

/// A translation error saying `message`.
fn invalid(message: impl Into<String>) -> TranslateError {
    TranslateError {
        message: message.into(),
    }
}

/// A JSON object.
type Object = Map<String, Value>;

/// The request body as a JSON object naming its `model` (a string), and the chat body begun
/// with the fields in `carried` copied as they are.
fn request_object(body: &[u8], carried: &[&str]) -> Result<(Object, Object), TranslateError> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(request) = request else {
        return Err(invalid("the body must be a JSON object"));
    };
    if !request.get("model").is_some_and(Value::is_string) {
        return Err(invalid("model: a string is required"));
    }
    let chat = carried
        .iter()
        .filter_map(|field| Some(((*field).to_owned(), request.get(*field)?.clone())))
        .collect();
    Ok((request, chat))
}

/// Translates a request body in `protocol` into Chat Completions (`count_only`: the Messages
/// token count, which needs no `max_tokens`).
pub fn to_chat(
    protocol: Protocol,
    body: &[u8],
    count_only: bool,
) -> Result<Translated, TranslateError> {
    match protocol {
        Protocol::Chat => Ok(Translated {
            body: body.to_vec(),
            dropped: Vec::new(),
        }),
        Protocol::Messages => messages::to_chat(body, count_only),
        Protocol::Responses => responses::to_chat(body),
    }
}

/// A whole answer (or error) in the client's protocol: an error by its status, a stream all at
/// once, a JSON completion whole. `None` when it stays as it is.
pub fn translate_whole(
    protocol: Protocol,
    status: u16,
    stream: bool,
    body: &[u8],
) -> Option<Vec<u8>> {
    let success = (200..300).contains(&status);
    match (protocol, success, stream) {
        (Protocol::Chat, _, _) => None,
        // Responses errors keep the OpenAI shape.
        (Protocol::Responses, false, _) => None,
        (Protocol::Messages, false, _) => Some(messages::error_from(status, body)),
        (Protocol::Messages, true, true) => Some(messages_sse::translate_all(body)),
        (Protocol::Messages, true, false) => messages::from_chat(body),
        (Protocol::Responses, true, true) => Some(responses_sse::translate_all(body)),
        (Protocol::Responses, true, false) => responses::from_chat(body),
    }
}

/// One stream's translator into the client's protocol.
#[derive(Debug)]
pub enum StreamTranslator {
    /// Into Messages events.
    Messages(messages_sse::SseTranslator),
    /// Into Responses events (boxed: it keeps the finished output items).
    Responses(Box<responses_sse::SseTranslator>),
}

impl StreamTranslator {
    /// A translator into `protocol`; `None` for Chat Completions.
    pub fn new(protocol: Protocol) -> Option<Self> {
        match protocol {
            Protocol::Chat => None,
            Protocol::Messages => Some(Self::Messages(Default::default())),
            Protocol::Responses => Some(Self::Responses(Box::default())),
        }
    }

    /// The client's events for `chunk`, and the closing ones at the end.
    pub fn push(&mut self, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        let (mut out, end) = match self {
            Self::Messages(t) => (t.push(chunk), end_of_stream.then(|| t.finish())),
            Self::Responses(t) => (t.push(chunk), end_of_stream.then(|| t.finish())),
        };
        out.extend(end.unwrap_or_default());
        out
    }
}
