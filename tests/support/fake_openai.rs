//! A deterministic FAKE OpenAI-compatible server for tests and the quickstart's `--fake` mode.
//! It is not a language model: it echoes what it received so tests can check what the upstream
//! saw (model id, headers, body length) and streams fixed SSE chunks with a pause between them.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake server saw in one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The path the request came on (`/v1/chat/completions`, `/v1/messages`).
    pub path: &'static str,
    /// Request headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Bytes,
}

/// The fake backend's identity and record of requests.
#[derive(Debug, Clone)]
pub struct FakeBackend {
    /// Name reported in every reply (`x-fake-backend` header and message text).
    pub name: String,
    /// Pause between streamed chunks.
    pub chunk_pause: Duration,
    /// Every chat request received, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Milliseconds to wait before answering a chat request (settable while serving).
    pub delay_ms: Arc<AtomicU64>,
    /// Log-probability reported for every token when a request asks for `logprobs` (f64 bits).
    pub logprob_bits: Arc<AtomicU64>,
    /// When non-zero, every chat request is answered with this status and an error body.
    pub fail_status: Arc<AtomicU64>,
    /// When set, the text of every answer (instead of the echo).
    pub reply_text: Arc<Mutex<Option<String>>>,
    /// Texts of the next answers, first in first out; ahead of `reply_text` and the echo.
    pub queued: Arc<Mutex<std::collections::VecDeque<String>>>,
    /// When non-zero, a streamed answer is cut every this many characters (mid-word) instead of
    /// word by word.
    pub chunk_chars: Arc<AtomicU64>,
    /// When set, every chat request is answered with exactly this: a hostile upstream.
    pub hostile: Arc<Mutex<Option<Hostile>>>,
    /// Chat requests being answered now (`llamacpp:requests_processing` at `/metrics`).
    pub in_flight: Arc<AtomicU64>,
    /// Requests `/metrics` reports as waiting (`llamacpp:requests_deferred`), as if other
    /// clients had sent them.
    pub deferred: Arc<AtomicU64>,
}

/// A reply no well-behaved server sends: any status, headers and body bytes.
#[derive(Debug, Clone)]
pub struct Hostile {
    /// Status code.
    pub status: u16,
    /// Headers, in order.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Bytes,
}

impl FakeBackend {
    /// A backend called `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            chunk_pause: Duration::from_millis(150),
            seen: Arc::new(Mutex::new(Vec::new())),
            delay_ms: Arc::new(AtomicU64::new(0)),
            logprob_bits: Arc::new(AtomicU64::new((-0.05f64).to_bits())),
            fail_status: Arc::new(AtomicU64::new(0)),
            reply_text: Arc::new(Mutex::new(None)),
            queued: Arc::new(Mutex::new(std::collections::VecDeque::new())),
            chunk_chars: Arc::new(AtomicU64::new(0)),
            hostile: Arc::new(Mutex::new(None)),
            in_flight: Arc::new(AtomicU64::new(0)),
            deferred: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Answers every chat request from now on with `reply`.
    pub fn turn_hostile(&self, reply: Hostile) {
        if let Ok(mut hostile) = self.hostile.lock() {
            *hostile = Some(reply);
        }
    }

    /// Queues the texts of the next answers, in order.
    pub fn queue(&self, texts: &[&str]) {
        if let Ok(mut queued) = self.queued.lock() {
            queued.extend(texts.iter().map(|t| (*t).to_owned()));
        }
    }

    /// Every request body received, parsed.
    pub fn bodies(&self) -> Vec<Value> {
        self.seen
            .lock()
            .map(|seen| {
                seen.iter()
                    .filter_map(|s| serde_json::from_slice(&s.body).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Sets the per-token log-probability this backend reports.
    pub fn set_logprob(&self, logprob: f64) {
        self.logprob_bits
            .store(logprob.to_bits(), Ordering::Relaxed);
    }

    /// The routes.
    pub fn router(self) -> Router {
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .route("/v1/models", get(models))
            .route("/metrics", get(metrics))
            .route("/health", get(|| async { "ok" }))
            .with_state(self)
    }
}

/// llama.cpp's queue gauges, as its server exports them.
async fn metrics(State(backend): State<FakeBackend>) -> String {
    format!(
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {}\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {}\n",
        backend.in_flight.load(Ordering::Relaxed),
        backend.deferred.load(Ordering::Relaxed)
    )
}

/// Counts a chat request in flight until dropped.
struct Answering(Arc<AtomicU64>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn models(State(backend): State<FakeBackend>) -> impl IntoResponse {
    json_response(
        json!({"object":"list","data":[{"id": backend.name, "object":"model","owned_by":"fake"}]}),
    )
}

fn record(backend: &FakeBackend, path: &'static str, headers: &HeaderMap, body: &Bytes) {
    let pairs = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    if let Ok(mut seen) = backend.seen.lock() {
        seen.push(Seen {
            path,
            headers: pairs,
            body: body.clone(),
        });
    }
}

/// A backend that speaks Anthropic Messages natively: one JSON message echoing the last user
/// text, marked as the native answer.
async fn messages(State(backend): State<FakeBackend>, headers: HeaderMap, body: Bytes) -> Response {
    record(&backend, "/v1/messages", &headers, &body);
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    json_response(json!({
        "id": "msg_fake", "type": "message", "role": "assistant", "model": request["model"],
        "content": [{"type": "text", "text": format!("[fake backend {} native] {last}", backend.name)}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 3, "output_tokens": 4}
    }))
}

async fn chat(State(backend): State<FakeBackend>, headers: HeaderMap, body: Bytes) -> Response {
    record(&backend, "/v1/chat/completions", &headers, &body);
    backend.in_flight.fetch_add(1, Ordering::Relaxed);
    let _answering = Answering(Arc::clone(&backend.in_flight));
    let delay = backend.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let hostile = backend.hostile.lock().ok().and_then(|h| h.clone());
    if let Some(reply) = hostile {
        let mut response = Response::new(Body::from(reply.body));
        *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
        for (name, value) in reply.headers {
            if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                response.headers_mut().append(name, value);
            }
        }
        return response;
    }
    let fail = backend.fail_status.load(Ordering::Relaxed);
    if fail > 0 {
        let status = StatusCode::from_u16(fail as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, "fake backend: failing on purpose").into_response();
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "fake backend: body is not JSON").into_response();
    };
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let text = format!(
        "[fake backend {}] model={model} echo: {}",
        backend.name,
        last.chars().take(60).collect::<String>()
    );
    let queued = backend.queued.lock().ok().and_then(|mut q| q.pop_front());
    let text = queued
        .or_else(|| {
            backend
                .reply_text
                .lock()
                .ok()
                .and_then(|fixed| fixed.clone())
        })
        .unwrap_or(text);
    let stream = request["stream"].as_bool().unwrap_or(false);
    let tag = [("x-fake-backend", backend.name.clone())];
    if !stream {
        let mut reply = json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        });
        if request["logprobs"].as_bool() == Some(true) {
            let logprob = f64::from_bits(backend.logprob_bits.load(Ordering::Relaxed));
            let content: Vec<Value> = text
                .split(' ')
                .map(|word| {
                    json!({"token": word, "logprob": logprob,
                           "top_logprobs": [{"token": word, "logprob": logprob},
                                            {"token": "~", "logprob": logprob - 1.0}]})
                })
                .collect();
            reply["choices"][0]["logprobs"] = json!({"content": content});
        }
        return (tag, json_response(reply)).into_response();
    }
    let cut = backend.chunk_chars.load(Ordering::Relaxed) as usize;
    let words: Vec<String> = if cut > 0 {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(cut).map(|c| c.iter().collect()).collect()
    } else {
        text.split(' ').map(|w| format!("{w} ")).collect()
    };
    let pause = backend.chunk_pause;
    // Asked for, the usage comes in a chunk of its own with no choices, as OpenAI sends it.
    let usage = request["stream_options"]["include_usage"] == json!(true);
    let chunks = futures_util::stream::unfold(0usize, move |i| {
        let words = words.clone();
        let model = model.clone();
        async move {
            if i > words.len() + 1 {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            let frame = if i == words.len() + 1 {
                "data: [DONE]\n\n".to_owned()
            } else if i == words.len() {
                let chunk = json!({
                    "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                });
                let mut frame = format!("data: {chunk}\n\n");
                if usage {
                    let counted = json!({
                        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                        "model": model, "choices": [],
                        "usage": {"prompt_tokens": 5, "completion_tokens": words.len(),
                                  "total_tokens": 5 + words.len()},
                    });
                    frame.push_str(&format!("data: {counted}\n\n"));
                }
                frame
            } else {
                let chunk = json!({
                    "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": {"content": words[i]}, "finish_reason": null}],
                });
                format!("data: {chunk}\n\n")
            };
            Some((Ok::<_, std::io::Error>(Bytes::from(frame)), i + 1))
        }
    });
    (
        tag,
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        Body::from_stream(chunks),
    )
        .into_response()
}

fn json_response(value: Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

/// Serves `backend` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, backend: FakeBackend) -> std::io::Result<()> {
    axum::serve(listener, backend.router()).await
}
