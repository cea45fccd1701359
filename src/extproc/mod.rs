//! The Envoy ext_proc adapter: protocol only. Each gRPC stream ([`service`]) drives one
//! protocol-neutral [`crate::engine::exchange::Exchange`] ([`stream`]), and proto types meet
//! the exchange's messages and steps in one file ([`convert`]).
//!
//! Phases (the filter config in `envoy/` sets these modes):
//!
//! | phase | mode | mom-router does |
//! |---|---|---|
//! | request headers | SEND | answers `/v1/models`, bad path/method, oversize `content-length`; else waits for the body |
//! | request body | BUFFERED | parses, runs signals → decision → selection; sets `x-selected-model`, rewrites `model`, fixes `content-length`, clears the route cache, emits `mom_router` metadata — or answers with an OpenAI error |
//! | response headers | SEND | adds `x-mom-*` headers; for a 200 to a `stream: true` request switches the response body to STREAMED |
//! | response body | NONE, STREAMED when switched | passes each SSE chunk through unchanged, timing the first |

pub mod convert;
mod forwarding;
pub mod reply;
pub mod service;
pub mod stream;

pub use service::{ExtProcService, MAX_MESSAGE_BYTES};
