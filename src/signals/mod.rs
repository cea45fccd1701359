//! Signals: typed evidence extracted from one request. This module owns the closed set of
//! signal kinds, their compiled forms and their evaluation. Rule signals here cost microseconds
//! and never perform I/O.

mod authz;
mod budget;
mod classifier;
mod conversation;
pub mod deobfuscate;
mod embedding;
mod exemplar;
pub mod exemplar_sets;
mod jailbreak;
pub mod jailbreak_patterns;
mod keyword;
pub mod keyword_index;
mod language;
mod metadata;
mod pii;
pub mod pii_patterns;
mod projection;
pub mod text;

pub use authz::{AuthzSignal, RolesSource};
pub use budget::BudgetSignal;
pub use classifier::{ClassifierSignal, ABSTAIN};
pub use conversation::{estimate_tokens, ConversationSignal, TokenRange};
pub use embedding::{Aggregate, EmbeddingSignal, OnError};
pub use exemplar::{ExemplarSignal, Label};
pub use jailbreak::{JailbreakSignal, Windows};
pub use keyword::{KeywordOperator, KeywordSignal};
pub use language::LanguageSignal;
pub use metadata::{HeaderPredicate, MetadataSignal};
pub use pii::{Entities, PiiSignal};
pub use projection::{Input, Outcome, Projection, Reading};
pub use text::Scope;

use crate::inference::InferenceError;
use crate::llm::{ChatRequest, Headers};
use serde::Serialize;
use std::sync::Arc;

/// What is computed once per request and shared by the signals: the model outputs neural
/// signals read, and every keyword signal's hits from the policy's combined matcher.
#[derive(Debug, Default)]
pub struct Neural {
    /// The keyword hits, when the signals include keyword signals (absent: each keyword signal
    /// matches on its own).
    pub keywords: Option<keyword_index::KeywordHits>,
    /// The request's embedding (last user message), when an embedding signal needs it.
    pub embedding: Option<Result<Arc<Vec<f32>>, InferenceError>>,
    /// Entities in every message, when a PII signal reads the token classifier.
    pub entities: Option<Entities>,
    /// Embeddings of the overlapping windows of user and tool text, when a jailbreak signal
    /// reads them.
    pub windows: Option<Windows>,
    /// The share the request's tenant has left of its tightest budget, when tenants are
    /// configured and the tenant has a windowed limit.
    pub budget: Option<f64>,
}

/// Which models a set of signals reads; each is run at most once per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The request embedding (last user message).
    pub embedding: bool,
    /// The token classifier's entities.
    pub entities: bool,
    /// The embeddings of the user and tool text windows.
    pub windows: bool,
    /// The combined keyword matcher's hits.
    pub keywords: bool,
}

impl Needs {
    /// What `signals` read together.
    pub fn of<'a>(signals: impl IntoIterator<Item = &'a SignalKind>) -> Self {
        signals
            .into_iter()
            .fold(Self::default(), |needs, kind| Self {
                embedding: needs.embedding || kind.needs_embedding(),
                entities: needs.entities || kind.needs_entities(),
                windows: needs.windows || kind.needs_windows(),
                keywords: needs.keywords || matches!(kind, SignalKind::Keyword(_)),
            })
    }
}

/// A problem in one signal's definition: the field (relative to the signal) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalError {
    /// Field path relative to the signal, e.g. `patterns[1]`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl SignalError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The closed set of signal kinds, compiled.
#[derive(Debug, Clone)]
pub enum SignalKind {
    /// Literal keywords and regular expressions.
    Keyword(KeywordSignal),
    /// Estimated prompt length in tokens.
    ContextLength(TokenRange),
    /// Conversation shape.
    Conversation(ConversationSignal),
    /// Detected language.
    Language(LanguageSignal),
    /// Roles from a trusted identity header.
    Authz(AuthzSignal),
    /// Similarity to candidate phrases.
    Embedding(EmbeddingSignal),
    /// The closest of several labelled example sets (complexity, preference, fact-check need,
    /// user feedback, modality).
    Exemplar(ExemplarSignal),
    /// A trained head over the request embedding (`domain`).
    Classifier(ClassifierSignal),
    /// Jailbreak and prompt injection: a trained head over text windows plus pattern rules.
    Jailbreak(JailbreakSignal),
    /// Personal data by validated detectors.
    Pii(PiiSignal),
    /// A request-header predicate.
    Metadata(MetadataSignal),
    /// The share the tenant has left of its tightest budget.
    Budget(BudgetSignal),
    /// One output of a projection over earlier signals (`difficulty.hard`).
    Projection(ProjectionOutput),
}

/// One output of a projection: it holds when the projection's winner is this output.
#[derive(Debug, Clone)]
pub struct ProjectionOutput {
    /// The projection, shared by all its outputs.
    pub projection: Arc<Projection>,
    /// This output's position among the projection's outputs.
    pub output: usize,
}

impl SignalKind {
    /// The kind's name as written in config (`type:`) and reported by `explain`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Keyword(_) => "keyword",
            Self::ContextLength(_) => "context_length",
            Self::Conversation(_) => "conversation",
            Self::Language(_) => "language",
            Self::Authz(_) => "authz",
            Self::Embedding(_) => "embedding",
            Self::Exemplar(signal) => signal.task,
            Self::Classifier(signal) => signal.task,
            Self::Jailbreak(_) => "jailbreak",
            Self::Pii(_) => "pii",
            Self::Metadata(_) => "metadata",
            Self::Budget(_) => "budget",
            Self::Projection(_) => "projection",
        }
    }

    /// True when the signal reads the request embedding.
    pub fn needs_embedding(&self) -> bool {
        matches!(
            self,
            Self::Embedding(_) | Self::Exemplar(_) | Self::Classifier(_)
        )
    }

    /// True when the signal reads the embeddings of the request's text windows.
    pub fn needs_windows(&self) -> bool {
        matches!(self, Self::Jailbreak(signal) if signal.uses_head())
    }

    /// True when the signal reads the token classifier's entities.
    pub fn needs_entities(&self) -> bool {
        matches!(self, Self::Pii(signal) if signal.uses_ner())
    }

    /// The error policy of a neural signal (`None` for rule signals, which cannot fail).
    pub fn on_error(&self) -> Option<OnError> {
        match self {
            Self::Embedding(signal) => Some(signal.on_error),
            Self::Exemplar(signal) => Some(signal.on_error),
            Self::Classifier(signal) => Some(signal.on_error),
            Self::Jailbreak(signal) if signal.uses_head() => Some(signal.on_error),
            Self::Pii(signal) if signal.uses_ner() => Some(signal.on_error),
            Self::Keyword(_)
            | Self::ContextLength(_)
            | Self::Conversation(_)
            | Self::Language(_)
            | Self::Authz(_)
            | Self::Pii(_)
            | Self::Jailbreak(_)
            | Self::Metadata(_)
            | Self::Budget(_)
            | Self::Projection(_) => None,
        }
    }
}

/// A named, compiled signal.
#[derive(Debug, Clone)]
pub struct Signal {
    /// Name referenced by decisions (shared with each result).
    pub name: std::sync::Arc<str>,
    /// What it computes.
    pub kind: SignalKind,
}

/// What a signal found in one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalResult {
    /// The signal kind (`keyword`, `language`, …).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The signal name (shared with its signal: no copy a request).
    pub name: std::sync::Arc<str>,
    /// Whether the signal's condition holds.
    pub matched: bool,
    /// Confidence in `matched`, 0..=1.
    pub confidence: f64,
    /// A measured quantity (token count, turns, hits), where the signal has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// A label (detected language, matched term, role), where the signal has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Why a neural signal has no real answer (overload, model failure); `matched` then follows
    /// the signal's `onError`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of one evaluation before it is named.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Evidence {
    /// Whether the condition holds.
    pub matched: bool,
    /// Confidence in `matched`.
    pub confidence: f64,
    /// Measured quantity.
    pub value: Option<f64>,
    /// Label.
    pub label: Option<String>,
    /// Why a neural signal has no real answer.
    pub error: Option<String>,
}

impl Evidence {
    /// A certain yes or no with no value or label.
    pub fn certain(matched: bool) -> Self {
        Self {
            matched,
            confidence: 1.0,
            value: None,
            label: None,
            error: None,
        }
    }
}

impl Signal {
    /// Evaluates the signal on one request; `neural` carries the model outputs it may read and
    /// `earlier` the results of signals evaluated before it (what a projection reads).
    pub fn evaluate(
        &self,
        request: &ChatRequest,
        headers: &Headers,
        neural: &Neural,
        earlier: &dyn Fn(usize) -> Option<Input>,
    ) -> SignalResult {
        let evidence = match &self.kind {
            SignalKind::Keyword(signal) => {
                let indexed = signal
                    .slot
                    .zip(neural.keywords.as_ref())
                    .and_then(|(slot, hits)| hits.of(slot));
                match indexed {
                    Some(hits) => signal.evidence(hits),
                    None => signal.evaluate(request),
                }
            }
            SignalKind::ContextLength(range) => conversation::context_length(range, request),
            SignalKind::Conversation(signal) => signal.evaluate(request),
            SignalKind::Language(signal) => signal.evaluate(request),
            SignalKind::Authz(signal) => signal.evaluate(headers),
            SignalKind::Embedding(signal) => signal.evaluate(neural.embedding.as_ref()),
            SignalKind::Exemplar(signal) => signal.evaluate(neural.embedding.as_ref()),
            SignalKind::Classifier(signal) => signal.evaluate(neural.embedding.as_ref()),
            SignalKind::Jailbreak(signal) => signal.evaluate(request, neural.windows.as_ref()),
            SignalKind::Pii(signal) => signal.evaluate(request, neural.entities.as_ref()),
            SignalKind::Metadata(signal) => signal.evaluate(headers),
            SignalKind::Budget(signal) => signal.evaluate(neural.budget),
            SignalKind::Projection(ProjectionOutput { projection, output }) => {
                let outcome = projection.evaluate(earlier);
                Evidence {
                    matched: outcome.winner == Some(*output),
                    confidence: if outcome.winner == Some(*output) {
                        outcome.confidence
                    } else {
                        1.0 - outcome.confidence
                    },
                    value: Some(outcome.score),
                    label: outcome
                        .winner
                        .and_then(|w| projection.outputs().get(w).cloned()),
                    error: None,
                }
            }
        };
        let Evidence {
            matched,
            confidence,
            value,
            label,
            error,
        } = evidence;
        SignalResult {
            kind: self.kind.type_name(),
            name: self.name.clone(),
            matched,
            confidence,
            value,
            label,
            error,
        }
    }
}
