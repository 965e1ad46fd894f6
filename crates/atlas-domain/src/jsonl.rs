//! The JSON Lines record format shared by `atlas import` and `atlas export`.
//!
//! One memory per line:
//! `{"text", "session"?, "speaker"?, "time"?, "meta"?, "scope"?, "kind"?, "body"?, "recorded_at"?,
//! "valid_from"?, "valid_until"?, "id"?}`. Only `text` is required; `time` defaults to the
//! import time, `kind` to `episode`. `id` is what `export` wrote and is ignored on import (the
//! store assigns new ids). Unknown fields are errors rather than silently dropped data.

use crate::{Body, Memory, MemoryKind, NewMemory, Scope, Timestamp, Validity};
use serde_json::{Map, Value};
use std::fmt;

const FIELDS: [&str; 12] = [
    "text",
    "session",
    "speaker",
    "time",
    "meta",
    "scope",
    "kind",
    "body",
    "recorded_at",
    "valid_from",
    "valid_until",
    "id",
];

/// What is wrong with one line, and in which field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub field: Option<String>,
    pub message: String,
}

impl LineError {
    fn at(field: &str, message: impl Into<String>) -> Self {
        LineError { field: Some(field.to_owned()), message: message.into() }
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "field \"{field}\": {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Parses one line into a memory; `now` fills `time` and `recorded_at` when absent.
pub fn parse_line(line: &str, now: Timestamp) -> Result<NewMemory, LineError> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| LineError { field: None, message: format!("not valid JSON ({e})") })?;
    let Value::Object(obj) = value else {
        return Err(LineError { field: None, message: "expected a JSON object".into() });
    };
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(LineError::at(unknown, format!("unknown field (known fields: {})", FIELDS.join(", "))));
    }

    let text = match obj.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(LineError::at("text", format!("expected a string, got {}", type_name(other))));
        }
        None => return Err(LineError::at("text", "missing")),
    };
    let mut scope = match obj.get("scope") {
        None | Some(Value::Null) => Scope::default(),
        Some(Value::Object(parts)) => {
            let mut scope = Scope::default();
            for (key, v) in parts {
                let field = format!("scope.{key}");
                let value = v
                    .as_str()
                    .ok_or_else(|| LineError::at(&field, format!("expected a string, got {}", type_name(v))))?;
                scope.set(key, value).map_err(|m| LineError::at(&field, m))?;
            }
            scope
        }
        Some(other) => {
            return Err(LineError::at(
                "scope",
                format!("expected an object such as {{\"user\": \"alice\"}}, got {}", type_name(other)),
            ));
        }
    };
    if let Some(session) = opt_string(&obj, "session")? {
        if scope.session.as_ref().is_some_and(|s| *s != session) {
            return Err(LineError::at("session", "differs from scope.session"));
        }
        scope.set("session", &session).map_err(|m| LineError::at("session", m))?;
    }
    let event_time = opt_time(&obj, "time")?.unwrap_or(now);
    let recorded_at = opt_time(&obj, "recorded_at")?.unwrap_or(now);
    let validity = Validity {
        valid_from: opt_time(&obj, "valid_from")?.unwrap_or(event_time),
        valid_until: opt_time(&obj, "valid_until")?,
    };
    let meta = match obj.get("meta") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(LineError::at("meta", format!("expected an object, got {}", type_name(other))));
        }
    };
    let kind = match opt_string(&obj, "kind")? {
        None => MemoryKind::Episode,
        Some(k) => k.parse::<MemoryKind>().map_err(|m| LineError::at("kind", m))?,
    };
    let speaker = opt_string(&obj, "speaker")?;
    let body = if kind == MemoryKind::Episode {
        if obj.contains_key("body") {
            return Err(LineError::at("body", "episodes carry no body (use \"speaker\")"));
        }
        Body::Episode { speaker }
    } else {
        if speaker.is_some() {
            return Err(LineError::at("speaker", format!("only episodes have a speaker, this is a {kind}")));
        }
        let mut fields = match obj.get("body") {
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                return Err(LineError::at("body", format!("expected an object, got {}", type_name(other))));
            }
            None => {
                return Err(LineError::at("body", format!("missing (required for kind {kind})")));
            }
        };
        fields.insert("kind".into(), Value::String(kind.as_str().into()));
        serde_json::from_value::<Body>(Value::Object(fields)).map_err(|e| LineError::at("body", e.to_string()))?
    };
    Ok(NewMemory { scope, text, event_time, recorded_at, validity, meta, body })
}

/// Writes a memory as one line that [`parse_line`] reads back to the same record.
pub fn to_line(memory: &Memory) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), Value::from(memory.id.0));
    obj.insert("kind".into(), Value::from(memory.kind().as_str()));
    obj.insert("text".into(), Value::from(memory.text.clone()));
    if let Some(session) = &memory.scope.session {
        obj.insert("session".into(), Value::from(session.clone()));
    }
    let scope = Scope { session: None, ..memory.scope.clone() };
    if !scope.is_empty() {
        obj.insert("scope".into(), serde_json::to_value(&scope).expect("scope serialises"));
    }
    match &memory.body {
        Body::Episode { speaker } => {
            if let Some(s) = speaker {
                obj.insert("speaker".into(), Value::from(s.clone()));
            }
        }
        other => {
            let mut body = serde_json::to_value(other).expect("body serialises");
            if let Value::Object(m) = &mut body {
                m.remove("kind");
            }
            obj.insert("body".into(), body);
        }
    }
    obj.insert("time".into(), Value::from(memory.event_time.to_rfc3339()));
    obj.insert("recorded_at".into(), Value::from(memory.recorded_at.to_rfc3339()));
    if memory.validity.valid_from != memory.event_time {
        obj.insert("valid_from".into(), Value::from(memory.validity.valid_from.to_rfc3339()));
    }
    if let Some(until) = memory.validity.valid_until {
        obj.insert("valid_until".into(), Value::from(until.to_rfc3339()));
    }
    if !memory.meta.is_empty() {
        obj.insert("meta".into(), Value::Object(memory.meta.clone()));
    }
    Value::Object(obj)
}

fn opt_string(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, LineError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(LineError::at(field, format!("expected a string, got {}", type_name(other)))),
    }
}

fn opt_time(obj: &Map<String, Value>, field: &str) -> Result<Option<Timestamp>, LineError> {
    opt_string(obj, field)?.map(|s| Timestamp::parse(&s).map_err(|m| LineError::at(field, m))).transpose()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryId;
    use proptest::prelude::*;

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    #[test]
    fn reads_the_locomo_harness_line() {
        let m = parse_line(
            r#"{"session": "conv-26/session_1", "speaker": "Caroline", "text": "Hey Mel!", "time": "2023-05-08T13:56:00Z", "meta": {"dia_id": "D1:1"}}"#,
            NOW,
        )
        .unwrap();
        assert_eq!(m.scope.session.as_deref(), Some("conv-26/session_1"));
        assert_eq!(m.body.speaker(), Some("Caroline"));
        assert_eq!(m.event_time, Timestamp::parse("2023-05-08T13:56:00Z").unwrap());
        assert_eq!(m.recorded_at, NOW);
        assert_eq!(m.meta["dia_id"], "D1:1");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"text": 5}"#, Some("text")),
            (r#"{"speaker": "x"}"#, Some("text")),
            (r#"{"text": "x", "time": "yesterday"}"#, Some("time")),
            (r#"{"text": "x", "scope": {"team": "a"}}"#, Some("scope.team")),
            (r#"{"text": "x", "txt": "typo"}"#, Some("txt")),
            (r#"{"text": "x", "kind": "fact"}"#, Some("body")),
            (r#"{"text": "x", "kind": "fact", "body": {"subject": "a"}}"#, Some("body")),
            (r#"{"text": "x", "meta": [1]}"#, Some("meta")),
            (r#"{"text": "x""#, None),
            (r#"[1, 2]"#, None),
        ];
        for (line, field) in cases {
            let err = parse_line(line, NOW).unwrap_err();
            assert_eq!(err.field.as_deref(), field, "{line}: {err}");
        }
        let unknown_scope = parse_line(r#"{"text": "x", "scope": {"team": "a"}}"#, NOW).unwrap_err();
        assert!(unknown_scope.to_string().contains("unknown scope \"team\""), "{unknown_scope}");
    }

    fn arb_text() -> impl Strategy<Value = String> {
        "\\PC{1,40}"
    }

    fn arb_body() -> impl Strategy<Value = Body> {
        prop_oneof![
            proptest::option::of("[a-zA-Z ]{1,10}").prop_map(|speaker| Body::Episode { speaker }),
            (arb_text(), arb_text(), arb_text(), 0u8..=100).prop_map(|(subject, predicate, object, c)| Body::Fact {
                subject,
                predicate,
                object,
                confidence: f32::from(c) / 100.0
            }),
            (arb_text(), 0u32..50, 0u32..50).prop_map(|(situation, successes, failures)| {
                Body::Strategy { suggestion: situation.to_uppercase(), situation, successes, failures }
            }),
            (arb_text(), proptest::collection::vec(1i64..100, 0..3)).prop_map(|(name, ids)| {
                Body::Concept {
                    code: format!("fn {name}() {{}}"),
                    name,
                    composed_of: ids.into_iter().map(MemoryId).collect(),
                }
            }),
        ]
    }

    prop_compose! {
        fn arb_memory()(
            text in arb_text(),
            user in proptest::option::of("[a-z]{1,8}"),
            session in proptest::option::of("[a-z0-9/_-]{1,12}"),
            t in 0i64..4_000_000_000_000,
            span in proptest::option::of(1i64..1_000_000),
            dia in proptest::option::of("D[0-9]{1,2}:[0-9]{1,3}"),
            body in arb_body(),
            id in 1i64..1_000_000,
        ) -> Memory {
            let mut meta = Map::new();
            if let Some(d) = dia { meta.insert("dia_id".into(), Value::from(d)); }
            Memory {
                id: MemoryId(id),
                scope: Scope { user, agent: None, session },
                text,
                event_time: Timestamp(t),
                recorded_at: Timestamp(t + 5),
                validity: Validity { valid_from: Timestamp(t), valid_until: span.map(|s| Timestamp(t + s)) },
                meta,
                body,
                context: None,
            }
        }
    }

    proptest! {
        #[test]
        fn export_then_import_is_identity(m in arb_memory()) {
            let line = to_line(&m).to_string();
            prop_assert_eq!(parse_line(&line, NOW).unwrap(), m.to_new());
        }

        #[test]
        fn parse_never_panics(line in ".{0,200}") {
            let _ = parse_line(&line, NOW);
        }
    }
}
