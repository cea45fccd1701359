//! The command line: `serve`, `check-config`, `explain`, `train`, `train-router`, `eval-signal`, `eval`,
//! `replay`, `bundle`. Each subcommand runs the same parse and
//! compile as the sidecar, so what the CLI accepts the sidecar accepts.

mod bundle;
mod eval;
mod finetune;
mod promote;
mod replay;
mod train;
mod train_router;

use crate::app::{self, ServeOptions};
use crate::config::{self, Snapshot};
use crate::engine::{self, Action, Routed};
use crate::llm::Headers;
use clap::{Parser, Subcommand};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// mom-router: an Envoy ext_proc sidecar that makes a pool of LLMs behave as one model.
#[derive(Debug, Parser)]
#[command(name = "mom-router", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the ext_proc gRPC server and the admin HTTP server.
    Serve {
        /// The configuration (or bundle and binding); reloaded when it changes.
        #[command(flatten)]
        source: SourceArgs,
        /// Write the resolution lock here at start-up and after every reload.
        #[arg(long)]
        lock: Option<PathBuf>,
        /// ext_proc listen address (`HOST:PORT` or `unix:/path`); overrides `server.grpcListen`.
        #[arg(long)]
        grpc_listen: Option<String>,
        /// Admin listen address; overrides `server.adminListen`.
        #[arg(long)]
        admin_listen: Option<String>,
        /// How often to check the configuration file for changes, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        reload_interval_ms: u64,
        /// Log as JSON lines instead of text.
        #[arg(long)]
        log_json: bool,
        /// On SIGTERM, seconds to keep serving after `/ready` turns false.
        #[arg(long, default_value_t = 2)]
        drain_grace_seconds: u64,
        /// On SIGTERM, the most seconds open streams and writes get to finish after that.
        #[arg(long, default_value_t = 30)]
        drain_limit_seconds: u64,
        /// Threads serving ext_proc and admin traffic (model inference has its own threads);
        /// one per two CPU cores when not given (Envoy and the encoders share the machine). One
        /// thread per Envoy worker is usually enough: a rule-only decision takes microseconds,
        /// and fewer threads mean fewer cross-thread wake-ups per request.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
        worker_threads: Option<u16>,
    },
    /// Validate a configuration exactly as `serve` would; print every error.
    CheckConfig {
        /// Configuration file (YAML).
        path: PathBuf,
        /// The configuration it replaces: an identity whose meaning changed without a version
        /// bump is an error, as it is for a hot reload.
        #[arg(long)]
        previous: Option<PathBuf>,
    },
    /// Run the pipeline offline on one chat-completion body and print the outcome as JSON.
    Explain {
        /// Configuration file (YAML).
        #[arg(long)]
        config: PathBuf,
        /// Request header `name:value`; repeatable.
        #[arg(long = "header", value_name = "NAME:VALUE")]
        headers: Vec<String>,
        /// Dynamic metadata Envoy would forward, `namespace=JSON object` (a verified token's
        /// claims: `envoy.filters.http.jwt_authn={"jwt_payload":{"roles":["premium"]}}`);
        /// repeatable.
        #[arg(long = "metadata", value_name = "NAMESPACE=JSON")]
        metadata: Vec<String>,
        /// HTTP method of the simulated request.
        #[arg(long, default_value = "POST")]
        method: String,
        /// Path of the simulated request.
        #[arg(long, default_value = engine::CHAT_PATH)]
        path: String,
        /// Request body file, or `-` for stdin.
        #[arg(default_value = "-")]
        request: String,
    },
    /// Fit a classification head on frozen sentence embeddings of labelled examples.
    Train(train::TrainArgs),
    /// Train the sentence encoder's top layers on labelled examples; write the encoder.
    Finetune(finetune::FinetuneArgs),
    /// Learn allocation from evaluation traces: a router head predicting, per model, P(correct)
    /// and cost, read by the `learned` selection algorithm.
    TrainRouter(train_router::TrainRouterArgs),
    /// Score a configured signal on labelled examples, through the routing code.
    EvalSignal(train::EvalArgs),
    /// Run a suite through Envoy against identities and every fixed model; write a scorecard.
    Eval(eval::EvalArgs),
    /// Re-derive recorded decisions under a configuration; report what would route differently.
    Replay(replay::ReplayArgs),
    /// Build, inspect, check, export and import policy bundles.
    Bundle(bundle::BundleArgs),
}

/// Where a policy comes from: `--config FILE`, or `--bundle DIR [--binding FILE]`.
#[derive(Debug, clap::Args)]
pub struct SourceArgs {
    /// Configuration file (YAML).
    #[arg(long, required_unless_present = "bundle", conflicts_with = "bundle")]
    config: Option<PathBuf>,
    /// A bundle folder instead of a configuration file.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// The binding that places the bundle (deployment sections, provider model ids).
    #[arg(long, requires = "bundle")]
    binding: Option<PathBuf>,
}

impl SourceArgs {
    /// The source the arguments name (clap guarantees one of `--config` and `--bundle`).
    pub fn source(&self) -> config::Source {
        match (&self.config, &self.bundle) {
            (Some(path), _) => config::Source::File(path.clone()),
            (None, bundle) => config::Source::Bundle {
                bundle: bundle.clone().unwrap_or_default(),
                binding: self.binding.clone(),
            },
        }
    }
}

/// Entry point used by the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            source,
            lock,
            grpc_listen,
            admin_listen,
            reload_interval_ms,
            log_json,
            drain_grace_seconds,
            drain_limit_seconds,
            worker_threads,
        } => {
            crate::observability::logging::init(log_json);
            let threads = Threads::Workers(worker_threads.map(usize::from));
            serve(
                threads,
                ServeOptions {
                    source: source.source(),
                    lock,
                    grpc_listen,
                    admin_listen,
                    reload_interval: Duration::from_millis(reload_interval_ms.max(50)),
                    drain: app::Drain {
                        grace: Duration::from_secs(drain_grace_seconds),
                        limit: Duration::from_secs(drain_limit_seconds),
                    },
                },
            )
        }
        Command::CheckConfig { path, previous } => check_config(&path, previous.as_deref()),
        Command::Explain {
            config,
            headers,
            metadata,
            method,
            path,
            request,
        } => {
            let Some(metadata) = forwarded_metadata(&metadata) else {
                return ExitCode::FAILURE;
            };
            let headers = (headers.as_slice(), metadata);
            explain(&config, headers, &method, &path, &request)
        }
        Command::Train(args) => {
            crate::observability::logging::init(false);
            train::run_train(args)
        }
        Command::Finetune(args) => {
            crate::observability::logging::init(false);
            finetune::run(&args)
        }
        Command::TrainRouter(args) => {
            crate::observability::logging::init(false);
            train_router::run(args)
        }
        Command::EvalSignal(args) => {
            crate::observability::logging::init(false);
            train::run_eval(args)
        }
        Command::Eval(args) => eval::run(args),
        Command::Replay(args) => replay::run(&args),
        Command::Bundle(args) => bundle::run(args),
    }
}

/// The threads of the async runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Threads {
    /// The caller's thread alone: offline commands.
    Current,
    /// Worker threads: `serve`, with this many ([`default_workers`] when `None`).
    Workers(Option<usize>),
}

/// Worker threads when none are asked for: one per two cores this process may use, at least
/// one. The sidecar shares its machine with Envoy and the encoders' own threads; on 2 cores one
/// worker spent about a tenth less CPU per rule-path request than two, and answered sooner
/// (README, Benchmarks).
fn default_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / 2).max(1)
}

/// The async runtime with the threads asked for.
fn runtime(threads: Threads) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = match threads {
        Threads::Current => tokio::runtime::Builder::new_current_thread(),
        Threads::Workers(count) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(count.unwrap_or_else(default_workers));
            builder
        }
    };
    builder.enable_all().build().map_err(|e| {
        eprintln!("mom-router: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

fn serve(threads: Threads, options: ServeOptions) -> ExitCode {
    let runtime = match runtime(threads) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let running = match app::start(options).await {
            Ok(running) => running,
            Err(e) => {
                eprintln!("mom-router: {e}");
                return ExitCode::FAILURE;
            }
        };
        shutdown_signal().await;
        tracing::info!("draining");
        if running.shutdown().await {
            tracing::info!("stopped");
        }
        ExitCode::SUCCESS
    })
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

fn check_config(path: &Path, previous: Option<&Path>) -> ExitCode {
    let checked = config::load(path).and_then(|snapshot| {
        let Some(previous) = previous else {
            return Ok(snapshot);
        };
        let before = config::load(previous).map_err(|errors| {
            config::ConfigErrors(
                errors
                    .0
                    .into_iter()
                    .map(|e| {
                        config::ConfigError::new(
                            format!("--previous {}", previous.display()),
                            e.to_string(),
                        )
                    })
                    .collect(),
            )
        })?;
        let changes = config::compile::unversioned_changes(&before, &snapshot);
        if changes.is_empty() {
            Ok(snapshot)
        } else {
            Err(config::ConfigErrors(
                changes
                    .into_iter()
                    .map(|(path, message)| config::ConfigError::new(path, message))
                    .collect(),
            ))
        }
    });
    match checked {
        Ok(snapshot) => {
            let line = format!("{}: ok, {}", path.display(), described(&snapshot));
            write_stdout(&line)
        }
        Err(errors) => {
            eprintln!("{}: {} error(s)", path.display(), errors.0.len());
            for error in &errors.0 {
                eprintln!("  {error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `version V (N models, N identities, N signals, N decisions)`.
fn described(snapshot: &Snapshot) -> String {
    format!(
        "version {} ({} models, {} identities, {} signals, {} decisions)",
        snapshot.version,
        snapshot.models.len(),
        snapshot.identities.len(),
        snapshot.signals.len(),
        snapshot.decisions.len()
    )
}

fn write_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn read_request(source: &str) -> std::io::Result<Vec<u8>> {
    if source == "-" {
        let mut body = Vec::new();
        std::io::stdin().read_to_end(&mut body)?;
        Ok(body)
    } else {
        std::fs::read(source)
    }
}

/// `--metadata namespace=JSON` values as forwarded metadata; `None` (said) when one is malformed.
fn forwarded_metadata(values: &[String]) -> Option<serde_json::Map<String, Value>> {
    let mut metadata = serde_json::Map::new();
    for value in values {
        let parsed = value
            .split_once('=')
            .and_then(|(namespace, json)| Some((namespace, serde_json::from_str(json).ok()?)));
        let Some((namespace, fields @ Value::Object(_))) = parsed else {
            eprintln!("mom-router: --metadata {value:?} must look like namespace={{JSON object}}");
            return None;
        };
        metadata.insert(namespace.trim().to_owned(), fields);
    }
    Some(metadata)
}

fn explain(
    config: &Path,
    (headers, metadata): (&[String], serde_json::Map<String, Value>),
    method: &str,
    path: &str,
    source: &str,
) -> ExitCode {
    let snapshot = match config::load(config) {
        Ok(snapshot) => snapshot,
        Err(errors) => {
            eprintln!("{}: {} error(s)", config.display(), errors.0.len());
            for error in &errors.0 {
                eprintln!("  {error}");
            }
            return ExitCode::FAILURE;
        }
    };
    let body = match read_request(source) {
        Ok(body) => body,
        Err(e) => {
            eprintln!("mom-router: cannot read request {source}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut pairs = vec![
        (":method".to_owned(), method.to_owned()),
        (":path".to_owned(), path.to_owned()),
        ("content-length".to_owned(), body.len().to_string()),
    ];
    for header in headers {
        let Some((name, value)) = header.split_once(':') else {
            eprintln!("mom-router: --header {header:?} must look like name:value");
            return ExitCode::FAILURE;
        };
        pairs.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let runtime = match runtime(Threads::Current) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let headers = Headers::new(pairs).with_metadata(metadata);
    let routed = runtime.block_on(run_offline(&snapshot, &headers, &body));
    let mut document = explain_json(&routed);
    document["encoder"] = json!(snapshot.encoder.as_ref().map(|e| e.describe()));
    document["ner"] = json!(snapshot.ner.as_ref().map(|n| n.describe()));
    let text = serde_json::to_string_pretty(&document).unwrap_or_default();
    write_stdout(&text)
}

/// Runs both request phases as the sidecar would, with no learned statistics (every model
/// cold, every rating and posterior at its prior).
pub async fn run_offline(snapshot: &Snapshot, headers: &Headers, body: &[u8]) -> Routed {
    match engine::on_request_headers(snapshot, headers, body.is_empty()) {
        Some(routed) => routed,
        None => {
            engine::on_request_body(
                snapshot,
                &engine::Services::offline(snapshot),
                headers,
                body,
            )
            .await
        }
    }
}

/// The `explain` document for one outcome.
pub fn explain_json(routed: &Routed) -> Value {
    let trace = &routed.trace;
    let response_path = match routed.action {
        Action::Forward(_) => crate::engine::ResponsePath::Upstream,
        Action::Respond(_) => crate::engine::ResponsePath::Immediate,
    };
    let headers: serde_json::Map<String, Value> = trace
        .response_headers(response_path)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
    // Offline a looper is planned, not run: the request would go to the looper, not upstream.
    let action = match (&routed.action, &trace.looper) {
        (Action::Forward(_), Some(_)) => "loop",
        (action, _) => action.kind(),
    };
    let mut out = json!({
        "identity": trace.identity,
        "identity_version": trace.identity_version,
        "signals": trace.signals,
        "decision": trace.decision,
        "confidence": trace.confidence,
        "algorithm": if trace.algorithm.is_empty() { None } else { Some(trace.algorithm) },
        "scores": trace.scores.iter().map(|(m, s)| json!({"model": m, "score": s})).collect::<Vec<_>>(),
        "selection_reason": if trace.selection_reason.is_empty() { None } else { Some(&trace.selection_reason) },
        "session": trace.session.as_ref().map(|s| json!({"id": s.id, "status": s.status, "reason": s.reason})),
        "looper": trace.looper.as_ref().map(|l| json!({
            "kind": l.kind,
            "steps": l.steps.iter().map(|s| json!({
                "model": s.model, "outcome": s.outcome, "confidence": s.confidence,
                "latency_ms": s.latency_ms,
            })).collect::<Vec<_>>(),
            "prompt_tokens": l.usage.0, "completion_tokens": l.usage.1, "cost": l.cost,
        })),
        "plugins": trace.plugins.iter().map(|a| json!({"plugin": a.plugin, "action": a.label()})).collect::<Vec<_>>(),
        "model": trace.model,
        "provider_model": trace.provider_model,
        "action": action,
        "recipe": trace.looper.as_ref().map(|l| l.kind),
        "config_version": trace.config_version,
        "response_headers": headers,
    });
    match &routed.action {
        Action::Forward(forward) => {
            out["upstream"] = json!({
                "headers": {
                    "x-selected-model": forward.model,
                    "content-length": forward.body.len().to_string(),
                },
                "stream": forward.stream,
                "body": serde_json::from_slice::<Value>(&forward.body).unwrap_or(Value::Null),
            });
        }
        Action::Respond(reply) => {
            out["status"] = json!(reply.status);
            out["body"] = serde_json::from_slice::<Value>(&reply.body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&reply.body).into()));
        }
    }
    out
}
