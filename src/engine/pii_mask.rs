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
mod tests {
    use super::*;

    fn masked(text: &str) -> (Map<String, Value>, Masker) {
        let mut object = json!({"messages": [{"role": "user", "content": text}]})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let masker = Masker::mask(&mut object, |_| true);
        (object, masker)
    }

    #[test]
    fn the_same_value_gets_the_same_placeholder_and_comes_back() {
        let (object, masker) = masked(
            "Mail jane.doe@example.com, cc bob@example.org, then jane.doe@example.com again",
        );
        assert_eq!(
            object["messages"][0]["content"],
            "Mail [EMAIL_1], cc [EMAIL_2], then [EMAIL_1] again"
        );
        assert_eq!(masker.label(), "[EMAIL_1] [EMAIL_2]");
        assert_eq!(
            masker.restore("Sent to [EMAIL_2] and [EMAIL_1]."),
            "Sent to bob@example.org and jane.doe@example.com."
        );
    }

    #[test]
    fn tool_call_arguments_are_masked_and_restored_in_json_and_events() {
        let mut object = json!({"messages": [
            {"role": "user", "content": "Mail the report"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "send", "arguments": "{\"to\":\"jane.doe@example.com\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sent to jane.doe@example.com"}]})
        .as_object()
        .cloned()
        .unwrap_or_default();
        let masker = Arc::new(Masker::mask(&mut object, |_| true));
        let arguments = &object["messages"][1]["tool_calls"][0]["function"]["arguments"];
        assert_eq!(arguments, "{\"to\":\"[EMAIL_1]\"}");
        assert_eq!(object["messages"][2]["content"], "sent to [EMAIL_1]");

        let reply = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c2", "type": "function",
                "function": {"name": "send", "arguments": "{\"cc\":\"[EMAIL_1]\"}"}}]}}]});
        let restored: Value =
            serde_json::from_slice(&masker.restore_body(reply.to_string().as_bytes()))
                .unwrap_or_default();
        let arguments =
            &restored["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
        assert_eq!(arguments, "{\"cc\":\"jane.doe@example.com\"}");

        // Streamed: the placeholder split across two argument deltas.
        let delta = |arguments: &str| {
            let call = json!({"index": 0, "function": {"arguments": arguments}});
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
            )
        };
        let finish = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
        let body = [
            delta("{\"cc\":\"[EMA"),
            delta("IL_1]\"}"),
            format!("data: {finish}\n\ndata: [DONE]\n\n"),
        ]
        .concat();
        let out = masker.restore_body(body.as_bytes());
        let joined = crate::llm::sse::assemble(&out).unwrap_or_default();
        let arguments = &joined["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
        assert_eq!(arguments, "{\"cc\":\"jane.doe@example.com\"}");
    }

    #[test]
    fn a_placeholder_split_across_pieces_is_held_then_restored() {
        let (_, masker) = masked("write to jane.doe@example.com");
        let mut stream = StreamRestorer::new(Arc::new(masker));
        let pieces = [
            "Writing to [EM",
            "AIL",
            "_1] now [",
            "sic] and [EMAIL_",
            "1]",
        ];
        let out: Vec<String> = pieces.iter().map(|p| stream.push(p)).collect();
        assert_eq!(
            out,
            [
                "Writing to ",
                "",
                "jane.doe@example.com now ",
                "[sic] and ",
                "jane.doe@example.com"
            ]
        );
        assert_eq!(stream.push("[EMA"), "");
        assert_eq!(stream.flush(), "[EMA");
    }

    #[test]
    fn server_sent_events_are_rewritten_across_chunk_and_line_boundaries() {
        let (_, masker) = masked("call +44 20 7946 0958");
        let masker = Arc::new(masker);
        let event = |text: &str| {
            format!(
                "data: {}\n\n",
                json!({"id": "x", "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
            )
        };
        let body = [
            event("Calling [PHO"),
            event("NE_1] now [PH"),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        // Cut the body mid-line too.
        let (a, b) = body.as_bytes().split_at(body.len() / 2);
        let mut sse = SseRestorer::new(Arc::clone(&masker));
        let mut out = sse.push(a);
        out.extend(sse.push(b));
        out.extend(sse.finish());
        let text = crate::llm::usage::streamed_text(&out);
        assert_eq!(text, "Calling +44 20 7946 0958 now [PH");
        let out = String::from_utf8(out).unwrap_or_default();
        assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
        assert_eq!(masker.restore_body(body.as_bytes()), out.as_bytes());
    }

    #[test]
    fn many_distinct_values_number_restore_and_label_correctly() {
        let emails: Vec<String> = (0..20_000)
            .map(|i| format!("user{i}@example.com"))
            .collect();
        let (object, masker) = masked(&emails.join(" "));
        let masked = object["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(
            masked.starts_with("[EMAIL_1] [EMAIL_2] "),
            "{}",
            &masked[..40]
        );
        assert!(masked.ends_with("[EMAIL_20000]"));
        assert_eq!(masker.restore(masked), emails.join(" "));
        assert_eq!(
            masker.label(),
            "[EMAIL_1] [EMAIL_2] [EMAIL_3] [EMAIL_4] [EMAIL_5] [EMAIL_6] [EMAIL_7] [EMAIL_8] \
             (+19992 more)"
        );
        // Brackets that are not placeholders, and one that opens inside another, stay.
        assert_eq!(
            masker.restore("[[EMAIL_2]] [EMAIL_0] [EMAIL_20001] [EMAIL_"),
            "[user1@example.com] [EMAIL_0] [EMAIL_20001] [EMAIL_"
        );
        let mut stream = StreamRestorer::new(Arc::new(masker));
        assert_eq!(stream.push("to [EMAIL_19"), "to ");
        assert_eq!(
            stream.push("999] and [EMAIL_3"),
            "user19998@example.com and "
        );
        assert_eq!(stream.push("0001"), "[EMAIL_30001");
    }

    #[test]
    fn hostile_event_streams_stay_bounded() {
        let (_, masker) = masked("mail jane.doe@example.com");
        let masker = Arc::new(masker);
        let chunk = |index: u64, text: &str| {
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": index, "delta": {"content": text}, "finish_reason": null}]})
            )
        };
        // A giant choice index is followed like any other, without allocating up to it.
        let mut sse = SseRestorer::new(Arc::clone(&masker));
        let mut out = sse.push(chunk(u64::MAX, "to [EMAIL").as_bytes());
        out.extend(sse.push(chunk(u64::MAX, "_1]").as_bytes()));
        out.extend(sse.finish());
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(text.contains("jane.doe@example.com"), "{text}");
        // Past the followed choices, text is still restored piece by piece.
        let mut sse = SseRestorer::new(Arc::clone(&masker));
        let mut out = Vec::new();
        for index in 0..(MAX_FOLLOWED as u64 + 5) {
            out.extend(sse.push(chunk(index, "[EMAIL_1]").as_bytes()));
        }
        let text = String::from_utf8(out).unwrap_or_default();
        assert_eq!(
            text.matches("jane.doe@example.com").count(),
            MAX_FOLLOWED + 5
        );
        // No newline: held up to the bound, then passed on as it is.
        let mut sse = SseRestorer::new(masker);
        let piece = vec![b'x'; 64 * 1024];
        let mut passed = 0;
        for _ in 0..(MAX_SSE_LINE / piece.len() + 2) {
            passed += sse.push(&piece).len();
            assert!(sse.partial.len() <= MAX_SSE_LINE);
        }
        passed += sse.finish().len();
        assert_eq!(passed, piece.len() * (MAX_SSE_LINE / piece.len() + 2));
    }

    #[test]
    fn replies_and_chunks_of_any_json_shape_pass_without_a_panic() {
        // Found by the `sse` fuzz target: a reply body `0` made restoring index into a number.
        let (_, masker) = masked("mail jane.doe@example.com");
        let masker = Arc::new(masker);
        for body in [
            &b"0"[..],
            b"[]",
            b"\"text\"",
            b"{\"choices\": 5}",
            b"{\"choices\": [1, {\"message\": 2}, {\"message\": {\"content\": 3, \"tool_calls\": [7, {\"function\": 1}]}}]}",
            b"data: 5\n\ndata: [1]\n\ndata: {\"choices\": [null, {\"delta\": 3}, {\"delta\": {\"content\": \"[EMAIL_1]\", \"tool_calls\": [1, {\"function\": []}]}}]}\n\ndata: [DONE]\n\n",
        ] {
            let restored = masker.restore_body(body);
            assert!(!restored.is_empty() || body.is_empty());
        }
        let mut object = json!({"messages": [1, "x", {"content": 5}, {"content": "a@b.co", "tool_calls": [3, {"function": null}]}]});
        let masker = Masker::mask(
            object.as_object_mut().unwrap_or_else(|| unreachable!()),
            |_| true,
        );
        assert_eq!(masker.label(), "[EMAIL_1]");
    }
}
