//! The tonic service: each ext_proc stream's state lives in its reply stream, which reads one
//! message from Envoy and yields one reply, in order; nothing is queued beyond that.

use super::stream::StreamState;
use crate::config::ConfigStore;
use crate::engine::Services;
use crate::observability::Metrics;
use crate::records::RecordSink;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    external_processor_server::{ExternalProcessor, ExternalProcessorServer},
    ProcessingRequest, ProcessingResponse,
};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

/// Largest gRPC message accepted from Envoy (a buffered request body plus headers). Bodies over
/// the configured `maxBodyBytes` are refused with 413 before this matters.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// gRPC metadata an Envoy sets on its ext_proc stream (value `dynamic-metadata`) when its route
/// configuration adds every `x-mom-*` response header from `mom_router.headers` in the dynamic
/// metadata: responses that owe mom-router nothing then skip the response phases.
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
    store: Arc<ConfigStore>,
    metrics: Arc<Metrics>,
    services: Services,
    records: Option<RecordSink>,
    spans: Option<crate::observability::otlp::SpanSink>,
}

impl ExtProcService {
    /// A service reading policy from `store`, with `services` for state and sub-requests.
    pub fn new(store: Arc<ConfigStore>, metrics: Arc<Metrics>, services: Services) -> Self {
        Self {
            store,
            metrics,
            services,
            records: None,
            spans: None,
        }
    }

    /// Sends a run record of every chat request to `records`.
    pub fn with_records(mut self, records: Option<RecordSink>) -> Self {
        self.records = records;
        self
    }

    /// Sends the spans of every chat request to `spans`.
    pub fn with_spans(mut self, spans: Option<crate::observability::otlp::SpanSink>) -> Self {
        self.spans = spans;
        self
    }

    /// The tonic server wrapper with message limits raised for buffered bodies.
    pub fn into_server(self) -> ExternalProcessorServer<Self> {
        ExternalProcessorServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

/// Decrements the active-stream gauge however the stream task ends.
struct ActiveStream(Arc<Metrics>);

impl Drop for ActiveStream {
    fn drop(&mut self) {
        self.0.active_streams.dec();
    }
}

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
        let failover = request
            .metadata()
            .get(FAILOVER_METADATA)
            .map(|v| v.as_bytes().to_vec());
        let inbound = request.into_inner();
        let state = StreamState::new(
            self.store.snapshot(),
            self.metrics.clone(),
            self.services.clone(),
        )
        .with_records(self.records.clone())
        .with_spans(self.spans.clone())
        .with_envoy_adding_headers(envoy_adds_headers)
        .with_failover_filter(failover.as_deref() == Some(b"filter"))
        .as_failover_stream(failover.as_deref() == Some(b"stream"));
        self.metrics.active_streams.inc();
        let active = ActiveStream(self.metrics.clone());
        // The response stream owns the stream state: each message from Envoy is handled when
        // tonic polls for the next reply, with no extra task or channel hop.
        let replies = futures_util::stream::unfold(
            (inbound, state, active),
            |(mut inbound, mut state, active)| async move {
                if let Some(reply) = state.resume().await {
                    return Some((Ok(reply), (inbound, state, active)));
                }
                loop {
                    match inbound.next().await? {
                        Ok(message) => {
                            if let Some(reply) = state.handle(message).await {
                                return Some((Ok(reply), (inbound, state, active)));
                            }
                        }
                        Err(status) => {
                            active.0.stream_errors.inc();
                            tracing::debug!(%status, "ext_proc stream ended with an error");
                            return None;
                        }
                    }
                }
            },
        );
        Ok(Response::new(Box::pin(replies)))
    }
}
