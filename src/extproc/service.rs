//! The tonic service: one spawned task owns each ext_proc stream, reading Envoy's messages and
//! answering each through a bounded channel.

use super::stream::StreamState;
use crate::config::ConfigStore;
use crate::observability::Metrics;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    external_processor_server::{ExternalProcessor, ExternalProcessorServer},
    ProcessingRequest, ProcessingResponse,
};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Largest gRPC message accepted from Envoy (a buffered request body plus headers). Bodies over
/// the configured `maxBodyBytes` are refused with 413 before this matters.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The ext_proc gRPC service.
#[derive(Clone)]
pub struct ExtProcService {
    store: Arc<ConfigStore>,
    metrics: Arc<Metrics>,
}

impl ExtProcService {
    /// A service reading policy from `store`.
    pub fn new(store: Arc<ConfigStore>, metrics: Arc<Metrics>) -> Self {
        Self { store, metrics }
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
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let mut state = StreamState::new(self.store.snapshot(), self.metrics.clone());
        let metrics = self.metrics.clone();
        metrics.active_streams.inc();
        tokio::spawn(async move {
            let _active = ActiveStream(metrics.clone());
            while let Some(message) = inbound.next().await {
                let message = match message {
                    Ok(message) => message,
                    Err(status) => {
                        metrics.stream_errors.inc();
                        tracing::debug!(%status, "ext_proc stream ended with an error");
                        break;
                    }
                };
                let Some(response) = state.handle(message) else {
                    continue;
                };
                if tx.send(Ok(response)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
