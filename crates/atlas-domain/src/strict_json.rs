//! JSON read strictly: an object that names a key twice is refused, naming the key's path.
//! serde_json keeps the last of two (`{"text": "a", "text": "b"}` would store "b"); a request
//! or an import line that says two things in one place is ambiguous, so every door that reads
//! JSON it did not write reads it here.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// Why a text is not strict JSON: `field` is the path of a key given twice (`meta.source`),
/// `None` for a syntax error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrictError {
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Parses `text` as one JSON value, refusing any object with a repeated key.
pub fn from_slice(text: &[u8]) -> Result<Value, StrictError> {
    let path = RefCell::new(Vec::new());
    let repeated = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(text);
    let parsed = Strict { path: &path, repeated: &repeated }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| match repeated.into_inner() {
        Some(field) => StrictError { message: format!("`{field}` is given twice"), field: Some(field) },
        None => StrictError { field: None, message: e.to_string() },
    })
}

/// [`from_slice`] of a string.
pub fn from_str(text: &str) -> Result<Value, StrictError> {
    from_slice(text.as_bytes())
}

/// One step of the path to a value: a key, or an index (kept as a number, so that a long
/// array costs no allocation per item).
enum Step {
    Key(String),
    Index(usize),
}

/// A value being read, with the steps above it (`path`) and, once found, the repeated key.
#[derive(Clone, Copy)]
struct Strict<'a> {
    path: &'a RefCell<Vec<Step>>,
    repeated: &'a RefCell<Option<String>>,
}

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
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
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

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.path.borrow_mut().push(Step::Index(items.len()));
            let item = seq.next_element_seed(self);
            self.path.borrow_mut().pop();
            match item? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let mut field = String::new();
                for step in self.path.borrow().iter().chain([&Step::Key(key)]) {
                    match step {
                        Step::Key(k) if field.is_empty() => field.push_str(k),
                        Step::Key(k) => field.push_str(&format!(".{k}")),
                        Step::Index(i) => field.push_str(&format!("[{i}]")),
                    }
                }
                *self.repeated.borrow_mut() = Some(field.clone());
                return Err(de::Error::custom(format!("`{field}` is given twice")));
            }
            self.path.borrow_mut().push(Step::Key(key.clone()));
            let value = map.next_value_seed(self);
            self.path.borrow_mut().pop();
            object.insert(key, value?);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_repeated_key_is_refused_with_its_path() {
        let e = from_str(r#"{"text": "a", "text": "b"}"#).unwrap_err();
        assert_eq!((e.field.as_deref(), e.message.as_str()), (Some("text"), "`text` is given twice"));
        let e = from_str(r#"{"meta": {"a": 1, "a": 2}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("meta.a"));
        let e = from_str(r#"{"memories": [{"text": "x"}, {"text": "y", "text": "z"}]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("memories[1].text"));
        // The same key in two objects is not a repetition.
        assert_eq!(from_str(r#"[{"a": 1}, {"a": 2}]"#).unwrap(), json!([{"a": 1}, {"a": 2}]));
    }

    #[test]
    fn syntax_errors_name_no_field() {
        let e = from_str(r#"{"text": "#).unwrap_err();
        assert!(e.field.is_none() && e.message.contains("EOF"), "{e:?}");
        assert!(from_str("{} {}").is_err(), "one value only");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Strict reading agrees with serde_json on every JSON without a repeated key.
        #[test]
        fn reads_what_serde_json_reads(value in json_value()) {
            let text = value.to_string();
            prop_assert_eq!(from_str(&text).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        }
    }
}
