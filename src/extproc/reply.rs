//! Envoy's reply as it goes on the wire: a `ProcessingResponse` whose `mom_router` dynamic
//! metadata is written straight from the exchange's [`Outcome`], field by field. Built as a
//! protobuf `Struct`, the same metadata is a hash map of keys and boxed values made, hashed,
//! measured three times over (each nesting level asks its children's length again) and freed
//! for every routed request; here it is two passes over the outcome's list. The bytes are the
//! message Envoy expects (`dynamic_metadata`, field 8: a `Struct` holding one namespace whose
//! value is a `Struct` of the fields), so a client decodes it as a plain `ProcessingResponse`.

use super::convert::METADATA_NAMESPACE;
use super::forwarding::Forwarding;
use crate::engine::exchange::{Field, Outcome};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use prost::bytes::{Buf, BufMut};
use prost::encoding::{
    encode_key, encode_varint, encoded_len_varint, key_len, skip_field, DecodeContext, WireType,
};
use prost::{DecodeError, Message};
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

/// `ProcessingResponse.dynamic_metadata`.
const DYNAMIC_METADATA: u32 = 8;
/// `Struct.fields`, a map: each entry is a message of its key (1) and value (2).
const STRUCT_FIELDS: u32 = 1;
const ENTRY_KEY: u32 = 1;
const ENTRY_VALUE: u32 = 2;
/// The kinds of `google.protobuf.Value` an outcome uses.
const NUMBER_VALUE: u32 = 2;
const STRING_VALUE: u32 = 3;
const STRUCT_VALUE: u32 = 5;

/// One reply to Envoy: the response, and the outcome written as its `mom_router` metadata.
#[derive(Debug, Default, PartialEq)]
pub struct Reply {
    /// Everything but the metadata.
    pub response: Response,
    /// The `mom_router` dynamic metadata, when the step has an outcome.
    pub metadata: Option<Outcome>,
}

/// A reply's response, besides its metadata. Neither variant is boxed: every request has a
/// reply of each, and a box would be one more allocation for each of them.
#[derive(Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Response {
    /// Any response, as prost writes it (its `dynamic_metadata` stays unset).
    Message(ProcessingResponse),
    /// The request-body phase forwarding the request, written field by field.
    Forward(Forwarding),
}

impl Default for Response {
    fn default() -> Self {
        Self::Message(ProcessingResponse::default())
    }
}

/// The length of a length-delimited field `tag` holding `len` bytes, key and length included.
pub(super) fn delimited_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A length-delimited field's key and length, before its `len` bytes.
pub(super) fn delimited_head(tag: u32, len: usize, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

/// A `Value`'s length.
fn value_len(field: Field) -> usize {
    match field {
        Field::Text(text) => delimited_len(STRING_VALUE, text.len()),
        Field::Number(_) => key_len(NUMBER_VALUE) + 8,
    }
}

fn encode_value(field: Field, buf: &mut impl BufMut) {
    match field {
        Field::Text(text) => {
            delimited_head(STRING_VALUE, text.len(), buf);
            buf.put_slice(text.as_bytes());
        }
        Field::Number(n) => {
            encode_key(NUMBER_VALUE, WireType::SixtyFourBit, buf);
            buf.put_f64_le(n);
        }
    }
}

/// A map entry's length: its key, then its value of `value_len` bytes.
fn entry_len(key: &str, value_len: usize) -> usize {
    delimited_len(ENTRY_KEY, key.len()) + delimited_len(ENTRY_VALUE, value_len)
}

fn entry_head(key: &str, value_len: usize, buf: &mut impl BufMut) {
    delimited_head(STRUCT_FIELDS, entry_len(key, value_len), buf);
    delimited_head(ENTRY_KEY, key.len(), buf);
    buf.put_slice(key.as_bytes());
    delimited_head(ENTRY_VALUE, value_len, buf);
}

/// The lengths of the namespace's `Struct` of fields and of the whole metadata `Struct`.
fn metadata_lens(outcome: &Outcome) -> (usize, usize) {
    let fields = outcome
        .fields()
        .map(|(name, field)| delimited_len(STRUCT_FIELDS, entry_len(name, value_len(field))))
        .sum();
    let namespace = delimited_len(STRUCT_VALUE, fields);
    let whole = delimited_len(STRUCT_FIELDS, entry_len(METADATA_NAMESPACE, namespace));
    (fields, whole)
}

fn encode_metadata(outcome: &Outcome, buf: &mut impl BufMut) {
    let (fields, whole) = metadata_lens(outcome);
    delimited_head(DYNAMIC_METADATA, whole, buf);
    entry_head(METADATA_NAMESPACE, delimited_len(STRUCT_VALUE, fields), buf);
    delimited_head(STRUCT_VALUE, fields, buf);
    for (name, field) in outcome.fields() {
        entry_head(name, value_len(field), buf);
        encode_value(field, buf);
    }
}

impl Message for Reply {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match &self.response {
            Response::Message(response) => response.encode_raw(buf),
            Response::Forward(forwarding) => forwarding.encode(buf),
        }
        if let Some(outcome) = &self.metadata {
            encode_metadata(outcome, buf);
        }
    }

    /// A reply is only ever sent: read back, every field is skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let metadata = self.metadata.as_ref().map_or(0, |outcome| {
            delimited_len(DYNAMIC_METADATA, metadata_lens(outcome).1)
        });
        let response = match &self.response {
            Response::Message(response) => response.encoded_len(),
            Response::Forward(forwarding) => forwarding.encoded_len(),
        };
        response + metadata
    }

    fn clear(&mut self) {
        self.response = Response::default();
        self.metadata = None;
    }
}

/// ext_proc's codec: Envoy's messages decoded by prost, each reply written straight into gRPC's
/// buffer. (Prost's encoder first measures the whole reply, walking every field once more, to
/// check a room that gRPC's buffer, which grows as it is written, always has.)
#[derive(Debug, Default)]
pub struct ReplyCodec;

impl Codec for ReplyCodec {
    type Encode = Reply;
    type Decode = ProcessingRequest;
    type Encoder = ReplyEncoder;
    type Decoder = ProstDecoder<ProcessingRequest>;

    fn encoder(&mut self) -> ReplyEncoder {
        ReplyEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<Reply, ProcessingRequest>::raw_decoder(BufferSettings::default())
    }
}

/// Writes each [`Reply`] into gRPC's buffer.
#[derive(Debug)]
pub struct ReplyEncoder;

impl Encoder for ReplyEncoder {
    type Item = Reply;
    type Error = Status;

    fn encode(&mut self, reply: Reply, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        reply.encode_raw(buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ext_proc::v3::{
        processing_response, BodyResponse, CommonResponse,
    };
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    use std::collections::HashMap;

    /// The same metadata built the slow way, as a protobuf `Struct`.
    fn as_struct(outcome: &Outcome) -> Struct {
        let fields = outcome
            .fields()
            .map(|(name, field)| {
                let kind = match field {
                    Field::Text(text) => Kind::StringValue(text.to_owned()),
                    Field::Number(n) => Kind::NumberValue(n),
                };
                (name.to_owned(), Value { kind: Some(kind) })
            })
            .collect();
        let namespace = Value {
            kind: Some(Kind::StructValue(Struct { fields })),
        };
        Struct {
            fields: HashMap::from([(METADATA_NAMESPACE.to_owned(), namespace)]),
        }
    }

    fn routed() -> ProcessingResponse {
        ProcessingResponse {
            response: Some(processing_response::Response::RequestBody(BodyResponse {
                response: Some(CommonResponse {
                    clear_route_cache: true,
                    ..Default::default()
                }),
            })),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_as_the_response_with_its_metadata_as_a_struct() {
        // Long texts push lengths past one varint byte at every level.
        let mut outcome = Outcome::default();
        outcome.push_text("model", "qwen2.5-coder-0.5b");
        outcome.push_text("selection_reason", &"é…".repeat(90));
        outcome.push_number("confidence", 0.8125);
        outcome.push_text("scores", "");
        outcome.push_number("looper_cost", -0.0);
        outcome.push_text("run_id", &"r".repeat(20_000));
        let reply = Reply {
            response: Response::Message(routed()),
            metadata: Some(outcome.clone()),
        };
        let bytes = reply.encode_to_vec();
        assert_eq!(bytes.len(), reply.encoded_len());
        let decoded = ProcessingResponse::decode(bytes.as_slice()).expect("decodes");
        let expected = ProcessingResponse {
            dynamic_metadata: Some(as_struct(&outcome)),
            ..routed()
        };
        assert_eq!(decoded, expected);
    }

    #[test]
    fn without_an_outcome_it_is_the_response_alone() {
        let reply = Reply {
            response: Response::Message(routed()),
            metadata: None,
        };
        assert_eq!(reply.encode_to_vec(), routed().encode_to_vec());
        let empty = Reply {
            response: Response::Message(routed()),
            metadata: Some(Outcome::default()),
        };
        let decoded = ProcessingResponse::decode(empty.encode_to_vec().as_slice()).expect("ok");
        assert_eq!(
            decoded.dynamic_metadata,
            Some(as_struct(&Outcome::default()))
        );
    }
}
