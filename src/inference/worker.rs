//! The encoder worker: one dedicated thread owns the model, reads jobs from a bounded queue,
//! gathers up to `max_batch` of them for at most `max_wait`, runs one forward pass and answers
//! each caller on its own reply channel. Repeated texts are answered from a cache.

use super::{load, EncoderSpec, InferenceError};
use moka::sync::Cache;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Batching and queueing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchSettings {
    /// Most texts in one forward pass.
    pub max_batch: usize,
    /// Longest a job waits for others to join its batch.
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
    /// Calls answered from the cache.
    pub cache_hits: AtomicU64,
}

type Embedding = Arc<Vec<f32>>;
type Answer = Result<Embedding, InferenceError>;

enum ReplyTo {
    Async(tokio::sync::oneshot::Sender<Answer>),
    Blocking(mpsc::Sender<Answer>),
}

struct Job {
    text: String,
    reply: ReplyTo,
}

/// A running encoder: cheap to share; the worker stops when the last handle is dropped.
pub struct EncoderHandle {
    jobs: SyncSender<Job>,
    cache: Cache<String, Embedding>,
    described: String,
    stats: Arc<EncoderStats>,
}

impl std::fmt::Debug for EncoderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderHandle")
            .field("described", &self.described)
            .finish_non_exhaustive()
    }
}

impl EncoderHandle {
    /// Loads the model on a new worker thread and waits until it is ready (or failed).
    pub fn spawn(spec: EncoderSpec) -> Result<Self, InferenceError> {
        let settings = spec.batch;
        let (jobs, queue) = mpsc::sync_channel::<Job>(settings.queue.max(1));
        let (ready_tx, ready_rx) = mpsc::channel();
        let stats = Arc::new(EncoderStats::default());
        let worker_stats = stats.clone();
        std::thread::Builder::new()
            .name("mom-encoder".to_owned())
            .spawn(move || match load(&spec) {
                Ok(mut encoder) => {
                    let _ = ready_tx.send(Ok(encoder.describe()));
                    drop(ready_tx);
                    serve(encoder.as_mut(), &queue, settings, &worker_stats);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| InferenceError::Load(format!("cannot start encoder thread: {e}")))?;
        let described = ready_rx.recv().map_err(|_| InferenceError::Closed)??;
        tracing::info!(encoder = %described, "encoder ready");
        Ok(Self {
            jobs,
            cache: Cache::new(settings.cache_entries),
            described,
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

    /// Embeds one text: from the cache, or queued for the next batch; `Overloaded` at once when
    /// the queue is full.
    pub async fn embed(&self, text: &str) -> Answer {
        if let Some(hit) = self.cache.get(text) {
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
        let embedding = answer.await.map_err(|_| InferenceError::Closed)??;
        self.cache.insert(text.to_owned(), embedding.clone());
        Ok(embedding)
    }

    /// Embeds several texts from a thread that may block (configuration compilation).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Embedding>, InferenceError> {
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

fn serve(
    encoder: &mut dyn super::Encoder,
    queue: &mpsc::Receiver<Job>,
    settings: BatchSettings,
    stats: &EncoderStats,
) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        let deadline = Instant::now() + settings.max_wait;
        while jobs.len() < settings.max_batch.max(1) {
            let left = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(left) {
                Ok(job) => jobs.push(job),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
        let result = encoder.encode(&texts);
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

fn answer(reply: ReplyTo, result: Answer) {
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
