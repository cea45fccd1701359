//! The gRPC service: each ext_proc stream's state lives in its reply stream, which reads one
//! message from Envoy and yields one reply, in order; nothing is queued beyond that. The
//! service answers ext_proc's one method itself (what tonic would generate, with the reply
//! type [`Reply`], which writes its metadata straight onto the wire).

use super::reply::{Reply, ReplyCodec};
use super::stream::StreamState;
use crate::engine::exchange::{Exchanges, FailoverPart, Proxy};
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, Service, StdError};
use tonic::server::{Grpc, NamedService};
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

/// ext_proc's gRPC service name, and the path of its one method.
const SERVICE_NAME: &str = "envoy.service.ext_proc.v3.ExternalProcessor";
const PROCESS_PATH: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

/// The ext_proc gRPC service.
#[derive(Clone)]
pub struct ExtProcService {
    exchanges: Exchanges,
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<Reply, Status>> + Send>>;

impl ExtProcService {
    /// A service opening one of `exchanges` per stream.
    pub fn new(exchanges: Exchanges) -> Self {
        Self { exchanges }
    }

    /// One ext_proc stream: its replies, one per message from Envoy.
    fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Response<ReplyStream> {
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
        let state = StreamState::new(self.exchanges.open(Proxy {
            adds_headers: envoy_adds_headers,
            failover,
        }));
        // Boxed: Envoy's messages and the stream's state move in and out of each step's
        // future, as a pointer.
        let stream = Box::new((request.into_inner(), state));
        // The response stream owns the stream state: each message from Envoy is handled when
        // tonic polls for the next reply, with no extra task or channel hop.
        let replies = futures_util::stream::unfold(stream, |mut stream| async move {
            let (inbound, state) = &mut *stream;
            if let Some(reply) = state.resume().await {
                return Some((Ok(reply), stream));
            }
            loop {
                // The message is out of the read's result before any await, so the step's
                // future does not also hold the result.
                let message = match inbound.next().await? {
                    Ok(message) => message,
                    Err(status) => {
                        state.broke();
                        tracing::debug!(%status, "ext_proc stream ended with an error");
                        return None;
                    }
                };
                let Some(step) = state.reply_to(message) else {
                    continue;
                };
                let reply = step.await;
                return Some((Ok(reply), stream));
            }
        });
        Response::new(Box::pin(replies))
    }
}

impl NamedService for ExtProcService {
    const NAME: &'static str = SERVICE_NAME;
}

/// The `Process` method's handler, as tonic's streaming server calls it.
struct Process(ExtProcService);

impl Service<Request<Streaming<ProcessingRequest>>> for Process {
    type Response = Response<ReplyStream>;
    type Error = Status;
    type Future = std::future::Ready<Result<Self::Response, Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Streaming<ProcessingRequest>>) -> Self::Future {
        std::future::ready(Ok(self.0.process(request)))
    }
}

impl<B> Service<http::Request<B>> for ExtProcService
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != PROCESS_PATH {
            // Another method of this service: gRPC's own answer for one it does not know.
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let process = Process(self.clone());
        Box::pin(async move {
            let mut grpc = Grpc::new(ReplyCodec)
                .apply_max_message_size_config(Some(MAX_MESSAGE_BYTES), Some(MAX_MESSAGE_BYTES));
            Ok(grpc.streaming(process, request).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, ConfigStore};
    use crate::engine::Services;
    use crate::observability::Metrics;
    use std::sync::Arc;

    fn service() -> ExtProcService {
        let path = std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/rules/config.yaml"
        ));
        let snapshot = config::load(&path).expect("rules config");
        let services = Services::offline(&snapshot);
        let store = Arc::new(ConfigStore::from_snapshot(snapshot, path));
        ExtProcService::new(Exchanges::new(store, Arc::new(Metrics::new()), services))
    }

    #[tokio::test]
    async fn a_method_ext_proc_does_not_have_is_unimplemented() {
        let request = http::Request::builder()
            .method("POST")
            .uri("/envoy.service.ext_proc.v3.ExternalProcessor/Other")
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .expect("request");
        let response = service().call(request).await.expect("infallible");
        let status = Status::from_header_map(response.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::Unimplemented);
    }

    #[tokio::test]
    async fn process_answers_as_a_grpc_stream() {
        let request = http::Request::builder()
            .method("POST")
            .uri(PROCESS_PATH)
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .expect("request");
        let response = service().call(request).await.expect("infallible");
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(
            response.headers().get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/grpc"[..])
        );
        assert!(Status::from_header_map(response.headers()).is_none());
    }
}
