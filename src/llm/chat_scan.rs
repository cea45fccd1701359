//! The common request body read in one pass, with no JSON object built: when no object at any
//! depth repeats a key and every field the signals read has the type it must, the pass yields
//! those fields and where the top-level `model` value lies. Anything else (a repeated key, a
//! wrong type, a missing field, a list over its bound, malformed JSON) makes it give up, and the
//! full reading of `chat_json` names what is wrong. Each value it skips is still read as
//! `serde_json::Value` reads one (numbers in range, strings valid, nesting bounded), so a body
//! this pass accepts is one the full reading accepts, with the same fields.

use super::chat::{Message, MAX_MESSAGES, MAX_TOOLS};
use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::ops::Range;

/// The fields of a request body in the common case.
pub(super) struct Scanned {
    pub model: String,
    /// Where the top-level `model` value lies in the text.
    pub model_at: Range<usize>,
    pub messages: Vec<Message>,
    pub stream: bool,
    pub has_tools: bool,
    /// `max_completion_tokens`, else `max_tokens`, when a positive integer.
    pub max_tokens: Option<u64>,
}

/// Reads `text` when it is the common case; `None` when the full reading must decide.
pub(super) fn scan(text: &str) -> Option<Scanned> {
    let keys = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    let scanned = de.deserialize_map(Top { text, keys: &keys }).ok()?;
    de.end().ok()?;
    Some(scanned)
}

/// The keys of the objects being read, innermost last: each object checks its own for a repeat
/// when it ends, then drops them.
type Keys<'k, 'de> = &'k RefCell<Vec<Cow<'de, str>>>;

fn give_up<E: Error>() -> E {
    E::custom("not the common case")
}

/// Reads each entry of an object with `entry`, then gives up when a key repeated.
fn each_entry<'de, A: MapAccess<'de>>(
    map: &mut A,
    keys: Keys<'_, 'de>,
    mut entry: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let start = keys.borrow().len();
    while let Some(key) = map.next_key_seed(Key)? {
        entry(&key, map)?;
        keys.borrow_mut().push(key);
    }
    let mut keys = keys.borrow_mut();
    let own = &mut keys[start..];
    own.sort_unstable();
    let repeated = own.windows(2).any(|pair| pair[0] == pair[1]);
    keys.truncate(start);
    if repeated {
        return Err(give_up());
    }
    Ok(())
}

/// An object key, borrowed from the text unless it holds an escape.
#[derive(Clone, Copy)]
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Reads a value with the visitor `V`, whatever kind of value it is: the visitor refuses the
/// kinds it does not take.
#[derive(Clone, Copy)]
struct AnyOf<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for AnyOf<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        deserializer.deserialize_any(self.0)
    }
}

/// What a value was, as far as the request's fields need to know.
enum Seen<'de> {
    Null,
    Bool(bool),
    Unsigned(u64),
    Text(Cow<'de, str>),
    List(usize),
    Other,
}

/// Any value, read through and summed up as [`Seen`].
#[derive(Clone, Copy)]
struct Any<'k, 'de>(Keys<'k, 'de>);

impl<'de> Visitor<'de> for Any<'_, 'de> {
    type Value = Seen<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Seen<'de>, E> {
        Ok(Seen::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Seen<'de>, E> {
        Ok(Seen::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Seen<'de>, E> {
        Ok(Seen::Unsigned(v))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Seen<'de>, E> {
        Ok(Seen::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Seen<'de>, E> {
        Ok(Seen::Other)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Seen<'de>, E> {
        Ok(Seen::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Seen<'de>, E> {
        Ok(Seen::Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Seen<'de>, E> {
        Ok(Seen::Text(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen<'de>, A::Error> {
        let mut len = 0;
        while seq.next_element_seed(AnyOf(self))?.is_some() {
            len += 1;
        }
        Ok(Seen::List(len))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen<'de>, A::Error> {
        each_entry(&mut map, self.0, |_, map| {
            map.next_value_seed(AnyOf(self)).map(drop)
        })?;
        Ok(Seen::Other)
    }
}

/// The top-level object.
struct Top<'k, 'de> {
    text: &'de str,
    keys: Keys<'k, 'de>,
}

impl<'de> Visitor<'de> for Top<'_, 'de> {
    type Value = Scanned;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a chat-completion request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scanned, A::Error> {
        let any = AnyOf(Any(self.keys));
        let (mut model, mut messages, mut stream, mut has_tools) = (None, None, false, false);
        let (mut max_completion_tokens, mut max_tokens) = (None, None);
        let unsigned = |seen| match seen {
            Seen::Unsigned(n) => Some(n),
            _ => None,
        };
        each_entry(&mut map, self.keys, |key, map| {
            match key {
                "model" => {
                    let raw: &'de RawValue = map.next_value()?;
                    let start = raw.get().as_ptr() as usize - self.text.as_ptr() as usize;
                    let name: String = serde_json::from_str(raw.get()).map_err(|_| give_up())?;
                    model = Some((name, start..start + raw.get().len()));
                }
                "messages" => messages = Some(map.next_value_seed(AnyOf(Messages(self.keys)))?),
                "stream" => {
                    stream = match map.next_value_seed(any)? {
                        Seen::Null => false,
                        Seen::Bool(stream) => stream,
                        _ => return Err(give_up()),
                    }
                }
                "tools" => {
                    has_tools = match map.next_value_seed(any)? {
                        Seen::Null => false,
                        Seen::List(n) if n <= MAX_TOOLS => n > 0,
                        _ => return Err(give_up()),
                    }
                }
                "max_completion_tokens" => {
                    max_completion_tokens = unsigned(map.next_value_seed(any)?);
                }
                "max_tokens" => max_tokens = unsigned(map.next_value_seed(any)?),
                _ => drop(map.next_value_seed(any)?),
            }
            Ok(())
        })?;
        let ((model, model_at), messages) = model.zip(messages).ok_or_else(give_up)?;
        Ok(Scanned {
            model,
            model_at,
            messages,
            stream,
            has_tools,
            max_tokens: max_completion_tokens.or(max_tokens).filter(|n| *n > 0),
        })
    }
}

/// The `messages` list: non-empty, within its bound, each entry a message.
struct Messages<'k, 'de>(Keys<'k, 'de>);

impl<'de> Visitor<'de> for Messages<'_, 'de> {
    type Value = Vec<Message>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Message>, A::Error> {
        let mut messages = Vec::new();
        while let Some(message) = seq.next_element_seed(AnyOf(OneMessage(self.0)))? {
            if messages.len() == MAX_MESSAGES {
                return Err(give_up());
            }
            messages.push(message);
        }
        if messages.is_empty() {
            return Err(give_up());
        }
        Ok(messages)
    }
}

/// One message: a string `role`, its content, and whether it carries tool calls.
#[derive(Clone, Copy)]
struct OneMessage<'k, 'de>(Keys<'k, 'de>);

impl<'de> Visitor<'de> for OneMessage<'_, 'de> {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let any = AnyOf(Any(self.0));
        let (mut role, mut content, mut tool_calls) = (None, None, false);
        each_entry(&mut map, self.0, |key, map| {
            match key {
                "role" => match map.next_value_seed(any)? {
                    Seen::Text(text) => role = Some(text.into_owned()),
                    _ => return Err(give_up()),
                },
                "content" => content = Some(map.next_value_seed(AnyOf(Content(self.0)))?),
                "tool_calls" => {
                    tool_calls = matches!(map.next_value_seed(any)?, Seen::List(n) if n > 0);
                }
                _ => drop(map.next_value_seed(any)?),
            }
            Ok(())
        })?;
        let (text, has_image) = content.unwrap_or_default();
        Ok(Message {
            role: role.ok_or_else(give_up)?,
            text,
            has_image,
            tool_calls,
        })
    }
}

/// A message's content: null, a string, or a list of parts (text parts joined by newlines).
struct Content<'k, 'de>(Keys<'k, 'de>);

impl<'de> Visitor<'de> for Content<'_, 'de> {
    type Value = (String, bool);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("message content")
    }

    fn visit_unit<E>(self) -> Result<(String, bool), E> {
        Ok((String::new(), false))
    }

    fn visit_str<E>(self, v: &str) -> Result<(String, bool), E> {
        Ok((v.to_owned(), false))
    }

    fn visit_string<E>(self, v: String) -> Result<(String, bool), E> {
        Ok((v, false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(String, bool), A::Error> {
        let (mut text, mut has_image) = (String::new(), false);
        while let Some(part) = seq.next_element_seed(AnyOf(Part(self.0)))? {
            match part {
                Piece::Text(part) => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&part);
                }
                Piece::Image => has_image = true,
                Piece::Other => {}
            }
        }
        Ok((text, has_image))
    }
}

/// What one content part gives the message.
enum Piece<'de> {
    Text(Cow<'de, str>),
    Image,
    Other,
}

/// One content part: an object with a string `type`, and a string `text` when a text part.
#[derive(Clone, Copy)]
struct Part<'k, 'de>(Keys<'k, 'de>);

impl<'de> Visitor<'de> for Part<'_, 'de> {
    type Value = Piece<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content part")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Piece<'de>, A::Error> {
        let any = AnyOf(Any(self.0));
        let (mut kind, mut text) = (None, None);
        each_entry(&mut map, self.0, |key, map| {
            match key {
                "type" => kind = Some(map.next_value_seed(any)?),
                "text" => text = Some(map.next_value_seed(any)?),
                _ => drop(map.next_value_seed(any)?),
            }
            Ok(())
        })?;
        let Some(Seen::Text(kind)) = kind else {
            return Err(give_up());
        };
        match (&*kind, text) {
            ("text", Some(Seen::Text(text))) => Ok(Piece::Text(text)),
            ("text", _) => Err(give_up()),
            ("image_url" | "input_image", _) => Ok(Piece::Image),
            _ => Ok(Piece::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ChatRequest;

    const SEEDS: &[&str] = &[
        r#"{"model":"mom/auto","messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"text":"b","type":"text"}]}],"model":"m","stream":true,"max_tokens":7}"#,
        r#"{"model":"m","max_completion_tokens":0,"max_tokens":9,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"assistant","tool_calls":[{"id":"c"}],"content":""},{"role":"tool","content":"4"}]}"#,
        r#"{"mod\u0065l":"a\"b","messages":[{"role":"us\u0065r","content":"caf\u00e9","x":[1,-2,3.5,1e300,{"k":{"j":[]}}]}],"stream":null,"tools":null,"n":18446744073709551615}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}],"model":"n"}"#,
    ];

    /// Every body one byte away from a seed: each byte removed, replaced or preceded by one of
    /// a few that change JSON's structure or types.
    fn neighbours(seed: &str) -> Vec<Vec<u8>> {
        let bytes = seed.as_bytes();
        let mut out = vec![bytes.to_vec()];
        for i in 0..=bytes.len() {
            for b in *br#""{}[],:1-.en\ x"# {
                let mut inserted = bytes.to_vec();
                inserted.insert(i, b);
                out.push(inserted);
                if i < bytes.len() {
                    let mut replaced = bytes.to_vec();
                    replaced[i] = b;
                    out.push(replaced);
                }
            }
            if i < bytes.len() {
                let mut removed = bytes.to_vec();
                removed.remove(i);
                out.push(removed);
            }
        }
        out
    }

    #[test]
    fn gives_up_only_where_the_full_reading_refuses_or_a_key_repeats_and_else_agrees() {
        let (mut scanned, mut given_up, mut repeated) = (0, 0, 0);
        for body in SEEDS.iter().flat_map(|seed| neighbours(seed)) {
            let Ok(text) = std::str::from_utf8(&body) else {
                continue;
            };
            let full = ChatRequest::parse_in_full(text);
            match scan(text) {
                Some(fast) => {
                    scanned += 1;
                    let full = full.unwrap_or_else(|e| panic!("{text}: scanned, but {e}"));
                    assert_eq!(full.model, fast.model, "{text}");
                    assert_eq!(full.messages, fast.messages, "{text}");
                    assert_eq!((full.stream, full.has_tools), (fast.stream, fast.has_tools));
                    assert_eq!(full.max_tokens(), fast.max_tokens, "{text}");
                    let spliced = ChatRequest::parse(text.as_bytes())
                        .unwrap()
                        .into_body_for("q");
                    assert_eq!(spliced, full.into_body_for("q"), "{text}");
                    let at: String = serde_json::from_str(&text[fast.model_at]).unwrap();
                    assert_eq!(at, fast.model, "{text}");
                }
                None => {
                    given_up += 1;
                    if let Ok(full) = full {
                        repeated += 1;
                        // Accepted whole: only a repeated key can have made the pass give up.
                        let read = super::super::chat_json::parse_object(text)
                            .unwrap()
                            .unwrap();
                        assert_eq!(read.model_at, None, "{text}");
                        assert_eq!(full.into_body_for("q"), {
                            let parsed = ChatRequest::parse(text.as_bytes()).unwrap();
                            parsed.into_body_for("q")
                        });
                    }
                }
            }
        }
        assert!(scanned > 100 && given_up > 1000 && repeated > 10);
    }
}
