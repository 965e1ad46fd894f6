//! The space's meta collection: what is not a memory, as vectorless points with a `type`.
//! Typed edges live here, one point each, so that every process of every host that reaches the
//! server sees the same graph.
//!
//! An edge's point id is derived from (src, dst, kind) (a UUID made of the first 16 bytes of a
//! SHA-256), so writing an edge twice replaces it, as the SQLite store's primary key does.
//! `carrier` is the edge's later end: the memory it travels with in an export
//! ([`atlas_domain::ports::StoredMemory::carries`]).

use crate::collection::Collection;
use atlas_domain::{AtlasError, Edge, EdgeKind, MemoryId, Result, Timestamp, Validity};
use qdrant_client::qdrant::{Condition, FieldType, Filter, PointId, PointStruct, Range, RetrievedPoint};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Payload fields of meta points.
pub mod field {
    /// What the point is: [`super::EDGE`], ...
    pub const TYPE: &str = "type";
    pub const SRC: &str = "src";
    pub const DST: &str = "dst";
    pub const CARRIER: &str = "carrier";
    pub const KIND: &str = "kind";
    pub const WEIGHT: &str = "weight";
    pub const VALID_FROM: &str = "valid_from";
    pub const VALID_UNTIL: &str = "valid_until";
    pub const RECORDED_AT: &str = "recorded_at";
}

/// The `type` of an edge's point.
pub const EDGE: &str = "edge";

/// Payload indexes of the meta collection.
pub const INDEXED_FIELDS: [(&str, FieldType); 4] = [
    (field::TYPE, FieldType::Keyword),
    (field::SRC, FieldType::Integer),
    (field::DST, FieldType::Integer),
    (field::CARRIER, FieldType::Integer),
];

fn is_edge() -> Condition {
    Condition::matches(field::TYPE, EDGE.to_owned())
}

/// `(src, dst, kind)` as a point id.
fn edge_point_id(e: &Edge) -> PointId {
    let digest = Sha256::digest(format!("edge\0{}\0{}\0{}", e.src.0, e.dst.0, e.kind.as_str()).as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    PointId::from(format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]))
}

pub(crate) fn edge_point(e: &Edge) -> PointStruct {
    let payload = json!({
        field::TYPE: EDGE,
        field::SRC: e.src.0,
        field::DST: e.dst.0,
        field::CARRIER: e.src.max(e.dst).0,
        field::KIND: e.kind.as_str(),
        field::WEIGHT: f64::from(e.weight),
        field::VALID_FROM: e.validity.valid_from.millis(),
        field::VALID_UNTIL: e.validity.valid_until.map(Timestamp::millis),
        field::RECORDED_AT: e.recorded_at.millis(),
    });
    let Value::Object(payload) = payload else { unreachable!("a JSON object") };
    PointStruct::new(edge_point_id(e), HashMap::<String, qdrant_client::qdrant::Vector>::new(), payload)
}

fn edge_of(p: RetrievedPoint) -> Result<Edge> {
    let payload: Map<String, Value> = p.payload.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
    let bad = |what: &str| AtlasError::Storage(format!("edge point {:?}: {what}", p.id));
    let int = |key: &str| payload.get(key).and_then(Value::as_i64).ok_or_else(|| bad(&format!("no integer {key}")));
    let kind = payload.get(field::KIND).and_then(Value::as_str).ok_or_else(|| bad("no kind"))?;
    Ok(Edge {
        src: MemoryId(int(field::SRC)?),
        dst: MemoryId(int(field::DST)?),
        kind: kind.parse::<EdgeKind>().map_err(|e| bad(&e.to_string()))?,
        weight: payload.get(field::WEIGHT).and_then(Value::as_f64).ok_or_else(|| bad("no weight"))? as f32,
        validity: Validity {
            valid_from: Timestamp(int(field::VALID_FROM)?),
            valid_until: payload.get(field::VALID_UNTIL).and_then(Value::as_i64).map(Timestamp),
        },
        recorded_at: Timestamp(int(field::RECORDED_AT)?),
    })
}

fn ids_condition(key: &str, ids: &[MemoryId]) -> Condition {
    Condition::matches(key, ids.iter().map(|id| id.0).collect::<Vec<i64>>())
}

/// Stores edges, each replacing one of the same (src, dst, kind).
pub async fn put_edges(meta: &Collection, edges: &[Edge]) -> Result<()> {
    if edges.is_empty() {
        return Ok(());
    }
    meta.ensure(None).await?;
    for chunk in edges.chunks(256) {
        meta.upsert(chunk.iter().map(edge_point).collect()).await?;
    }
    Ok(())
}

/// The edges from or to `id`: those from it first, each part by (other end, kind).
pub async fn edges_of(meta: &Collection, id: MemoryId) -> Result<Vec<Edge>> {
    let filter = Filter {
        must: vec![is_edge()],
        should: vec![ids_condition(field::SRC, &[id]), ids_condition(field::DST, &[id])],
        ..Filter::default()
    };
    let mut edges = meta.scroll_matching(filter).await?.into_iter().map(edge_of).collect::<Result<Vec<_>>>()?;
    edges.sort_by_key(|e| (e.src != id, e.src, e.dst, e.kind));
    Ok(edges)
}

/// Edges whose later end lies in (after, last], grouped by that end.
pub async fn carried_edges(meta: &Collection, after: i64, last: i64) -> Result<HashMap<MemoryId, Vec<Edge>>> {
    let range = Range { gt: Some(after as f64), lte: Some(last as f64), ..Range::default() };
    let filter = Filter::must([is_edge(), Condition::range(field::CARRIER, range)]);
    let mut by_end: HashMap<MemoryId, Vec<Edge>> = HashMap::new();
    for p in meta.scroll_matching(filter).await? {
        let e = edge_of(p)?;
        by_end.entry(e.src.max(e.dst)).or_default().push(e);
    }
    Ok(by_end)
}

/// Deletes every edge from or to one of `ids` (the memories are gone or never were).
pub async fn delete_edges_of(meta: &Collection, ids: &[MemoryId]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    for chunk in ids.chunks(256) {
        let filter = Filter {
            must: vec![is_edge()],
            should: vec![ids_condition(field::SRC, chunk), ids_condition(field::DST, chunk)],
            ..Filter::default()
        };
        meta.delete_matching(filter).await?;
    }
    Ok(())
}

pub async fn count_edges(meta: &Collection) -> Result<u64> {
    if !meta.exists().await? {
        return Ok(0);
    }
    meta.count(Some(Filter::must([is_edge()]))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_point_round_trips_and_its_id_depends_on_its_key_only() {
        let e = Edge {
            src: MemoryId(3),
            dst: MemoryId(9),
            kind: EdgeKind::Temporal,
            weight: 0.5,
            validity: Validity { valid_from: Timestamp(10), valid_until: Some(Timestamp(20)) },
            recorded_at: Timestamp(11),
        };
        let p = edge_point(&e);
        let back = edge_of(RetrievedPoint { id: p.id.clone(), payload: p.payload.clone(), ..Default::default() });
        assert_eq!(back.unwrap(), e);
        let heavier = Edge { weight: 1.0, ..e.clone() };
        assert_eq!(edge_point_id(&heavier), edge_point_id(&e), "a rewrite replaces the edge");
        let reversed = Edge { src: e.dst, dst: e.src, ..e.clone() };
        assert_ne!(edge_point_id(&reversed), edge_point_id(&e));
        let causal = Edge { kind: EdgeKind::Causal, ..e };
        assert_ne!(edge_point_id(&causal), edge_point_id(&heavier));
    }
}
