//! OpenAI wire types as the pipeline sees them: the chat-completion request, the request's HTTP
//! headers, the OpenAI-style error body, token usage and log-probabilities, where code sits in a
//! message's Markdown; and the one outbound seam, the client for sub-requests through Envoy's
//! internal listener.

pub mod chat;
mod chat_json;
mod chat_scan;
pub mod client;
pub mod contract;
pub mod error_body;
pub mod headers;
pub mod lines;
pub mod logprobs;
pub mod markdown;
pub mod sse;
pub mod usage;
pub mod usage_strip;

pub use chat::{ChatRequest, Message, RequestError};
pub use client::{CallError, LlmClient, SubReply};
pub use headers::Headers;
pub use usage::{Usage, UsageScanner};
