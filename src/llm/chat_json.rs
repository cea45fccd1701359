//! A request body read once into a JSON object, noting what lets the forwarded body be the
//! client's own bytes with only `model` replaced: where the top-level `model` value lies, and
//! whether any object, at any depth, repeats a key. A repeated key makes the bytes ambiguous
//! (parsers disagree on which copy counts), so such a body is written out again from what the
//! signals read instead of spliced.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::fmt;
use std::ops::Range;

/// A body read as an object.
pub(super) struct Parsed {
    /// The object, as `serde_json` reads it (a repeated key keeps its last value).
    pub object: Map<String, Value>,
    /// Where the top-level `model` value lies in the text, when the body can be spliced: no
    /// key repeats anywhere.
    pub model_at: Option<Range<usize>>,
}

/// Reads `text`; `Ok(None)` when it is JSON but not an object.
pub(super) fn parse_object(text: &str) -> Result<Option<Parsed>, serde_json::Error> {
    let repeated = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(text);
    let top = de.deserialize_any(Top {
        text,
        repeated: &repeated,
    })?;
    de.end()?;
    Ok(top.map(|(object, model_at)| Parsed {
        object,
        model_at: model_at.filter(|_| !repeated.get()),
    }))
}

/// The top level: an object whose `model` value is read raw, to find where it lies.
struct Top<'t, 'r> {
    text: &'t str,
    repeated: &'r Cell<bool>,
}

type TopValue = Option<(Map<String, Value>, Option<Range<usize>>)>;

impl<'de, 'r> Visitor<'de> for Top<'de, 'r> {
    type Value = TopValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopValue, A::Error> {
        let mut object = Map::new();
        let mut model_at = None;
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "model" {
                let raw: &'de RawValue = map.next_value()?;
                let start = raw.get().as_ptr() as usize - self.text.as_ptr() as usize;
                model_at = Some(start..start + raw.get().len());
                serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?
            } else {
                map.next_value_seed(Strict(self.repeated))?
            };
            if object.insert(key, value).is_some() {
                self.repeated.set(true);
            }
        }
        Ok(Some((object, model_at)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TopValue, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<TopValue, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<TopValue, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<TopValue, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<TopValue, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<TopValue, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<TopValue, E> {
        Ok(None)
    }
}

/// A nested value, read as `serde_json::Value` reads it, noting a repeated key.
#[derive(Clone, Copy)]
struct Strict<'r>(&'r Cell<bool>);

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if object.insert(key, value).is_some() {
                self.0.set(true);
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Parsed {
        parse_object(text)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("not an object"))
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"model":"m","n":[1,-2,3.5,1e300,18446744073709551615,null,true,"a\u00e9"],"o":{"k":{"j":[]}}}"#;
        let expected: Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(read(text).object, expected);
    }

    #[test]
    fn finds_the_model_value() {
        let text = "{ \"messages\": [], \"model\" :\t\"mom/auto\" , \"stream\": true }";
        let at = read(text).model_at.unwrap();
        assert_eq!(&text[at], "\"mom/auto\"");
        let escaped = r#"{"mod\u0065l":"m\"x","messages":[]}"#;
        let at = read(escaped).model_at.unwrap();
        assert_eq!(&escaped[at], r#""m\"x""#);
    }

    #[test]
    fn a_repeated_key_at_any_depth_forbids_splicing() {
        for text in [
            r#"{"model":"a","model":"b"}"#,
            r#"{"model":"a","messages":[],"messages":[]}"#,
            r#"{"model":"a","messages":[{"role":"user","content":"x","content":"y"}]}"#,
        ] {
            let parsed = read(text);
            assert_eq!(parsed.model_at, None, "{text}");
            let expected: Map<String, Value> = serde_json::from_str(text).unwrap();
            assert_eq!(parsed.object, expected, "{text}");
        }
    }

    #[test]
    fn other_values_are_not_objects_and_errors_are_serde_jsons() {
        for text in ["[1,{\"a\":2}]", "3", "\"s\"", "null", "true"] {
            assert!(parse_object(text).unwrap().is_none(), "{text}");
        }
        let ours = parse_object("{\"model\":").err().unwrap().to_string();
        let theirs = serde_json::from_str::<Value>("{\"model\":").err().unwrap();
        assert_eq!(ours, theirs.to_string());
        // Nesting past serde_json's depth limit is an error inside the object, never a deep
        // recursion; a deep array on its own is skipped without recursing, and is no object.
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert!(parse_object(&nested(100_000)).unwrap().is_none());
        for text in [
            format!("{{\"a\":{}}}", nested(200)),
            format!("{{\"model\":{}}}", nested(200)),
        ] {
            let error = parse_object(&text).err().unwrap().to_string();
            assert!(error.contains("recursion limit exceeded"), "{error}");
        }
    }
}
