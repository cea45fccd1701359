//! PII masking: every validated personal-data value in the request's messages is replaced by a
//! deterministic placeholder (`[EMAIL_1]`, the same value always the same placeholder) before
//! any model sees it, and the placeholders are restored in the answer — a JSON reply, or a
//! stream of server-sent events where a placeholder may be split across chunks.

use crate::llm::lines::split_lines;
use crate::signals::pii_patterns::{replace_spans, PiiKind};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The placeholders of one request and the values they stand for. Work is linear in the text:
/// numbering and restoring look placeholders up by hash, never by scanning the list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masker {
    /// `(placeholder, value)` in order of first appearance.
    pairs: Vec<(String, String)>,
    /// Index into `pairs` by value and by placeholder.
    by_value: HashMap<String, usize>,
    by_placeholder: HashMap<String, usize>,
    /// Placeholders numbered so far per kind.
    counts: HashMap<PiiKind, usize>,
}

/// At most this many placeholders are named in [`Masker::label`] (a response header).
pub const LABEL_PLACEHOLDERS: usize = 8;

impl Masker {
    /// Masks, in place, every message text of `object` (string contents and text parts) for the
    /// kinds `masks` accepts.
    pub fn mask(object: &mut Map<String, Value>, masks: impl Fn(PiiKind) -> bool) -> Self {
        let mut masker = Self::default();
        let Some(Value::Array(messages)) = object.get_mut("messages") else {
            return masker;
        };
        for message in messages.iter_mut().filter_map(Value::as_object_mut) {
            match message.get_mut("content").unwrap_or(&mut Value::Null) {
                Value::String(text) => *text = masker.mask_text(text, &masks),
                Value::Array(parts) => {
                    for part in parts {
                        if let Some(Value::String(text)) = part.get_mut("text") {
                            *text = masker.mask_text(text, &masks);
                        }
                    }
                }
                _ => {}
            }
            // Arguments the model passed to tools earlier in the conversation (JSON text; a
            // placeholder keeps it valid JSON).
            for arguments in tool_arguments(message) {
                *arguments = masker.mask_text(arguments, &masks);
            }
        }
        masker
    }

    fn mask_text(&mut self, text: &str, masks: &impl Fn(PiiKind) -> bool) -> String {
        replace_spans(text, |kind, value| {
            masks(kind).then(|| self.placeholder(kind, value))
        })
    }

    fn placeholder(&mut self, kind: PiiKind, value: &str) -> String {
        if let Some(&i) = self.by_value.get(value) {
            return self.pairs[i].0.clone();
        }
        let number = self.counts.entry(kind).or_default();
        *number += 1;
        let placeholder = format!("[{}_{number}]", kind.name());
        let i = self.pairs.len();
        self.by_value.insert(value.to_owned(), i);
        self.by_placeholder.insert(placeholder.clone(), i);
        self.pairs.push((placeholder.clone(), value.to_owned()));
        placeholder
    }

    /// True when nothing was masked.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The placeholders, space-separated (`[EMAIL_1] [PHONE_1]`), for the trace: the first
    /// [`LABEL_PLACEHOLDERS`], then how many more.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self
            .pairs
            .iter()
            .take(LABEL_PLACEHOLDERS)
            .map(|(p, _)| p.as_str())
            .collect();
        let mut label = names.join(" ");
        if self.pairs.len() > LABEL_PLACEHOLDERS {
            label.push_str(&format!(
                " (+{} more)",
                self.pairs.len() - LABEL_PLACEHOLDERS
            ));
        }
        label
    }

    /// `text` with every placeholder replaced by its value, in one pass.
    pub fn restore(&self, text: &str) -> String {
        if self.pairs.is_empty() {
            return text.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(open) = rest.find('[') {
            out.push_str(&rest[..open]);
            let candidate = &rest[open..];
            let close = candidate
                .bytes()
                .take(MAX_PLACEHOLDER_LEN)
                .position(|b| b == b']');
            match close.and_then(|c| self.by_placeholder.get(&candidate[..=c]).map(|i| (c, i))) {
                Some((c, &i)) => {
                    out.push_str(&self.pairs[i].1);
                    rest = &candidate[c + 1..];
                }
                None => {
                    out.push('[');
                    rest = &candidate[1..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Restores every choice's message content and tool-call arguments of a chat completion.
    pub fn restore_reply(&self, body: &mut Value) {
        for choice in choices(body) {
            let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(Value::String(text)) = message.get_mut("content") {
                *text = self.restore(text);
            }
            for arguments in tool_arguments(message) {
                *arguments = self.restore(arguments);
            }
        }
    }

    /// Restores the placeholders in a whole reply body, JSON or server-sent events.
    pub fn restore_body(self: &Arc<Self>, body: &[u8]) -> Vec<u8> {
        if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
            self.restore_reply(&mut value);
            return value.to_string().into_bytes();
        }
        let mut events = SseRestorer::new(Arc::clone(self));
        let mut out = events.push(body);
        out.extend(events.finish());
        out
    }

    /// True when `tail` (text from a `[`) is a proper start of one of the placeholders: a kind
    /// name then `_` and the start of a number no larger than that kind's count. Constant work
    /// per call, whatever the number of placeholders.
    fn could_start(&self, tail: &str) -> bool {
        let Some(inner) = tail.strip_prefix('[') else {
            return false;
        };
        if inner.len() >= MAX_PLACEHOLDER_LEN {
            return false;
        }
        self.counts.iter().any(|(kind, &count)| {
            let stem = format!("{}_", kind.name());
            if stem.starts_with(inner) {
                return true;
            }
            let Some(digits) = inner.strip_prefix(stem.as_str()) else {
                return false;
            };
            digits.is_empty()
                || (!digits.starts_with('0')
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && digits.parse::<usize>().is_ok_and(|n| n <= count))
        })
    }
}

/// Longer than any placeholder (`[IP_ADDRESS_` and a 64-bit number, then `]`).
const MAX_PLACEHOLDER_LEN: usize = 40;

/// Restores placeholders in text that arrives in pieces, holding back a piece's end while it
/// could still be the start of a placeholder.
#[derive(Debug)]
pub struct StreamRestorer {
    masker: Arc<Masker>,
    held: String,
}

impl StreamRestorer {
    /// A restorer for `masker`'s placeholders.
    pub fn new(masker: Arc<Masker>) -> Self {
        Self {
            masker,
            held: String::new(),
        }
    }

    /// The restored text that can be released after `piece`.
    pub fn push(&mut self, piece: &str) -> String {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(piece);
        if let Some(open) = text.rfind('[') {
            if self.masker.could_start(&text[open..]) {
                self.held = text.split_off(open);
            }
        }
        self.masker.restore(&text)
    }

    /// Whatever is still held (a `[` that never became a placeholder).
    pub fn flush(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.masker.restore(&held)
    }
}

/// Restores placeholders in a server-sent-events body as it passes, chunk by chunk: each
/// complete `data:` line's `choices[].delta.content` goes through a [`StreamRestorer`] per
/// choice, and each tool call's `function.arguments` deltas through one per call; text held at
/// the end is sent in one more chunk before `data: [DONE]`.
#[derive(Debug)]
pub struct SseRestorer {
    masker: Arc<Masker>,
    /// The start of a line whose end has not arrived (never holds a `\n`).
    partial: Vec<u8>,
    /// Content by choice index.
    choices: Vec<(usize, StreamRestorer)>,
    /// Tool-call arguments by (choice index, call index).
    calls: Vec<((usize, u64), StreamRestorer)>,
    template: Option<Value>,
}

/// A line of events longer than this passes on as it is, unrestored, rather than being held
/// without bound while no newline arrives.
pub const MAX_SSE_LINE: usize = 1024 * 1024;

/// Distinct choices and tool calls followed across chunks; text of any further one is restored
/// chunk by chunk (a placeholder split across its chunks stays as it is).
const MAX_FOLLOWED: usize = crate::llm::sse::MAX_TOOL_CALLS;

impl SseRestorer {
    /// A restorer for `masker`'s placeholders.
    pub fn new(masker: Arc<Masker>) -> Self {
        Self {
            masker,
            partial: Vec::new(),
            choices: Vec::new(),
            calls: Vec::new(),
            template: None,
        }
    }

    /// The bytes to pass on for `chunk`: its complete lines, rewritten.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.partial.len() + chunk.len());
        let mut partial = std::mem::take(&mut self.partial);
        let long = split_lines(&mut partial, chunk, MAX_SSE_LINE, |line| {
            self.line(line, &mut out)
        });
        self.partial = partial;
        out.extend(long.unwrap_or_default());
        out
    }

    /// The bytes left at the end of the body.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.partial);
        let mut out = Vec::new();
        if !rest.is_empty() {
            self.line(&rest, &mut out);
        }
        out.extend(self.held_event());
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let Some(data) = line.strip_prefix(b"data:") else {
            out.extend_from_slice(line);
            return;
        };
        let payload = data.trim_ascii();
        if payload == b"[DONE]" {
            out.extend(self.held_event());
            out.extend_from_slice(line);
            return;
        }
        // A placeholder, or the start of one, is `[` then an upper-case letter or the end of the
        // text (`"` in JSON); JSON's own arrays open with `[{`, `[]` or `[0`. An event without
        // one, while nothing is held, passes as it is, unparsed.
        let holding = self
            .choices
            .iter()
            .map(|(_, c)| c)
            .chain(self.calls.iter().map(|(_, c)| c))
            .any(|c| !c.held.is_empty());
        let maybe = payload
            .windows(2)
            .any(|w| w[0] == b'[' && (w[1].is_ascii_uppercase() || w[1] == b'"'));
        if !holding && !maybe && self.template.is_some() {
            out.extend_from_slice(line);
            return;
        }
        let Ok(mut chunk) = serde_json::from_slice::<Value>(payload) else {
            out.extend_from_slice(line);
            return;
        };
        for (i, choice) in choices(&mut chunk).enumerate() {
            let index = choice
                .get("index")
                .and_then(Value::as_u64)
                .map_or(i, |n| usize::try_from(n).unwrap_or(usize::MAX));
            let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(Value::String(text)) = delta.get_mut("content") {
                *text = follow(&mut self.choices, index, &self.masker, text);
            }
            let calls = delta.get_mut("tool_calls").and_then(Value::as_array_mut);
            for (j, call) in calls.into_iter().flatten().enumerate() {
                let key = (
                    index,
                    call.get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(j as u64),
                );
                let arguments = call
                    .get_mut("function")
                    .and_then(|f| f.get_mut("arguments"));
                if let Some(Value::String(arguments)) = arguments {
                    *arguments = follow(&mut self.calls, key, &self.masker, arguments);
                }
            }
        }
        // Only a chunk object can be the shape of the chunk that carries held text.
        if chunk.is_object() {
            self.template = Some(chunk.clone());
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(chunk.to_string().as_bytes());
        out.push(b'\n');
    }

    /// One more chunk carrying text still held back, if any (then nothing is held).
    fn held_event(&mut self) -> Vec<u8> {
        let mut deltas = Vec::new();
        for (index, restorer) in &mut self.choices {
            let text = restorer.flush();
            if !text.is_empty() {
                deltas.push((*index, json!({"content": text})));
            }
        }
        for ((index, call), restorer) in &mut self.calls {
            let text = restorer.flush();
            if !text.is_empty() {
                let call = json!({"index": call, "function": {"arguments": text}});
                deltas.push((*index, json!({ "tool_calls": [call] })));
            }
        }
        let mut out = Vec::new();
        for (index, delta) in deltas {
            let mut chunk = self
                .template
                .clone()
                .unwrap_or_else(|| json!({"object": "chat.completion.chunk", "choices": []}));
            chunk["choices"] = json!([{"index": index, "delta": delta, "finish_reason": null}]);
            chunk.as_object_mut().map(|o| o.remove("usage"));
            out.extend_from_slice(format!("data: {chunk}\n\n").as_bytes());
        }
        out
    }
}

/// The choice objects of a chat completion or chunk of any shape (none when it is not one).
fn choices(body: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    body.get_mut("choices")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The `function.arguments` texts of a message's tool calls, whatever else it holds.
fn tool_arguments(message: &mut Map<String, Value>) -> impl Iterator<Item = &mut String> {
    message
        .get_mut("tool_calls")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(
            |call| match call.get_mut("function")?.get_mut("arguments")? {
                Value::String(arguments) => Some(arguments),
                _ => None,
            },
        )
}

/// `text` restored through the restorer followed for `key`, started on first sight while fewer
/// than [`MAX_FOLLOWED`] are followed; past that, restored on its own.
fn follow<K: PartialEq>(
    followed: &mut Vec<(K, StreamRestorer)>,
    key: K,
    masker: &Arc<Masker>,
    text: &str,
) -> String {
    if let Some((_, restorer)) = followed.iter_mut().find(|(k, _)| *k == key) {
        return restorer.push(text);
    }
    if followed.len() >= MAX_FOLLOWED {
        return masker.restore(text);
    }
    let mut restorer = StreamRestorer::new(Arc::clone(masker));
    let restored = restorer.push(text);
    followed.push((key, restorer));
    restored
}

#[cfg(test)]
mod tests;
