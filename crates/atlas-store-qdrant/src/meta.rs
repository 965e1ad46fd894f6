//! The space's meta collection: what is not a memory, as vectorless points with a `type`, so
//! that every process of every host that reaches the server sees the same space: typed edges
//! (one point each), the records of writes ([`crate::ledger`]), and the sleep cycle's
//! bookkeeping: per session when its last turn was said and how many turns its summary covers,
//! per episode that failed how often it did.
//!
//! An edge's point id is derived from (src, dst, kind) (a UUID made of the first 16 bytes of a
//! SHA-256), so writing an edge twice replaces it, as the SQLite store's primary key does.
//! `carrier` is the edge's later end: the memory it travels with in an export
//! ([`atlas_domain::ports::StoredMemory::carries`]).

use crate::collection::Collection;
pub use crate::payload::point_id_of;
use atlas_domain::{AtlasError, Edge, EdgeKind, MemoryId, Result, Timestamp, Validity};
use qdrant_client::qdrant::{Condition, Filter, PointId, PointStruct, Range, RetrievedPoint};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

pub use crate::schema::meta_field as field;

/// The `type` of an edge's point.
pub const EDGE: &str = "edge";
/// The `type` of a session's bookkeeping.
pub const SESSION: &str = "session";
/// The `type` of a failed episode's bookkeeping.
pub const ATTEMPT: &str = "attempt";
/// The `type` of a row of the ledger of cycles a restore brought (the space's own cycles are
/// the records of their writes): `at`, `report`.
pub const CYCLE: &str = "cycle";

/// Adds restored rows of the ledger of cycles, each once (its point id is made of its content).
pub async fn put_cycles(meta: &Collection, cycles: &[atlas_domain::ports::CycleRecord]) -> Result<()> {
    let points: Vec<PointStruct> = cycles
        .iter()
        .map(|c| {
            let payload =
                json!({ field::TYPE: CYCLE, crate::schema::ledger_field::AT: c.at.millis(), "report": c.report });
            let id = point_id_of(&format!("cycle\0{}\0{}", c.at.millis(), c.report));
            PointStruct::new(id, HashMap::<String, qdrant_client::qdrant::Vector>::new(), object(payload))
        })
        .collect();
    for chunk in points.chunks(256) {
        meta.upsert(chunk.to_vec()).await?;
    }
    Ok(())
}

fn is_edge() -> Condition {
    Condition::matches(field::TYPE, EDGE.to_owned())
}

/// `(src, dst, kind)` as a point id.
fn edge_point_id(e: &Edge) -> PointId {
    edge_key_point_id(e.src, e.dst, e.kind)
}

fn edge_key_point_id(src: MemoryId, dst: MemoryId, kind: EdgeKind) -> PointId {
    point_id_of(&format!("edge\0{}\0{}\0{}", src.0, dst.0, kind.as_str()))
}

/// Deletes the edges `(src, dst, kind)`; one that does not exist is no error.
pub async fn delete_edges(meta: &Collection, edges: &[(MemoryId, MemoryId, EdgeKind)]) -> Result<()> {
    for chunk in edges.chunks(256) {
        let ids: Vec<PointId> = chunk.iter().map(|(src, dst, kind)| edge_key_point_id(*src, *dst, *kind)).collect();
        meta.delete_matching(Filter::must([Condition::has_id(ids)])).await?;
    }
    Ok(())
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
    PointStruct::new(edge_point_id(e), HashMap::<String, qdrant_client::qdrant::Vector>::new(), object(payload))
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

/// Stores edges, each replacing one of the same (src, dst, kind); those of a write under way
/// carry its marks (`ledger::Write::marks`) and stay invisible until it is rolled forward.
pub async fn put_edges(meta: &Collection, edges: &[Edge], marks: &[(&'static str, Value)]) -> Result<()> {
    if edges.is_empty() {
        return Ok(());
    }
    meta.ensure(None).await?;
    for chunk in edges.chunks(256) {
        let points = chunk
            .iter()
            .map(|e| {
                let mut p = edge_point(e);
                for (key, value) in marks {
                    p.payload.insert((*key).to_owned(), value.clone().into());
                }
                p
            })
            .collect();
        meta.upsert(points).await?;
    }
    Ok(())
}

/// The edges from or to `id`: those from it first, each part by (other end, kind).
pub async fn edges_of(meta: &Collection, id: MemoryId) -> Result<Vec<Edge>> {
    let filter = Filter {
        must: vec![is_edge()],
        should: vec![ids_condition(field::SRC, &[id]), ids_condition(field::DST, &[id])],
        must_not: vec![crate::filter::pending()],
        ..Filter::default()
    };
    let mut edges = meta.scroll_matching(filter).await?.into_iter().map(edge_of).collect::<Result<Vec<_>>>()?;
    edges.sort_by_key(|e| (e.src != id, e.src, e.dst, e.kind));
    Ok(edges)
}

/// The edges of each of `ids`, as [`edges_of`] orders them, in one read.
pub async fn edges_of_many(meta: &Collection, ids: &[MemoryId]) -> Result<HashMap<MemoryId, Vec<Edge>>> {
    let mut out: HashMap<MemoryId, Vec<Edge>> = ids.iter().map(|id| (*id, Vec::new())).collect();
    for chunk in ids.chunks(256) {
        let filter = Filter {
            must: vec![is_edge()],
            should: vec![ids_condition(field::SRC, chunk), ids_condition(field::DST, chunk)],
            must_not: vec![crate::filter::pending()],
            ..Filter::default()
        };
        for p in meta.scroll_matching(filter).await? {
            let e = edge_of(p)?;
            let ends = if e.src == e.dst { vec![e.src] } else { vec![e.src, e.dst] };
            for end in ends {
                if let Some(list) = out.get_mut(&end) {
                    list.push(e.clone());
                }
            }
        }
    }
    for (id, edges) in &mut out {
        edges.sort_by_key(|e| (e.src != *id, e.src, e.dst, e.kind));
    }
    Ok(out)
}

/// Edges whose later end lies in (after, last], grouped by that end.
pub async fn carried_edges(meta: &Collection, after: i64, last: i64) -> Result<HashMap<MemoryId, Vec<Edge>>> {
    let range = Range { gt: Some(after as f64), lte: Some(last as f64), ..Range::default() };
    let filter = Filter {
        must: vec![is_edge(), Condition::range(field::CARRIER, range)],
        must_not: vec![crate::filter::pending()],
        ..Filter::default()
    };
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
    meta.count(Some(Filter { must: vec![is_edge()], must_not: vec![crate::filter::pending()], ..Filter::default() }))
        .await
}

/// A session's bookkeeping point: one per (user, agent, session).
fn session_point_id(user: Option<&str>, agent: Option<&str>, session: &str) -> PointId {
    point_id_of(&session_key(user, agent, session))
}

fn session_key(user: Option<&str>, agent: Option<&str>, session: &str) -> String {
    format!("session\0{}", json!([user, agent, session]))
}

fn is_type(kind: &str) -> Condition {
    Condition::matches(field::TYPE, kind.to_owned())
}

/// Creates a session's bookkeeping if it has none, then raises `key` to `value` where it is
/// lower (a maximum kept by a conditional write: no read-modify-write race between hosts).
async fn raise_session(
    meta: &Collection,
    (user, agent, session): (Option<&str>, Option<&str>, &str),
    key: &str,
    value: i64,
) -> Result<()> {
    meta.ensure(None).await?;
    let id = session_point_id(user, agent, session);
    // Session points are never deleted: once this process made sure one exists, its writes
    // go straight to the conditional raise (one round trip per turn, not two).
    let created = session_key(user, agent, session);
    if !meta.created_before(&created) {
        let mut fresh = Map::new();
        fresh.insert(field::TYPE.into(), Value::from(SESSION));
        for (k, v) in [(field::USER, user), (field::AGENT, agent)] {
            if let Some(v) = v {
                fresh.insert(k.into(), Value::from(v));
            }
        }
        fresh.insert(field::SESSION.into(), Value::from(session));
        fresh.insert(field::LAST_EVENT.into(), Value::from(i64::MIN));
        fresh.insert(field::SUMMARIZED.into(), Value::from(0));
        let point = PointStruct::new(id.clone(), HashMap::<String, qdrant_client::qdrant::Vector>::new(), fresh);
        let request = qdrant_client::qdrant::UpsertPointsBuilder::new(meta.name(), vec![point])
            .update_mode(qdrant_client::qdrant::UpdateMode::InsertOnly)
            .wait(true);
        meta.call("record a session", meta.client().upsert_points(request.build())).await?;
        meta.mark_created(created);
    }
    let mut values = Map::new();
    values.insert(key.into(), Value::from(value));
    let below = Range { lt: Some(value as f64), ..Range::default() };
    let filter = Filter::must([Condition::has_id([id]), Condition::range(key, below)]);
    let request =
        qdrant_client::qdrant::SetPayloadPointsBuilder::new(meta.name(), qdrant_client::Payload::from(values))
            .points_selector(filter)
            .ordering(crate::collection::ordered())
            .wait(true);
    meta.call("record a session", meta.client().set_payload(request.build())).await
}

/// A session's last turn was said at `at` (or later).
pub async fn saw_turn(meta: &Collection, session: (Option<&str>, Option<&str>, &str), at: i64) -> Result<()> {
    raise_session(meta, session, field::LAST_EVENT, at).await
}

/// A session's current summary covers `turns` turns (or more).
pub async fn summarized(meta: &Collection, session: (Option<&str>, Option<&str>, &str), turns: i64) -> Result<()> {
    raise_session(meta, session, field::SUMMARIZED, turns).await
}

/// Claims a session whose summary covers fewer than `turns` turns for `owner`'s summary until
/// `until`: true if `owner` holds it (no other process's cycle summarises it before then;
/// [`crate::queue::Claims::SUMMARY`]). The coverage is part of the server's condition, so a
/// claim released by a cycle that just summarised the session cannot be taken on a stale read.
pub async fn claim_session(
    meta: &Collection,
    (user, agent, session): (Option<&str>, Option<&str>, &str),
    turns: i64,
    owner: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let id = session_point_id(user, agent, session);
    let uncovered = Condition::range(field::SUMMARIZED, Range { lt: Some(turns as f64), ..Range::default() });
    let held = crate::queue::Claims::SUMMARY.claim_points(meta, vec![id], vec![uncovered], owner, now, until).await?;
    Ok(!held.is_empty())
}

/// Lets go of a session's summary claim held by `held_by` (its summary is written).
pub async fn release_session(
    meta: &Collection,
    (user, agent, session): (Option<&str>, Option<&str>, &str),
    held_by: Option<&str>,
) -> Result<()> {
    crate::queue::Claims::SUMMARY.release_points(meta, vec![session_point_id(user, agent, session)], held_by).await
}

/// A session quiet since before a cut-off: (user, agent, session, turns its summary covers).
pub type QuietSession = (Option<String>, Option<String>, String, i64);

/// Sessions whose last turn was said before `before`, the longest quiet first.
pub async fn quiet_sessions(meta: &Collection, before: i64) -> Result<Vec<QuietSession>> {
    let filter = Filter::must([
        is_type(SESSION),
        Condition::range(field::LAST_EVENT, Range { lt: Some(before as f64), ..Range::default() }),
    ]);
    let mut sessions: Vec<(i64, QuietSession)> = meta
        .scroll_matching(filter)
        .await?
        .into_iter()
        .filter_map(|p| {
            let text = |k: &str| p.payload.get(k).and_then(|v| v.as_str()).cloned();
            let int = |k: &str| p.payload.get(k).and_then(|v| v.as_integer());
            let session = (text(field::USER), text(field::AGENT), text(field::SESSION)?, int(field::SUMMARIZED)?);
            Some((int(field::LAST_EVENT)?, session))
        })
        .collect();
    sessions.sort_by(|a, b| (a.0, &a.1.2).cmp(&(b.0, &b.1.2)));
    Ok(sessions.into_iter().map(|(_, s)| s).collect())
}

fn attempt_point_id(episode: MemoryId) -> PointId {
    point_id_of(&format!("attempt\0{}", episode.0))
}

/// How often the sleep cycle failed on each of `episodes` that it failed on, and when last.
pub async fn attempts_of(meta: &Collection, episodes: &[MemoryId]) -> Result<HashMap<MemoryId, (i64, i64)>> {
    let mut out = HashMap::new();
    if episodes.is_empty() || !meta.exists().await? {
        return Ok(out);
    }
    for chunk in episodes.chunks(1000) {
        let ids: Vec<PointId> = chunk.iter().map(|id| attempt_point_id(*id)).collect();
        let request =
            qdrant_client::qdrant::GetPointsBuilder::new(meta.name(), ids).with_payload(true).with_vectors(false);
        for p in meta.call("read failed episodes", meta.client().get_points(request.build())).await? {
            let int = |k: &str| p.payload.get(k).and_then(|v| v.as_integer());
            if let (Some(episode), Some(attempts), Some(last)) =
                (int(field::EPISODE), int(field::ATTEMPTS), int(field::LAST_ATTEMPT))
            {
                out.insert(MemoryId(episode), (attempts, last));
            }
        }
    }
    Ok(out)
}

/// One more failed attempt on each of `failed`, at `at`.
pub async fn record_failures(meta: &Collection, failed: &[(MemoryId, String)], at: i64) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let ids: Vec<MemoryId> = failed.iter().map(|(id, _)| *id).collect();
    let before = attempts_of(meta, &ids).await?;
    let rows: Vec<Failure> = failed
        .iter()
        // Counted already by this cycle (a roll-forward repeated): not counted twice.
        .filter(|(id, _)| before.get(id).is_none_or(|(_, last)| *last < at))
        .map(|(id, error)| Failure {
            episode: *id,
            attempts: before.get(id).map_or(0, |(n, _)| *n) + 1,
            last_attempt: at,
            last_error: error.clone(),
        })
        .collect();
    put_failures(meta, &rows).await
}

/// How often the sleep cycle failed on an episode.
pub struct Failure {
    pub episode: MemoryId,
    pub attempts: i64,
    pub last_attempt: i64,
    pub last_error: String,
}

pub async fn put_failures(meta: &Collection, failures: &[Failure]) -> Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    meta.ensure(None).await?;
    let points = failures
        .iter()
        .map(|f| {
            let payload = object(json!({
                field::TYPE: ATTEMPT,
                field::EPISODE: f.episode.0,
                field::ATTEMPTS: f.attempts,
                field::LAST_ATTEMPT: f.last_attempt,
                field::LAST_ERROR: f.last_error,
            }));
            PointStruct::new(
                attempt_point_id(f.episode),
                HashMap::<String, qdrant_client::qdrant::Vector>::new(),
                payload,
            )
        })
        .collect();
    meta.upsert(points).await
}

/// The `type` of the space's settings (one point).
pub const SETTINGS: &str = "settings";

fn settings_point_id() -> PointId {
    point_id_of("settings")
}

/// The embedding model bound to the space, if any.
pub async fn model(meta: &Collection) -> Result<Option<atlas_domain::ports::EmbeddingModel>> {
    if !meta.exists().await? {
        return Ok(None);
    }
    let request = qdrant_client::qdrant::GetPointsBuilder::new(meta.name(), vec![settings_point_id()])
        .with_payload(true)
        .with_vectors(false);
    let points = meta.call("read the space's settings", meta.client().get_points(request.build())).await?;
    let Some(p) = points.first() else { return Ok(None) };
    let name = p.payload.get(field::MODEL).and_then(|v| v.as_str()).cloned();
    let dimension = p.payload.get(field::DIMENSION).and_then(|v| v.as_integer());
    Ok(name.zip(dimension).map(|(name, d)| atlas_domain::ports::EmbeddingModel { name, dimension: d as usize }))
}

/// Binds `model` to the space unless one is bound; returns the one bound (compare to know).
/// Two processes binding at once: the server keeps the first (a conditional write).
pub async fn bind_model(
    meta: &Collection,
    model: &atlas_domain::ports::EmbeddingModel,
) -> Result<atlas_domain::ports::EmbeddingModel> {
    meta.ensure(None).await?;
    let values = object(json!({ field::TYPE: SETTINGS, field::MODEL: model.name, field::DIMENSION: model.dimension }));
    let point = PointStruct::new(settings_point_id(), HashMap::<String, qdrant_client::qdrant::Vector>::new(), values);
    let request = qdrant_client::qdrant::UpsertPointsBuilder::new(meta.name(), vec![point])
        .update_mode(qdrant_client::qdrant::UpdateMode::InsertOnly)
        .ordering(crate::collection::ordered())
        .wait(true);
    meta.call("bind the embedding model", meta.client().upsert_points(request.build())).await?;
    self::model(meta).await?.ok_or_else(|| AtlasError::Storage("the space's settings vanished while binding".into()))
}

/// Binds `model` to the space in place of any other (re-embedding).
pub async fn rebind_model(meta: &Collection, model: &atlas_domain::ports::EmbeddingModel) -> Result<()> {
    meta.ensure(None).await?;
    let values = object(json!({ field::TYPE: SETTINGS, field::MODEL: model.name, field::DIMENSION: model.dimension }));
    let point = PointStruct::new(settings_point_id(), HashMap::<String, qdrant_client::qdrant::Vector>::new(), values);
    meta.upsert(vec![point]).await
}

pub(crate) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
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
