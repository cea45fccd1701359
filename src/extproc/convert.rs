//! Proto ↔ domain: the only file that builds ext_proc messages.

use crate::engine::{Forward, Reply, ResponsePath, Trace};
use crate::llm::Headers;
use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderMap, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{
    processing_mode::{BodySendMode, HeaderSendMode},
    ProcessingMode,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, common_response::ResponseStatus, processing_response::Response,
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse,
    ProcessingResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use std::collections::HashMap;

/// Dynamic-metadata namespace Envoy must list in `receiving_namespaces.untyped`.
pub const METADATA_NAMESPACE: &str = "mom_router";

/// Headers mom-router owns upstream; a client's copies are overwritten or removed.
pub const SELECTED_MODEL_HEADER: &str = "x-selected-model";

/// Reads Envoy's header map; values come in `raw_value` (falling back to `value`).
pub fn headers_from(map: Option<&HeaderMap>) -> Headers {
    Headers::new(map.into_iter().flat_map(|m| &m.headers).map(|h| {
        let value = if h.raw_value.is_empty() {
            h.value.clone()
        } else {
            String::from_utf8_lossy(&h.raw_value).into_owned()
        };
        (h.key.clone(), value)
    }))
}

/// Bound on the forwarded dynamic metadata read (values nested deeper are dropped): Envoy's
/// filters write shallow structures; this keeps a hostile one from recursing without end.
const METADATA_DEPTH: usize = 8;

/// The dynamic metadata Envoy forwarded (only the namespaces its ext_proc filter is told to
/// forward, `metadata_options.forwarding_namespaces`), as JSON by namespace.
pub fn metadata_from(
    metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>,
) -> serde_json::Map<String, serde_json::Value> {
    fn json(value: &Value, depth: usize) -> serde_json::Value {
        match &value.kind {
            _ if depth == 0 => serde_json::Value::Null,
            Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
            Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
            Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Some(Kind::ListValue(list)) => {
                serde_json::Value::Array(list.values.iter().map(|v| json(v, depth - 1)).collect())
            }
            Some(Kind::StructValue(s)) => object(s, depth - 1),
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        }
    }
    fn object(s: &Struct, depth: usize) -> serde_json::Value {
        let fields = s.fields.iter().map(|(k, v)| (k.clone(), json(v, depth)));
        serde_json::Value::Object(fields.collect())
    }
    metadata
        .into_iter()
        .flat_map(|m| &m.filter_metadata)
        .map(|(namespace, fields)| (namespace.clone(), object(fields, METADATA_DEPTH)))
        .collect()
}

/// A header that replaces any value the request already has.
pub fn set_header(name: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: name.to_owned(),
            value: String::new(),
            raw_value: value.as_bytes().to_vec(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn string(value: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(value.to_owned())),
    }
}

/// The `mom_router` dynamic metadata describing an outcome.
pub fn metadata(trace: &Trace, response_path: ResponsePath) -> Struct {
    namespaced(outcome_fields(trace, response_path))
}

/// The fields of the `mom_router` metadata describing an outcome.
fn outcome_fields(trace: &Trace, response_path: ResponsePath) -> HashMap<String, Value> {
    let mut fields = HashMap::new();
    fields.insert("response_path".to_owned(), string(response_path.name()));
    fields.insert("config_version".to_owned(), string(&trace.config_version));
    if let Some(translation) = &trace.translation {
        fields.insert("protocol".to_owned(), string(translation.protocol.name()));
    }
    if let Some(identity) = &trace.identity {
        fields.insert("identity".to_owned(), string(identity));
    }
    if let Some(chain) = &trace.failover {
        fields.insert("fallback".to_owned(), string(chain));
    }
    if let Some(model) = &trace.model {
        fields.insert("decision".to_owned(), string(trace.decision_label()));
        fields.insert("model".to_owned(), string(model));
        fields.insert("algorithm".to_owned(), string(trace.algorithm));
        fields.insert(
            "confidence".to_owned(),
            Value {
                kind: Some(Kind::NumberValue(trace.confidence)),
            },
        );
    }
    if !trace.scores.is_empty() {
        fields.insert("scores".to_owned(), string(&trace.scores_label()));
        fields.insert(
            "selection_reason".to_owned(),
            string(&trace.selection_reason),
        );
    }
    if let Some(looper) = &trace.looper {
        fields.insert("looper".to_owned(), string(looper.kind));
        fields.insert("looper_steps".to_owned(), string(&trace.looper_label()));
        for (name, value) in [
            ("looper_prompt_tokens", looper.usage.0 as f64),
            ("looper_completion_tokens", looper.usage.1 as f64),
            ("looper_cost", looper.cost),
        ] {
            fields.insert(
                name.to_owned(),
                Value {
                    kind: Some(Kind::NumberValue(value)),
                },
            );
        }
    }
    if let Some(contract) = trace.contract_label() {
        fields.insert("contract".to_owned(), string(&contract));
    }
    if !trace.plugins.is_empty() {
        fields.insert("plugins".to_owned(), string(&trace.plugins_label()));
    }
    if let Some(grounding) = trace.grounding_label() {
        fields.insert("grounding".to_owned(), string(&grounding));
    }
    if let Some(session) = &trace.session {
        fields.insert("session".to_owned(), string(session.status));
        fields.insert("session_reason".to_owned(), string(&session.reason));
    }
    if let Some(run_id) = &trace.run_id {
        fields.insert("run_id".to_owned(), string(run_id));
    }
    if let Some(provider_model) = &trace.provider_model {
        fields.insert("provider_model".to_owned(), string(provider_model));
    }
    if let Some((code, _)) = trace.error {
        fields.insert("error".to_owned(), string(code));
    }
    fields
}

/// `fields` under the `mom_router` namespace.
fn namespaced(fields: HashMap<String, Value>) -> Struct {
    let namespace = Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    };
    Struct {
        fields: HashMap::from([(METADATA_NAMESPACE.to_owned(), namespace)]),
    }
}

/// A reply that only extends Envoy's timer for the current message (up to the filter's
/// `max_message_timeout`), sent before a looper's sub-requests.
pub fn extend_timeout(by: std::time::Duration) -> ProcessingResponse {
    ProcessingResponse {
        override_message_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: by.as_secs() as i64,
            nanos: by.subsec_nanos() as i32,
        }),
        ..Default::default()
    }
}

/// Continue with the request headers unchanged.
pub fn continue_request_headers() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestHeaders(HeadersResponse::default())),
        ..Default::default()
    }
}

/// The request-headers reply that skips the response phases: the request body still comes
/// whole (BUFFERED); the response passes through Envoy alone.
pub fn continue_request_headers_unwatched() -> ProcessingResponse {
    ProcessingResponse {
        mode_override: Some(complete_mode(HeaderSendMode::Skip, BodySendMode::None)),
        ..continue_request_headers()
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

/// The body-phase reply that routes the request: header, body, content-length, route cache.
/// Takes the rewritten body by value so it is not copied. With `unwatched` (no response phase
/// follows) the `x-mom-*` response headers go in the metadata's `headers`, for Envoy to add.
pub fn forward(forward: Forward, trace: &Trace, unwatched: bool) -> ProcessingResponse {
    let mut set_headers = vec![
        set_header(SELECTED_MODEL_HEADER, &forward.model),
        set_header("content-length", &forward.body.len().to_string()),
        set_header("accept-encoding", "identity"),
    ];
    set_headers.extend(forward.headers.set.iter().map(|(k, v)| set_header(k, v)));
    let common = CommonResponse {
        status: ResponseStatus::Continue as i32,
        header_mutation: Some(HeaderMutation {
            set_headers,
            remove_headers: forward.headers.remove,
        }),
        body_mutation: Some(BodyMutation {
            mutation: Some(Mutation::Body(forward.body)),
        }),
        clear_route_cache: true,
        ..Default::default()
    };
    ProcessingResponse {
        response: Some(Response::RequestBody(BodyResponse {
            response: Some(common),
        })),
        dynamic_metadata: Some(if unwatched {
            metadata_with_headers(trace)
        } else {
            metadata(trace, ResponsePath::Upstream)
        }),
        ..Default::default()
    }
}

/// [`metadata`] plus `headers`: each `x-mom-*` response header by name.
fn metadata_with_headers(trace: &Trace) -> Struct {
    let headers = trace
        .response_headers(ResponsePath::Upstream)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), string(&value)))
        .collect();
    let mut fields = outcome_fields(trace, ResponsePath::Upstream);
    let headers = Value {
        kind: Some(Kind::StructValue(Struct { fields: headers })),
    };
    fields.insert("headers".to_owned(), headers);
    namespaced(fields)
}

/// An immediate reply with a JSON body, the `x-mom-*` headers and metadata.
pub fn immediate(reply: &Reply, trace: &Trace) -> ProcessingResponse {
    immediate_on(reply, trace, ResponsePath::Immediate)
}

/// [`immediate`] on response path `path` (`fallback`: another model's answer after the
/// forwarded one failed).
pub fn immediate_on(reply: &Reply, trace: &Trace, path: ResponsePath) -> ProcessingResponse {
    let typed = reply
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    let mut set_headers = Vec::new();
    if !typed {
        set_headers.push(set_header("content-type", "application/json"));
    }
    set_headers.extend(reply.headers.iter().map(|(k, v)| set_header(k, v)));
    set_headers.extend(
        trace
            .response_headers(path)
            .iter()
            .map(|(k, v)| set_header(k, v)),
    );
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus {
                code: i32::from(reply.status),
            }),
            headers: Some(HeaderMutation {
                set_headers,
                remove_headers: Vec::new(),
            }),
            body: reply.body.clone(),
            details: format!("mom_router_{}", reply.code.label()),
            ..Default::default()
        })),
        dynamic_metadata: Some(metadata(trace, path)),
        ..Default::default()
    }
}

/// The run id a failed response's `mom_router` metadata names (the failover filter's stream).
pub fn run_id_from(
    metadata: Option<&envoy_types::pb::envoy::config::core::v3::Metadata>,
) -> Option<&str> {
    let fields = &metadata?.filter_metadata.get(METADATA_NAMESPACE)?.fields;
    match &fields.get("run_id")?.kind {
        Some(Kind::StringValue(id)) => Some(id),
        _ => None,
    }
}

/// A response-headers reply that passes the response on with `headers` set.
pub fn response_headers_setting(headers: &[(&str, &str)]) -> ProcessingResponse {
    let mut reply = response_headers(None, BodyMode::Unchanged);
    if let Some(Response::ResponseHeaders(HeadersResponse {
        response: Some(common),
    })) = &mut reply.response
    {
        let mutation = common.header_mutation.get_or_insert_with(Default::default);
        mutation
            .set_headers
            .extend(headers.iter().map(|(k, v)| set_header(k, v)));
    }
    reply
}

/// How the response body reaches mom-router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// Not at all (the filter's configured mode).
    Unchanged,
    /// Chunk by chunk as it passes (observation, streamed contract checks).
    Streamed,
    /// Whole, before the client sees any of it (contract checks that may repair).
    Buffered,
}

/// The response-headers reply: `x-mom-*` headers, and the response body mode asked for.
pub fn response_headers(trace: Option<&Trace>, body: BodyMode) -> ProcessingResponse {
    let set_headers = trace
        .map(|t| {
            t.response_headers(ResponsePath::Upstream)
                .iter()
                .map(|(k, v)| set_header(k, v))
                .collect()
        })
        .unwrap_or_default();
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
                    set_headers,
                    remove_headers: Vec::new(),
                }),
                ..Default::default()
            }),
        })),
        mode_override,
        ..Default::default()
    }
}

/// Adds `name` to the headers a response-headers reply removes.
pub fn remove_response_header(reply: &mut ProcessingResponse, name: &str) {
    if let Some(Response::ResponseHeaders(HeadersResponse {
        response: Some(common),
    })) = &mut reply.response
    {
        common
            .header_mutation
            .get_or_insert_with(HeaderMutation::default)
            .remove_headers
            .push(name.to_owned());
    }
}

/// A response body mom-router read: the replacement body when there is one (with its
/// content-length while Envoy holds the headers, a BUFFERED body), and — given the trace of a
/// finished contract check — `x-mom-contract` (held headers only) and the metadata with the
/// outcome.
pub fn checked_response_body(
    checked: Option<&Trace>,
    body: Option<Vec<u8>>,
    held: bool,
) -> ProcessingResponse {
    let mut set_headers = Vec::new();
    if held {
        if let Some(contract) = checked.and_then(Trace::contract_label) {
            set_headers.push(set_header("x-mom-contract", &contract));
        }
        if let Some(grounding) = checked.and_then(Trace::grounding_label) {
            set_headers.push(set_header("x-mom-grounding", &grounding));
        }
        if let Some(body) = &body {
            set_headers.push(set_header("content-length", &body.len().to_string()));
        }
    }
    let common = CommonResponse {
        header_mutation: (!set_headers.is_empty()).then_some(HeaderMutation {
            set_headers,
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
        dynamic_metadata: checked.map(|trace| metadata(trace, ResponsePath::Upstream)),
        ..Default::default()
    }
}

/// Replaces the body a response-body reply sends on (a refusal is left as it is); a held body
/// gets its new content-length.
pub fn replace_response_body(response: &mut ProcessingResponse, body: Vec<u8>, held: bool) {
    let Some(Response::ResponseBody(BodyResponse { response: common })) = &mut response.response
    else {
        return;
    };
    let common = common.get_or_insert_with(CommonResponse::default);
    if held {
        let mutation = common
            .header_mutation
            .get_or_insert_with(HeaderMutation::default);
        mutation
            .set_headers
            .retain(|h| h.header.as_ref().is_none_or(|h| h.key != "content-length"));
        mutation
            .set_headers
            .push(set_header("content-length", &body.len().to_string()));
    }
    common.body_mutation = Some(BodyMutation {
        mutation: Some(Mutation::Body(body)),
    });
}

/// Pass a response body chunk through unchanged.
pub fn continue_response_body() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::ResponseBody(BodyResponse::default())),
        ..Default::default()
    }
}

/// Pass request trailers through unchanged.
pub fn continue_request_trailers() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::RequestTrailers(TrailersResponse::default())),
        ..Default::default()
    }
}

/// Pass response trailers through unchanged.
pub fn continue_response_trailers() -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::ResponseTrailers(TrailersResponse::default())),
        ..Default::default()
    }
}
