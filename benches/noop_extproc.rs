//! The floor of routing on a body through Envoy's ext_proc: a server that does nothing a router
//! could do without. It answers the request-headers phase with the response phases skipped, and
//! the request-body phase with `x-selected-model` set and the route cache cleared, so Envoy routes
//! exactly as it does for mom-router; any other phase Envoy sends passes through unchanged.
//! `scripts/load.sh` measures mom-router against it behind the same Envoy configuration.
//!
//! `cargo run --release --example noop_extproc -- [ADDR] [MODEL]` (default 127.0.0.1:50061,
//! smollm2-135m).

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{
    processing_mode::{BodySendMode, HeaderSendMode},
    ProcessingMode,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    external_processor_server::{ExternalProcessor, ExternalProcessorServer},
    processing_request::Request,
    processing_response::Response,
    BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ProcessingRequest,
    ProcessingResponse, TrailersResponse,
};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use tonic::Status;

/// The reply to one phase: what the floor does, and nothing more.
pub fn reply(request: Request, model: &str) -> Response {
    match request {
        Request::RequestHeaders(_) => Response::RequestHeaders(HeadersResponse::default()),
        Request::RequestBody(_) => Response::RequestBody(BodyResponse {
            response: Some(CommonResponse {
                header_mutation: Some(HeaderMutation {
                    set_headers: vec![HeaderValueOption {
                        header: Some(HeaderValue {
                            key: "x-selected-model".to_owned(),
                            raw_value: model.as_bytes().to_vec(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    remove_headers: Vec::new(),
                }),
                clear_route_cache: true,
                ..Default::default()
            }),
        }),
        Request::ResponseHeaders(_) => Response::ResponseHeaders(HeadersResponse::default()),
        Request::ResponseBody(_) => Response::ResponseBody(BodyResponse::default()),
        Request::RequestTrailers(_) => Response::RequestTrailers(TrailersResponse::default()),
        Request::ResponseTrailers(_) => Response::ResponseTrailers(TrailersResponse::default()),
    }
}

/// The processing mode the headers reply asks for: the request body whole, nothing else.
pub fn request_only() -> ProcessingMode {
    ProcessingMode {
        request_header_mode: HeaderSendMode::Send as i32,
        response_header_mode: HeaderSendMode::Skip as i32,
        request_body_mode: BodySendMode::Buffered as i32,
        response_body_mode: BodySendMode::None as i32,
        request_trailer_mode: HeaderSendMode::Skip as i32,
        response_trailer_mode: HeaderSendMode::Skip as i32,
    }
}

/// The no-op ext_proc service.
#[derive(Clone)]
pub struct Noop {
    /// The model every request is routed to.
    pub model: String,
}

type Replies = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Noop {
    type ProcessStream = Replies;

    async fn process(
        &self,
        request: tonic::Request<tonic::Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<Replies>, Status> {
        let model = self.model.clone();
        let replies = request.into_inner().filter_map(move |message| {
            let reply = message.ok().and_then(|m| m.request).map(|request| {
                let headers = matches!(request, Request::RequestHeaders(_));
                Ok(ProcessingResponse {
                    response: Some(reply(request, &model)),
                    mode_override: headers.then(request_only),
                    ..Default::default()
                })
            });
            std::future::ready(reply)
        });
        Ok(tonic::Response::new(Box::pin(replies)))
    }
}

/// Serves [`Noop`] on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    model: &str,
) -> Result<(), tonic::transport::Error> {
    let service = ExternalProcessorServer::new(Noop {
        model: model.to_owned(),
    })
    .max_decoding_message_size(64 << 20);
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
}

#[allow(
    dead_code,
    reason = "the tests include this file for its service, not its main"
)]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:50061".to_owned());
    let model = args.next().unwrap_or_else(|| "smollm2-135m".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("no-op ext_proc on {addr}, routing to {model}");
    serve(listener, &model).await?;
    Ok(())
}
