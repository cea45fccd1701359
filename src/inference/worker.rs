//! The model worker: one dedicated thread owns a model, reads jobs from a bounded queue, gathers
//! up to `max_batch` of them (for at most `max_wait` while callers come together), runs one
//! forward pass and answers each caller on its own reply channel. Repeated texts are answered from a cache. The same worker
//! serves sentence encoders and token classifiers ([`Batched`]). A model that panics loses
//! the batch it was running (those callers get `Closed`) and is loaded again on the same
//! thread, at most [`MAX_RESTARTS`] times (counted); after that the worker stays stopped.

use super::{load, Encoder, EncoderSpec, InferenceError};
use moka::sync::Cache;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reloads after a panic before a worker gives up and stays stopped.
pub const MAX_RESTARTS: u64 = 3;

/// Batching and queueing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchSettings {
    /// Most texts in one forward pass.
    pub max_batch: usize,
    /// Longest a job waits for others to join its batch, while others come: a job after a
    /// batch of one runs with what is queued at once.
    pub max_wait: Duration,
    /// Jobs that may wait in the queue; beyond this callers get `Overloaded`.
    pub queue: usize,
    /// Embeddings kept in the cache.
    pub cache_entries: u64,
}

/// Counters a worker keeps (read by the metrics endpoint and tests).
#[derive(Debug, Default)]
pub struct EncoderStats {
    /// Forward passes run.
    pub batches: AtomicU64,
    /// Texts embedded by forward passes.
    pub items: AtomicU64,
    /// Calls refused because the queue was full.
    pub overloaded: AtomicU64,
    /// Calls that gave up waiting past the deadline.
    pub timed_out: AtomicU64,
    /// Calls answered from the cache.
    pub cache_hits: AtomicU64,
    /// Times the model was loaded again after a panic.
    pub restarts: AtomicU64,
    /// Queued texts dropped unrun because their caller had already gone (a client or Envoy
    /// gave up on the request).
    pub abandoned: AtomicU64,
    /// Set when the worker thread has ended (a panic in the model included): every call then
    /// fails, and `/ready` says so.
    pub stopped: std::sync::atomic::AtomicBool,
}

/// Marks the worker stopped when its thread ends, however it ends.
struct StopMark(Arc<EncoderStats>);

impl Drop for StopMark {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
    }
}

/// A model the worker can batch: texts in, one output per text.
pub trait Batched {
    /// What the model returns for one text.
    type Output;
    /// Runs one batch.
    fn run(&mut self, texts: &[&str]) -> Result<Vec<Self::Output>, InferenceError>;
    /// What runs the model (backend and execution provider actually in use).
    fn describe(&self) -> String;
}

impl Batched for Box<dyn Encoder> {
    type Output = Vec<f32>;

    fn run(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, InferenceError> {
        self.encode(texts)
    }

    fn describe(&self) -> String {
        Encoder::describe(self.as_ref())
    }
}

type Answer<O> = Result<Arc<O>, InferenceError>;

enum ReplyTo<O> {
    Async(tokio::sync::oneshot::Sender<Answer<O>>),
    Blocking(mpsc::Sender<Answer<O>>),
}

impl<O> ReplyTo<O> {
    /// Whether the caller stopped waiting (its future was dropped). A blocking caller always
    /// waits.
    fn abandoned(&self) -> bool {
        match self {
            Self::Async(tx) => tx.is_closed(),
            Self::Blocking(_) => false,
        }
    }
}

struct Job<O> {
    text: String,
    reply: ReplyTo<O>,
}

/// A running model: cheap to share; the worker stops when the last handle is dropped.
pub struct ModelHandle<O> {
    jobs: SyncSender<Job<O>>,
    /// Outputs by the SHA-256 of their text: an entry costs 32 bytes of key, whatever the
    /// text's length.
    cache: Cache<[u8; 32], Arc<O>>,
    described: String,
    weights: Option<std::path::PathBuf>,
    stats: Arc<EncoderStats>,
}

/// A running sentence encoder.
pub type EncoderHandle = ModelHandle<Vec<f32>>;

impl<O> std::fmt::Debug for ModelHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHandle")
            .field("described", &self.described)
            .finish_non_exhaustive()
    }
}

impl EncoderHandle {
    /// Loads the encoder on a new worker thread and waits until it is ready (or failed).
    pub fn spawn(spec: EncoderSpec) -> Result<Self, InferenceError> {
        let settings = spec.batch;
        let weights = match &spec.backend {
            super::Backend::Candle { .. } => spec.model_dir.join("model.safetensors"),
            super::Backend::Onnx { model, .. } => model.clone(),
        };
        let mut handle = Self::start("mom-encoder", settings, move || load(&spec))?;
        handle.weights = Some(weights);
        Ok(handle)
    }

    /// The encoder's weights file (identifies the model in trained heads).
    pub fn weights_file(&self) -> Option<&std::path::Path> {
        self.weights.as_deref()
    }

    /// Embeds one text (see [`ModelHandle::call`]).
    pub async fn embed(&self, text: &str) -> Answer<Vec<f32>> {
        self.call(text).await
    }

    /// Embeds several texts, queued together so they can share a batch; fails as a whole when
    /// any one fails.
    pub async fn embed_many(
        &self,
        texts: &[String],
        deadline: Option<Duration>,
    ) -> Result<Vec<Arc<Vec<f32>>>, InferenceError> {
        let calls: Vec<_> = texts
            .iter()
            .map(|text| self.call_within(text, deadline))
            .collect();
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect()
    }

    /// Embeds several texts from a thread that may block (configuration compilation).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Arc<Vec<f32>>>, InferenceError> {
        self.call_blocking(texts)
    }
}

impl<O: Send + Sync + 'static> ModelHandle<O> {
    /// Loads a model with `load` on a new worker thread named `name` and waits until it is
    /// ready (or failed). `load` runs again to restart the model after a panic.
    pub fn start<M, F>(name: &str, settings: BatchSettings, load: F) -> Result<Self, InferenceError>
    where
        M: Batched<Output = O>,
        F: Fn() -> Result<M, InferenceError> + Send + 'static,
    {
        let (jobs, queue) = mpsc::sync_channel::<Job<O>>(settings.queue.max(1));
        let (ready_tx, ready_rx) = mpsc::channel();
        let stats = Arc::new(EncoderStats::default());
        let worker_stats = stats.clone();
        let worker = name.to_owned();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let mut model = match load() {
                    Ok(model) => model,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _stop = StopMark(worker_stats.clone());
                let _ = ready_tx.send(Ok(model.describe()));
                drop(ready_tx);
                loop {
                    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        serve(&mut model, &queue, settings, &worker_stats);
                    }));
                    if served.is_ok() {
                        return; // every handle is gone
                    }
                    let restarts = worker_stats.restarts.load(Ordering::SeqCst);
                    if restarts >= MAX_RESTARTS {
                        tracing::error!(worker, restarts, "a model worker panicked again: it stays stopped");
                        return;
                    }
                    match load() {
                        Ok(reloaded) => {
                            model = reloaded;
                            worker_stats.restarts.fetch_add(1, Ordering::SeqCst);
                            tracing::error!(worker, restart = restarts + 1, "a model worker panicked: reloaded");
                        }
                        Err(error) => {
                            tracing::error!(worker, %error, "a model worker panicked and cannot reload: it stays stopped");
                            return;
                        }
                    }
                }
            })
            .map_err(|e| InferenceError::Load(format!("cannot start {name} thread: {e}")))?;
        let described = ready_rx.recv().map_err(|_| InferenceError::Closed)??;
        tracing::info!(model = %described, worker = name, "model ready");
        Ok(Self {
            jobs,
            cache: Cache::new(settings.cache_entries),
            described,
            weights: None,
            stats,
        })
    }

    /// What runs the model (backend and execution provider actually in use).
    pub fn describe(&self) -> &str {
        &self.described
    }

    /// The worker's counters.
    pub fn stats(&self) -> &EncoderStats {
        &self.stats
    }

    /// Runs the model on one text with no deadline (see [`ModelHandle::call_within`]).
    pub async fn call(&self, text: &str) -> Answer<O> {
        self.call_within(text, None).await
    }

    /// Runs the model on one text: from the cache, or queued for the next batch; `Overloaded`
    /// at once when the queue is full, `TimedOut` past `deadline`.
    pub async fn call_within(&self, text: &str, deadline: Option<Duration>) -> Answer<O> {
        let key = cache_key(text);
        if let Some(hit) = self.cache.get(&key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job {
            text: text.to_owned(),
            reply: ReplyTo::Async(reply),
        };
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.stats.overloaded.fetch_add(1, Ordering::Relaxed);
                return Err(InferenceError::Overloaded);
            }
            Err(TrySendError::Disconnected(_)) => return Err(InferenceError::Closed),
        }
        let answered = match deadline {
            // A caller that gives up drops its reply: the worker skips the text if unrun.
            Some(deadline) => match tokio::time::timeout(deadline, answer).await {
                Ok(answered) => answered,
                Err(_) => {
                    self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
                    return Err(InferenceError::TimedOut(deadline.as_millis() as u64));
                }
            },
            None => answer.await,
        };
        let output = answered.map_err(|_| InferenceError::Closed)??;
        self.cache.insert(key, output.clone());
        Ok(output)
    }

    /// Runs the model on several texts from a thread that may block.
    pub fn call_blocking(&self, texts: &[String]) -> Result<Vec<Arc<O>>, InferenceError> {
        let mut waiting = Vec::with_capacity(texts.len());
        for text in texts {
            let (reply, answer) = mpsc::channel();
            self.jobs
                .send(Job {
                    text: text.clone(),
                    reply: ReplyTo::Blocking(reply),
                })
                .map_err(|_| InferenceError::Closed)?;
            waiting.push(answer);
        }
        waiting
            .into_iter()
            .map(|answer| answer.recv().map_err(|_| InferenceError::Closed)?)
            .collect()
    }
}

fn cache_key(text: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}

fn serve<M: Batched>(
    model: &mut M,
    queue: &mpsc::Receiver<Job<M::Output>>,
    settings: BatchSettings,
    stats: &EncoderStats,
) {
    // Waiting for others pays only when callers come together. A batch of one says none joined
    // the last time (one caller at a time): the next job runs with whatever is queued, and the
    // wait would only add to its latency. A batch of several says they do: the next waits.
    let mut together = true;
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        let wait = if together {
            settings.max_wait
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + wait;
        while jobs.len() < settings.max_batch.max(1) {
            let left = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(left) {
                Ok(job) => jobs.push(job),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        together = jobs.len() > 1;
        // Under overload a queue holds work for requests already given up on: skip it.
        let waiting = jobs.len();
        jobs.retain(|job| !job.reply.abandoned());
        let dropped = (waiting - jobs.len()) as u64;
        if dropped > 0 {
            stats.abandoned.fetch_add(dropped, Ordering::Relaxed);
        }
        if jobs.is_empty() {
            continue;
        }
        let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
        let result = model.run(&texts);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.items.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        match result {
            Ok(vectors) if vectors.len() == jobs.len() => {
                for (job, vector) in jobs.into_iter().zip(vectors) {
                    answer(job.reply, Ok(Arc::new(vector)));
                }
            }
            Ok(vectors) => {
                let error = InferenceError::Run(format!(
                    "encoder returned {} embeddings for {} texts",
                    vectors.len(),
                    jobs.len()
                ));
                for job in jobs {
                    answer(job.reply, Err(error.clone()));
                }
            }
            Err(error) => {
                for job in jobs {
                    answer(job.reply, Err(error.clone()));
                }
            }
        }
    }
}

fn answer<O>(reply: ReplyTo<O>, result: Answer<O>) {
    // A caller that gave up (dropped its receiver) needs no answer.
    match reply {
        ReplyTo::Async(tx) => {
            let _ = tx.send(result);
        }
        ReplyTo::Blocking(tx) => {
            let _ = tx.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics on the text "boom", echoes the length of any other.
    struct Fragile;

    impl Batched for Fragile {
        type Output = usize;

        fn run(&mut self, texts: &[&str]) -> Result<Vec<usize>, InferenceError> {
            assert!(!texts.contains(&"boom"), "the model broke");
            Ok(texts.iter().map(|t| t.len()).collect())
        }

        fn describe(&self) -> String {
            "fragile".to_owned()
        }
    }

    /// One text a batch, eight may wait.
    fn one_at_a_time() -> BatchSettings {
        BatchSettings {
            max_batch: 1,
            max_wait: Duration::from_millis(1),
            queue: 8,
            cache_entries: 16,
        }
    }

    /// Sleeps 200 ms per batch, then answers each text's length.
    struct Slow;

    impl Batched for Slow {
        type Output = usize;

        fn run(&mut self, texts: &[&str]) -> Result<Vec<usize>, InferenceError> {
            std::thread::sleep(Duration::from_millis(200));
            Ok(texts.iter().map(|t| t.len()).collect())
        }

        fn describe(&self) -> String {
            "slow".to_owned()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_texts_whose_caller_left_are_skipped_not_run() {
        let settings = one_at_a_time();
        let handle = Arc::new(
            ModelHandle::start("slow", settings, || Ok(Slow)).unwrap_or_else(|e| panic!("{e}")),
        );
        // The first call keeps the worker busy; the second's caller gives up while it waits.
        let busy = {
            let handle = handle.clone();
            tokio::spawn(async move { handle.call("first").await.map(|n| *n) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(20), handle.call("left")).await;
        assert!(gave_up.is_err(), "the call was still waiting");
        assert_eq!(busy.await.ok(), Some(Ok(5)));
        // A later call runs; the abandoned one never did.
        assert_eq!(handle.call("after").await.map(|n| *n), Ok(5));
        assert_eq!(handle.stats().abandoned.load(Ordering::SeqCst), 1);
        assert_eq!(handle.stats().items.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_past_its_deadline_fails_as_overloaded_and_its_text_is_skipped() {
        let settings = one_at_a_time();
        let deadline = Some(Duration::from_millis(300));
        let handle = Arc::new(
            ModelHandle::start("slow", settings, || Ok(Slow)).unwrap_or_else(|e| panic!("{e}")),
        );
        // Batches take 200 ms: the first call fits its 300 ms; the second (queued at 20 ms,
        // run from 200 to 400 ms) and the third (queued behind it) do not.
        let spawn = |text: &'static str| {
            let handle = handle.clone();
            tokio::spawn(async move { handle.call_within(text, deadline).await.map(|n| *n) })
        };
        let first = spawn("one");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = spawn("two!");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let third = handle.call_within("three", deadline).await;
        assert_eq!(third, Err(InferenceError::TimedOut(300)));
        assert_eq!(first.await.ok(), Some(Ok(3)));
        assert_eq!(second.await.ok(), Some(Err(InferenceError::TimedOut(300))));
        assert_eq!(handle.stats().timed_out.load(Ordering::SeqCst), 2);
        // The third text's caller gave up while it was queued: it is never run.
        assert_eq!(handle.call("after").await.map(|n| *n), Ok(5));
        assert_eq!(handle.stats().abandoned.load(Ordering::SeqCst), 1);
        assert_eq!(handle.stats().items.load(Ordering::SeqCst), 3);
    }

    /// Up to eight texts a batch, each waiting up to two seconds for others while they come.
    fn patient() -> BatchSettings {
        BatchSettings {
            max_batch: 8,
            max_wait: Duration::from_secs(2),
            queue: 8,
            cache_entries: 0,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_waits_for_others_only_while_callers_come_together() {
        let handle = Arc::new(
            ModelHandle::start("fragile", patient(), || Ok(Fragile))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let batches = || handle.stats().batches.load(Ordering::SeqCst);
        let spawn = |text: &'static str| {
            let handle = handle.clone();
            tokio::spawn(async move { handle.call(text).await.map(|n| *n) })
        };
        // Callers 100 ms apart, within the two-second wait: the first waits, so they share a
        // forward pass.
        let (one, two) = (spawn("a"), {
            tokio::time::sleep(Duration::from_millis(100)).await;
            spawn("bb")
        });
        assert_eq!((one.await.ok(), two.await.ok()), (Some(Ok(1)), Some(Ok(2))));
        assert_eq!(batches(), 1);
        // A caller alone waits out the two seconds (none joins), and so shows callers now come
        // one at a time.
        assert_eq!(handle.call("ccc").await.map(|n| *n), Ok(3));
        assert_eq!(batches(), 2);
        // From then on a lone job runs at once: two callers 100 ms apart get a pass each.
        let (three, four) = (spawn("dddd"), {
            tokio::time::sleep(Duration::from_millis(100)).await;
            spawn("eeeee")
        });
        assert_eq!(
            (three.await.ok(), four.await.ok()),
            (Some(Ok(4)), Some(Ok(5)))
        );
        assert_eq!(batches(), 4);
    }

    #[tokio::test]
    async fn a_panicking_model_is_reloaded_a_bounded_number_of_times_then_stays_stopped() {
        let settings = one_at_a_time();
        let loads = Arc::new(AtomicU64::new(0));
        let counted = loads.clone();
        let handle = ModelHandle::start("fragile", settings, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(Fragile)
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(handle.call("four").await.map(|n| *n), Ok(4));
        // Each panic loses its own call and reloads the model; the next call is served.
        for restart in 1..=MAX_RESTARTS {
            assert_eq!(handle.call("boom").await, Err(InferenceError::Closed));
            assert_eq!(
                handle.call(&"x".repeat(restart as usize)).await.map(|n| *n),
                Ok(restart as usize)
            );
            assert_eq!(handle.stats().restarts.load(Ordering::SeqCst), restart);
            assert!(!handle.stats().stopped.load(Ordering::SeqCst));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1 + MAX_RESTARTS);
        // One panic more than the bound: stopped for good.
        assert!(handle.call("boom").await.is_err());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !handle.stats().stopped.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(handle.stats().stopped.load(Ordering::SeqCst));
        // Cached answers still come back; anything new fails instead of hanging.
        assert_eq!(handle.call("four").await.map(|n| *n), Ok(4));
        assert_eq!(handle.call("other").await, Err(InferenceError::Closed));
    }
}
