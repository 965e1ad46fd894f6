//! The JSON Lines record format shared by `atlas import` and `atlas export`.
//!
//! One memory per line:
//! `{"text", "session"?, "speaker"?, "time"?, "meta"?, "scope"?, "kind"?, "body"?, "recorded_at"?,
//! "valid_from"?, "valid_until"?, "id"?}`. Only `text` is required; `time` defaults to the
//! import time, `kind` to `episode`. In such a file `id` is ignored on import (the store
//! assigns new ids). Unknown fields are errors rather than silently dropped data.
//!
//! A full export (what `atlas export` writes) starts with a header line,
//! `{"atlas_export": {"format": 1, "embedding_model"?: {"name", "dimension"}}}`, and ends with
//! a trailer line, `{"atlas_export_end": {"memories": N}}`, so that a file cut short is
//! refused rather than half restored. Every line between is a stored memory: the fields above
//! with `id` required, plus
//! `"context"?` (the turn it answers), `"consolidated_at"?` (an episode a sleep cycle consumed),
//! `"edges"?` (the typed edges it carries: those whose
//! other end has a smaller id, `{"src", "dst", "kind", "weight", "valid_from", "valid_until"?,
//! "recorded_at"}`), `"lifecycle"?` (`{"deleted_at"?, "last_used"?, "uses"?, "review"?}`, what
//! happened to it since: soft deletion, use) and `"vector"?` (with `export --vectors`). Importing it restores the space
//! exactly, renumbering every reference when the space already holds memories. After the
//! memories come the ledger of sleep cycles, one `{"atlas_cycle": {"at", "report"}}` line each.
//!
//! Trajectories (what the agent memories learn from) are lines of their own shape:
//! [`parse_trajectory_line`].

use crate::ports::{EmbeddingModel, StoredMemory};
use crate::{Body, Edge, EdgeKind, Memory, MemoryId, MemoryKind, NewMemory, Scope, Timestamp, Validity};
use serde_json::{Map, Value};
use std::fmt;

#[cfg(test)]
mod tests;
mod trajectory;

pub use trajectory::parse_trajectory_line;

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

/// The fields only a full export's lines carry.
const STORED_FIELDS: [&str; 5] = ["context", "edges", "lifecycle", "vector", "consolidated_at"];

/// The key of a full export's header line.
pub const HEADER_KEY: &str = "atlas_export";

/// The format version this build writes and reads.
pub const EXPORT_FORMAT: u64 = 1;

/// The key of a full export's trailer line.
pub const TRAILER_KEY: &str = "atlas_export_end";

/// The first line of a full export.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportHeader {
    /// The model that made the vectors, when the export carries them.
    pub embedding_model: Option<EmbeddingModel>,
}

/// The key of a line of a full export that holds one row of the ledger of sleep cycles:
/// `{"atlas_cycle": {"at", "report"}}`, between the memories and the trailer.
pub const CYCLE_KEY: &str = "atlas_cycle";

/// A cycle's line.
pub fn cycle_line(cycle: &crate::ports::CycleRecord) -> Value {
    serde_json::json!({ CYCLE_KEY: { "at": cycle.at.to_rfc3339(), "report": cycle.report } })
}

/// Reads a cycle's line; `None` when the line is not one.
pub fn parse_cycle(line: &str) -> Result<Option<crate::ports::CycleRecord>, LineError> {
    let Ok(obj) = object(line) else { return Ok(None) };
    let Some(cycle) = obj.get(CYCLE_KEY) else { return Ok(None) };
    let Value::Object(cycle) = cycle else {
        return Err(LineError::at(CYCLE_KEY, format!("expected an object, got {}", type_name(cycle))));
    };
    let at = opt_time(cycle, "at")
        .map_err(|e| LineError::at(&format!("{CYCLE_KEY}.at"), e.message))?
        .ok_or_else(|| LineError::at(&format!("{CYCLE_KEY}.at"), "missing"))?;
    let report = cycle.get("report").cloned().unwrap_or(Value::Null);
    Ok(Some(crate::ports::CycleRecord { at, report }))
}

/// The last line of a full export: how many memories it holds.
pub fn trailer_line(memories: u64) -> Value {
    serde_json::json!({ TRAILER_KEY: { "memories": memories } })
}

/// Reads a full export's trailer line; `None` when the line is not one.
pub fn parse_trailer(line: &str) -> Result<Option<u64>, LineError> {
    let Ok(obj) = object(line) else { return Ok(None) };
    let Some(trailer) = obj.get(TRAILER_KEY) else { return Ok(None) };
    trailer
        .get("memories")
        .and_then(Value::as_u64)
        .map(Some)
        .ok_or_else(|| LineError::at(&format!("{TRAILER_KEY}.memories"), "missing or not a number"))
}

fn object(line: &str) -> Result<Map<String, Value>, LineError> {
    let value = crate::strict_json::from_str(line).map_err(|e| match e.field {
        Some(field) => LineError::at(&field, e.message),
        None => LineError::at("line", format!("not valid JSON ({e})")),
    })?;
    match value {
        Value::Object(obj) => Ok(obj),
        _ => Err(LineError::at("line", "expected a JSON object")),
    }
}

/// Parses one line into a memory; `now` fills `time` and `recorded_at` when absent.
pub fn parse_line(line: &str, now: Timestamp) -> Result<NewMemory, LineError> {
    let obj = object(line)?;
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        if STORED_FIELDS.contains(&unknown.as_str()) || unknown == HEADER_KEY || unknown == TRAILER_KEY {
            return Err(LineError::at(
                unknown,
                "only a full export carries this field, and its first line must be the export's header",
            ));
        }
        return Err(LineError::at(unknown, format!("unknown field (known fields: {})", FIELDS.join(", "))));
    }
    parse_memory(&obj, now)
}

/// Reads a full export's header line; `None` when the line is not one (a plain import file).
pub fn parse_header(line: &str) -> Result<Option<ExportHeader>, LineError> {
    let Ok(obj) = object(line) else { return Ok(None) };
    let Some(header) = obj.get(HEADER_KEY) else { return Ok(None) };
    let field = |name: &str| format!("{HEADER_KEY}.{name}");
    let Value::Object(h) = header else {
        return Err(LineError::at(HEADER_KEY, format!("expected an object, got {}", type_name(header))));
    };
    match h.get("format").and_then(Value::as_u64) {
        Some(EXPORT_FORMAT) => {}
        Some(other) => {
            return Err(LineError::at(
                &field("format"),
                format!("format {other} is newer than this atlas reads (up to {EXPORT_FORMAT}); upgrade atlas"),
            ));
        }
        None => return Err(LineError::at(&field("format"), "missing or not a number")),
    }
    let embedding_model = match h.get("embedding_model") {
        None | Some(Value::Null) => None,
        Some(m) => {
            let name = m.get("name").and_then(Value::as_str);
            let dimension = m.get("dimension").and_then(Value::as_u64);
            match (name, dimension) {
                (Some(name), Some(dimension)) => {
                    Some(EmbeddingModel { name: name.to_owned(), dimension: dimension as usize })
                }
                _ => return Err(LineError::at(&field("embedding_model"), "expected {\"name\", \"dimension\"}")),
            }
        }
    };
    Ok(Some(ExportHeader { embedding_model }))
}

/// Writes a full export's header line.
pub fn header_line(header: &ExportHeader) -> Value {
    let mut h = Map::new();
    h.insert("format".into(), Value::from(EXPORT_FORMAT));
    if let Some(m) = &header.embedding_model {
        h.insert("embedding_model".into(), serde_json::json!({"name": m.name, "dimension": m.dimension}));
    }
    let mut obj = Map::new();
    obj.insert(HEADER_KEY.into(), Value::Object(h));
    Value::Object(obj)
}

/// Parses one line of a full export.
pub fn parse_stored_line(line: &str, now: Timestamp) -> Result<StoredMemory, LineError> {
    let obj = object(line)?;
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str()) && !STORED_FIELDS.contains(&k.as_str())) {
        return Err(LineError::at(
            unknown,
            format!("unknown field (known fields: {}, {})", FIELDS.join(", "), STORED_FIELDS.join(", ")),
        ));
    }
    let id = match obj.get("id") {
        Some(Value::Number(n)) => n.as_i64().filter(|n| *n > 0).map(MemoryId),
        Some(_) => None,
        None => return Err(LineError::at("id", "missing (every line of a full export has one)")),
    }
    .ok_or_else(|| LineError::at("id", "expected a positive integer"))?;
    let mut memory = parse_memory(&obj, now)?.with_id(id);
    memory.context = opt_string(&obj, "context")?;
    if let Some(lifecycle) = obj.get("lifecycle").filter(|v| !v.is_null()) {
        memory.lifecycle =
            serde_json::from_value(lifecycle.clone()).map_err(|e| LineError::at("lifecycle", e.to_string()))?;
    }
    let edges = match obj.get("edges") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            items.iter().enumerate().map(|(i, e)| parse_edge(e, &format!("edges[{i}]"))).collect::<Result<_, _>>()?
        }
        Some(other) => return Err(LineError::at("edges", format!("expected an array, got {}", type_name(other)))),
    };
    let vector = match obj.get("vector") {
        None | Some(Value::Null) => None,
        Some(Value::Array(xs)) => Some(
            xs.iter()
                .enumerate()
                .map(|(i, x)| {
                    x.as_f64()
                        .map(|x| x as f32)
                        .ok_or_else(|| LineError::at(&format!("vector[{i}]"), "expected a number"))
                })
                .collect::<Result<Vec<f32>, _>>()?,
        ),
        Some(other) => return Err(LineError::at("vector", format!("expected an array, got {}", type_name(other)))),
    };
    let consolidated_at = opt_time(&obj, "consolidated_at")?;
    Ok(StoredMemory { memory, vector, edges, consolidated_at })
}

fn parse_edge(value: &Value, at: &str) -> Result<Edge, LineError> {
    let field = |name: &str| format!("{at}.{name}");
    let Value::Object(e) = value else {
        return Err(LineError::at(at, format!("expected an object, got {}", type_name(value))));
    };
    let id = |name: &str| {
        e.get(name)
            .and_then(Value::as_i64)
            .filter(|n| *n > 0)
            .map(MemoryId)
            .ok_or_else(|| LineError::at(&field(name), "expected a memory id (a positive integer)"))
    };
    let kind = e
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| LineError::at(&field("kind"), "missing or not a string"))?
        .parse::<EdgeKind>()
        .map_err(|m| LineError::at(&field("kind"), m))?;
    let weight = e
        .get("weight")
        .map_or(Some(1.0), Value::as_f64)
        .ok_or_else(|| LineError::at(&field("weight"), "expected a number"))?;
    let time = |name: &str| -> Result<Option<Timestamp>, LineError> {
        match e.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Timestamp::parse(s).map(Some).map_err(|m| LineError::at(&field(name), m)),
            Some(other) => Err(LineError::at(&field(name), format!("expected a string, got {}", type_name(other)))),
        }
    };
    let valid_from = time("valid_from")?.ok_or_else(|| LineError::at(&field("valid_from"), "missing"))?;
    let recorded_at = time("recorded_at")?.ok_or_else(|| LineError::at(&field("recorded_at"), "missing"))?;
    Ok(Edge {
        src: id("src")?,
        dst: id("dst")?,
        kind,
        weight: weight as f32,
        validity: Validity { valid_from, valid_until: time("valid_until")? },
        recorded_at,
    })
}

fn edge_value(e: &Edge) -> Value {
    let mut obj = Map::new();
    obj.insert("src".into(), Value::from(e.src.0));
    obj.insert("dst".into(), Value::from(e.dst.0));
    obj.insert("kind".into(), Value::from(e.kind.as_str()));
    obj.insert("weight".into(), Value::from(f64::from(e.weight)));
    obj.insert("valid_from".into(), Value::from(e.validity.valid_from.to_rfc3339()));
    if let Some(until) = e.validity.valid_until {
        obj.insert("valid_until".into(), Value::from(until.to_rfc3339()));
    }
    obj.insert("recorded_at".into(), Value::from(e.recorded_at.to_rfc3339()));
    Value::Object(obj)
}

/// Writes a stored memory as one line of a full export, which [`parse_stored_line`] reads
/// back to the same record; the vector only when `with_vector`.
pub fn stored_to_line(item: &StoredMemory, with_vector: bool) -> Value {
    let mut line = to_line(&item.memory);
    let Value::Object(obj) = &mut line else { unreachable!("to_line writes an object") };
    if let Some(context) = &item.memory.context {
        obj.insert("context".into(), Value::from(context.clone()));
    }
    if !item.memory.lifecycle.is_fresh() {
        obj.insert("lifecycle".into(), serde_json::to_value(item.memory.lifecycle).expect("a lifecycle serialises"));
    }
    if !item.edges.is_empty() {
        obj.insert("edges".into(), Value::Array(item.edges.iter().map(edge_value).collect()));
    }
    if let Some(at) = item.consolidated_at {
        obj.insert("consolidated_at".into(), Value::from(at.to_rfc3339()));
    }
    if with_vector && let Some(v) = &item.vector {
        obj.insert("vector".into(), Value::Array(v.iter().map(|x| Value::from(f64::from(*x))).collect()));
    }
    line
}

fn parse_memory(obj: &Map<String, Value>, now: Timestamp) -> Result<NewMemory, LineError> {
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
    if let Some(session) = opt_string(obj, "session")? {
        if scope.session.as_ref().is_some_and(|s| *s != session) {
            return Err(LineError::at("session", "differs from scope.session"));
        }
        scope.set("session", &session).map_err(|m| LineError::at("session", m))?;
    }
    let event_time = opt_time(obj, "time")?.unwrap_or(now);
    let recorded_at = opt_time(obj, "recorded_at")?.unwrap_or(now);
    let validity = Validity {
        valid_from: opt_time(obj, "valid_from")?.unwrap_or(event_time),
        valid_until: opt_time(obj, "valid_until")?,
    };
    let meta = match obj.get("meta") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(LineError::at("meta", format!("expected an object, got {}", type_name(other))));
        }
    };
    let kind = match opt_string(obj, "kind")? {
        None => MemoryKind::Episode,
        Some(k) => k.parse::<MemoryKind>().map_err(|m| LineError::at("kind", m))?,
    };
    let speaker = opt_string(obj, "speaker")?;
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
