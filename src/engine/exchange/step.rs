//! The exchange's vocabulary with the proxy in front of it: the [`Message`]s it reads (one per
//! phase of an HTTP request) and the [`Step`] it answers each with, plus the [`Outcome`] a step
//! publishes for the access log. Nothing here names a wire format: the proxy's adapter
//! (`extproc/convert.rs` for Envoy) turns these into its own messages.

use super::super::{Forward, Reply, ResponsePath, Trace};
use crate::llm::Headers;
use std::time::Duration;

/// One phase of an HTTP request, as the proxy hands it over.
#[derive(Debug)]
pub enum Message {
    /// The request's headers (with the metadata the proxy forwarded).
    RequestHeaders(Head),
    /// The request body (whole when the proxy buffers it, as mom-router asks).
    RequestBody(Body),
    /// The upstream's response headers, `:status` among them.
    ResponseHeaders(Head),
    /// A chunk of the response body (the whole body when held).
    ResponseBody(Body),
    /// The request's trailers.
    RequestTrailers,
    /// The response's trailers.
    ResponseTrailers,
}

/// A message's headers.
#[derive(Debug, Default)]
pub struct Head {
    /// The headers.
    pub headers: Headers,
    /// No body follows.
    pub end_of_stream: bool,
    /// The run id the request's outcome named, when the proxy passes it back with a response
    /// (the failover filter's stream finds its parked request by it).
    pub run_id: Option<crate::state::RunId>,
}

/// A message's body, or a chunk of it.
#[derive(Debug, Default)]
pub struct Body {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The last of the body.
    pub end_of_stream: bool,
}

/// How the response body reaches mom-router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// Not at all (the proxy's configured mode).
    Unchanged,
    /// Chunk by chunk as it passes (observation, streamed contract checks).
    Streamed,
    /// Whole, before the client sees any of it (contract checks that may repair).
    Buffered,
}

/// A response header mom-router sets: a name it owns, a value it wrote.
pub type HeaderSet = (&'static str, String);

/// What the proxy does with one message.
#[derive(Debug)]
pub enum Step {
    /// The request headers pass on; the body comes next. Without `watch_response` the
    /// response phases are skipped (the `x-mom-*` headers travel in the outcome instead).
    PassRequestHeaders {
        /// The response phases come back to mom-router.
        watch_response: bool,
    },
    /// Wait this long for the next step: mom-router holds the message while it calls models.
    Wait(Duration),
    /// Send the rewritten request upstream.
    Forward {
        /// The model, body and header edits.
        forward: Forward,
        /// The decision, for the access log (and the response headers when unwatched).
        outcome: Outcome,
    },
    /// Answer the client now, instead of (or in place of) the upstream.
    Reply {
        /// Status, body and its own headers.
        reply: Reply,
        /// The `x-mom-*` headers.
        headers: Vec<HeaderSet>,
        /// The outcome, for the access log.
        outcome: Outcome,
    },
    /// The response headers pass on, edited; the body comes as `body` asks.
    PassResponseHeaders {
        /// Headers set.
        set: Vec<HeaderSet>,
        /// Headers removed.
        remove: Vec<&'static str>,
        /// How the body comes back.
        body: BodyMode,
    },
    /// A response body chunk passes on, or is replaced.
    PassResponseBody {
        /// Headers set (a held body only: the headers are still with the proxy).
        set: Vec<HeaderSet>,
        /// The bytes the client gets instead, when they differ.
        body: Option<Vec<u8>>,
        /// The outcome, once a check finished.
        outcome: Option<Outcome>,
    },
    /// The request trailers pass on.
    PassRequestTrailers,
    /// The response trailers pass on.
    PassResponseTrailers,
}

impl Step {
    /// The response headers passed on unchanged.
    pub fn pass_response_headers() -> Self {
        Self::PassResponseHeaders {
            set: Vec::new(),
            remove: Vec::new(),
            body: BodyMode::Unchanged,
        }
    }

    /// A response body chunk passed on unchanged.
    pub fn pass_response_body() -> Self {
        Self::PassResponseBody {
            set: Vec::new(),
            body: None,
            outcome: None,
        }
    }

    /// The answer `reply` on response path `path`, its headers and outcome from `trace`.
    pub fn reply(reply: Reply, trace: &Trace, path: ResponsePath) -> Self {
        Self::Reply {
            reply,
            headers: trace.response_headers(path),
            outcome: Outcome::of(trace, path),
        }
    }

    /// The response headers passed on with the `x-mom-*` headers of `trace`, the body read as
    /// `body` asks.
    pub fn response_headers(trace: &Trace, body: BodyMode) -> Self {
        Self::PassResponseHeaders {
            set: trace.response_headers(ResponsePath::Upstream),
            remove: Vec::new(),
            body,
        }
    }

    /// A response body mom-router read: the replacement when there is one (with its
    /// content-length while the proxy holds the headers, a held body), and, given the trace of
    /// a finished check, `x-mom-contract` and `x-mom-grounding` (held only) and the outcome.
    pub fn checked_body(checked: Option<&Trace>, body: Option<Vec<u8>>, held: bool) -> Self {
        let mut set = Vec::new();
        if held {
            if let Some(contract) = checked.and_then(Trace::contract_label) {
                set.push(("x-mom-contract", contract));
            }
            if let Some(grounding) = checked.and_then(Trace::grounding_label) {
                set.push(("x-mom-grounding", grounding));
            }
            if let Some(body) = &body {
                set.push(("content-length", body.len().to_string()));
            }
        }
        Self::PassResponseBody {
            set,
            body,
            outcome: checked.map(|trace| Outcome::of(trace, ResponsePath::Upstream)),
        }
    }

    /// Replaces the body a response-body step sends on (any other step is left as it is); a
    /// held body gets its new content-length.
    pub fn replace_body(&mut self, replacement: Vec<u8>, held: bool) {
        let Self::PassResponseBody { set, body, .. } = self else {
            return;
        };
        if held {
            set.retain(|(name, _)| *name != "content-length");
            set.push(("content-length", replacement.len().to_string()));
        }
        *body = Some(replacement);
    }
}

/// One field of an [`Outcome`], as read from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// Text.
    Text(&'a str),
    /// A number.
    Number(f64),
}

/// Where a field's value lies: its text's range in the outcome's text, or the number.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    Text(std::ops::Range<usize>),
    Number(f64),
}

/// What a request's handling decided, field by field, for the proxy's access log: the
/// `mom_router` dynamic metadata in Envoy. Every text lies in one string, so an outcome is two
/// allocations however many fields it has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    text: String,
    fields: Vec<(&'static str, Slot)>,
}

impl Outcome {
    /// Adds a text field.
    pub fn push_text(&mut self, name: &'static str, value: &str) {
        self.push_with(name, |text| text.push_str(value));
    }

    /// Adds a text field that `write` appends to the outcome's text (a label written in place
    /// rather than made and copied).
    pub fn push_with(&mut self, name: &'static str, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        self.fields.push((name, Slot::Text(start..self.text.len())));
    }

    /// Adds a number field.
    pub fn push_number(&mut self, name: &'static str, value: f64) {
        self.fields.push((name, Slot::Number(value)));
    }

    /// The fields in the order they were added.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, Field<'_>)> {
        self.fields.iter().map(|(name, slot)| {
            let field = match slot {
                Slot::Text(range) => Field::Text(&self.text[range.clone()]),
                Slot::Number(n) => Field::Number(*n),
            };
            (*name, field)
        })
    }

    /// The outcome `trace` describes, answered on `path`.
    pub fn of(trace: &Trace, path: ResponsePath) -> Self {
        let mut outcome = Self {
            text: String::with_capacity(256),
            fields: Vec::with_capacity(24),
        };
        outcome.push_text("response_path", path.name());
        outcome.push_text("config_version", &trace.config_version);
        if let Some(translation) = &trace.translation {
            outcome.push_text("protocol", translation.protocol.name());
        }
        if let Some(identity) = &trace.identity {
            outcome.push_text("identity", identity);
        }
        if let Some(chain) = &trace.failover {
            outcome.push_text("fallback", chain);
        }
        if let Some(model) = &trace.model {
            outcome.push_text("decision", trace.decision_label());
            outcome.push_text("model", model);
            outcome.push_text("algorithm", trace.algorithm);
        }
        if !trace.scores.is_empty() {
            outcome.push_with("scores", |text| trace.push_scores_label(text));
            outcome.push_text("selection_reason", &trace.selection_reason);
        }
        if let Some(looper) = &trace.looper {
            outcome.push_text("looper", looper.kind);
            outcome.push_text("looper_steps", &trace.looper_label());
        }
        if let Some(contract) = trace.contract_label() {
            outcome.push_text("contract", &contract);
        }
        if !trace.plugins.is_empty() {
            outcome.push_text("plugins", &trace.plugins_label());
        }
        if let Some(grounding) = trace.grounding_label() {
            outcome.push_text("grounding", &grounding);
        }
        if let Some(session) = &trace.session {
            outcome.push_text("session", session.status);
            outcome.push_text("session_reason", &session.reason);
        }
        if let Some(run_id) = &trace.run_id {
            outcome.push_text("run_id", run_id.text().as_str());
        }
        if let Some(provider_model) = &trace.provider_model {
            outcome.push_text("provider_model", provider_model);
        }
        if let Some((code, _)) = trace.error {
            outcome.push_text("error", code);
        }
        if let Some(tenant) = &trace.tenant {
            outcome.push_text("tenant", tenant);
        }
        if trace.model.is_some() {
            outcome.push_number("confidence", trace.confidence);
        }
        if let Some(looper) = &trace.looper {
            outcome.push_number("looper_prompt_tokens", looper.usage.0 as f64);
            outcome.push_number("looper_completion_tokens", looper.usage.1 as f64);
            outcome.push_number("looper_cost", looper.cost);
        }
        outcome
    }

    /// [`Outcome::of`] a forwarded request, for a proxy that adds its `x-mom-*` response
    /// headers itself (the response phases are skipped). Each header reads the field that holds
    /// its text (`x-mom-selection-reason` from `selection_reason`, as `envoy/quickstart.yaml`
    /// lists them); the two texts no other field holds are added: `identity_version`, and
    /// `confidence_label`, the confidence as the header writes it. One flat namespace: Envoy
    /// spends far more on a nested copy of the headers than on a few more fields.
    pub fn with_headers(trace: &Trace) -> Self {
        let mut outcome = Self::of(trace, ResponsePath::Upstream);
        if let Some(version) = &trace.identity_version {
            outcome.push_text("identity_version", version);
        }
        if trace.model.is_some() {
            outcome.push_with("confidence_label", |text| trace.push_confidence_label(text));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_gives_back_each_field_as_pushed() {
        let mut outcome = Outcome::default();
        outcome.push_text("model", "qwen2.5-coder-0.5b");
        outcome.push_number("confidence", 0.8125);
        outcome.push_text("scores", "");
        outcome.push_with("label", |text| text.push_str("é…"));
        outcome.push_text("run_id", "r1");
        let fields: Vec<_> = outcome.fields().collect();
        assert_eq!(
            fields,
            vec![
                ("model", Field::Text("qwen2.5-coder-0.5b")),
                ("confidence", Field::Number(0.8125)),
                ("scores", Field::Text("")),
                ("label", Field::Text("é…")),
                ("run_id", Field::Text("r1")),
            ]
        );
    }
}
