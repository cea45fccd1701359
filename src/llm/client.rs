//! The client for mom-router's own sub-requests: chat completions sent to Envoy's internal
//! listener, which routes on `x-selected-model` like the public one but runs no ext_proc, so
//! Envoy keeps owning clusters, load balancing and retries. Every sub-request carries the
//! process's internal token and the depth; the public listener strips both from clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Header carrying the internal token.
pub const TOKEN_HEADER: &str = "x-mom-internal-token";
/// Header carrying the sub-request depth.
pub const DEPTH_HEADER: &str = "x-mom-depth";

/// One sub-request's answer.
#[derive(Debug, Clone)]
pub struct SubReply {
    /// HTTP status.
    pub status: u16,
    /// The body, parsed.
    pub body: serde_json::Value,
    /// Wall time of the call.
    pub latency: Duration,
}

/// An upstream's answer relayed as it came: any status, its content type and body bytes.
#[derive(Debug, Clone)]
pub struct Relayed {
    /// HTTP status.
    pub status: u16,
    /// The `content-type` header, when the upstream sent one.
    pub content_type: Option<String>,
    /// The body, whole (a stream's events included).
    pub body: Vec<u8>,
}

/// Why a sub-request has no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer within the deadline.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// The connection failed.
    #[error("cannot reach Envoy's internal listener: {0}")]
    Transport(String),
    /// A non-2xx answer.
    #[error("upstream answered {0}")]
    Status(u16),
    /// A 2xx answer that is not a chat completion.
    #[error("upstream answer is not a chat completion: {0}")]
    Malformed(String),
}

/// Sends sub-requests to one internal listener. Each exchange holds a copy: its texts are
/// shared, so the copy allocates nothing.
#[derive(Debug, Clone)]
pub struct LlmClient {
    base: Arc<str>,
    url: Arc<str>,
    token: Arc<str>,
    http: reqwest::Client,
}

impl LlmClient {
    /// A client for the internal listener at `base` (`http://127.0.0.1:10001`) signing with
    /// `token`.
    pub fn new(base: &str, token: String) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            url: format!("{base}/v1/chat/completions").into(),
            base: base.into(),
            token: token.into(),
            http: reqwest::Client::builder()
                // A redirect would carry the internal token to wherever it points.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        }
    }

    /// The process's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Posts `body` for logical model `model` at `depth`, waiting at most `deadline`.
    pub async fn chat(
        &self,
        model: &str,
        body: Vec<u8>,
        depth: u32,
        deadline: Duration,
    ) -> Result<SubReply, CallError> {
        let started = Instant::now();
        let span = crate::observability::spans::start_call();
        let mut request = self
            .http
            .post(&*self.url)
            .header("content-type", "application/json")
            .header(DEPTH_HEADER, depth.to_string())
            .body(body);
        if let Some(span) = &span {
            request = request.header("traceparent", span.traceparent());
        }
        let reply = within(deadline, async {
            let (status, body) = self.exchange(request, model).await?;
            if body["choices"][0]["message"].is_null() {
                return Err(CallError::Malformed("no choices[0].message".to_owned()));
            }
            Ok(SubReply {
                status,
                body,
                latency: started.elapsed(),
            })
        })
        .await;
        if let Some(span) = span {
            finish_span(span, model, depth, &reply);
        }
        reply
    }

    /// Posts a client's chat `body` (JSON or a stream) for logical model `model`, waiting at
    /// most `first_byte` for the response's headers and `deadline` for the whole answer; any
    /// status comes back as it is.
    pub async fn relay(
        &self,
        model: &str,
        body: Vec<u8>,
        first_byte: Option<Duration>,
        deadline: Duration,
    ) -> Result<Relayed, CallError> {
        let request = self
            .http
            .post(&*self.url)
            .header("content-type", "application/json")
            .header(DEPTH_HEADER, "1")
            .header("x-selected-model", model)
            .header(TOKEN_HEADER, &*self.token)
            .body(body);
        within(deadline, async {
            let sending = async {
                request
                    .send()
                    .await
                    .map_err(|e| CallError::Transport(e.to_string()))
            };
            let response = match first_byte {
                Some(first_byte) => within(first_byte, sending).await?,
                None => sending.await?,
            };
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = read_capped(response, MAX_REPLY_BYTES).await?;
            Ok(Relayed {
                status,
                content_type,
                body,
            })
        })
        .await
    }

    /// The Prometheus text the backend behind logical model `model` serves at `/metrics`,
    /// waiting at most `deadline`.
    pub async fn metrics(&self, model: &str, deadline: Duration) -> Result<String, CallError> {
        let request = self.http.get(format!("{}/metrics", self.base));
        within(deadline, async {
            let response = self.succeeded(request, model).await?;
            let body = read_capped(response, MAX_METRICS_BYTES).await?;
            String::from_utf8(body).map_err(|e| CallError::Malformed(e.to_string()))
        })
        .await
    }

    /// The model ids the backend behind logical model `model` lists at `GET /v1/models`,
    /// waiting at most `deadline`.
    pub async fn list_models(
        &self,
        model: &str,
        deadline: Duration,
    ) -> Result<Vec<String>, CallError> {
        let request = self.http.get(format!("{}/v1/models", self.base));
        within(deadline, async {
            let (_, body) = self.exchange(request, model).await?;
            let Some(data) = body["data"].as_array() else {
                return Err(CallError::Malformed("no data list".to_owned()));
            };
            Ok(data
                .iter()
                .filter_map(|m| m["id"].as_str().map(str::to_owned))
                .collect())
        })
        .await
    }

    /// Sends `request` for logical model `model`, signed as this process; a 2xx answer's status
    /// and JSON body.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        model: &str,
    ) -> Result<(u16, serde_json::Value), CallError> {
        let response = self.succeeded(request, model).await?;
        let status = response.status().as_u16();
        let bytes = read_capped(response, MAX_REPLY_BYTES).await?;
        let body =
            serde_json::from_slice(&bytes).map_err(|e| CallError::Malformed(e.to_string()))?;
        Ok((status, body))
    }

    /// Sends `request` for logical model `model`, signed as this process; the response when
    /// its status is 2xx.
    async fn succeeded(
        &self,
        request: reqwest::RequestBuilder,
        model: &str,
    ) -> Result<reqwest::Response, CallError> {
        let response = request
            .header("x-selected-model", model)
            .header(TOKEN_HEADER, &*self.token)
            .send()
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(CallError::Status(status));
        }
        Ok(response)
    }
}

/// Ends a sub-request's span with the GenAI attributes of its answer.
fn finish_span(
    span: crate::observability::spans::CallSpan,
    model: &str,
    depth: u32,
    reply: &Result<SubReply, CallError>,
) {
    use crate::observability::spans::{chat_call_attributes, SpanKind, Value};
    let (mut attributes, error) = match reply {
        Ok(reply) => {
            let usage = super::usage::usage_of(&reply.body);
            let counts = (usage.prompt_tokens, usage.completion_tokens);
            let reason = super::usage::finish_reason_of(&reply.body);
            let mut attributes = chat_call_attributes(model, Some(reply.status), counts, reason);
            if let Some(served) = reply.body["model"].as_str() {
                attributes.push(("gen_ai.response.model", Value::Str(served.to_owned())));
            }
            (attributes, None)
        }
        Err(error) => {
            let kind = match error {
                CallError::Timeout(_) => "timeout".to_owned(),
                CallError::Transport(_) => "transport".to_owned(),
                CallError::Status(status) => status.to_string(),
                CallError::Malformed(_) => "malformed_answer".to_owned(),
            };
            let mut attributes = chat_call_attributes(model, None, (None, None), None);
            attributes.push(("error.type", Value::Str(kind)));
            (attributes, Some(error.to_string()))
        }
    };
    attributes.push(("mom.depth", Value::Int(i64::from(depth))));
    span.finish(format!("chat {model}"), SpanKind::Client, attributes, error);
}

/// The largest `/metrics` page read.
const MAX_METRICS_BYTES: usize = 1024 * 1024;

/// The largest sub-request answer read; a longer one is [`CallError::Malformed`].
pub const MAX_REPLY_BYTES: usize = 8 * 1024 * 1024;

/// The body of `response`, refused once it passes `max` bytes (before reading it all).
async fn read_capped(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, CallError> {
    let too_long = || CallError::Malformed(format!("answer longer than {max} bytes"));
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CallError::Transport(e.to_string()))?
    {
        if body.len() + chunk.len() > max {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `call`'s result, or a timeout once `deadline` passes.
async fn within<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(CallError::Timeout(deadline.as_millis() as u64)),
    }
}

/// A fresh random token for this process.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Compares a presented token with the expected one in time independent of where they differ.
pub fn token_matches(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert!(token_matches(&token, &token.clone()));
        assert!(!token_matches(&token[..31], &token));
        let mut wrong = token.clone().into_bytes();
        wrong[0] = if wrong[0] == b'a' { b'b' } else { b'a' };
        assert!(!token_matches(
            std::str::from_utf8(&wrong).unwrap_or(""),
            &token
        ));
        assert_ne!(new_token(), token);
    }

    /// A one-connection-at-a-time HTTP server on loopback answering every request with `reply`
    /// (then closing); counts the requests it saw.
    async fn answering(reply: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let base = format!(
            "http://{}",
            listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(&reply).await;
                let _ = socket.shutdown().await;
            }
        });
        (base, seen)
    }

    #[tokio::test]
    async fn sub_requests_follow_no_redirect_and_read_no_oversize_answer() {
        let (target, followed) =
            answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec()).await;
        let redirect = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}/v1/chat/completions\r\ncontent-length: 0\r\n\r\n"
        );
        let (base, _) = answering(redirect.into_bytes()).await;
        let client = LlmClient::new(&base, new_token());
        let second = Duration::from_secs(5);
        let answer = client.chat("m", b"{}".to_vec(), 1, second).await;
        assert_eq!(answer.unwrap_err(), CallError::Status(307));
        assert_eq!(followed.load(std::sync::atomic::Ordering::SeqCst), 0);

        let declared = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_REPLY_BYTES + 1
        );
        let (base, _) = answering(declared.into_bytes()).await;
        let answer = LlmClient::new(&base, new_token())
            .chat("m", Vec::new(), 1, second)
            .await;
        assert!(matches!(answer, Err(CallError::Malformed(m)) if m.contains("longer than")));

        // No length declared: the body is cut off at the cap while it streams.
        let mut chunked = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
        chunked.extend(vec![b' '; MAX_REPLY_BYTES + 10]);
        let (base, _) = answering(chunked).await;
        let answer = LlmClient::new(&base, new_token())
            .chat("m", Vec::new(), 1, second)
            .await;
        assert!(matches!(answer, Err(CallError::Malformed(m)) if m.contains("longer than")));
    }
}
