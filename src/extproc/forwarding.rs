//! The request-body reply that forwards a request, written straight onto the wire: the header
//! edits (`x-selected-model`, the new `content-length`, `accept-encoding`, any a plugin made),
//! the rewritten body and `clear_route_cache`. Built as prost messages, each header is three
//! allocations and each nesting level measures everything below it again; here every length is
//! summed once from the parts. The bytes are those prost writes for the same
//! `ProcessingResponse` (fields in the same order), so Envoy reads the message it always did.

use super::reply::{delimited_head, delimited_len};
use crate::engine::decimal::Digits;
use prost::bytes::BufMut;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

/// `ProcessingResponse.request_body`.
const REQUEST_BODY: u32 = 3;
/// `BodyResponse.response`.
const COMMON: u32 = 1;
/// `CommonResponse.header_mutation`, `.body_mutation`, `.clear_route_cache`.
const HEADER_MUTATION: u32 = 2;
const BODY_MUTATION: u32 = 3;
const CLEAR_ROUTE_CACHE: u32 = 5;
/// `HeaderMutation.set_headers`, `.remove_headers`.
const SET_HEADERS: u32 = 1;
const REMOVE_HEADERS: u32 = 2;
/// `HeaderValueOption.header`, `.append_action`.
const HEADER: u32 = 1;
const APPEND_ACTION: u32 = 3;
/// `HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD`.
const OVERWRITE_IF_EXISTS_OR_ADD: u64 = 2;
/// `HeaderValue.key`, `.raw_value`.
const KEY: u32 = 1;
const RAW_VALUE: u32 = 3;
/// `BodyMutation.body`.
const BODY: u32 = 1;

/// The header that names the model Envoy routes to.
const SELECTED_MODEL: &str = super::convert::SELECTED_MODEL_HEADER;

/// A forwarded request's reply to the request-body phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarding {
    /// The model Envoy routes to (`x-selected-model`).
    pub model: crate::config::Name,
    /// Headers set besides those every forward sets (name, value), each replacing any value.
    pub set: Vec<(String, String)>,
    /// Headers removed.
    pub remove: Vec<String>,
    /// The body sent upstream.
    pub body: Vec<u8>,
}

/// A `HeaderValue` of `name` and `value`, its length (the empty `value` string is not written).
fn header_value_len(name: &str, value: &[u8]) -> usize {
    delimited_len(KEY, name.len()) + delimited_len(RAW_VALUE, value.len())
}

/// A `HeaderValueOption` of the header, its length.
fn option_len(name: &str, value: &[u8]) -> usize {
    delimited_len(HEADER, header_value_len(name, value))
        + key_len(APPEND_ACTION)
        + encoded_len_varint(OVERWRITE_IF_EXISTS_OR_ADD)
}

fn encode_option(name: &str, value: &[u8], buf: &mut impl BufMut) {
    delimited_head(SET_HEADERS, option_len(name, value), buf);
    delimited_head(HEADER, header_value_len(name, value), buf);
    delimited_head(KEY, name.len(), buf);
    buf.put_slice(name.as_bytes());
    delimited_head(RAW_VALUE, value.len(), buf);
    buf.put_slice(value);
    encode_key(APPEND_ACTION, WireType::Varint, buf);
    encode_varint(OVERWRITE_IF_EXISTS_OR_ADD, buf);
}

impl Forwarding {
    /// The body's length, as `content-length` carries it.
    fn length(&self) -> Digits {
        Digits::new(self.body.len() as u64)
    }

    /// Each header set, in order: the three every forward sets, then the plugins'.
    fn headers<'a>(&'a self, length: &'a Digits) -> impl Iterator<Item = (&'a str, &'a [u8])> {
        [
            (SELECTED_MODEL, self.model.as_bytes()),
            ("content-length", length.as_str().as_bytes()),
            ("accept-encoding", b"identity".as_slice()),
        ]
        .into_iter()
        .chain(self.set.iter().map(|(k, v)| (k.as_str(), v.as_bytes())))
    }

    /// The lengths of the `HeaderMutation` and of the `CommonResponse`.
    fn lens(&self, length: &Digits) -> (usize, usize) {
        let set: usize = self
            .headers(length)
            .map(|(name, value)| delimited_len(SET_HEADERS, option_len(name, value)))
            .sum();
        let remove: usize = self
            .remove
            .iter()
            .map(|name| delimited_len(REMOVE_HEADERS, name.len()))
            .sum();
        let mutation = set + remove;
        let common = delimited_len(HEADER_MUTATION, mutation)
            + delimited_len(BODY_MUTATION, delimited_len(BODY, self.body.len()))
            + key_len(CLEAR_ROUTE_CACHE)
            + 1;
        (mutation, common)
    }

    /// The length of the `ProcessingResponse` field it is.
    pub fn encoded_len(&self) -> usize {
        let common = self.lens(&self.length()).1;
        delimited_len(REQUEST_BODY, delimited_len(COMMON, common))
    }

    /// Writes it as the `ProcessingResponse.request_body` field.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let length = self.length();
        let (mutation, common) = self.lens(&length);
        delimited_head(REQUEST_BODY, delimited_len(COMMON, common), buf);
        delimited_head(COMMON, common, buf);
        delimited_head(HEADER_MUTATION, mutation, buf);
        for (name, value) in self.headers(&length) {
            encode_option(name, value, buf);
        }
        for name in &self.remove {
            delimited_head(REMOVE_HEADERS, name.len(), buf);
            buf.put_slice(name.as_bytes());
        }
        delimited_head(BODY_MUTATION, delimited_len(BODY, self.body.len()), buf);
        delimited_head(BODY, self.body.len(), buf);
        buf.put_slice(&self.body);
        encode_key(CLEAR_ROUTE_CACHE, WireType::Varint, buf);
        encode_varint(1, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extproc::convert::set_header;
    use envoy_types::pb::envoy::service::ext_proc::v3::{
        body_mutation::Mutation, processing_response::Response, BodyMutation, BodyResponse,
        CommonResponse, HeaderMutation, ProcessingResponse,
    };
    use prost::Message;

    /// The same reply built as prost messages.
    fn as_prost(forwarding: &Forwarding) -> ProcessingResponse {
        let length = forwarding.body.len().to_string();
        let mut set_headers = vec![
            set_header(SELECTED_MODEL, &forwarding.model),
            set_header("content-length", &length),
            set_header("accept-encoding", "identity"),
        ];
        set_headers.extend(forwarding.set.iter().map(|(k, v)| set_header(k, v)));
        ProcessingResponse {
            response: Some(Response::RequestBody(BodyResponse {
                response: Some(CommonResponse {
                    header_mutation: Some(HeaderMutation {
                        set_headers,
                        remove_headers: forwarding.remove.clone(),
                    }),
                    body_mutation: Some(BodyMutation {
                        mutation: Some(Mutation::Body(forwarding.body.clone())),
                    }),
                    clear_route_cache: true,
                    ..Default::default()
                }),
            })),
            ..Default::default()
        }
    }

    #[test]
    fn writes_the_bytes_prost_writes_for_the_same_response() {
        let plain = Forwarding {
            model: "qwen2.5-coder-0.5b".into(),
            set: Vec::new(),
            remove: Vec::new(),
            body: br#"{"model":"qwen","messages":[]}"#.to_vec(),
        };
        // Long values push lengths past one varint byte at every level; an empty body is
        // still a body.
        let edited = Forwarding {
            model: "m".repeat(300).into(),
            set: vec![
                (":path".to_owned(), "/v1/chat/completions".to_owned()),
                ("traceparent".to_owned(), "t".repeat(20_000)),
            ],
            remove: vec!["authorization".to_owned(), "x-api-key".to_owned()],
            body: Vec::new(),
        };
        let big = Forwarding {
            body: vec![b'x'; 70_000],
            ..plain.clone()
        };
        for forwarding in [plain, edited, big] {
            let mut ours = Vec::new();
            forwarding.encode(&mut ours);
            assert_eq!(ours.len(), forwarding.encoded_len());
            assert_eq!(ours, as_prost(&forwarding).encode_to_vec());
        }
    }
}
