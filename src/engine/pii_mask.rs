//! PII masking: every validated personal-data value in the request's messages is replaced by a
//! deterministic placeholder (`[EMAIL_1]`, the same value always the same placeholder) before
//! any model sees it, and the placeholders are restored in the answer — a JSON reply, or a
//! stream of server-sent events where a placeholder may be split across chunks.

use crate::signals::pii_patterns::{replace_spans, PiiKind};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The placeholders of one request and the values they stand for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masker {
    /// `(placeholder, value)` in order of first appearance.
    pairs: Vec<(String, String)>,
}

impl Masker {
    /// Masks, in place, every message text of `object` (string contents and text parts) for the
    /// kinds `masks` accepts.
    pub fn mask(object: &mut Map<String, Value>, masks: impl Fn(PiiKind) -> bool) -> Self {
        let mut masker = Self::default();
        let Some(Value::Array(messages)) = object.get_mut("messages") else {
            return masker;
        };
        for message in messages {
            match &mut message["content"] {
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
            for call in message["tool_calls"].as_array_mut().into_iter().flatten() {
                if let Some(Value::String(arguments)) = call["function"].get_mut("arguments") {
                    *arguments = masker.mask_text(arguments, &masks);
                }
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
        if let Some((placeholder, _)) = self.pairs.iter().find(|(_, v)| v == value) {
            return placeholder.clone();
        }
        let prefix = format!("[{}_", kind.name());
        let number = self
            .pairs
            .iter()
            .filter(|(p, _)| p.starts_with(&prefix))
            .count()
            + 1;
        let placeholder = format!("{prefix}{number}]");
        self.pairs.push((placeholder.clone(), value.to_owned()));
        placeholder
    }

    /// True when nothing was masked.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The placeholders, space-separated (`[EMAIL_1] [PHONE_1]`), for the trace.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.pairs.iter().map(|(p, _)| p.as_str()).collect();
        names.join(" ")
    }

    /// `text` with every placeholder replaced by its value.
    pub fn restore(&self, text: &str) -> String {
        let mut out = text.to_owned();
        // Longest first, so `[EMAIL_1]` never eats into `[EMAIL_12]`.
        let mut pairs: Vec<&(String, String)> = self.pairs.iter().collect();
        pairs.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (placeholder, value) in pairs {
            if out.contains(placeholder.as_str()) {
                out = out.replace(placeholder.as_str(), value);
            }
        }
        out
    }

    /// Restores every choice's message content and tool-call arguments of a chat completion.
    pub fn restore_reply(&self, body: &mut Value) {
        for choice in body["choices"].as_array_mut().into_iter().flatten() {
            let message = &mut choice["message"];
            if let Some(text) = message["content"].as_str() {
                message["content"] = json!(self.restore(text));
            }
            for call in message["tool_calls"].as_array_mut().into_iter().flatten() {
                if let Some(arguments) = call["function"]["arguments"].as_str() {
                    call["function"]["arguments"] = json!(self.restore(arguments));
                }
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

    /// True when `tail` could still grow into a placeholder.
    fn could_start(&self, tail: &str) -> bool {
        self.pairs
            .iter()
            .any(|(p, _)| p.len() > tail.len() && p.starts_with(tail))
    }
}

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
    partial: Vec<u8>,
    choices: Vec<StreamRestorer>,
    /// Tool-call arguments by (choice index, call index).
    calls: Vec<((usize, u64), StreamRestorer)>,
    template: Option<Value>,
}

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
        self.partial.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.partial.len());
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.line(&line, &mut out);
        }
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
        for (i, choice) in chunk["choices"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = choice["index"].as_u64().map_or(i, |n| n as usize);
            if let Some(text) = choice["delta"]["content"].as_str() {
                while self.choices.len() <= index {
                    self.choices
                        .push(StreamRestorer::new(Arc::clone(&self.masker)));
                }
                choice["delta"]["content"] = json!(self.choices[index].push(text));
            }
            let calls = choice["delta"]["tool_calls"].as_array_mut();
            for (j, call) in calls.into_iter().flatten().enumerate() {
                let Some(arguments) = call["function"]["arguments"].as_str() else {
                    continue;
                };
                let key = (index, call["index"].as_u64().unwrap_or(j as u64));
                let position = match self.calls.iter().position(|(k, _)| *k == key) {
                    Some(p) => p,
                    None => {
                        let restorer = StreamRestorer::new(Arc::clone(&self.masker));
                        self.calls.push((key, restorer));
                        self.calls.len() - 1
                    }
                };
                let restored = self.calls[position].1.push(arguments);
                call["function"]["arguments"] = json!(restored);
            }
        }
        self.template = Some(chunk.clone());
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(chunk.to_string().as_bytes());
        out.push(b'\n');
    }

    /// One more chunk carrying text still held back, if any (then nothing is held).
    fn held_event(&mut self) -> Vec<u8> {
        let mut deltas = Vec::new();
        for (index, restorer) in self.choices.iter_mut().enumerate() {
            let text = restorer.flush();
            if !text.is_empty() {
                deltas.push((index, json!({"content": text})));
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
}
