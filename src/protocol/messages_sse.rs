//! A Chat Completions event stream translated into Messages events as it arrives: `message_start`
//! on the first chunk, a `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`) / `content_block_stop` run per text or tool call, and at the end
//! `message_delta` (stop reason, output tokens from the final usage chunk) and `message_stop`.
//! Chunks may split lines anywhere; only the first choice is read (Messages has one).

use super::messages::stop_reason;
use serde_json::{json, Value};

/// Longest event line held while waiting for its newline; a longer one ends the stream with
/// an error event.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// The open content block.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text,
    /// A tool call, by its chat index.
    Tool(u64),
}

/// Translates one stream; feed it every chunk, then [`SseTranslator::finish`].
#[derive(Debug, Default)]
pub struct SseTranslator {
    line: Vec<u8>,
    started: bool,
    finished: bool,
    /// Blocks emitted so far (the next block's index).
    blocks: usize,
    open: Option<Block>,
    stop_reason: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
}

fn event(kind: &str, data: &Value) -> Vec<u8> {
    format!("event: {kind}\ndata: {data}\n\n").into_bytes()
}

impl SseTranslator {
    /// A translator for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The Messages events for `chunk`.
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
        out.extend(self.close_block());
        out.extend(event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}}),
        ));
        out.extend(event("message_stop", &json!({"type": "message_stop"})));
        out
    }

    fn fail(&mut self, message: &str) -> Vec<u8> {
        self.finished = true;
        event(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
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
            self.input_tokens = usage["prompt_tokens"].as_u64().unwrap_or(self.input_tokens);
            self.output_tokens = usage["completion_tokens"]
                .as_u64()
                .unwrap_or(self.output_tokens);
        }
        let mut out = Vec::new();
        if !self.started {
            out.extend(self.start_with(&chunk));
        }
        let Some(choice) = chunk["choices"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["index"].as_u64().unwrap_or(0) == 0))
        else {
            return out;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.extend(self.open_block(Block::Text, || json!({"type": "text", "text": ""})));
            out.extend(self.delta(json!({"type": "text_delta", "text": text})));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            out.extend(self.open_block(Block::Tool(index), || {
                json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                    "input": {}})
            }));
            if let Some(part) = call["function"]["arguments"]
                .as_str()
                .filter(|p| !p.is_empty())
            {
                out.extend(self.delta(json!({"type": "input_json_delta", "partial_json": part})));
            }
        }
        if let Some(reason) = stop_reason(choice["finish_reason"].as_str()) {
            self.stop_reason = Some(reason);
        }
        out
    }

    fn start(&mut self) -> Vec<u8> {
        if self.started {
            return Vec::new();
        }
        self.start_with(&Value::Null)
    }

    fn start_with(&mut self, chunk: &Value) -> Vec<u8> {
        self.started = true;
        let id = chunk["id"].as_str().unwrap_or_default();
        event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": format!("msg_{id}"), "type": "message", "role": "assistant",
                "model": chunk["model"], "content": [], "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}}),
        )
    }

    /// Opens `block` unless it is the open one (closing the one before).
    fn open_block(&mut self, block: Block, content: impl FnOnce() -> Value) -> Vec<u8> {
        if self.open.as_ref() == Some(&block) {
            return Vec::new();
        }
        let mut out = self.close_block();
        out.extend(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": self.blocks,
                "content_block": content()}),
        ));
        self.open = Some(block);
        out
    }

    fn delta(&self, delta: Value) -> Vec<u8> {
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.blocks, "delta": delta}),
        )
    }

    fn close_block(&mut self) -> Vec<u8> {
        if self.open.take().is_none() {
            return Vec::new();
        }
        let index = self.blocks;
        self.blocks += 1;
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )
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
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Hel"}), None),
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

    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (kind, data) = e.split_once('\n').unwrap();
                let kind = kind.strip_prefix("event: ").unwrap().to_owned();
                let data = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                (kind, data)
            })
            .collect()
    }

    #[test]
    fn a_chat_stream_becomes_the_messages_event_sequence() {
        let out = events(&translate_all(stream().as_bytes()));
        let kinds: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(out[0].1["message"]["id"], "msg_c9");
        assert_eq!(
            out[2].1["delta"],
            json!({"type": "text_delta", "text": "Hel"})
        );
        assert_eq!(out[5].1["index"], 1);
        assert_eq!(out[5].1["content_block"]["name"], "weather");
        let json: String = out[6..8]
            .iter()
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(json, r#"{"city":1}"#);
        assert_eq!(out[9].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(out[9].1["usage"]["output_tokens"], 5);
    }

    #[test]
    fn every_chunking_of_a_stream_gives_the_same_events() {
        let whole = translate_all(stream().as_bytes());
        let bytes = stream().into_bytes();
        for size in [1, 2, 3, 7, 64, 1000] {
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
    fn a_stream_cut_short_or_failing_still_ends_in_order() {
        let cut = chunk(json!({"content": "Hi"}), None);
        let out = events(&translate_all(cut.as_bytes()));
        let kinds: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
        assert_eq!(out[out.len() - 2].1["delta"]["stop_reason"], "end_turn");
        let failing = "data: {\"error\":{\"message\":\"backend died\"}}\n\n";
        let out = events(&translate_all(failing.as_bytes()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "error");
        assert_eq!(out[0].1["error"]["message"], "backend died");
    }
}
