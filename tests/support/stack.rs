//! A whole stack on free loopback ports: FAKE backends, the in-process sidecar (on TCP, on a
//! Unix socket, or absent) and a real Envoy from `envoy/quickstart.yaml`.

use super::envoy::{self, Envoy};
use super::fake_openai::FakeBackend;
use super::free_port;
use super::sidecar::{quickstart_config, Sidecar};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// How the sidecar runs in a stack.
enum Mode<'a> {
    Tcp(&'a str),
    Bundle(&'a Path, &'a str),
    Replicas(&'a str),
    Unix(&'a str, &'a Path),
    /// No sidecar; Envoy's config edited by the pairs.
    Down(&'a [(&'a str, &'a str)]),
    /// Another ext_proc server, listening on this port.
    External(u16),
}

/// Everything a request passes through.
pub struct Stack {
    /// The real Envoy.
    pub envoy: Envoy,
    /// The sidecar, unless the stack runs without one.
    pub sidecar: Option<Sidecar>,
    /// A second sidecar replica behind the same Envoy, when started with replicas.
    pub replica: Option<Sidecar>,
    /// The FAKE backends by model name.
    pub backends: HashMap<&'static str, FakeBackend>,
    /// A client for the public listener.
    pub client: reqwest::Client,
    _servers: Vec<tokio::task::JoinHandle<()>>,
    _held: Vec<tokio::net::TcpSocket>,
}

impl Stack {
    /// The quickstart policy over TCP.
    pub async fn start() -> Self {
        Self::start_mode(Mode::Tcp(&quickstart_config()), None).await
    }

    /// A bundle folder bound by `binding` over TCP. In the binding, `INTERNAL_URL` and
    /// `ENVOY_ADMIN` stand for Envoy's internal listener and admin addresses.
    pub async fn start_bundle(bundle: &Path, binding: &str) -> Self {
        Self::start_mode(Mode::Bundle(bundle, binding), None).await
    }

    /// Another policy over TCP.
    pub async fn start_with_config(config: &str) -> Self {
        Self::start_mode(Mode::Tcp(config), None).await
    }

    /// The quickstart policy with the sidecar on a Unix socket.
    pub async fn start_on_unix_socket(socket: &Path) -> Self {
        Self::start_mode(Mode::Unix(&quickstart_config(), socket), None).await
    }

    /// Two sidecar replicas with the same policy behind one Envoy, which balances ext_proc
    /// streams between them round robin.
    pub async fn start_replicas(config: &str) -> Self {
        Self::start_mode(Mode::Replicas(config), None).await
    }

    /// Envoy and backends with another ext_proc server in the sidecar's place, on `port`.
    pub async fn start_with_processor(port: u16) -> Self {
        Self::start_mode(Mode::External(port), None).await
    }

    /// Envoy and backends with no sidecar listening.
    pub async fn start_without_sidecar() -> Self {
        Self::start_mode(Mode::Down(&[]), None).await
    }

    /// Envoy with its ext_proc filter failing open (`failure_mode_allow: true`), no sidecar.
    pub async fn start_failing_open_without_sidecar() -> Self {
        let open = [("failure_mode_allow: false", "failure_mode_allow: true")];
        Self::start_mode(Mode::Down(&open), None).await
    }

    /// Another policy over TCP, with the backend of model `dead` not listening: Envoy's
    /// connections to it are refused.
    pub async fn start_with_dead_backend(config: &str, dead: &str) -> Self {
        Self::start_mode(Mode::Tcp(config), Some(dead)).await
    }

    async fn start_mode(mode: Mode<'_>, dead: Option<&str>) -> Self {
        let mut ports = HashMap::new();
        let mut backends = HashMap::new();
        let mut servers = Vec::new();
        let mut held = Vec::new();
        for (fixed, name) in envoy::BACKENDS {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ports.insert(fixed, listener.local_addr().unwrap().port());
            if dead == Some(name) {
                // Bound but not listening: the port refuses connections, and no other test
                // can take it.
                drop(listener);
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind(([127, 0, 0, 1], ports[&fixed]).into()).unwrap();
                held.push(socket);
                continue;
            }
            let mut backend = FakeBackend::new(name);
            backend.chunk_pause = Duration::from_millis(200);
            backends.insert(name, backend.clone());
            servers.push(tokio::spawn(async move {
                let _ = super::fake_openai::serve(listener, backend).await;
            }));
        }
        for fixed in [envoy::PUBLIC, envoy::INTERNAL, envoy::ADMIN] {
            ports.insert(fixed, free_port());
        }
        let mut replica = None;
        let (sidecar, envoy) = match mode {
            Mode::Tcp(config) => {
                // Loopers and failover reach Envoy's internal listener wherever the test put
                // it (a policy naming none uses the default, 10001).
                let internal = format!("http://127.0.0.1:{}", ports[&envoy::INTERNAL]);
                let config = if config.contains("internalUrl") {
                    config.replace("http://127.0.0.1:10001", &internal)
                } else {
                    config.replacen(
                        "server:\n",
                        &format!("server:\n  internalUrl: {internal}\n"),
                        1,
                    )
                };
                let sidecar = Sidecar::start(&config, 0).await;
                ports.insert(envoy::SIDECAR, sidecar.grpc_port());
                (Some(sidecar), Envoy::start(ports).await)
            }
            Mode::Bundle(bundle, binding) => {
                let binding = binding
                    .replace(
                        "INTERNAL_URL",
                        &format!("http://127.0.0.1:{}", ports[&envoy::INTERNAL]),
                    )
                    .replace(
                        "ENVOY_ADMIN",
                        &format!("http://127.0.0.1:{}", ports[&envoy::ADMIN]),
                    );
                let sidecar = Sidecar::start_bundle(bundle, &binding).await;
                ports.insert(envoy::SIDECAR, sidecar.grpc_port());
                (Some(sidecar), Envoy::start(ports).await)
            }
            Mode::Replicas(config) => {
                let first = Sidecar::start(config, 0).await;
                let second = Sidecar::start(config, 0).await;
                ports.insert(envoy::SIDECAR, first.grpc_port());
                ports.insert(envoy::SIDECAR + 1, second.grpc_port());
                let one = "port_value: 50051 } } } }] }]";
                let two = "port_value: 50051 } } } }, { endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 50052 } } } }] }]";
                let envoy = Envoy::start_edited(ports, &[(one, two)]).await;
                replica = Some(second);
                (Some(first), envoy)
            }
            Mode::Unix(config, socket) => {
                let sidecar =
                    Sidecar::start_on(config, &format!("unix:{}", socket.display())).await;
                ports.insert(envoy::SIDECAR, free_port());
                let pipe = format!("pipe: {{ path: {} }}", socket.display());
                let tcp = "socket_address: { address: 127.0.0.1, port_value: 50051 }";
                (
                    Some(sidecar),
                    Envoy::start_edited(ports, &[(tcp, pipe.as_str())]).await,
                )
            }
            Mode::External(port) => {
                ports.insert(envoy::SIDECAR, port);
                (None, Envoy::start(ports).await)
            }
            Mode::Down(edits) => {
                // The sidecar's port stays ours for the test (no other test's sidecar can take
                // it) and refuses every ext_proc stream: connections are closed at once.
                let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                ports.insert(envoy::SIDECAR, dead.local_addr().unwrap().port());
                servers.push(tokio::spawn(async move {
                    while let Ok((socket, _)) = dead.accept().await {
                        drop(socket);
                    }
                }));
                (None, Envoy::start_edited(ports, edits).await)
            }
        };
        Self {
            envoy,
            sidecar,
            replica,
            backends,
            client: reqwest::Client::new(),
            _servers: servers,
            _held: held,
        }
    }

    /// A public-listener URL; `marker` finds the request's access-log line.
    pub fn url(&self, path: &str, marker: &str) -> String {
        format!("{}{path}?t={marker}", self.envoy.public_url())
    }

    /// Posts a chat body through Envoy.
    pub async fn chat(&self, body: &Value, marker: &str) -> reqwest::Response {
        self.client
            .post(self.url("/v1/chat/completions", marker))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// Every request body the backends received, as text.
    pub fn bodies_seen(&self) -> Vec<String> {
        self.backends
            .values()
            .flat_map(|b| b.seen.lock().unwrap().clone())
            .map(|s| String::from_utf8_lossy(&s.body).into_owned())
            .collect()
    }

    /// Requests the backends received, in all.
    pub fn requests_seen(&self) -> usize {
        self.backends
            .values()
            .map(|b| b.seen.lock().unwrap().len())
            .sum()
    }
}

/// The first choice's content deltas of a server-sent-events body, joined.
pub fn streamed(text: &str) -> String {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// A `mom/auto` request with one user message.
pub fn ask(text: &str) -> Value {
    json!({"model": "mom/auto", "messages": [{"role": "user", "content": text}]})
}

/// A response header's value, or empty.
pub fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}
