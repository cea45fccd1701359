//! A complete answer in hand — a forwarded request's held body, or a looper's or the cache's
//! reply — parsed once: its bytes, its JSON (a JSON body) and the text the model wrote, kept
//! together so every obligation reads the same parse and a replacement re-parses once.

use super::pii_mask::Masker;
use serde_json::Value;
use std::sync::Arc;

/// A complete chat-completion answer, JSON or server-sent events.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    body: Vec<u8>,
    stream: bool,
    json: Option<Value>,
    text: String,
    changed: bool,
}

impl Held {
    /// Parses `body` (events when `stream`). A JSON body that does not parse has no JSON and no
    /// text: a check then reads the empty answer.
    pub fn new(body: Vec<u8>, stream: bool) -> Self {
        let json = if stream {
            None
        } else {
            serde_json::from_slice::<Value>(&body).ok()
        };
        let text = match &json {
            Some(completion) => crate::llm::chat::reply_text(completion).to_owned(),
            None if stream => crate::llm::usage::streamed_text(&body),
            None => String::new(),
        };
        Self {
            body,
            stream,
            json,
            text,
            changed: false,
        }
    }

    /// The bytes the client would get.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Whether the answer streams.
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The parsed completion of a JSON answer.
    pub fn json(&self) -> Option<&Value> {
        self.json.as_ref()
    }

    /// The text of the first choice (its deltas joined, for events).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True once the answer was replaced or rewritten.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Another answer takes this one's place (a repaired one, a fallback).
    pub fn replace(&mut self, body: Vec<u8>) {
        *self = Self {
            changed: true,
            ..Self::new(body, self.stream)
        };
    }

    /// Puts back the personal data `masker` replaced with placeholders: in the parsed JSON (no
    /// second parse), or event by event.
    pub fn restore(&mut self, masker: &Arc<Masker>) {
        match &mut self.json {
            Some(completion) => {
                masker.restore_reply(completion);
                self.body = completion.to_string().into_bytes();
                self.text = crate::llm::chat::reply_text(completion).to_owned();
                self.changed = true;
            }
            None => {
                let body = masker.restore_body(&self.body);
                self.replace(body);
            }
        }
    }

    /// The bytes, given up.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_once_in_either_form() {
        let json = br#"{"choices":[{"message":{"role":"assistant","content":"Paris."}}]}"#;
        let held = Held::new(json.to_vec(), false);
        assert_eq!(held.text(), "Paris.");
        assert!(held.json().is_some() && !held.changed());
        let events = "data: {\"choices\":[{\"delta\":{\"content\":\"Par\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"is.\"}}]}\n\ndata: [DONE]\n\n";
        let held = Held::new(events.as_bytes().to_vec(), true);
        assert_eq!((held.text(), held.json()), ("Paris.", None));
        let broken = Held::new(b"{not json".to_vec(), false);
        assert_eq!((broken.text(), broken.json()), ("", None));
        let mut replaced = Held::new(json.to_vec(), false);
        replaced.replace(br#"{"choices":[{"message":{"content":"Lyon."}}]}"#.to_vec());
        assert_eq!(replaced.text(), "Lyon.");
        assert!(replaced.changed());
    }
}
