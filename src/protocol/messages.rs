//! Anthropic Messages ↔ Chat Completions: the request (system, content blocks — text, image,
//! tool_use, tool_result —, tools, tool_choice, stop_sequences, the required max_tokens,
//! stream) into a chat body; a chat completion back into a message; errors in Messages' shape.
//! Streams are translated in [`super::messages_sse`].

use super::{invalid, request_object, TranslateError, Translated};
use serde_json::{json, Value};
use std::collections::HashSet;

/// The Messages path.
pub const PATH: &str = "/v1/messages";
/// The token-count path, answered locally with mom-router's estimate.
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

/// Fields carried into the chat body as they are.
const CARRIED: [&str; 4] = ["model", "temperature", "top_p", "stream"];
/// Fields Chat Completions has no place for: dropped, and said.
const DROPPED: [&str; 4] = ["top_k", "thinking", "service_tier", "container"];

/// Translates a Messages request body into a Chat Completions body. `count_only` (the
/// token-count endpoint) does not require `max_tokens`.
pub fn to_chat(body: &[u8], count_only: bool) -> Result<Translated, TranslateError> {
    let (request, mut chat) = request_object(body, &CARRIED)?;
    match request.get("max_tokens") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
            chat.insert("max_tokens".to_owned(), Value::Number(n.clone()));
        }
        None if count_only => {}
        None => return Err(invalid("max_tokens: required (a positive integer)")),
        Some(_) => return Err(invalid("max_tokens: must be a positive integer")),
    }
    if request.get("stream") == Some(&Value::Bool(true)) {
        // Usage arrives on the final chunk: Messages reports it in message_delta.
        chat.insert("stream_options".to_owned(), json!({"include_usage": true}));
    }
    match request.get("stop_sequences") {
        Some(Value::Array(stops)) if stops.iter().all(Value::is_string) => {
            chat.insert("stop".to_owned(), Value::Array(stops.clone()));
        }
        None => {}
        Some(_) => return Err(invalid("stop_sequences: must be a list of strings")),
    }
    if let Some(user) = request.get("metadata").and_then(|m| m["user_id"].as_str()) {
        chat.insert("user".to_owned(), Value::String(user.to_owned()));
    }
    let mut messages = system(request.get("system"))?;
    let Some(Value::Array(turns)) = request.get("messages") else {
        return Err(invalid("messages: a list of messages is required"));
    };
    let mut tool_uses = HashSet::new();
    for (i, turn) in turns.iter().enumerate() {
        messages.extend(turn_of(turn, i, &mut tool_uses)?);
    }
    chat.insert("messages".to_owned(), Value::Array(messages));
    if let Some(tools) = request.get("tools") {
        chat.insert("tools".to_owned(), tools_of(tools)?);
    }
    if let Some(choice) = request.get("tool_choice") {
        let (choice, parallel) = tool_choice_of(choice)?;
        chat.insert("tool_choice".to_owned(), choice);
        if let Some(parallel) = parallel {
            chat.insert("parallel_tool_calls".to_owned(), Value::Bool(parallel));
        }
    }
    let dropped = DROPPED
        .into_iter()
        .filter(|field| request.contains_key(*field))
        .collect();
    Ok(Translated {
        body: Value::Object(chat).to_string().into_bytes(),
        dropped,
    })
}

/// The system prompt (a string or text blocks) as a leading system message.
fn system(system: Option<&Value>) -> Result<Vec<Value>, TranslateError> {
    let text = match system {
        None => return Ok(Vec::new()),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            let texts: Option<Vec<&str>> = blocks
                .iter()
                .map(|b| match b["type"].as_str() {
                    Some("text") => b["text"].as_str(),
                    _ => None,
                })
                .collect();
            texts
                .ok_or_else(|| invalid("system: must be a string or a list of text blocks"))?
                .join("\n")
        }
        Some(_) => return Err(invalid("system: must be a string or a list of text blocks")),
    };
    Ok(vec![json!({"role": "system", "content": text})])
}

/// One Messages turn as chat messages: a user turn's tool results become tool messages (before
/// its other content), an assistant turn's tool uses become tool calls.
fn turn_of(
    turn: &Value,
    i: usize,
    tool_uses: &mut HashSet<String>,
) -> Result<Vec<Value>, TranslateError> {
    let at = |what: &str| invalid(format!("messages[{i}]: {what}"));
    let role = match turn["role"].as_str() {
        Some(role @ ("user" | "assistant")) => role,
        _ => return Err(at("role must be \"user\" or \"assistant\"")),
    };
    let blocks = match &turn["content"] {
        Value::String(text) => return Ok(vec![json!({"role": role, "content": text})]),
        Value::Array(blocks) => blocks,
        _ => return Err(at("content must be a string or a list of content blocks")),
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = |what: &str| invalid(format!("messages[{i}].content[{j}]: {what}"));
        match (block["type"].as_str(), role) {
            (Some("text"), _) => {
                let text = block["text"]
                    .as_str()
                    .ok_or_else(|| at("text must be a string"))?;
                parts.push(json!({"type": "text", "text": text}));
            }
            (Some("image"), "user") => parts.push(image_of(&block["source"]).ok_or_else(|| {
                at("image source must be {type: base64, media_type, data} or {type: url, url}")
            })?),
            (Some("tool_use"), "assistant") => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
                    return Err(at("tool_use needs an id and a name"));
                };
                tool_uses.insert(id.to_owned());
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            (Some("tool_result"), "user") => {
                let id = block["tool_use_id"]
                    .as_str()
                    .ok_or_else(|| at("tool_result needs its tool_use_id"))?;
                if !tool_uses.contains(id) {
                    return Err(at(&format!(
                        "tool_result for {id:?}, which no earlier assistant tool_use has"
                    )));
                }
                let content = result_text(&block["content"])
                    .ok_or_else(|| at("tool_result content must be a string or text blocks"))?;
                results.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            (Some(kind), role) => {
                return Err(at(&format!(
                    "a {kind:?} block is not accepted in a {role} turn"
                )))
            }
            (None, _) => return Err(at("type is required")),
        }
    }
    let mut out = results;
    if role == "assistant" {
        let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        let mut message = json!({"role": "assistant", "content": text.join("")});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        out.push(message);
    } else if !parts.is_empty() || out.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
    Ok(out)
}

fn image_of(source: &Value) -> Option<Value> {
    let url = match source["type"].as_str()? {
        "base64" => format!(
            "data:{};base64,{}",
            source["media_type"].as_str()?,
            source["data"].as_str()?
        ),
        "url" => source["url"].as_str()?.to_owned(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn result_text(content: &Value) -> Option<String> {
    match content {
        Value::Null => Some(String::new()),
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| (b["type"] == "text").then(|| b["text"].as_str()).flatten())
            .collect::<Option<Vec<&str>>>()
            .map(|texts| texts.join("\n")),
        _ => None,
    }
}

fn tools_of(tools: &Value) -> Result<Value, TranslateError> {
    let Value::Array(tools) = tools else {
        return Err(invalid("tools: must be a list"));
    };
    let translated = tools.iter().enumerate().map(|(i, tool)| {
        let name = tool["name"]
            .as_str()
            .ok_or_else(|| invalid(format!("tools[{i}]: name is required")))?;
        let mut function = json!({"name": name,
            "parameters": tool.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"}))});
        if let Some(description) = tool["description"].as_str() {
            function["description"] = Value::String(description.to_owned());
        }
        Ok(json!({"type": "function", "function": function}))
    });
    Ok(Value::Array(translated.collect::<Result<_, _>>()?))
}

/// `tool_choice` as chat's, and `parallel_tool_calls` when the client disabled them.
fn tool_choice_of(choice: &Value) -> Result<(Value, Option<bool>), TranslateError> {
    let parallel = choice["disable_parallel_tool_use"]
        .as_bool()
        .map(|off| !off);
    let translated = match choice["type"].as_str() {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = choice["name"]
                .as_str()
                .ok_or_else(|| invalid("tool_choice: type tool needs a name"))?;
            json!({"type": "function", "function": {"name": name}})
        }
        _ => return Err(invalid("tool_choice: type must be auto, any, tool or none")),
    };
    Ok((translated, parallel))
}

/// Messages' stop reason for a chat finish reason.
pub fn stop_reason(finish_reason: Option<&str>) -> Option<&'static str> {
    Some(match finish_reason? {
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        _ => "end_turn",
    })
}

/// A chat completion (JSON) as a Messages message; `None` when it is not one.
pub fn from_chat(completion: &[u8]) -> Option<Vec<u8>> {
    let completion: Value = serde_json::from_slice(completion).ok()?;
    let choice = completion["choices"].get(0)?;
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
        content.push(json!({"type": "tool_use", "id": call["id"],
            "name": call["function"]["name"], "input": input}));
    }
    let id = completion["id"].as_str().unwrap_or_default();
    let message = json!({
        "id": format!("msg_{id}"),
        "type": "message",
        "role": "assistant",
        "model": completion["model"],
        "content": content,
        "stop_reason": stop_reason(choice["finish_reason"].as_str()),
        "stop_sequence": null,
        "usage": {
            "input_tokens": completion["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            "output_tokens": completion["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        },
    });
    Some(message.to_string().into_bytes())
}

/// Messages' error type for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An error body in Messages' shape: the OpenAI-style error's message (or the whole body when
/// it has none), typed by the status.
pub fn error_from(status: u16, body: &[u8]) -> Vec<u8> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    error_body(status, &message)
}

/// A Messages error body.
pub fn error_body(status: u16, message: &str) -> Vec<u8> {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
        .to_string()
        .into_bytes()
}

#[cfg(test)]
mod tests;
