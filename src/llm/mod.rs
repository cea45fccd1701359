//! OpenAI wire types as the pipeline sees them: the chat-completion request, the request's HTTP
//! headers, and the OpenAI-style error body. Pure data and parsing, no I/O.

pub mod chat;
pub mod error_body;
pub mod headers;
pub mod usage;

pub use chat::{ChatRequest, Message, RequestError};
pub use headers::Headers;
pub use usage::{Usage, UsageScanner};
