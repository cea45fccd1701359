//! Proto ↔ domain: the only file that reads and builds ext_proc messages. Each message from
//! Envoy becomes an exchange [`Message`]; each [`Step`] the exchange answers becomes Envoy's
//! reply ([`Reply`]), its [`Outcome`](crate::engine::exchange::Outcome) the `mom_router` dynamic
//! metadata.

use super::forwarding::Forwarding;
use super::reply::{self, Reply};
use crate::engine::exchange::{Body, BodyMode, Head, HeaderSet, Message, Step};
use crate::engine::{self, Forward, Headers};
use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderMap, HeaderValue, HeaderValueOption, Metadata,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{
    processing_mode::{BodySendMode, HeaderSendMode},
    ProcessingMode,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, processing_request::Request, processing_response::Response,
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpBody,
    HttpHeaders, ImmediateResponse, ProcessingRequest, ProcessingResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

/// Dynamic-metadata namespace Envoy must list in `receiving_namespaces.untyped`.
pub const METADATA_NAMESPACE: &str = "mom_router";

/// Headers mom-router owns upstream; a client's copies are overwritten or removed.
pub const SELECTED_MODEL_HEADER: &str = "x-selected-model";

/// Reads Envoy's header map, taking its strings: values come in `raw_value` (falling back to
/// `value`), names are lower-cased in place.
pub fn headers_from(map: Option<HeaderMap>) -> Headers {
    Headers::new(map.into_iter().flat_map(|m| m.headers).map(|h| {
        let value = if h.raw_value.is_empty() {
            h.value
        } else {
            String::from_utf8(h.raw_value)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        };
        (h.key, value)
    }))
}

/// Bound on the forwarded dynamic metadata read (values nested deeper are dropped): Envoy's
/// filters write shallow structures; this keeps a hostile one from recursing without end.
const METADATA_DEPTH: usize = 8;

/// The dynamic metadata Envoy forwarded (only the namespaces its ext_proc filter is told to
/// forward, `metadata_options.forwarding_namespaces`), as JSON by namespace.
pub fn metadata_from(metadata: Option<Metadata>) -> serde_json::Map<String, serde_json::Value> {
    fn json(value: Value, depth: usize) -> serde_json::Value {
        match value.kind {
            _ if depth == 0 => serde_json::Value::Null,
            Some(Kind::StringValue(s)) => serde_json::Value::String(s),
            Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
            Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Some(Kind::ListValue(list)) => serde_json::Value::Array(
                list.values
                    .into_iter()
                    .map(|v| json(v, depth - 1))
                    .collect(),
            ),
            Some(Kind::StructValue(s)) => object(s, depth - 1),
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        }
    }
    fn object(s: Struct, depth: usize) -> serde_json::Value {
        let fields = s.fields.into_iter().map(|(k, v)| (k, json(v, depth)));
        serde_json::Value::Object(fields.collect())
    }
    metadata
        .into_iter()
        .flat_map(|m| m.filter_metadata)
        .map(|(namespace, fields)| (namespace, object(fields, METADATA_DEPTH)))
        .collect()
}

/// A header that replaces any value the request already has.
pub fn set_header(name: &str, value: &str) -> HeaderValueOption {
    set_owned(name.to_owned(), value.as_bytes().to_vec())
}

/// [`set_header`] of a name and value already owned.
fn set_owned(key: String, raw_value: Vec<u8>) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key,
            value: String::new(),
            raw_value,
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

/// The exchange's message for one of Envoy's; `None` when it carries no phase.
pub fn message(message: ProcessingRequest) -> Option<Message> {
    let ProcessingRequest {
        request,
        metadata_context: metadata,
        ..
    } = message;
    let head = |h: HttpHeaders| Head {
        headers: headers_from(h.headers),
        end_of_stream: h.end_of_stream,
        run_id: None,
    };
    let body = |b: HttpBody| Body {
        bytes: b.body,
        end_of_stream: b.end_of_stream,
    };
    Some(match request? {
        Request::RequestHeaders(h) => {
            let mut head = head(h);
            head.headers = head.headers.with_metadata(metadata_from(metadata));
            Message::RequestHeaders(head)
        }
        Request::RequestBody(b) => Message::RequestBody(body(b)),
        Request::ResponseHeaders(h) => Message::ResponseHeaders(Head {
            run_id: run_id_from(metadata.as_ref()).and_then(crate::state::RunId::parse),
            ..head(h)
        }),
        Request::ResponseBody(b) => Message::ResponseBody(body(b)),
        Request::RequestTrailers(_) => Message::RequestTrailers,
        Request::ResponseTrailers(_) => Message::ResponseTrailers,
    })
}

/// Envoy's reply for the exchange's step: the response, and the outcome its metadata carries.
pub fn reply(step: Step) -> Reply {
    // Every response but the forward's is built as prost's message.
    let message = reply::Response::Message;
    let (response, metadata) = match step {
        Step::PassRequestHeaders { watch_response } => {
            let mut reply = continue_request_headers();
            if !watch_response {
                // The request body still comes whole (BUFFERED); the response passes through
                // Envoy alone.
                reply.mode_override = Some(complete_mode(HeaderSendMode::Skip, BodySendMode::None));
            }
            (message(reply), None)
        }
        Step::Wait(by) => (message(extend_timeout(by)), None),
        Step::Forward { forward, outcome } => {
            (reply::Response::Forward(forwarding(forward)), Some(outcome))
        }
        Step::Reply {
            reply,
            headers,
            outcome,
        } => (message(immediate(reply, headers)), Some(outcome)),
        Step::PassResponseHeaders { set, remove, body } => {
            (message(response_headers(set, remove, body)), None)
        }
        Step::PassResponseBody { set, body, outcome } => (
            message(response_body(set, body, outcome.is_some())),
            outcome,
        ),
        Step::PassRequestTrailers => (
            message(ProcessingResponse {
                response: Some(Response::RequestTrailers(TrailersResponse::default())),
                ..Default::default()
            }),
            None,
        ),
        Step::PassResponseTrailers => (
            message(ProcessingResponse {
                response: Some(Response::ResponseTrailers(TrailersResponse::default())),
                ..Default::default()
            }),
            None,
        ),
    };
    Reply { response, metadata }
}

fn set_headers(set: Vec<HeaderSet>) -> impl Iterator<Item = HeaderValueOption> {
    set.into_iter()
        .map(|(name, value)| set_owned(name.to_owned(), value.into_bytes()))
}

/// A reply that only extends Envoy's timer for the current message (up to the filter's
/// `max_message_timeout`), sent before mom-router calls models.
fn extend_timeout(by: std::time::Duration) -> ProcessingResponse {
    ProcessingResponse {
        override_message_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: by.as_secs() as i64,
            nanos: by.subsec_nanos() as i32,
        }),
        ..Default::default()
    }
}

/// Continue with the request headers unchanged.
fn continue_request_headers() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestHeaders(HeadersResponse::default())),
        ..Default::default()
    }
}

/// A whole processing mode (Envoy takes a `mode_override` as given): the request body
/// BUFFERED as mom-router needs it, trailers skipped, the response as asked.
fn complete_mode(response_headers: HeaderSendMode, response_body: BodySendMode) -> ProcessingMode {
    ProcessingMode {
        request_header_mode: HeaderSendMode::Send as i32,
        response_header_mode: response_headers as i32,
        request_body_mode: BodySendMode::Buffered as i32,
        response_body_mode: response_body as i32,
        request_trailer_mode: HeaderSendMode::Skip as i32,
        response_trailer_mode: HeaderSendMode::Skip as i32,
    }
}

/// The body-phase reply that routes the request, written field by field; the forward's model,
/// header edits and rewritten body move into it uncopied.
fn forwarding(forward: Forward) -> Forwarding {
    Forwarding {
        model: forward.model,
        set: forward.headers.set,
        remove: forward.headers.remove,
        body: forward.body,
    }
}

/// An immediate reply with its body, its own headers and the `x-mom-*` headers.
fn immediate(reply: engine::Reply, headers: Vec<HeaderSet>) -> ProcessingResponse {
    let typed = reply
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    let mut set = Vec::new();
    if !typed {
        set.push(set_header("content-type", "application/json"));
    }
    set.extend(reply.headers.iter().map(|(k, v)| set_header(k, v)));
    set.extend(set_headers(headers));
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus {
                code: i32::from(reply.status),
            }),
            headers: Some(HeaderMutation {
                set_headers: set,
                remove_headers: Vec::new(),
            }),
            details: format!("mom_router_{}", reply.code.label()),
            body: reply.body,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The run id a failed response's `mom_router` metadata names (the failover filter's stream).
pub fn run_id_from(metadata: Option<&Metadata>) -> Option<&str> {
    let fields = &metadata?.filter_metadata.get(METADATA_NAMESPACE)?.fields;
    match &fields.get("run_id")?.kind {
        Some(Kind::StringValue(id)) => Some(id),
        _ => None,
    }
}

/// The response-headers reply: headers set and removed, and the response body mode asked for.
fn response_headers(set: Vec<HeaderSet>, remove: Vec<&str>, body: BodyMode) -> ProcessingResponse {
    let response_body_mode = match body {
        BodyMode::Unchanged => None,
        BodyMode::Streamed => Some(BodySendMode::Streamed),
        BodyMode::Buffered => Some(BodySendMode::Buffered),
    };
    let mode_override = response_body_mode.map(|mode| complete_mode(HeaderSendMode::Send, mode));
    ProcessingResponse {
        response: Some(Response::ResponseHeaders(HeadersResponse {
            response: Some(CommonResponse {
                header_mutation: Some(HeaderMutation {
                    set_headers: set_headers(set).collect(),
                    remove_headers: remove.into_iter().map(str::to_owned).collect(),
                }),
                ..Default::default()
            }),
        })),
        mode_override,
        ..Default::default()
    }
}

/// The response-body reply: the chunk passed on or replaced, and headers set while Envoy holds
/// them (a BUFFERED body); `with_metadata` when the outcome of a finished check goes with it.
fn response_body(
    set: Vec<HeaderSet>,
    body: Option<Vec<u8>>,
    with_metadata: bool,
) -> ProcessingResponse {
    if set.is_empty() && body.is_none() && !with_metadata {
        return ProcessingResponse {
            response: Some(Response::ResponseBody(BodyResponse::default())),
            ..Default::default()
        };
    }
    let common = CommonResponse {
        header_mutation: (!set.is_empty()).then(|| HeaderMutation {
            set_headers: set_headers(set).collect(),
            remove_headers: Vec::new(),
        }),
        body_mutation: body.map(|body| BodyMutation {
            mutation: Some(Mutation::Body(body)),
        }),
        ..Default::default()
    };
    ProcessingResponse {
        response: Some(Response::ResponseBody(BodyResponse {
            response: Some(common),
        })),
        ..Default::default()
    }
}
