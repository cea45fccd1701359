//! A Chat Completions event stream translated into Messages events as it arrives: `message_start`
//! on the first chunk, a `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`) / `content_block_stop` run per text or tool call, and at the end
//! `message_delta` (stop reason, tokens from the final usage chunk) and `message_stop`.

use super::messages::stop_reason;
use super::sse::{self, Events};
use serde_json::{json, Value};

/// The open content block.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text,
    /// A tool call, by its chat index.
    Tool(u64),
}

/// Messages' events for one stream.
#[derive(Debug, Default)]
pub struct MessagesEvents {
    started: bool,
    /// Blocks emitted so far (the next block's index).
    blocks: usize,
    open: Option<Block>,
    stop_reason: Option<&'static str>,
}

/// Translates one chat stream into Messages events.
pub type SseTranslator = sse::Translator<MessagesEvents>;

fn event(kind: &str, data: &Value) -> Vec<u8> {
    format!("event: {kind}\ndata: {data}\n\n").into_bytes()
}

impl Events for MessagesEvents {
    fn chunk(&mut self, chunk: &Value, choice: Option<&Value>) -> Vec<u8> {
        let mut out = self.start(chunk);
        let Some(choice) = choice else {
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

    fn end(&mut self, (input_tokens, output_tokens): (u64, u64)) -> Vec<u8> {
        let mut out = self.start(&Value::Null);
        out.extend(self.close_block());
        out.extend(event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop_reason.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}),
        ));
        out.extend(event("message_stop", &json!({"type": "message_stop"})));
        out
    }

    fn error(&mut self, message: &str) -> Vec<u8> {
        event(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        )
    }
}

impl MessagesEvents {
    /// `message_start`, once, from the first chunk's id and model.
    fn start(&mut self, chunk: &Value) -> Vec<u8> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let id = chunk["id"].as_str().unwrap_or_default();
        event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": format!("msg_{id}"), "type": "message", "role": "assistant",
                "model": chunk["model"], "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}}}),
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
    sse::translate_all::<MessagesEvents>(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sse::{assert_chunking_invariant, parse_events, sample_stream};

    #[test]
    fn a_chat_stream_becomes_the_messages_event_sequence() {
        let out = parse_events(&translate_all(sample_stream().as_bytes()));
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
            .map(|(_, d)| {
                d["delta"]["partial_json"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(json, r#"{"city":1}"#);
        assert_eq!(out[9].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(out[9].1["usage"]["output_tokens"], 5);
    }

    #[test]
    fn every_chunking_of_a_stream_gives_the_same_events() {
        assert_chunking_invariant::<MessagesEvents>();
    }

    #[test]
    fn a_stream_cut_short_or_failing_still_ends_in_order() {
        let cut =
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
        let out = parse_events(&translate_all(cut.as_bytes()));
        let kinds: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
        assert_eq!(out[out.len() - 2].1["delta"]["stop_reason"], "end_turn");
        let failing = "data: {\"error\":{\"message\":\"backend died\"}}\n\n";
        let out = parse_events(&translate_all(failing.as_bytes()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "error");
        assert_eq!(out[0].1["error"]["message"], "backend died");
    }
}
