//! Evaluation traces: what every fixed model did on every item of a suite — passed or not,
//! tokens, latency, why it stopped — as JSON Lines, one row per item and model. `mom-router
//! eval --traces` writes them; `mom-router train-router` learns allocation from them. A trace
//! set is usable only when complete: every item answered by the same models, each once, with
//! finite measurements, so [`parse`] refuses anything else and names the line.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Most rows a trace file may hold.
const MAX_ROWS: usize = 1_000_000;

/// One item answered by one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TraceRow {
    /// The item's id (unique within the suite).
    pub item: String,
    /// How the item is graded (`humaneval`, `exact`, `choice`).
    pub kind: String,
    /// The logical model that answered.
    pub model: String,
    /// The user message sent: what the router embeds at serving time.
    pub prompt: String,
    /// Whether the answer passed the item's contract.
    pub passed: bool,
    /// HTTP status of the answer (0 when none came).
    pub status: u16,
    /// Prompt tokens the model reported.
    pub prompt_tokens: u64,
    /// Completion tokens the model reported.
    pub completion_tokens: u64,
    /// Client-side time to the complete answer, in milliseconds.
    pub latency_ms: f64,
    /// Client-side time to the first streamed chunk, in milliseconds (`eval --stream`); 0 when
    /// the answer was not streamed.
    #[serde(default)]
    pub ttft_ms: f64,
    /// Why the model stopped (`stop`, `length`, …; empty when unknown).
    pub finish_reason: String,
    /// The answer's text (its first 4 Ki characters), so a trace can be audited or regraded.
    #[serde(default)]
    pub answer: String,
    /// The `max_tokens` the request asked for (absent in traces written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The answer's mean token log-probability (`eval --logprobs`; absent when the model
    /// returned none): what a confidence cascade reads to accept the answer or escalate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}

/// A complete trace set: every item with one row per model, in model order.
#[derive(Debug, Clone, PartialEq)]
pub struct Traces {
    /// The models, sorted by name.
    pub models: Vec<String>,
    /// The items, sorted by id.
    pub items: Vec<TracedItem>,
}

/// One item and how each model did on it.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedItem {
    /// The item's id.
    pub id: String,
    /// Its grading kind.
    pub kind: String,
    /// The user message.
    pub prompt: String,
    /// One row per model, in [`Traces::models`] order.
    pub rows: Vec<TraceRow>,
}

/// Whether `key` (an item id, an example's text) falls in the held-out `percent`: a stable
/// FNV-1a hash, the same on every platform and release, so a split never moves.
pub fn is_held_out(key: &str, percent: u32) -> bool {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % 100) < u64::from(percent)
}

/// Parses and checks a trace file; errors name the line (or the item) and what is wrong.
pub fn parse(text: &str) -> Result<Traces, String> {
    let mut by_item: BTreeMap<String, HashMap<String, TraceRow>> = BTreeMap::new();
    let mut rows = 0usize;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = number + 1;
        rows += 1;
        if rows > MAX_ROWS {
            return Err(format!("more than {MAX_ROWS} rows"));
        }
        // serde_json reads NaN as no number at all: say what it is.
        let row: TraceRow = serde_json::from_str(line).map_err(|e| format!("line {at}: {e}"))?;
        if !row.latency_ms.is_finite() || row.latency_ms < 0.0 {
            return Err(format!(
                "line {at} ({} on {}): latencyMs must be a finite number of milliseconds ≥ 0, got {}",
                row.item, row.model, row.latency_ms
            ));
        }
        if !row.ttft_ms.is_finite() || row.ttft_ms < 0.0 || row.ttft_ms > row.latency_ms {
            return Err(format!(
                "line {at} ({} on {}): ttftMs must be a finite number of milliseconds between 0 and latencyMs, got {}",
                row.item, row.model, row.ttft_ms
            ));
        }
        if let Some(c) = row.confidence.filter(|c| !c.is_finite() || *c > 0.0) {
            return Err(format!(
                "line {at} ({} on {}): confidence is a mean log-probability, finite and ≤ 0, got {c}",
                row.item, row.model
            ));
        }
        if row.item.is_empty() || row.model.is_empty() {
            return Err(format!("line {at}: item and model must not be empty"));
        }
        let models = by_item.entry(row.item.clone()).or_default();
        if let Some(first) = models.values().next() {
            if first.prompt != row.prompt
                || first.kind != row.kind
                || first.max_tokens != row.max_tokens
            {
                return Err(format!(
                    "line {at} ({}): the item's prompt, kind or maxTokens differs from its earlier rows",
                    row.item
                ));
            }
        }
        if models.contains_key(&row.model) {
            return Err(format!(
                "line {at}: item {:?} has a second row for model {:?}",
                row.item, row.model
            ));
        }
        models.insert(row.model.clone(), row);
    }
    let mut models: Vec<String> = by_item
        .values()
        .flat_map(|m| m.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    models.sort();
    if models.len() < 2 {
        return Err(format!(
            "traces name {} model(s); allocation needs at least two",
            models.len()
        ));
    }
    let mut items = Vec::with_capacity(by_item.len());
    for (id, mut rows) in by_item {
        let mut ordered = Vec::with_capacity(models.len());
        for model in &models {
            let Some(row) = rows.remove(model) else {
                return Err(format!(
                    "item {id:?} has no row for model {model:?} (every item needs every model: {})",
                    models.join(", ")
                ));
            };
            ordered.push(row);
        }
        let (kind, prompt) = (ordered[0].kind.clone(), ordered[0].prompt.clone());
        items.push(TracedItem {
            id,
            kind,
            prompt,
            rows: ordered,
        });
    }
    Ok(Traces { models, items })
}

/// Rows as JSON Lines, in the order given.
pub fn to_jsonl(rows: &[TraceRow]) -> String {
    let mut out = String::new();
    for row in rows {
        if let Ok(line) = serde_json::to_string(row) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(item: &str, model: &str, latency: f64) -> TraceRow {
        TraceRow {
            item: item.to_owned(),
            kind: "exact".to_owned(),
            model: model.to_owned(),
            prompt: format!("question {item}"),
            passed: model == "a",
            status: 200,
            prompt_tokens: 10,
            completion_tokens: 3,
            latency_ms: latency,
            ttft_ms: 0.0,
            finish_reason: "stop".to_owned(),
            answer: "an answer".to_owned(),
            max_tokens: Some(24),
            confidence: None,
        }
    }

    #[test]
    fn complete_traces_group_by_item_in_model_order() {
        let text = to_jsonl(&[row("2", "b", 5.0), row("1", "a", 1.0), row("1", "b", 2.0)])
            + &to_jsonl(&[row("2", "a", 3.0)]);
        let traces = parse(&text).unwrap();
        assert_eq!(traces.models, ["a", "b"]);
        assert_eq!(traces.items.len(), 2);
        assert_eq!(traces.items[1].id, "2");
        assert_eq!(traces.items[1].rows[1].latency_ms, 5.0);
        assert!(traces.items[0].rows[0].passed && !traces.items[0].rows[1].passed);
    }

    #[test]
    fn bad_traces_are_named() {
        let missing = to_jsonl(&[row("1", "a", 1.0), row("1", "b", 1.0), row("2", "a", 1.0)]);
        let error = parse(&missing).unwrap_err();
        assert!(
            error.contains("item \"2\" has no row for model \"b\""),
            "{error}"
        );
        let twice = to_jsonl(&[row("1", "a", 1.0), row("1", "a", 2.0)]);
        let error = parse(&twice).unwrap_err();
        assert!(
            error.contains("line 2: item \"1\" has a second row for model \"a\""),
            "{error}"
        );
        let nan = to_jsonl(&[row("1", "a", 1.0)])
            + &to_jsonl(&[row("1", "b", 1.0)]).replace("1.0", "NaN");
        let error = parse(&nan).unwrap_err();
        assert!(error.starts_with("line 2:"), "{error}");
        let negative = to_jsonl(&[row("1", "a", 1.0), row("1", "b", -4.0)]);
        let error = parse(&negative).unwrap_err();
        assert!(error.contains("latencyMs must be a finite"), "{error}");
        let mut late = row("1", "b", 10.0);
        late.ttft_ms = 11.0;
        let error = parse(&to_jsonl(&[row("1", "a", 1.0), late])).unwrap_err();
        assert!(
            error.contains(
                "ttftMs must be a finite number of milliseconds between 0 and latencyMs, got 11"
            ),
            "{error}"
        );
        let one_model = to_jsonl(&[row("1", "a", 1.0)]);
        assert!(parse(&one_model).unwrap_err().contains("at least two"));
        let mut changed = row("1", "b", 1.0);
        changed.prompt = "another".to_owned();
        let error = parse(&to_jsonl(&[row("1", "a", 1.0), changed])).unwrap_err();
        assert!(
            error.contains("prompt, kind or maxTokens differs"),
            "{error}"
        );
        let mut budget = row("1", "b", 1.0);
        budget.max_tokens = Some(256);
        let error = parse(&to_jsonl(&[row("1", "a", 1.0), budget])).unwrap_err();
        assert!(error.contains("maxTokens differs"), "{error}");
        let mut sure = row("1", "b", 1.0);
        sure.confidence = Some(0.5);
        let error = parse(&to_jsonl(&[row("1", "a", 1.0), sure])).unwrap_err();
        assert!(
            error.contains("confidence is a mean log-probability"),
            "{error}"
        );
    }
}
