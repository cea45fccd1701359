//! OTLP trace export: finished request traces go through a bounded queue to one exporter task
//! that batches them and sends `ExportTraceServiceRequest`s to a collector, over gRPC
//! (`TraceService/Export`) or HTTP (`POST …/v1/traces`, `application/x-protobuf`). The request
//! path never waits on the collector: a full queue, a failed or slow export drops the spans and
//! counts them (`mom_spans_dropped_total`). The task exports what is queued before it stops.

use super::spans::{RequestTrace, Span, SpanKind, Value};
use opentelemetry_proto::tonic::collector::trace::v1::{
    trace_service_client::TraceServiceClient, ExportTraceServiceRequest,
};
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Status};
use prometheus_client::metrics::counter::Counter;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Request traces queued beyond this are dropped (and counted): the collector is too slow.
const QUEUE: usize = 2048;
/// Request traces sent in one export, at most.
const BATCH: usize = 256;
/// A failure is logged at most this often; every dropped span is counted.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies.
    Http,
}

/// Where and how spans are exported.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpSettings {
    /// The collector: `http://host:4317` (gRPC) or `http://host:4318` (HTTP; `/v1/traces` is
    /// added unless the URL already ends with it).
    pub endpoint: String,
    /// gRPC or HTTP.
    pub protocol: OtlpProtocol,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// One export's deadline.
    pub timeout: Duration,
}

/// Where finished request traces are sent.
#[derive(Debug, Clone)]
pub struct SpanSink {
    queue: mpsc::Sender<RequestTrace>,
    dropped: Counter,
}

impl SpanSink {
    /// Starts the exporter task; it exports until every sink is dropped and the queue is empty.
    pub fn start(settings: &OtlpSettings, dropped: Counter) -> (Self, JoinHandle<()>) {
        let (queue, mut traces) = mpsc::channel::<RequestTrace>(QUEUE);
        let exporter = Exporter::new(settings);
        let counted = dropped.clone();
        let task = tokio::spawn(async move {
            let mut warned: Option<Instant> = None;
            while let Some(trace) = traces.recv().await {
                let mut batch = vec![trace];
                while batch.len() < BATCH {
                    match traces.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                let spans: usize = batch.iter().map(|t| t.spans.len()).sum();
                if let Err(error) = exporter.export(&batch).await {
                    counted.inc_by(spans as u64);
                    if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(%error, endpoint = exporter.endpoint, spans, "cannot export spans");
                    }
                }
            }
        });
        (Self { queue, dropped }, task)
    }

    /// Queues one request's spans; a full queue drops them (counted).
    pub fn send(&self, trace: RequestTrace) {
        let spans = trace.spans.len() as u64;
        if self.queue.try_send(trace).is_err() {
            self.dropped.inc_by(spans);
        }
    }
}

struct Exporter {
    endpoint: String,
    service_name: String,
    timeout: Duration,
    transport: Transport,
}

enum Transport {
    Grpc(Option<TraceServiceClient<tonic::transport::Channel>>),
    Http(reqwest::Client),
}

impl Exporter {
    fn new(settings: &OtlpSettings) -> Self {
        let (endpoint, transport) = match settings.protocol {
            OtlpProtocol::Grpc => {
                // Connected on first use; a collector that is down is retried every export.
                let channel = tonic::transport::Endpoint::from_shared(settings.endpoint.clone())
                    .ok()
                    .map(|e| e.timeout(settings.timeout).connect_lazy());
                (
                    settings.endpoint.clone(),
                    Transport::Grpc(channel.map(TraceServiceClient::new)),
                )
            }
            OtlpProtocol::Http => {
                let base = settings.endpoint.trim_end_matches('/');
                let url = if base.ends_with("/v1/traces") {
                    base.to_owned()
                } else {
                    format!("{base}/v1/traces")
                };
                let http = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap_or_default();
                (url, Transport::Http(http))
            }
        };
        Self {
            endpoint,
            service_name: settings.service_name.clone(),
            timeout: settings.timeout,
            transport,
        }
    }

    async fn export(&self, batch: &[RequestTrace]) -> Result<(), String> {
        let request = export_request(&self.service_name, batch);
        let sent = async {
            match &self.transport {
                Transport::Grpc(None) => Err("the endpoint is not a valid URI".to_owned()),
                Transport::Grpc(Some(client)) => client
                    .clone()
                    .export(request)
                    .await
                    .map(drop)
                    .map_err(|status| status.to_string()),
                Transport::Http(http) => {
                    let body = prost::Message::encode_to_vec(&request);
                    let response = http
                        .post(&self.endpoint)
                        .header("content-type", "application/x-protobuf")
                        .body(body)
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    if response.status().is_success() {
                        Ok(())
                    } else {
                        Err(format!("the collector answered {}", response.status()))
                    }
                }
            }
        };
        tokio::time::timeout(self.timeout, sent)
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
    }
}

/// The OTLP request carrying `batch` as spans of one resource (`service.name`) and one scope.
fn export_request(service_name: &str, batch: &[RequestTrace]) -> ExportTraceServiceRequest {
    let spans = batch
        .iter()
        .flat_map(|trace| {
            trace
                .spans
                .iter()
                .map(|span| span_of(&trace.trace_id, span))
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    key_value("service.name", &Value::Str(service_name.to_owned())),
                    key_value(
                        "service.version",
                        &Value::Str(env!("CARGO_PKG_VERSION").to_owned()),
                    ),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "mom-router".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The span's flags: sampled (the trace flag), and whether its parent is remote (the client's).
const SAMPLED: u32 = 0x1;
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

fn span_of(trace_id: &[u8], span: &Span) -> opentelemetry_proto::tonic::trace::v1::Span {
    let nanos = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    };
    let kind = match span.kind {
        SpanKind::Internal => span::SpanKind::Internal,
        SpanKind::Server => span::SpanKind::Server,
        SpanKind::Client => span::SpanKind::Client,
    };
    let remote_parent = span.kind == SpanKind::Server && span.parent.is_some();
    let status = match &span.error {
        Some(message) => Status {
            message: message.clone(),
            code: status::StatusCode::Error as i32,
        },
        None => Status::default(),
    };
    opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: trace_id.to_vec(),
        span_id: span.span_id.to_vec(),
        parent_span_id: span.parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: SAMPLED | HAS_IS_REMOTE | if remote_parent { IS_REMOTE } else { 0 },
        name: span.name.clone(),
        kind: kind as i32,
        start_time_unix_nano: nanos(span.start),
        end_time_unix_nano: nanos(span.end),
        attributes: span
            .attributes
            .iter()
            .map(|(key, value)| key_value(key, value))
            .collect(),
        status: Some(status),
        ..Default::default()
    }
}

fn key_value(key: &str, value: &Value) -> KeyValue {
    let any = |value: any_value::Value| AnyValue { value: Some(value) };
    let value = match value {
        Value::Str(s) => any(any_value::Value::StringValue(s.clone())),
        Value::Int(i) => any(any_value::Value::IntValue(*i)),
        Value::Float(f) => any(any_value::Value::DoubleValue(*f)),
        Value::Strs(list) => any(any_value::Value::ArrayValue(ArrayValue {
            values: list
                .iter()
                .map(|s| any(any_value::Value::StringValue(s.clone())))
                .collect(),
        })),
    };
    KeyValue {
        key: key.to_owned(),
        value: Some(value),
        ..KeyValue::default()
    }
}
