//! The models signals read, run once per request: the encoder for embeddings and jailbreak
//! windows, the token classifier for personal data. Each pass is a span of the request.

use crate::config::Snapshot;
use crate::inference::InferenceError;
use crate::llm::ChatRequest;
use crate::observability::spans;
use crate::signals::text::{scanned_text, windows};
use crate::signals::{Needs, Neural};
use std::sync::Arc;

/// Runs the models the signals in `needs` read, once each. The encoder gets one request for the
/// last user message (every embedding signal reads it; the encoder truncates it to `maxTokens`)
/// and the overlapping windows of user and tool text (jailbreak signals scan them), queued
/// together so they share a batch, each distinct text once: a one-message request needs one
/// forward for both. The token classifier gets every message once (scanned in overlapping
/// windows) for every PII signal. The policy's keyword signals are matched in one pass too.
pub async fn neural_inputs(
    snapshot: &Snapshot,
    needs: Needs,
    request: &ChatRequest,
    deadlines: bool,
) -> Neural {
    let window_texts = if needs.windows {
        windows(&scanned_text(request))
    } else {
        Vec::new()
    };
    let mut texts: Vec<String> = Vec::new();
    if needs.embedding {
        texts.push(request.last_user_text().trim().to_owned());
    }
    for window in &window_texts {
        if !texts.contains(window) {
            texts.push(window.clone());
        }
    }
    let encoded = async {
        if texts.is_empty() {
            return None;
        }
        Some(match &snapshot.encoder {
            Some(encoder) => {
                let deadline = snapshot.call_deadlines.encoder.filter(|_| deadlines);
                let span = spans::start_call();
                let vectors = encoder.embed_many(&texts, deadline).await;
                model_span(span, "encoder", texts.len(), vectors.as_ref().err());
                vectors
            }
            None => Err(InferenceError::Closed),
        })
    };
    let entities = async {
        if !needs.entities {
            return None;
        }
        let fenced_code = snapshot.ner_fenced_code;
        let text: Vec<_> = request
            .messages
            .iter()
            .map(|m| fenced_code.apply(&m.text))
            .collect();
        Some(match &snapshot.ner {
            Some(ner) => {
                let deadline = snapshot.call_deadlines.ner.filter(|_| deadlines);
                let span = spans::start_call();
                let entities = ner.call_within(&text.join("\n"), deadline).await;
                model_span(
                    span,
                    "token classifier",
                    text.len(),
                    entities.as_ref().err(),
                );
                entities
            }
            None => Err(InferenceError::Closed),
        })
    };
    // The models run on their own worker threads: ask them all at once.
    let (encoded, entities) = tokio::join!(encoded, entities);
    let vector_of = |text: &str| -> Result<Arc<Vec<f32>>, InferenceError> {
        match &encoded {
            Some(Ok(vectors)) => texts
                .iter()
                .position(|t| t == text)
                .and_then(|i| vectors.get(i).cloned())
                .ok_or(InferenceError::Closed),
            Some(Err(error)) => Err(error.clone()),
            None => Err(InferenceError::Closed),
        }
    };
    Neural {
        keywords: (needs.keywords && !snapshot.keywords.is_empty())
            .then(|| snapshot.keywords.hits(request)),
        embedding: needs
            .embedding
            .then(|| vector_of(request.last_user_text().trim())),
        entities,
        windows: needs.windows.then(|| {
            window_texts
                .iter()
                .map(|w| vector_of(w))
                .collect::<Result<Vec<_>, _>>()
        }),
        budget: None,
    }
}

/// Ends the span of one pass of an in-process model over `texts` texts.
fn model_span(
    span: Option<spans::CallSpan>,
    model: &str,
    texts: usize,
    error: Option<&InferenceError>,
) {
    let Some(span) = span else {
        return;
    };
    let mut attributes = vec![
        ("mom.model", spans::Value::Str(model.to_owned())),
        ("mom.texts", spans::Value::Int(texts as i64)),
    ];
    if let Some(error) = error {
        attributes.push(("error.type", spans::Value::Str(error.to_string())));
    }
    let name = format!("signals {model}");
    span.finish(
        name,
        spans::SpanKind::Internal,
        attributes,
        error.map(ToString::to_string),
    );
}
