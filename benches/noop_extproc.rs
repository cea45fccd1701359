//! The floor of routing on a body through Envoy's ext_proc: a server that does nothing a router
//! could do without. It answers the request-headers phase with the response phases skipped, and
//! the request-body phase with `x-selected-model` set and the route cache cleared, so Envoy routes
//! exactly as it does for mom-router; any other phase Envoy sends passes through unchanged.
//! `scripts/load.sh` measures mom-router against it behind the same Envoy configuration.
//!
//! Given a provider model, it also does the one thing any router of a virtual model name must:
//! the body's `model` becomes that name (its bytes spliced, `content-length` set), so Envoy
//! replaces the buffered body as it does for mom-router (`FLOOR=rewrite` in `scripts/load.sh`).
//!
//! `cargo run --release --example noop_extproc -- [ADDR] [MODEL] [PROVIDER_MODEL]` (default
//! 127.0.0.1:50061, smollm2-135m, no rewrite).

use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{
    processing_mode::{BodySendMode, HeaderSendMode},
    ProcessingMode,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation,
    external_processor_server::{ExternalProcessor, ExternalProcessorServer},
    processing_request::Request,
    processing_response::Response,
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ProcessingRequest,
    ProcessingResponse, TrailersResponse,
};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use tonic::Status;

/// A header set to `value`.
fn header(key: &str, value: &[u8]) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_owned(),
            raw_value: value.to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `body` with the value of its first `"model"` key replaced by `name`; `None` when it has no
/// such string value. A byte splice, as cheap as a rewrite can be; not a JSON parser.
pub fn with_model(body: &[u8], name: &str) -> Option<Vec<u8>> {
    let key = body.windows(7).position(|w| w == b"\"model\"")? + 7;
    let next = |from: usize| {
        let skipped = body[from..].iter().position(|b| !b.is_ascii_whitespace())?;
        Some((from + skipped, body[from + skipped]))
    };
    let (colon, b':') = next(key)? else {
        return None;
    };
    let (open, b'"') = next(colon + 1)? else {
        return None;
    };
    let close = open + 1 + body[open + 1..].iter().position(|b| *b == b'"')?;
    let mut spliced = Vec::with_capacity(body.len() + name.len());
    spliced.extend_from_slice(&body[..=open]);
    spliced.extend_from_slice(name.as_bytes());
    spliced.extend_from_slice(&body[close..]);
    Some(spliced)
}

/// The reply to one phase: what the floor does, and nothing more. With `rewrite`, the request
/// body's model becomes that name.
pub fn reply(request: Request, model: &str, rewrite: Option<&str>) -> Response {
    match request {
        Request::RequestHeaders(_) => Response::RequestHeaders(HeadersResponse::default()),
        Request::RequestBody(body) => {
            let mut set_headers = vec![header("x-selected-model", model.as_bytes())];
            let spliced = rewrite.and_then(|name| with_model(&body.body, name));
            let body_mutation = spliced.map(|spliced| {
                set_headers.push(header(
                    "content-length",
                    spliced.len().to_string().as_bytes(),
                ));
                BodyMutation {
                    mutation: Some(Mutation::Body(spliced)),
                }
            });
            Response::RequestBody(BodyResponse {
                response: Some(CommonResponse {
                    header_mutation: Some(HeaderMutation {
                        set_headers,
                        remove_headers: Vec::new(),
                    }),
                    body_mutation,
                    clear_route_cache: true,
                    ..Default::default()
                }),
            })
        }
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
    /// The name written into each request body's `model`, when set.
    pub rewrite: Option<String>,
}

type Replies = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Noop {
    type ProcessStream = Replies;

    async fn process(
        &self,
        request: tonic::Request<tonic::Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<Replies>, Status> {
        let Noop { model, rewrite } = self.clone();
        let replies = request.into_inner().filter_map(move |message| {
            let reply = message.ok().and_then(|m| m.request).map(|request| {
                let headers = matches!(request, Request::RequestHeaders(_));
                Ok(ProcessingResponse {
                    response: Some(reply(request, &model, rewrite.as_deref())),
                    mode_override: headers.then(request_only),
                    ..Default::default()
                })
            });
            std::future::ready(reply)
        });
        Ok(tonic::Response::new(Box::pin(replies)))
    }
}

/// Serves `noop` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    noop: Noop,
) -> Result<(), tonic::transport::Error> {
    let service = ExternalProcessorServer::new(noop).max_decoding_message_size(64 << 20);
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
    let rewrite = args.next();
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    match &rewrite {
        Some(name) => eprintln!("no-op ext_proc on {addr}, routing to {model} as {name}"),
        None => eprintln!("no-op ext_proc on {addr}, routing to {model}"),
    }
    serve(listener, Noop { model, rewrite }).await?;
    Ok(())
}
