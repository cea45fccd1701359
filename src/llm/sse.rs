//! A chat completion in its two wire forms: a JSON `chat.completion` written as server-sent
//! events (answers mom-router gives itself to a streaming client), and a complete event stream
//! assembled back into one JSON completion (answers kept for later requests in either form).

use serde_json::{json, Map, Value};

/// `body` (a JSON chat completion) as server-sent events: per choice, one chunk with the role,
/// content and tool calls, one with the finish reason (the last carrying `usage`), then
/// `[DONE]`.
pub fn events(body: &Value) -> Vec<u8> {
    let chunk = |choice: Value, usage: Option<&Value>| {
        let mut chunk = json!({
            "id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
            "model": body["model"], "choices": [choice],
        });
        if let Some(usage) = usage.filter(|u| u.is_object()) {
            chunk["usage"] = usage.clone();
        }
        format!("data: {chunk}\n\n")
    };
    let choices = body["choices"].as_array().map_or(&[][..], Vec::as_slice);
    let mut out = String::new();
    for (position, choice) in choices.iter().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let message = &choice["message"];
        let mut delta = json!({"role": "assistant", "content": message["content"]});
        if let Some(calls) = message["tool_calls"].as_array() {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let mut call = call.clone();
                    if let Some(fields) = call.as_object_mut() {
                        fields.insert("index".to_owned(), json!(i));
                    }
                    call
                })
                .collect();
            delta["tool_calls"] = Value::Array(calls);
        }
        out.push_str(&chunk(
            json!({"index": index, "delta": delta, "finish_reason": null}),
            None,
        ));
        let finish = match &choice["finish_reason"] {
            Value::Null => json!("stop"),
            reason => reason.clone(),
        };
        let last = position + 1 == choices.len();
        out.push_str(&chunk(
            json!({"index": index, "delta": {}, "finish_reason": finish}),
            last.then_some(&body["usage"]),
        ));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// The answer text of a chat completion body in either form: the first choice's content, or
/// its content deltas joined.
pub fn answer_text(body: &[u8], stream: bool) -> String {
    if stream {
        return super::usage::streamed_text(body);
    }
    let parsed: Value = serde_json::from_slice(body).unwrap_or_default();
    super::chat::reply_text(&parsed).to_owned()
}

/// A choice as its deltas build it.
#[derive(Default)]
struct Assembled {
    role: Option<Value>,
    content: Option<String>,
    /// Tool calls by their `index`: id, type, function name and arguments.
    calls: Vec<Map<String, Value>>,
    finish: Option<Value>,
}

/// The most choices (`n`) and tool calls per choice an assembled stream may hold; a chunk
/// indexing past them makes the stream unassemblable instead of allocating up to its index.
pub const MAX_CHOICES: u64 = 128;
/// See [`MAX_CHOICES`].
pub const MAX_TOOL_CALLS: usize = 128;

/// A complete event stream as one JSON chat completion; `None` unless the stream ended with
/// `[DONE]`, every choice has a finish reason, and no index passes [`MAX_CHOICES`] or
/// [`MAX_TOOL_CALLS`].
pub fn assemble(body: &[u8]) -> Option<Value> {
    let mut head: Option<Value> = None;
    let mut choices: Vec<(u64, Assembled)> = Vec::new();
    let mut usage = Value::Null;
    let mut done = false;
    for line in body.split(|b| *b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_slice(data).ok()?;
        if chunk["usage"].is_object() {
            usage = chunk["usage"].clone();
        }
        head.get_or_insert_with(|| chunk.clone());
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let index = choice["index"].as_u64().unwrap_or(0);
            if index >= MAX_CHOICES {
                return None;
            }
            let position = match choices.iter().position(|(i, _)| *i == index) {
                Some(p) => p,
                None => {
                    choices.push((index, Assembled::default()));
                    choices.len() - 1
                }
            };
            merge(&mut choices[position].1, choice)?;
        }
    }
    let complete = !choices.is_empty() && choices.iter().all(|(_, c)| c.finish.is_some());
    if !(done && complete) {
        return None;
    }
    choices.sort_by_key(|(i, _)| *i);
    let head = head?;
    let choices: Vec<Value> = choices
        .into_iter()
        .map(|(index, c)| {
            let mut message = json!({
                "role": c.role.unwrap_or(json!("assistant")),
                "content": c.content.map_or(Value::Null, Value::String),
            });
            if !c.calls.is_empty() {
                message["tool_calls"] =
                    Value::Array(c.calls.into_iter().map(Value::Object).collect());
            }
            json!({"index": index, "message": message, "finish_reason": c.finish})
        })
        .collect();
    let mut completion = json!({
        "id": head["id"], "object": "chat.completion", "created": head["created"],
        "model": head["model"], "choices": choices,
    });
    if usage.is_object() {
        completion["usage"] = usage;
    }
    Some(completion)
}

fn merge(into: &mut Assembled, choice: &Value) -> Option<()> {
    let delta = &choice["delta"];
    if let Some(role) = delta.get("role").filter(|r| r.is_string()) {
        into.role = Some(role.clone());
    }
    if let Some(piece) = delta["content"].as_str() {
        into.content.get_or_insert_with(String::new).push_str(piece);
    }
    for call in delta["tool_calls"].as_array().into_iter().flatten() {
        let index = usize::try_from(call["index"].as_u64().unwrap_or(0)).ok()?;
        if index >= MAX_TOOL_CALLS {
            return None;
        }
        if into.calls.len() <= index {
            into.calls.resize_with(index + 1, Map::new);
        }
        let slot = &mut into.calls[index];
        for field in ["id", "type"] {
            if let Some(value) = call.get(field).filter(|v| v.is_string()) {
                slot.insert(field.to_owned(), value.clone());
            }
        }
        let function = slot
            .entry("function")
            .or_insert_with(|| json!({"name": "", "arguments": ""}));
        for field in ["name", "arguments"] {
            if let Some(piece) = call["function"][field].as_str() {
                // Appended in place: a long argument streamed in many pieces stays linear.
                match function.get_mut(field) {
                    Some(Value::String(joined)) => joined.push_str(piece),
                    _ => function[field] = Value::String(piece.to_owned()),
                }
            }
        }
    }
    if !choice["finish_reason"].is_null() {
        into.finish = Some(choice["finish_reason"].clone());
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion() -> Value {
        json!({
            "id": "c1", "object": "chat.completion", "created": 7, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there",
                "tool_calls": [{"id": "t1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        })
    }

    #[test]
    fn events_assemble_back_into_the_same_completion() {
        let body = completion();
        let stream = events(&body);
        let text = String::from_utf8(stream.clone()).unwrap_or_default();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert_eq!(assemble(&stream), Some(body));
    }

    #[test]
    fn deltas_cut_anywhere_are_joined_by_index() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"He\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\",\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let assembled = assemble(stream.as_bytes()).unwrap_or_default();
        let message = &assembled["choices"][0]["message"];
        assert_eq!(message["content"], "Hello");
        assert_eq!(
            message["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(message["tool_calls"][0]["id"], "t");
        assert_eq!(assembled["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn an_unfinished_or_broken_stream_assembles_to_nothing() {
        let head = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
        assert_eq!(assemble(format!("{head}data: [DONE]\n\n").as_bytes()), None);
        let finished = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
        assert_eq!(assemble(format!("{head}{finished}").as_bytes()), None);
        assert!(assemble(format!("{head}{finished}data: [DONE]\n\n").as_bytes()).is_some());
        assert_eq!(assemble(b"data: {not json\n\ndata: [DONE]\n\n"), None);
    }

    #[test]
    fn a_completion_of_any_shape_becomes_events_without_a_panic() {
        for body in [
            json!(0),
            json!({"choices": 3}),
            json!({"choices": [1, {"message": 2}, {"message": {"tool_calls": [5, {"id": "t"}]}}]}),
        ] {
            let text = String::from_utf8(events(&body)).unwrap_or_default();
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        }
    }

    #[test]
    fn a_huge_choice_or_tool_call_index_is_refused_without_allocating_to_it() {
        let done = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        for index in [u64::MAX, 1 << 40, MAX_TOOL_CALLS as u64] {
            let call = format!(
                "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"function\":{{\"name\":\"f\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
            );
            assert_eq!(
                assemble(format!("{call}{done}").as_bytes()),
                None,
                "{index}"
            );
        }
        let choice = format!("data: {{\"id\":\"c\",\"choices\":[{{\"index\":{},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n", u64::MAX);
        assert_eq!(assemble(format!("{choice}{done}").as_bytes()), None);
        let last = MAX_TOOL_CALLS - 1;
        let call = format!(
            "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{last},\"function\":{{\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
        );
        let assembled = assemble(format!("{call}{done}").as_bytes()).unwrap();
        let calls = assembled["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap();
        assert_eq!(
            (calls.len(), &calls[last]["function"]["arguments"]),
            (MAX_TOOL_CALLS, &json!("{}"))
        );
    }
}
