//! The graph as Cypher statements (seed 000 §7.2): memories as nodes labelled by kind, typed
//! edges with their validity, written as batched `UNWIND … CREATE` statements that Neo4j,
//! Memgraph and embedded engines (Kùzu, Ladybug) load as they are.
//!
//! Every node of every label carries the same properties (absent ones `null`), so that a
//! batch's rows have one shape (engines with typed tables require it) and a loader can declare
//! one schema for all labels: [`NODE_PROPERTIES`] and [`EDGE_PROPERTIES`].

use crate::{Body, Edge, EdgeKind, Memory, MemoryKind};
use serde_json::Value;
use std::fmt::Write;

/// Rows per `UNWIND` statement: large enough to load fast, small enough for any parser.
pub const BATCH: usize = 500;

/// The properties of every node, in the order written, with their types (as a typed engine
/// declares them: `INT64`, `STRING`, `DOUBLE`).
pub const NODE_PROPERTIES: [(&str, &str); 17] = [
    ("id", "INT64"),
    ("kind", "STRING"),
    ("text", "STRING"),
    ("user", "STRING"),
    ("agent", "STRING"),
    ("session", "STRING"),
    ("time", "STRING"),
    ("recorded_at", "STRING"),
    ("valid_from", "STRING"),
    ("valid_until", "STRING"),
    ("speaker", "STRING"),
    ("subject", "STRING"),
    ("predicate", "STRING"),
    ("object", "STRING"),
    ("confidence", "DOUBLE"),
    ("name", "STRING"),
    ("body", "STRING"),
];

/// The properties of every edge.
pub const EDGE_PROPERTIES: [(&str, &str); 4] =
    [("weight", "DOUBLE"), ("valid_from", "STRING"), ("valid_until", "STRING"), ("recorded_at", "STRING")];

/// The node label of a memory kind.
pub fn label(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Episode => "Episode",
        MemoryKind::Fact => "Fact",
        MemoryKind::Entity => "Entity",
        MemoryKind::Core => "Core",
        MemoryKind::Experience => "Experience",
        MemoryKind::Concept => "Concept",
        MemoryKind::Strategy => "Strategy",
        MemoryKind::Summary => "Summary",
        MemoryKind::Doc => "Doc",
    }
}

/// The relationship type of an edge kind (an entity edge reads "mentions").
pub fn edge_type(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Temporal => "TEMPORAL",
        EdgeKind::Causal => "CAUSAL",
        EdgeKind::Entity => "MENTIONS",
        EdgeKind::DerivedFrom => "DERIVED_FROM",
        EdgeKind::Supersedes => "SUPERSEDES",
    }
}

/// A Cypher literal of a JSON value: strings double-quoted with JSON's escapes (which Cypher
/// shares), numbers, booleans and `null`. Every character a reader may take for the end of a
/// line (U+0085, U+2028, U+2029 and the other controls, which JSON leaves raw) is escaped too,
/// so that a statement stays one line whatever splits the file.
fn literal(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.is_finite() { format!("{f:.1}") } else { f.to_string() }
        }
        other => {
            let json = other.to_string();
            if !json.contains(|c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')) {
                return json;
            }
            let mut out = String::with_capacity(json.len() + 12);
            for c in json.chars() {
                if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

fn map(pairs: &[(&str, Value)]) -> String {
    let fields: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}: {}", literal(v))).collect();
    format!("{{{}}}", fields.join(", "))
}

fn opt(text: Option<&str>) -> Value {
    text.map_or(Value::Null, Value::from)
}

fn float(x: f32) -> Value {
    // Through the shortest decimal of the f32, so 0.8 is written 0.8, not 0.800000011920929.
    Value::from(x.to_string().parse::<f64>().unwrap_or(f64::from(x)))
}

/// A node's row: every property of [`NODE_PROPERTIES`].
pub fn node_row(memory: &Memory) -> String {
    let (mut speaker, mut subject, mut predicate, mut object, mut confidence, mut name) =
        (Value::Null, Value::Null, Value::Null, Value::Null, Value::Null, Value::Null);
    match &memory.body {
        Body::Episode { speaker: s } => speaker = opt(s.as_deref()),
        Body::Fact { subject: s, predicate: p, object: o, confidence: c } => {
            subject = Value::from(s.clone());
            predicate = Value::from(p.clone());
            object = Value::from(o.clone());
            confidence = float(*c);
        }
        Body::Entity { name: n, .. } | Body::Concept { name: n, .. } => name = Value::from(n.clone()),
        _ => {}
    }
    let body = match &memory.body {
        Body::Episode { .. } => Value::Null,
        other => {
            let mut v = serde_json::to_value(other).expect("a body serialises");
            if let Value::Object(m) = &mut v {
                m.remove("kind");
            }
            Value::from(v.to_string())
        }
    };
    let rows = [
        ("id", Value::from(memory.id.0)),
        ("kind", Value::from(memory.kind().as_str())),
        ("text", Value::from(memory.text.clone())),
        ("user", opt(memory.scope.user.as_deref())),
        ("agent", opt(memory.scope.agent.as_deref())),
        ("session", opt(memory.scope.session.as_deref())),
        ("time", Value::from(memory.event_time.to_rfc3339())),
        ("recorded_at", Value::from(memory.recorded_at.to_rfc3339())),
        ("valid_from", Value::from(memory.validity.valid_from.to_rfc3339())),
        ("valid_until", opt(memory.validity.valid_until.map(|t| t.to_rfc3339()).as_deref())),
        ("speaker", speaker),
        ("subject", subject),
        ("predicate", predicate),
        ("object", object),
        ("confidence", confidence),
        ("name", name),
        ("body", body),
    ];
    debug_assert!(rows.iter().map(|(k, _)| *k).eq(NODE_PROPERTIES.iter().map(|(k, _)| *k)));
    map(&rows)
}

/// The statement creating `rows` (from [`node_row`]) as nodes of `label`.
pub fn nodes_statement(label: &str, rows: &[String]) -> String {
    let mut out = String::new();
    let _ = write!(out, "UNWIND [{}] AS row CREATE (:{label} {{", rows.join(", "));
    let fields: Vec<String> = NODE_PROPERTIES.iter().map(|(k, _)| format!("{k}: row.{k}")).collect();
    let _ = write!(out, "{}}});", fields.join(", "));
    out
}

/// An edge's row: its ends and every property of [`EDGE_PROPERTIES`].
pub fn edge_row(edge: &Edge) -> String {
    map(&[
        ("src", Value::from(edge.src.0)),
        ("dst", Value::from(edge.dst.0)),
        ("weight", float(edge.weight)),
        ("valid_from", Value::from(edge.validity.valid_from.to_rfc3339())),
        ("valid_until", opt(edge.validity.valid_until.map(|t| t.to_rfc3339()).as_deref())),
        ("recorded_at", Value::from(edge.recorded_at.to_rfc3339())),
    ])
}

/// The statement creating `rows` (from [`edge_row`]) as edges of `kind` from `src_label` nodes
/// to `dst_label` nodes.
pub fn edges_statement(kind: EdgeKind, src_label: &str, dst_label: &str, rows: &[String]) -> String {
    let fields: Vec<String> = EDGE_PROPERTIES.iter().map(|(k, _)| format!("{k}: row.{k}")).collect();
    format!(
        "UNWIND [{}] AS row MATCH (a:{src_label} {{id: row.src}}), (b:{dst_label} {{id: row.dst}}) CREATE (a)-[:{} {{{}}}]->(b);",
        rows.join(", "),
        edge_type(kind),
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Any text is one well-formed literal: it reads back as the same string (Cypher's
        /// string escapes are JSON's).
        #[test]
        fn a_string_literal_reads_back(text in any::<String>()) {
            let lit = literal(&Value::from(text.clone()));
            prop_assert!(lit.starts_with('"') && lit.ends_with('"'));
            prop_assert_eq!(serde_json::from_str::<String>(&lit).unwrap(), text);
            prop_assert!(!lit.contains('\n'));
            let raw_separator = lit.contains(|c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'));
            prop_assert!(!raw_separator, "a raw line separator in {:?}", lit);
        }
    }

    #[test]
    fn line_separators_inside_a_string_are_escaped() {
        let lit = literal(&Value::from("a\u{2028}b\u{2029}c\u{85}d"));
        assert_eq!(lit, "\"a\\u2028b\\u2029c\\u0085d\"");
        assert_eq!(serde_json::from_str::<String>(&lit).unwrap(), "a\u{2028}b\u{2029}c\u{85}d");
    }

    #[test]
    fn floats_are_written_as_floats() {
        assert_eq!(literal(&float(1.0)), "1.0");
        assert_eq!(literal(&float(0.8)), "0.8");
        assert_eq!(literal(&Value::from(3)), "3");
    }
}
