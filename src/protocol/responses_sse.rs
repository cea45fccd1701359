//! A Chat Completions event stream translated into Responses' typed events as it arrives:
//! `response.created` on the first chunk; per text run `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta` … `.done`,
//! `response.content_part.done`, `response.output_item.done`; per tool call the item and its
//! `response.function_call_arguments.delta` … `.done`; at the end `response.completed` (or
//! `response.incomplete` at the token limit) with the whole response and its usage. Every event
//! carries its `sequence_number`. Chunks may split lines anywhere; only the first choice is read.

use super::responses::{call_item, message_item, response};
use serde_json::{json, Value};

/// Longest event line held while waiting for its newline; a longer one ends the stream with
/// an error event.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// The output item being streamed.
#[derive(Debug)]
enum Open {
    Text {
        text: String,
    },
    Call {
        index: u64,
        call_id: Value,
        name: Value,
        arguments: String,
    },
}

/// Translates one stream; feed it every chunk, then [`SseTranslator::finish`].
#[derive(Debug, Default)]
pub struct SseTranslator {
    line: Vec<u8>,
    started: bool,
    finished: bool,
    sequence: u64,
    id: String,
    model: Value,
    done: Vec<Value>,
    open: Option<Open>,
    finish_reason: Option<String>,
    usage: (u64, u64),
}

impl SseTranslator {
    /// A translator for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn event(&mut self, kind: &str, mut data: Value) -> Vec<u8> {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        format!("event: {kind}\ndata: {data}\n\n").into_bytes()
    }

    /// The Responses events for `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        for &byte in chunk {
            if byte != b'\n' {
                self.line.push(byte);
                if self.line.len() > MAX_LINE {
                    self.line.clear();
                    out.extend(self.fail("an upstream event line exceeded 4 MiB"));
                    return out;
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            out.extend(self.on_line(&line));
        }
        out
    }

    /// The closing events (once), whether or not the upstream sent `[DONE]`.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            out.extend(self.on_line(&line));
        }
        if self.finished {
            return out;
        }
        self.finished = true;
        out.extend(self.start());
        out.extend(self.close());
        let whole = response(
            &self.id,
            &self.model,
            self.done.clone(),
            self.finish_reason.as_deref(),
            self.usage,
        );
        let kind = match whole["status"].as_str() {
            Some("incomplete") => "response.incomplete",
            _ => "response.completed",
        };
        out.extend(self.event(kind, json!({"response": whole})));
        out
    }

    fn fail(&mut self, message: &str) -> Vec<u8> {
        self.finished = true;
        self.event(
            "error",
            json!({"code": "upstream_error", "message": message, "param": null}),
        )
    }

    fn on_line(&mut self, line: &[u8]) -> Vec<u8> {
        let line = String::from_utf8_lossy(line);
        let Some(data) = line.trim_end_matches('\r').strip_prefix("data:") else {
            return Vec::new();
        };
        let data = data.trim();
        if data == "[DONE]" {
            return self.finish();
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            return Vec::new();
        };
        if let Some(message) = chunk["error"]["message"].as_str() {
            return self.fail(message);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = (
                usage["prompt_tokens"].as_u64().unwrap_or(self.usage.0),
                usage["completion_tokens"].as_u64().unwrap_or(self.usage.1),
            );
        }
        let mut out = Vec::new();
        if !self.started {
            self.id = chunk["id"].as_str().unwrap_or_default().to_owned();
            self.model = chunk["model"].clone();
            out.extend(self.start());
        }
        let Some(choice) = chunk["choices"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["index"].as_u64().unwrap_or(0) == 0))
        else {
            return out;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.extend(self.text(text));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            out.extend(self.call(call));
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_owned());
        }
        out
    }

    fn start(&mut self) -> Vec<u8> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let mut created = response(&self.id, &self.model, Vec::new(), None, (0, 0));
        created["status"] = json!("in_progress");
        self.event("response.created", json!({"response": created}))
    }

    fn output_index(&self) -> usize {
        self.done.len()
    }

    fn text(&mut self, delta: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if !matches!(self.open, Some(Open::Text { .. })) {
            out.extend(self.close());
            let item = json!({"type": "message", "id": format!("msg_{}", self.id),
                "status": "in_progress", "role": "assistant", "content": []});
            let index = self.output_index();
            out.extend(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            let item_id = format!("msg_{}", self.id);
            out.extend(self.event(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part}),
            ));
            self.open = Some(Open::Text {
                text: String::new(),
            });
        }
        if let Some(Open::Text { text }) = &mut self.open {
            text.push_str(delta);
        }
        let (item_id, index) = (format!("msg_{}", self.id), self.output_index());
        out.extend(self.event(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": delta}),
        ));
        out
    }

    fn call(&mut self, call: &Value) -> Vec<u8> {
        let index = call["index"].as_u64().unwrap_or(0);
        let mut out = Vec::new();
        let same = matches!(&self.open, Some(Open::Call { index: open, .. }) if *open == index);
        if !same {
            out.extend(self.close());
            let (call_id, name) = (call["id"].clone(), call["function"]["name"].clone());
            let mut item = call_item(&call_id, &name, "");
            item["status"] = json!("in_progress");
            let output_index = self.output_index();
            out.extend(self.event(
                "response.output_item.added",
                json!({"output_index": output_index, "item": item}),
            ));
            self.open = Some(Open::Call {
                index,
                call_id,
                name,
                arguments: String::new(),
            });
        }
        let part = call["function"]["arguments"].as_str().unwrap_or_default();
        if part.is_empty() {
            return out;
        }
        let mut item_id = String::new();
        if let Some(Open::Call {
            call_id, arguments, ..
        }) = &mut self.open
        {
            arguments.push_str(part);
            item_id = format!("fc_{}", call_id.as_str().unwrap_or_default());
        }
        let output_index = self.output_index();
        out.extend(self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": item_id, "output_index": output_index, "delta": part}),
        ));
        out
    }

    fn close(&mut self) -> Vec<u8> {
        let index = self.output_index();
        let mut out = Vec::new();
        match self.open.take() {
            None => {}
            Some(Open::Text { text }) => {
                let item_id = format!("msg_{}", self.id);
                out.extend(self.event(
                    "response.output_text.done",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": text}),
                ));
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                out.extend(self.event(
                    "response.content_part.done",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part}),
                ));
                let item = message_item(&self.id, &text);
                out.extend(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.done.push(item);
            }
            Some(Open::Call {
                call_id,
                name,
                arguments,
                ..
            }) => {
                let item = call_item(&call_id, &name, &arguments);
                out.extend(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": item["id"], "output_index": index, "arguments": arguments}),
                ));
                out.extend(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.done.push(item);
            }
        }
        out
    }
}

/// A whole chat event stream translated at once (a held body).
pub fn translate_all(stream: &[u8]) -> Vec<u8> {
    let mut translator = SseTranslator::new();
    let mut out = translator.push(stream);
    out.extend(translator.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        let chunk = json!({"id": "c9", "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    }

    fn stream() -> String {
        let usage = json!({"id": "c9", "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5}});
        [
            chunk(json!({"role": "assistant", "content": "Hel"}), None),
            chunk(json!({"content": "lo"}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"ci"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":1}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            format!("data: {usage}\n\n"),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat()
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (kind, data) = e.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(kind.strip_prefix("event: "), data["type"].as_str());
                data
            })
            .collect()
    }

    #[test]
    fn a_chat_stream_becomes_the_typed_response_events() {
        let out = events(&translate_all(stream().as_bytes()));
        let kinds: Vec<&str> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let numbers: Vec<u64> = out
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..14).collect::<Vec<_>>());
        assert_eq!(out[5]["text"], "Hello");
        assert_eq!(out[11]["arguments"], r#"{"city":1}"#);
        let done = &out[13]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][1]["call_id"], "call_1");
        assert_eq!(done["usage"]["output_tokens"], 5);
    }

    #[test]
    fn every_chunking_of_a_stream_gives_the_same_events() {
        let whole = translate_all(stream().as_bytes());
        let bytes = stream().into_bytes();
        for size in [1, 2, 5, 64, 1000] {
            let mut translator = SseTranslator::new();
            let mut out: Vec<u8> = bytes
                .chunks(size)
                .flat_map(|c| translator.push(c))
                .collect();
            out.extend(translator.finish());
            assert_eq!(out, whole, "chunks of {size}");
        }
    }

    #[test]
    fn a_stream_at_the_token_limit_ends_incomplete() {
        let cut = [
            chunk(json!({"content": "Hi"}), Some("length")),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let out = events(&translate_all(cut.as_bytes()));
        let last = out.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
    }
}
