//! Composition root for `serve`: loads the configuration (a file, or a bundle and its binding),
//! starts the ext_proc gRPC server, the admin server, the reload watcher and the resolution
//! lock, and stops them together.

use crate::admin::{self, AdminState};
use crate::config::{ConfigErrors, ConfigStore, Listen, ReloadOutcome, Source};
use crate::engine::exchange::Exchanges;
use crate::engine::Services;
use crate::extproc::ExtProcService;
use crate::llm::LlmClient;
use crate::lock::LockSlot;
use crate::observability::metrics::ReloadLabels;
use crate::observability::Metrics;
use crate::state::StateStore;
use futures_util::StreamExt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How `serve` was asked to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The configuration file, or a bundle and its binding.
    pub source: Source,
    /// Where to write the resolution lock (it is always served at `/lock`).
    pub lock: Option<PathBuf>,
    /// Overrides `server.grpcListen`.
    pub grpc_listen: Option<String>,
    /// Overrides `server.adminListen`.
    pub admin_listen: Option<String>,
    /// How often the configuration file is checked for changes.
    pub reload_interval: Duration,
    /// How a stop drains.
    pub drain: Drain,
}

/// How a stop drains: `/ready` turns false at once, new streams are still served for `grace`
/// (while Envoy and Kubernetes take the replica out of rotation), then listeners stop accepting
/// and open streams, record writes and Redis writes get until `limit` to finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// Serving on after `/ready` turned false.
    pub grace: Duration,
    /// The most the rest of the stop may take.
    pub limit: Duration,
}

/// Why the sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration does not compile.
    #[error("invalid configuration:\n{0}")]
    Config(#[from] ConfigErrors),
    /// A listen address is malformed.
    #[error("invalid listen address {0:?}")]
    Address(String),
    /// The loading task did not finish.
    #[error("start-up failed: {0}")]
    Startup(String),
    /// Shared state could not start.
    #[error("{0}")]
    State(#[from] crate::state::StateError),
    /// A listener could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(String, std::io::Error),
}

/// A running sidecar.
pub struct Running {
    /// Bound ext_proc address (TCP), if listening on TCP.
    pub grpc_addr: Option<SocketAddr>,
    /// Bound admin address.
    pub admin_addr: SocketAddr,
    /// The configuration store.
    pub store: Arc<ConfigStore>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Learned statistics and remembered runs.
    pub state: Arc<StateStore>,
    /// The token this process signs loopers' sub-requests with (in-process checks of the
    /// sub-request guard; never logged or served).
    pub internal_token: String,
    /// Set once a stop has begun (`/ready` answers 503).
    pub draining: Arc<AtomicBool>,
    drain: Drain,
    stop: watch::Sender<bool>,
    flush: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    writers: Vec<JoinHandle<()>>,
}

impl Running {
    /// Drains (see [`Drain`]): `/ready` false, serving on for the grace period, then stops
    /// accepting and waits for open streams and every task, at most the drain limit. True when
    /// everything finished in time.
    pub async fn shutdown(self) -> bool {
        self.draining.store(true, Ordering::SeqCst);
        tokio::time::sleep(self.drain.grace).await;
        let _ = self.stop.send(true);
        let (flush, writers) = (self.flush, self.writers);
        let finished = tokio::time::timeout(self.drain.limit, async {
            // The servers first (open streams finish), then the writers flush what they left.
            for task in self.tasks {
                let _ = task.await;
            }
            let _ = flush.send(true);
            for writer in writers {
                let _ = writer.await;
            }
        })
        .await;
        if finished.is_err() {
            tracing::warn!(limit = ?self.drain.limit, "drain limit reached; stopping with work open");
        }
        finished.is_ok()
    }
}

/// Starts every server. Listen addresses may use port 0; [`Running`] reports what was bound.
pub async fn start(options: ServeOptions) -> Result<Running, AppError> {
    // Loading may read model weights and run the encoder: keep it off the async workers.
    let source = options.source.clone();
    let store = tokio::task::spawn_blocking(move || {
        let store = ConfigStore::open(source);
        crate::observability::memory::release_freed("snapshot loaded");
        store
    })
    .await
    .map_err(|e| AppError::Startup(e.to_string()))??;
    let store = Arc::new(store);
    let metrics = Arc::new(Metrics::new());
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    metrics.runtime_workers.set(workers as i64);
    let snapshot = store.snapshot();

    let grpc_listen = match &options.grpc_listen {
        Some(text) => parse_listen(text)?,
        None => snapshot.server.grpc_listen.clone(),
    };
    let admin_listen = match &options.admin_listen {
        Some(text) => text.parse().map_err(|_| AppError::Address(text.clone()))?,
        None => snapshot.server.admin_listen,
    };
    let (stop, stopped) = watch::channel(false);
    let (flush, flushing) = watch::channel(false);
    let mut tasks = Vec::new();
    let (state, state_tasks, mut writers) = StateStore::start(
        snapshot.state.clone(),
        metrics.state_fallbacks.clone(),
        stopped.clone(),
        flushing,
    )?;
    tasks.extend(state_tasks);

    let lock: LockSlot = Arc::default();
    let records = snapshot.records.as_ref().map(|settings| {
        let (sink, writer) = crate::records::RecordSink::start(
            settings,
            state.clone(),
            metrics.records_dropped.clone(),
            lock.clone(),
        );
        // Ends once every sink is dropped: after the servers and their streams.
        writers.push(writer);
        sink
    });
    let spans = snapshot.otlp.as_ref().map(|settings| {
        let (sink, exporter) =
            crate::observability::otlp::SpanSink::start(settings, metrics.spans_dropped.clone());
        // Like the record writer: ends once the streams holding a sink are gone.
        writers.push(exporter);
        tracing::info!(endpoint = %settings.endpoint, "exporting spans over OTLP");
        sink
    });
    let internal_token = crate::llm::client::new_token();
    let client = LlmClient::new(&snapshot.server.internal_url, internal_token.clone());
    let services = Services {
        state: state.clone(),
        client: Some(client.clone()),
        model_deadlines: true,
        parked: Arc::default(),
    };
    let reloaded = Arc::new(tokio::sync::Notify::new());
    tasks.push(tokio::spawn(crate::lock::maintain(
        store.clone(),
        client,
        lock.clone(),
        options.lock.clone(),
        reloaded.clone(),
        stopped.clone(),
    )));
    tasks.push(tokio::spawn(read_queue_metrics(
        store.clone(),
        LlmClient::new(&snapshot.server.internal_url, internal_token.clone()),
        state.clone(),
        stopped.clone(),
    )));
    let records_for_admin = records.clone();
    let exchanges = Exchanges::new(store.clone(), metrics.clone(), services)
        .with_records(records)
        .with_spans(spans);
    let service = ExtProcService::new(exchanges);
    let grpc = tonic::transport::Server::builder().add_service(service);
    let grpc_addr = match grpc_listen {
        Listen::Tcp(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| AppError::Bind(addr.to_string(), e))?;
            let bound = listener
                .local_addr()
                .map_err(|e| AppError::Bind(addr.to_string(), e))?;
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
                if let Ok(stream) = &s {
                    let _ = stream.set_nodelay(true);
                }
                s
            });
            let signal = wait_for(stopped.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(e) = grpc.serve_with_incoming_shutdown(incoming, signal).await {
                    tracing::error!(error = %e, "ext_proc server stopped");
                }
            }));
            tracing::info!(%bound, "ext_proc listening");
            Some(bound)
        }
        Listen::Unix(path) => {
            let _ = std::fs::remove_file(&path);
            let listener = tokio::net::UnixListener::bind(&path)
                .map_err(|e| AppError::Bind(path.display().to_string(), e))?;
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let signal = wait_for(stopped.clone());
            tasks.push(tokio::spawn(async move {
                if let Err(e) = grpc.serve_with_incoming_shutdown(incoming, signal).await {
                    tracing::error!(error = %e, "ext_proc server stopped");
                }
            }));
            tracing::info!(path = %path.display(), "ext_proc listening on unix socket");
            None
        }
    };

    let admin_listener = TcpListener::bind(admin_listen)
        .await
        .map_err(|e| AppError::Bind(admin_listen.to_string(), e))?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|e| AppError::Bind(admin_listen.to_string(), e))?;
    let draining = Arc::new(AtomicBool::new(false));
    let routes = admin::router(AdminState {
        store: store.clone(),
        metrics: metrics.clone(),
        state: state.clone(),
        lock,
        records: records_for_admin,
        outcomes_auth: admin::OutcomesAuth::from_env(admin_addr.ip().is_loopback()),
        draining: draining.clone(),
    });
    let signal = wait_for(stopped.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(admin_listener, routes)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::error!(error = %e, "admin server stopped");
        }
    }));
    tracing::info!(%admin_addr, version = %snapshot.version, "admin listening");

    tasks.push(tokio::spawn(watch_config(
        store.clone(),
        metrics.clone(),
        reloaded,
        options.reload_interval,
        stopped,
    )));
    Ok(Running {
        grpc_addr,
        admin_addr,
        store,
        metrics,
        state,
        internal_token,
        draining,
        drain: options.drain,
        stop,
        flush,
        tasks,
        writers,
    })
}

fn parse_listen(text: &str) -> Result<Listen, AppError> {
    match text.strip_prefix("unix:") {
        Some(path) if !path.is_empty() => Ok(Listen::Unix(path.into())),
        Some(_) => Err(AppError::Address(text.to_owned())),
        None => text
            .parse()
            .map(Listen::Tcp)
            .map_err(|_| AppError::Address(text.to_owned())),
    }
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Polls the configuration file; a changed valid file becomes the live snapshot, a changed
/// invalid one is logged error by error and counted, and the old snapshot stays.
async fn watch_config(
    store: Arc<ConfigStore>,
    metrics: Arc<Metrics>,
    reloaded: Arc<tokio::sync::Notify>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        let worker_store = store.clone();
        let Ok(outcome) = tokio::task::spawn_blocking(move || {
            let outcome = worker_store.reload();
            if !matches!(outcome, ReloadOutcome::Unchanged) {
                crate::observability::memory::release_freed("snapshot reloaded");
            }
            outcome
        })
        .await
        else {
            continue;
        };
        match outcome {
            ReloadOutcome::Unchanged => {}
            ReloadOutcome::Applied { version } => {
                metrics
                    .reloads
                    .get_or_create(&ReloadLabels { result: "applied" })
                    .inc();
                tracing::info!(%version, "configuration reloaded");
                reloaded.notify_one();
            }
            ReloadOutcome::Rejected(errors) => {
                metrics
                    .reloads
                    .get_or_create(&ReloadLabels { result: "rejected" })
                    .inc();
                for error in &errors.0 {
                    tracing::error!(%error, "configuration rejected; keeping the previous one");
                }
            }
        }
    }
}

/// Reads the queue of every backend whose model declares `queueMetrics` (its `/metrics` through
/// Envoy's internal listener), each at its own interval, and reports it to the pool, until
/// `stopped`. A read that fails leaves the last report to expire.
async fn read_queue_metrics(
    store: Arc<ConfigStore>,
    client: LlmClient,
    state: Arc<crate::state::StateStore>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut due: std::collections::HashMap<String, std::time::Instant> = Default::default();
    loop {
        let snapshot = store.snapshot();
        let now = std::time::Instant::now();
        for model in &snapshot.models {
            let Some((format, interval)) = model.queue_metrics else {
                continue;
            };
            if due.get(&*model.name).is_some_and(|at| *at > now) {
                continue;
            }
            due.insert(model.name.to_string(), now + interval);
            let patience = interval.min(std::time::Duration::from_secs(2));
            match client.metrics(&model.name, patience).await {
                Ok(text) => match format.queued(&text) {
                    Some(queued) => state.pool.report(&model.name, queued),
                    None => {
                        tracing::warn!(model = %model.name, "backend metrics carry no queue gauges")
                    }
                },
                Err(error) => {
                    tracing::debug!(model = %model.name, %error, "backend metrics unread")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}
