//! OpenAI Responses ↔ Chat Completions: the request (`input` as a string or items — messages,
//! function calls and their outputs —, `instructions`, `tools`, `tool_choice`, `text.format`,
//! `max_output_tokens`, `stream`) into a chat body; a chat completion back into a response.
//! Errors keep the OpenAI shape both protocols share. `previous_response_id` needs a store of
//! past responses, which mom-router does not keep: refused, said so. Streams are translated in
//! [`super::responses_sse`].

use super::{invalid, request_object, TranslateError, Translated};
use serde_json::{json, Value};
use std::collections::HashSet;

/// The Responses path.
pub const PATH: &str = "/v1/responses";

/// Fields carried into the chat body as they are.
const CARRIED: [&str; 6] = [
    "model",
    "temperature",
    "top_p",
    "stream",
    "user",
    "parallel_tool_calls",
];
/// Fields Chat Completions has no place for: dropped, and said.
const DROPPED: [&str; 5] = ["reasoning", "include", "truncation", "background", "prompt"];

/// Translates a Responses request body into a Chat Completions body.
pub fn to_chat(body: &[u8]) -> Result<Translated, TranslateError> {
    let (request, mut chat) = request_object(body, &CARRIED)?;
    if request
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(invalid(
            "previous_response_id: mom-router keeps no store of past responses; send the whole conversation in input",
        ));
    }
    match request.get("max_output_tokens") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
            chat.insert("max_tokens".to_owned(), Value::Number(n.clone()));
        }
        None | Some(Value::Null) => {}
        Some(_) => return Err(invalid("max_output_tokens: must be a positive integer")),
    }
    if request.get("stream") == Some(&Value::Bool(true)) {
        chat.insert("stream_options".to_owned(), json!({"include_usage": true}));
    }
    let mut messages = Vec::new();
    match request.get("instructions") {
        Some(Value::String(text)) => messages.push(json!({"role": "system", "content": text})),
        None | Some(Value::Null) => {}
        Some(_) => return Err(invalid("instructions: must be a string")),
    }
    match request.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => messages.extend(items_of(items)?),
        None => return Err(invalid("input: a string or a list of items is required")),
        Some(_) => return Err(invalid("input: must be a string or a list of items")),
    }
    chat.insert("messages".to_owned(), Value::Array(messages));
    if let Some(tools) = request.get("tools") {
        chat.insert("tools".to_owned(), tools_of(tools)?);
    }
    if let Some(choice) = request.get("tool_choice") {
        chat.insert("tool_choice".to_owned(), tool_choice_of(choice)?);
    }
    if let Some(format) = request.get("text").and_then(|t| t.get("format")) {
        chat.insert("response_format".to_owned(), format_of(format)?);
    }
    let dropped = DROPPED
        .into_iter()
        .filter(|field| request.get(*field).is_some_and(|v| !v.is_null()))
        .collect();
    Ok(Translated {
        body: Value::Object(chat).to_string().into_bytes(),
        dropped,
    })
}

/// Input items as chat messages: consecutive function calls join one assistant message; a
/// function call output must answer an earlier call.
fn items_of(items: &[Value]) -> Result<Vec<Value>, TranslateError> {
    let mut messages: Vec<Value> = Vec::new();
    let mut calls = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = |what: &str| invalid(format!("input[{i}]: {what}"));
        match item["type"].as_str() {
            Some("function_call") => {
                let (Some(id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str())
                else {
                    return Err(at("function_call needs a call_id and a name"));
                };
                calls.insert(id.to_owned());
                let arguments = item["arguments"].as_str().unwrap_or("{}");
                let call = json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments}});
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" && last["tool_calls"].is_array() => {
                        if let Some(list) = last["tool_calls"].as_array_mut() {
                            list.push(call);
                        }
                    }
                    _ => messages
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => {
                let id = item["call_id"]
                    .as_str()
                    .ok_or_else(|| at("function_call_output needs its call_id"))?;
                if !calls.contains(id) {
                    return Err(at(&format!(
                        "function_call_output for {id:?}, which no earlier function_call has"
                    )));
                }
                let output = match &item["output"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
            Some("message") | None => messages.push(message_of(item, i)?),
            Some(kind) => return Err(at(&format!("items of type {kind:?} are not accepted"))),
        }
    }
    Ok(messages)
}

fn message_of(item: &Value, i: usize) -> Result<Value, TranslateError> {
    let at = |what: &str| invalid(format!("input[{i}]: {what}"));
    let role = match item["role"].as_str() {
        Some("developer") => "system",
        Some(role @ ("user" | "assistant" | "system")) => role,
        _ => return Err(at("role must be user, assistant, system or developer")),
    };
    let parts = match &item["content"] {
        Value::String(text) => return Ok(json!({"role": role, "content": text})),
        Value::Array(parts) => parts,
        _ => return Err(at("content must be a string or a list of parts")),
    };
    let mut out = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let at = |what: &str| invalid(format!("input[{i}].content[{j}]: {what}"));
        match part["type"].as_str() {
            Some("input_text" | "output_text" | "text") => {
                let text = part["text"]
                    .as_str()
                    .ok_or_else(|| at("text must be a string"))?;
                out.push(json!({"type": "text", "text": text}));
            }
            Some("input_image") => {
                let url = part["image_url"]
                    .as_str()
                    .ok_or_else(|| at("input_image needs an image_url"))?;
                out.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Some(kind) => return Err(at(&format!("parts of type {kind:?} are not accepted"))),
            None => return Err(at("type is required")),
        }
    }
    if role == "user" {
        return Ok(json!({"role": role, "content": out}));
    }
    let text: Vec<&str> = out.iter().filter_map(|p| p["text"].as_str()).collect();
    Ok(json!({"role": role, "content": text.join("")}))
}

fn tools_of(tools: &Value) -> Result<Value, TranslateError> {
    let Value::Array(tools) = tools else {
        return Err(invalid("tools: must be a list"));
    };
    let translated = tools.iter().enumerate().map(|(i, tool)| {
        let at = |what: &str| invalid(format!("tools[{i}]: {what}"));
        if tool["type"] != "function" {
            return Err(at("only function tools are accepted"));
        }
        let name = tool["name"]
            .as_str()
            .ok_or_else(|| at("name is required"))?;
        let mut function = json!({"name": name,
            "parameters": tool.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}))});
        for field in ["description", "strict"] {
            if let Some(value) = tool.get(field) {
                function[field] = value.clone();
            }
        }
        Ok(json!({"type": "function", "function": function}))
    });
    Ok(Value::Array(translated.collect::<Result<_, _>>()?))
}

fn tool_choice_of(choice: &Value) -> Result<Value, TranslateError> {
    match choice {
        Value::String(mode) if ["auto", "none", "required"].contains(&mode.as_str()) => {
            Ok(choice.clone())
        }
        Value::Object(_) if choice["type"] == "function" => {
            let name = choice["name"]
                .as_str()
                .ok_or_else(|| invalid("tool_choice: a function choice needs a name"))?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        _ => Err(invalid(
            "tool_choice: must be auto, none, required or {type: function, name}",
        )),
    }
}

fn format_of(format: &Value) -> Result<Value, TranslateError> {
    match format["type"].as_str() {
        Some("text") => Ok(json!({"type": "text"})),
        Some("json_object") => Ok(json!({"type": "json_object"})),
        Some("json_schema") => {
            let mut schema = json!({"name": format["name"].as_str().unwrap_or("response"),
                "schema": format["schema"]});
            if let Some(strict) = format.get("strict") {
                schema["strict"] = strict.clone();
            }
            Ok(json!({"type": "json_schema", "json_schema": schema}))
        }
        _ => Err(invalid(
            "text.format: type must be text, json_object or json_schema",
        )),
    }
}

/// The response object for a completion's parts: `output` items, status and usage.
pub fn response(
    id: &str,
    model: &Value,
    output: Vec<Value>,
    finish_reason: Option<&str>,
    usage: (u64, u64),
) -> Value {
    let incomplete = finish_reason == Some("length");
    json!({
        "id": format!("resp_{id}"),
        "object": "response",
        "created_at": 0,
        "status": if incomplete { "incomplete" } else { "completed" },
        "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "model": model,
        "output": output,
        "usage": {"input_tokens": usage.0, "output_tokens": usage.1,
            "total_tokens": usage.0 + usage.1},
    })
}

/// An assistant message output item.
pub fn message_item(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": format!("msg_{id}"), "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// A function call output item.
pub fn call_item(call_id: &Value, name: &Value, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call_id.as_str().unwrap_or_default()),
        "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
}

/// A chat completion (JSON) as a Responses response; `None` when it is not one.
pub fn from_chat(completion: &[u8]) -> Option<Vec<u8>> {
    let completion: Value = serde_json::from_slice(completion).ok()?;
    let choice = completion["choices"].get(0)?;
    let message = &choice["message"];
    let id = completion["id"].as_str().unwrap_or_default();
    let mut output = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        output.push(message_item(id, text));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        output.push(call_item(&call["id"], &call["function"]["name"], arguments));
    }
    let usage = &completion["usage"];
    let usage = (
        usage["prompt_tokens"].as_u64().unwrap_or(0),
        usage["completion_tokens"].as_u64().unwrap_or(0),
    );
    let finish = choice["finish_reason"].as_str();
    let response = response(id, &completion["model"], output, finish, usage);
    Some(response.to_string().into_bytes())
}

#[cfg(test)]
mod tests;
