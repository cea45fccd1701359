//! The protocols clients speak, and their translation to and from the one mom-router's pipeline
//! reads. Chat Completions is the pipeline's own form: a request in another protocol is
//! translated into it at ingress (signals, decisions, plugins, recipes, the cache and records
//! then read one request), and the answer is translated back at egress — JSON whole, a stream
//! event by event, errors in the client's protocol's shape.

pub mod messages;
pub mod messages_sse;

/// The protocol of a client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`): the pipeline's own form.
    #[default]
    Chat,
    /// Anthropic Messages (`POST /v1/messages`).
    Messages,
}

impl Protocol {
    /// The protocol's name in headers, records and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Messages => "messages",
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

impl TranslateError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
