//! What every stream translator shares: a Chat Completions event stream split into lines across
//! chunks (at most [`MAX_LINE`] held), `data:` lines parsed, `[DONE]` and the end closing the
//! stream once, an upstream error event ending it, the final usage chunk read, and the first
//! choice picked. A protocol supplies its events ([`Events`]).

use serde_json::Value;

/// Longest event line held while waiting for its newline; a longer one ends the stream with
/// an error event.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// What one protocol emits for the chat stream's parts.
pub trait Events: Default {
    /// Events for one chat chunk (the first one opens the answer); `choice` is its first choice.
    fn chunk(&mut self, chunk: &Value, choice: Option<&Value>) -> Vec<u8>;
    /// The closing events; `usage` is the final (prompt, completion) token count.
    fn end(&mut self, usage: (u64, u64)) -> Vec<u8>;
    /// An error event that ends the stream.
    fn error(&mut self, message: &str) -> Vec<u8>;
}

/// Translates one stream into `E`'s events; feed it every chunk, then [`Translator::finish`].
#[derive(Debug, Default)]
pub struct Translator<E> {
    line: Vec<u8>,
    finished: bool,
    usage: (u64, u64),
    events: E,
}

impl<E: Events> Translator<E> {
    /// The events for `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &byte in chunk {
            if self.finished {
                break;
            }
            if byte != b'\n' {
                self.line.push(byte);
                if self.line.len() > MAX_LINE {
                    self.line.clear();
                    self.finished = true;
                    out.extend(self.events.error("an upstream event line exceeded 4 MiB"));
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
        if !self.line.is_empty() && !self.finished {
            let line = std::mem::take(&mut self.line);
            out.extend(self.on_line(&line));
        }
        if !self.finished {
            self.finished = true;
            out.extend(self.events.end(self.usage));
        }
        out
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
            self.finished = true;
            return self.events.error(message);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = (
                usage["prompt_tokens"].as_u64().unwrap_or(self.usage.0),
                usage["completion_tokens"].as_u64().unwrap_or(self.usage.1),
            );
        }
        let choice = chunk["choices"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["index"].as_u64().unwrap_or(0) == 0));
        self.events.chunk(&chunk, choice)
    }
}

/// A whole chat event stream translated at once (a held body).
pub fn translate_all<E: Events>(stream: &[u8]) -> Vec<u8> {
    let mut translator = Translator::<E>::default();
    let mut out = translator.push(stream);
    out.extend(translator.finish());
    out
}

/// A chat stream for the translators' tests: text, then a tool call in two argument parts,
/// the finish reason, the usage chunk and `[DONE]`.
#[cfg(test)]
pub fn sample_stream() -> String {
    use serde_json::json;
    let chunk = |delta: Value, finish: Option<&str>| {
        let chunk = json!({"id": "c9", "model": "qwen",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
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

/// Checks that every chunking of [`sample_stream`] gives the events of the whole.
#[cfg(test)]
pub fn assert_chunking_invariant<E: Events>() {
    let whole = translate_all::<E>(sample_stream().as_bytes());
    let bytes = sample_stream().into_bytes();
    for size in [1, 2, 3, 7, 64, 1000] {
        let mut translator = Translator::<E>::default();
        let mut out: Vec<u8> = bytes
            .chunks(size)
            .flat_map(|c| translator.push(c))
            .collect();
        out.extend(translator.finish());
        assert_eq!(out, whole, "chunks of {size}");
    }
}

/// The `(event, data)` pairs of translated bytes.
#[cfg(test)]
pub fn parse_events(bytes: &[u8]) -> Vec<(String, Value)> {
    String::from_utf8_lossy(bytes)
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .filter_map(|e| {
            let (kind, data) = e.split_once('\n')?;
            let kind = kind.strip_prefix("event: ")?.to_owned();
            Some((
                kind,
                serde_json::from_str(data.strip_prefix("data: ")?).ok()?,
            ))
        })
        .collect()
}
