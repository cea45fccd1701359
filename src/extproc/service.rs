//! The tonic service: each ext_proc stream's state lives in its reply stream, which reads one
//! message from Envoy and yields one reply, in order; nothing is queued beyond that.

use super::stream::StreamState;
use crate::engine::exchange::{Exchanges, FailoverPart, Proxy};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    external_processor_server::{ExternalProcessor, ExternalProcessorServer},
    ProcessingRequest, ProcessingResponse,
};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use tonic::{Request, Response, Status, Streaming};

/// Largest gRPC message accepted from Envoy (a buffered request body plus headers). Bodies over
/// the configured `maxBodyBytes` are refused with 413 before this matters.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// gRPC metadata an Envoy sets on its ext_proc stream (value `dynamic-metadata`) when its route
/// configuration adds every `x-mom-*` response header from the `mom_router` dynamic metadata
/// field holding its text ([`crate::engine::exchange::Outcome::with_headers`]): responses that
/// owe mom-router nothing then skip the response phases.
pub const RESPONSE_HEADERS_METADATA: &str = "x-mom-response-headers";

/// The value of [`RESPONSE_HEADERS_METADATA`] that declares it.
pub const HEADERS_FROM_METADATA: &str = "dynamic-metadata";

/// gRPC metadata naming a stream's part in failover: `filter` on the main filter's streams of an
/// Envoy that also runs the failover filter (a composite filter that opens an ext_proc stream
/// only for a failed response), `stream` on that failover filter's own streams.
pub const FAILOVER_METADATA: &str = "x-mom-failover";

/// The ext_proc gRPC service.
#[derive(Clone)]
pub struct ExtProcService {
    exchanges: Exchanges,
}

impl ExtProcService {
    /// A service opening one of `exchanges` per stream.
    pub fn new(exchanges: Exchanges) -> Self {
        Self { exchanges }
    }

    /// The tonic server wrapper with message limits raised for buffered bodies.
    pub fn into_server(self) -> ExternalProcessorServer<Self> {
        ExternalProcessorServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProcService {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        // An Envoy that adds the x-mom-* response headers itself says so on the stream
        // (`grpc_service.initial_metadata` in envoy/quickstart.yaml).
        let envoy_adds_headers = request
            .metadata()
            .get(RESPONSE_HEADERS_METADATA)
            .is_some_and(|v| v.as_bytes() == HEADERS_FROM_METADATA.as_bytes());
        let failover = match request
            .metadata()
            .get(FAILOVER_METADATA)
            .map(|v| v.as_bytes())
        {
            Some(b"filter") => FailoverPart::Filter,
            Some(b"stream") => FailoverPart::Stream,
            _ => FailoverPart::None,
        };
        let inbound = request.into_inner();
        // Boxed: the stream's state moves in and out of each step's future, as a pointer.
        let state = Box::new(StreamState::new(self.exchanges.open(Proxy {
            adds_headers: envoy_adds_headers,
            failover,
        })));
        // The response stream owns the stream state: each message from Envoy is handled when
        // tonic polls for the next reply, with no extra task or channel hop.
        let replies =
            futures_util::stream::unfold((inbound, state), |(mut inbound, mut state)| async move {
                if let Some(reply) = state.resume().await {
                    return Some((Ok(reply), (inbound, state)));
                }
                loop {
                    match inbound.next().await? {
                        Ok(message) => {
                            if let Some(reply) = state.handle(message).await {
                                return Some((Ok(reply), (inbound, state)));
                            }
                        }
                        Err(status) => {
                            state.broke();
                            tracing::debug!(%status, "ext_proc stream ended with an error");
                            return None;
                        }
                    }
                }
            });
        Ok(Response::new(Box::pin(replies)))
    }
}
