//! A Chat Completions event stream translated into Responses' typed events as it arrives:
//! `response.created` on the first chunk; per text run `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta` … `.done`,
//! `response.content_part.done`, `response.output_item.done`; per tool call the item and its
//! `response.function_call_arguments.delta` … `.done`; at the end `response.completed` (or
//! `response.incomplete` at the token limit) with the whole response and its usage. Every event
//! carries its `sequence_number`. Chunks may split lines anywhere; only the first choice is read.

use super::responses::{call_item, message_item, response};
use super::sse::{self, Events};
use serde_json::{json, Value};

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

/// Responses' events for one stream.
#[derive(Debug, Default)]
pub struct ResponsesEvents {
    started: bool,
    sequence: u64,
    id: String,
    model: Value,
    /// Output items finished so far.
    done: Vec<Value>,
    open: Option<Open>,
    finish_reason: Option<String>,
}

/// Translates one chat stream into Responses events.
pub type SseTranslator = sse::Translator<ResponsesEvents>;

impl Events for ResponsesEvents {
    fn chunk(&mut self, chunk: &Value, choice: Option<&Value>) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.started {
            self.id = chunk["id"].as_str().unwrap_or_default().to_owned();
            self.model = chunk["model"].clone();
            out.extend(self.start());
        }
        let Some(choice) = choice else {
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

    fn end(&mut self, usage: (u64, u64)) -> Vec<u8> {
        let mut out = self.start();
        out.extend(self.close());
        let finish = self.finish_reason.as_deref();
        let whole = response(&self.id, &self.model, self.done.clone(), finish, usage);
        let kind = match whole["status"].as_str() {
            Some("incomplete") => "response.incomplete",
            _ => "response.completed",
        };
        out.extend(self.event(kind, json!({"response": whole})));
        out
    }

    fn error(&mut self, message: &str) -> Vec<u8> {
        self.event(
            "error",
            json!({"code": "upstream_error", "message": message, "param": null}),
        )
    }
}

impl ResponsesEvents {
    fn event(&mut self, kind: &str, mut data: Value) -> Vec<u8> {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        format!("event: {kind}\ndata: {data}\n\n").into_bytes()
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
    sse::translate_all::<ResponsesEvents>(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::sse::{assert_chunking_invariant, parse_events, sample_stream};

    #[test]
    fn a_chat_stream_becomes_the_typed_response_events() {
        let out = parse_events(&translate_all(sample_stream().as_bytes()));
        for (kind, data) in &out {
            assert_eq!(data["type"], kind.as_str());
        }
        let kinds: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
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
            .map(|(_, e)| e["sequence_number"].as_u64().unwrap_or(u64::MAX))
            .collect();
        assert_eq!(numbers, (0..14).collect::<Vec<_>>());
        assert_eq!(out[5].1["text"], "Hello");
        assert_eq!(out[11].1["arguments"], r#"{"city":1}"#);
        let done = &out[13].1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][1]["call_id"], "call_1");
        assert_eq!(done["usage"]["output_tokens"], 5);
    }

    #[test]
    fn every_chunking_of_a_stream_gives_the_same_events() {
        assert_chunking_invariant::<ResponsesEvents>();
    }

    #[test]
    fn a_stream_at_the_token_limit_ends_incomplete() {
        let cut = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        let out = parse_events(&translate_all(cut.as_bytes()));
        let (kind, last) = out.last().unwrap();
        assert_eq!(kind, "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
    }
}
