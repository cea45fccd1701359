//! The chat-completion request: parsed once into a typed view for the signals, while the
//! client's body is kept so the rewritten body loses no field the client sent. The full JSON
//! object is read from it only when something asks for it.

use serde_json::{Map, Value};
use std::ops::Range;
use std::sync::OnceLock;

/// Why a request body is not a valid chat-completion request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The body is empty.
    #[error("request body is empty; send a JSON chat-completion request")]
    Empty,
    /// The body is not valid UTF-8.
    #[error("request body is not valid UTF-8 (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The body is not valid JSON.
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The body is JSON but not an object.
    #[error("request body must be a JSON object")]
    NotAnObject,
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// Path of the field, e.g. `messages[1].role`.
        field: String,
        /// The expected type, as a phrase.
        expected: &'static str,
    },
    /// A list holds more entries than one request may.
    #[error("field `{field}` holds {count} entries; at most {max} are accepted")]
    TooMany {
        /// The list (`messages`, `tools`).
        field: &'static str,
        /// How many it holds.
        count: usize,
        /// The bound.
        max: usize,
    },
}

/// Most messages one request may hold: every signal reads the conversation once, and this
/// keeps that work bounded whatever the body size allows.
pub const MAX_MESSAGES: usize = 4_096;
/// Most tools one request may declare.
pub const MAX_TOOLS: usize = 512;

/// One chat message reduced to what signals read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, …
    pub role: String,
    /// The text content: the string, or the text parts joined by newlines.
    pub text: String,
    /// True when the content carries an image part.
    pub has_image: bool,
    /// True when an assistant message carries tool calls.
    pub tool_calls: bool,
}

/// A validated chat-completion request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The requested model or identity.
    pub model: String,
    /// The messages, in order.
    pub messages: Vec<Message>,
    /// True when the client asked for server-sent events.
    pub stream: bool,
    /// True when the request declares tools.
    pub has_tools: bool,
    /// The completion-token cap the one-pass reading found; once the object is read,
    /// [`ChatRequest::max_tokens`] reads it there instead.
    sent_max_tokens: Option<u64>,
    /// The client's body.
    body: Vec<u8>,
    /// Where the top-level `model` value lies in `body`, while the object is as the client
    /// sent it and no key repeats, so the forwarded body can be the client's bytes.
    model_at: Option<Range<usize>>,
    /// The whole request object, read from `body` when first asked for.
    object: OnceLock<Map<String, Value>>,
}

impl ChatRequest {
    /// Parses and validates a request body.
    pub fn parse(bytes: &[u8]) -> Result<Self, RequestError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(RequestError::Empty);
        }
        let text = std::str::from_utf8(bytes).map_err(|e| RequestError::NotUtf8 {
            offset: e.valid_up_to(),
        })?;
        match super::chat_scan::scan(text) {
            Some(scanned) => Ok(Self {
                model: scanned.model,
                messages: scanned.messages,
                stream: scanned.stream,
                has_tools: scanned.has_tools,
                sent_max_tokens: scanned.max_tokens,
                body: bytes.to_vec(),
                model_at: Some(scanned.model_at),
                object: OnceLock::new(),
            }),
            None => Self::parse_in_full(text),
        }
    }

    /// Parses a body the one-pass reading gave up on: into the whole object first, then each
    /// field from it, naming the first that is wrong.
    pub(super) fn parse_in_full(text: &str) -> Result<Self, RequestError> {
        let parsed = super::chat_json::parse_object(text)
            .map_err(|e| RequestError::MalformedJson(e.to_string()))?;
        let Some(super::chat_json::Parsed { object, model_at }) = parsed else {
            return Err(RequestError::NotAnObject);
        };
        let model = match object.get("model") {
            None => return Err(RequestError::MissingField("model")),
            Some(Value::String(model)) => model.clone(),
            Some(_) => return Err(wrong_type("model", "a string")),
        };
        let messages = match object.get("messages") {
            None => return Err(RequestError::MissingField("messages")),
            Some(Value::Array(items)) if items.len() > MAX_MESSAGES => {
                return Err(RequestError::TooMany {
                    field: "messages",
                    count: items.len(),
                    max: MAX_MESSAGES,
                })
            }
            Some(Value::Array(items)) if !items.is_empty() => parse_messages(items)?,
            Some(_) => return Err(wrong_type("messages", "a non-empty array of messages")),
        };
        let stream = match object.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err(wrong_type("stream", "a boolean")),
        };
        let has_tools = match object.get("tools") {
            None | Some(Value::Null) => false,
            Some(Value::Array(tools)) if tools.len() > MAX_TOOLS => {
                return Err(RequestError::TooMany {
                    field: "tools",
                    count: tools.len(),
                    max: MAX_TOOLS,
                })
            }
            Some(Value::Array(tools)) => !tools.is_empty(),
            Some(_) => return Err(wrong_type("tools", "an array")),
        };
        Ok(Self {
            model,
            messages,
            stream,
            has_tools,
            // The object is read: the cap is read from it.
            sent_max_tokens: None,
            body: text.as_bytes().to_vec(),
            model_at,
            object: OnceLock::from(object),
        })
    }

    /// The body to send upstream: the client's request, every field kept, with `model` replaced.
    /// While nothing was rewritten, that is the client's own bytes with the `model` value
    /// replaced in place; otherwise the object written out again.
    pub fn into_body_for(self, provider_model: &str) -> Vec<u8> {
        if let Some(model_at) = self.model_at {
            let bytes = &self.body;
            let mut body = Vec::with_capacity(bytes.len() + provider_model.len() + 2);
            body.extend_from_slice(&bytes[..model_at.start]);
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut body, provider_model);
            body.extend_from_slice(&bytes[model_at.end..]);
            return body;
        }
        let mut object = match self.object.into_inner() {
            Some(object) => object,
            None => read_object(&self.body),
        };
        object.insert("model".to_owned(), Value::String(provider_model.to_owned()));
        Value::Object(object).to_string().into_bytes()
    }

    /// The request object for rewriting (plugins); the parsed messages signals read stay as
    /// the client sent them. The forwarded body is then written out from the object.
    pub fn object_mut(&mut self) -> &mut Map<String, Value> {
        self.model_at = None;
        if self.object.get().is_none() {
            self.object = OnceLock::from(read_object(&self.body));
        }
        match self.object.get_mut() {
            Some(object) => object,
            None => unreachable!("the object was read above"),
        }
    }

    /// The whole request object, every field as the client sent it.
    pub fn object(&self) -> &Map<String, Value> {
        self.object.get_or_init(|| read_object(&self.body))
    }

    /// Asks a streamed answer for its usage (`stream_options.include_usage`); false when the
    /// client had asked already (or the request does not stream).
    pub fn ask_for_usage(&mut self) -> bool {
        let options = self.object().get("stream_options");
        let asked = options.and_then(|o| o.get("include_usage")) == Some(&Value::Bool(true));
        if !self.stream || asked {
            return false;
        }
        let options = self
            .object_mut()
            .entry("stream_options")
            .or_insert_with(|| Value::Object(Map::new()));
        if !options.is_object() {
            *options = Value::Object(Map::new());
        }
        options["include_usage"] = Value::Bool(true);
        true
    }

    /// The completion-token cap the client asked for (`max_completion_tokens`, else
    /// `max_tokens`), when it is a positive integer.
    pub fn max_tokens(&self) -> Option<u64> {
        self.object
            .get()
            .map_or(self.sent_max_tokens, max_tokens_of)
    }

    /// The `messages` array as the client sent it (empty when absent).
    pub fn messages_json(&self) -> Vec<Value> {
        self.object()
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// The last user message's text, or empty.
    pub fn last_user_text(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map_or("", |m| m.text.as_str())
    }

    /// True while a tool loop is open: the conversation ends with an assistant tool call, or
    /// with tool results answering one (the model that asked must read them).
    pub fn tool_loop_active(&self) -> bool {
        let mut rest = self.messages.iter().rev().skip_while(|m| m.role == "tool");
        rest.next()
            .is_some_and(|m| m.role == "assistant" && m.tool_calls)
    }

    /// Number of user messages.
    pub fn user_turns(&self) -> usize {
        self.messages.iter().filter(|m| m.role == "user").count()
    }

    /// True when any message carries an image.
    pub fn has_images(&self) -> bool {
        self.messages.iter().any(|m| m.has_image)
    }
}

/// The object of a body already read whole once, so known to be a JSON object.
fn read_object(body: &[u8]) -> Map<String, Value> {
    serde_json::from_slice(body).unwrap_or_default()
}

/// `max_completion_tokens`, else `max_tokens`, when a positive integer.
fn max_tokens_of(object: &Map<String, Value>) -> Option<u64> {
    ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|key| object.get(*key).and_then(Value::as_u64))
        .filter(|n| *n > 0)
}

fn wrong_type(field: impl Into<String>, expected: &'static str) -> RequestError {
    RequestError::WrongType {
        field: field.into(),
        expected,
    }
}

fn parse_messages(items: &[Value]) -> Result<Vec<Message>, RequestError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_message(i, item))
        .collect()
}

fn parse_message(index: usize, item: &Value) -> Result<Message, RequestError> {
    let Value::Object(fields) = item else {
        return Err(wrong_type(format!("messages[{index}]"), "an object"));
    };
    let role = match fields.get("role") {
        Some(Value::String(role)) => role.clone(),
        None => {
            return Err(wrong_type(
                format!("messages[{index}].role"),
                "a string (it is missing)",
            ))
        }
        Some(_) => return Err(wrong_type(format!("messages[{index}].role"), "a string")),
    };
    let (text, has_image) = match fields.get("content") {
        None | Some(Value::Null) => (String::new(), false),
        Some(Value::String(text)) => (text.clone(), false),
        Some(Value::Array(parts)) => parse_parts(index, parts)?,
        Some(_) => {
            return Err(wrong_type(
                format!("messages[{index}].content"),
                "a string, an array of content parts, or null",
            ))
        }
    };
    let tool_calls =
        matches!(fields.get("tool_calls"), Some(Value::Array(calls)) if !calls.is_empty());
    Ok(Message {
        role,
        text,
        has_image,
        tool_calls,
    })
}

fn parse_parts(index: usize, parts: &[Value]) -> Result<(String, bool), RequestError> {
    let mut text = String::new();
    let mut has_image = false;
    for (j, part) in parts.iter().enumerate() {
        let Some(kind) = part.get("type").and_then(Value::as_str) else {
            return Err(wrong_type(
                format!("messages[{index}].content[{j}].type"),
                "a string",
            ));
        };
        match kind {
            "text" => {
                let Some(part_text) = part.get("text").and_then(Value::as_str) else {
                    return Err(wrong_type(
                        format!("messages[{index}].content[{j}].text"),
                        "a string",
                    ));
                };
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(part_text);
            }
            "image_url" | "input_image" => has_image = true,
            _ => {}
        }
    }
    Ok((text, has_image))
}

/// The text of a chat completion's first choice (empty when it has none).
pub fn reply_text(reply: &Value) -> &str {
    reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatRequest, RequestError> {
        ChatRequest::parse(body.as_bytes())
    }

    #[test]
    fn message_and_tool_lists_are_bounded() {
        let message = r#"{"role":"user","content":"hi"}"#;
        let at = |n: usize| vec![message; n].join(",");
        let fits = format!(r#"{{"model":"m","messages":[{}]}}"#, at(MAX_MESSAGES));
        assert!(parse(&fits).is_ok());
        let over = format!(r#"{{"model":"m","messages":[{}]}}"#, at(MAX_MESSAGES + 1));
        assert_eq!(
            parse(&over).unwrap_err().to_string(),
            "field `messages` holds 4097 entries; at most 4096 are accepted"
        );
        let tools = vec![r#"{"type":"function"}"#; MAX_TOOLS + 1].join(",");
        let over = format!(r#"{{"model":"m","messages":[{message}],"tools":[{tools}]}}"#);
        assert!(matches!(
            parse(&over),
            Err(RequestError::TooMany {
                field: "tools",
                count: 513,
                max: 512
            })
        ));
    }

    #[test]
    fn parses_text_and_parts_and_keeps_unknown_fields_when_rewriting() {
        let request = parse(
            r#"{"model":"mom/auto","temperature":0.2,"messages":[
                {"role":"system","content":"be brief"},
                {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}]}"#,
        )
        .unwrap();
        assert_eq!(request.last_user_text(), "hi");
        assert!(request.has_images());
        assert_eq!(request.user_turns(), 1);
        let body: Value = serde_json::from_slice(&request.into_body_for("qwen")).unwrap();
        assert_eq!(body["model"], "qwen");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["messages"][0]["content"], "be brief");
    }

    #[test]
    fn the_forwarded_body_is_the_clients_bytes_until_something_is_rewritten() {
        let sent = "{ \"messages\": [{\"role\":\"user\",\"content\":\"caf\\u00e9\"}],\n  \"model\": \"mom/auto\", \"top_p\": 1.0 }";
        let request = parse(sent).unwrap();
        let body = String::from_utf8(request.into_body_for("a \"quoted\" name")).unwrap();
        assert_eq!(body, sent.replace("\"mom/auto\"", r#""a \"quoted\" name""#));

        let mut edited = parse(sent).unwrap();
        edited
            .object_mut()
            .insert("seed".to_owned(), Value::from(7));
        let body = edited.into_body_for("qwen");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (body["model"].as_str(), body["seed"].as_i64()),
            (Some("qwen"), Some(7))
        );
        assert_eq!(body["messages"][0]["content"], "café");

        let mut streamed =
            parse(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}"#)
                .unwrap();
        assert!(streamed.ask_for_usage());
        let body: Value = serde_json::from_slice(&streamed.into_body_for("q")).unwrap();
        assert_eq!(body["stream_options"]["include_usage"], true);

        // A repeated key is written out once, as the signals read it.
        let smuggled = r#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}"#;
        let request = parse(smuggled).unwrap();
        assert_eq!(request.last_user_text(), "b");
        let body = String::from_utf8(request.into_body_for("q")).unwrap();
        assert_eq!(
            body,
            r#"{"model":"q","messages":[{"role":"user","content":"b"}]}"#
        );
    }

    #[test]
    fn a_tool_loop_is_open_until_the_model_answers_the_tool_results() {
        let call = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#;
        let result = r#"{"role":"tool","tool_call_id":"c1","content":"42"}"#;
        let user = r#"{"role":"user","content":"and now?"}"#;
        let answer = r#"{"role":"assistant","content":"it is 42"}"#;
        let open = |messages: &[&str]| {
            let body = format!(r#"{{"model":"m","messages":[{}]}}"#, messages.join(","));
            parse(&body).unwrap().tool_loop_active()
        };
        assert!(open(&[user, call, result]));
        assert!(open(&[user, call]));
        assert!(!open(&[user, call, result, answer, user]));
        assert!(!open(&[user]));
        assert!(
            !open(&[result]),
            "tool results without a call do not open a loop"
        );
    }

    #[test]
    fn rejects_each_kind_of_bad_body_with_a_precise_error() {
        assert_eq!(parse("  ").err(), Some(RequestError::Empty));
        assert!(matches!(
            ChatRequest::parse(b"{\"model\":\"\xff\"}"),
            Err(RequestError::NotUtf8 { offset: 10 })
        ));
        assert!(matches!(
            parse("{nope"),
            Err(RequestError::MalformedJson(_))
        ));
        assert_eq!(parse("[1]").err(), Some(RequestError::NotAnObject));
        assert_eq!(
            parse(r#"{"messages":[{"role":"user","content":"x"}]}"#).err(),
            Some(RequestError::MissingField("model"))
        );
        assert_eq!(
            parse(r#"{"model":"m"}"#).err(),
            Some(RequestError::MissingField("messages"))
        );
        assert_eq!(
            parse(r#"{"model":"m","messages":"hi"}"#)
                .unwrap_err()
                .to_string(),
            "field `messages` must be a non-empty array of messages"
        );
        assert_eq!(
            parse(r#"{"model":"m","messages":[{"role":1}]}"#)
                .unwrap_err()
                .to_string(),
            "field `messages[0].role` must be a string"
        );
        assert_eq!(
            parse(r#"{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}"#)
                .unwrap_err()
                .to_string(),
            "field `stream` must be a boolean"
        );
    }
}
