//! SQL pieces shared by the queries: the filter clause (and the ranked ids that pass it), row ↔
//! record mapping, vector encoding.

use crate::VECTOR_TABLE;
use crate::error::storage;
use atlas_domain::ports::ScoredId;
use atlas_domain::{
    AtlasError, Body, Edge, EdgeKind, Lifecycle, Memory, MemoryId, NewMemory, RecallFilter, Result, Scope, Timestamp,
    Validity,
};
use rusqlite::types::Value;
use rusqlite::{Connection, Row};

/// The columns [`memory_from_row`] reads, qualified by the alias `m`.
pub const MEMORY_COLUMNS: &str = "m.id, m.text, m.scope_user, m.scope_agent, m.scope_session, m.event_time, \
     m.recorded_at, m.valid_from, m.valid_until, m.meta, m.body, m.context, m.deleted_at, m.lifecycle";

/// `filter` as a boolean SQL expression over alias `m`, with its positional parameters.
pub fn filter_clause(filter: &RecallFilter) -> (String, Vec<Value>) {
    let deleted = if filter.forgotten { "m.deleted_at IS NOT NULL" } else { "m.deleted_at IS NULL" };
    let mut parts: Vec<String> = vec![deleted.into()];
    let mut params: Vec<Value> = Vec::new();
    for (column, value) in [
        ("m.scope_user", &filter.scope.user),
        ("m.scope_agent", &filter.scope.agent),
        ("m.scope_session", &filter.scope.session),
    ] {
        if let Some(v) = value {
            parts.push(format!("{column} = ?"));
            params.push(Value::Text(v.clone()));
        }
    }
    if !filter.kinds.is_empty() {
        let marks = vec!["?"; filter.kinds.len()].join(", ");
        parts.push(format!("m.kind IN ({marks})"));
        params.extend(filter.kinds.iter().map(|k| Value::Text(k.as_str().into())));
    }
    if let Some(since) = filter.since {
        parts.push("m.event_time >= ?".into());
        params.push(Value::Integer(since.millis()));
    }
    if let Some(until) = filter.until {
        parts.push("m.event_time < ?".into());
        params.push(Value::Integer(until.millis()));
    }
    if let Some(at) = filter.valid_at {
        parts.push("m.valid_from <= ? AND (m.valid_until IS NULL OR m.valid_until > ?)".into());
        params.push(Value::Integer(at.millis()));
        params.push(Value::Integer(at.millis()));
    }
    (parts.join(" AND "), params)
}

pub fn memory_from_row(row: &Row<'_>) -> rusqlite::Result<Memory> {
    let id: i64 = row.get(0)?;
    let meta_text: String = row.get(9)?;
    let body_text: String = row.get(10)?;
    let corrupt = |what: &str, e: serde_json::Error| {
        rusqlite::Error::FromSqlConversionFailure(
            10,
            rusqlite::types::Type::Text,
            format!("memory {id}: column {what} is not valid JSON: {e}").into(),
        )
    };
    let meta = serde_json::from_str(&meta_text).map_err(|e| corrupt("meta", e))?;
    let body: Body = serde_json::from_str(&body_text).map_err(|e| corrupt("body", e))?;
    let mut lifecycle: Lifecycle = match row.get::<_, Option<String>>(13)? {
        Some(text) => serde_json::from_str(&text).map_err(|e| corrupt("lifecycle", e))?,
        None => Lifecycle::default(),
    };
    lifecycle.deleted_at = row.get::<_, Option<i64>>(12)?.map(Timestamp);
    Ok(Memory {
        id: MemoryId(id),
        text: row.get(1)?,
        scope: Scope { user: row.get(2)?, agent: row.get(3)?, session: row.get(4)? },
        event_time: Timestamp(row.get(5)?),
        recorded_at: Timestamp(row.get(6)?),
        validity: Validity {
            valid_from: Timestamp(row.get(7)?),
            valid_until: row.get::<_, Option<i64>>(8)?.map(Timestamp),
        },
        meta,
        body,
        context: row.get(11)?,
        lifecycle,
    })
}

/// The `deleted_at` and `lifecycle` columns of `lifecycle` ([`memory_from_row`] reads them back).
pub fn lifecycle_columns(lifecycle: &Lifecycle) -> (Option<i64>, Option<String>) {
    let rest = Lifecycle { deleted_at: None, ..*lifecycle };
    let json = (!rest.is_fresh()).then(|| serde_json::to_string(&rest).expect("a lifecycle serialises"));
    (lifecycle.deleted_at.map(Timestamp::millis), json)
}

/// The columns [`edge_from_row`] reads.
pub const EDGE_COLUMNS: &str = "src, dst, kind, weight, valid_from, valid_until, recorded_at";

pub fn edge_from_row(row: &Row<'_>) -> rusqlite::Result<Edge> {
    let kind: String = row.get(2)?;
    Ok(Edge {
        src: MemoryId(row.get(0)?),
        dst: MemoryId(row.get(1)?),
        kind: kind
            .parse::<EdgeKind>()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into()))?,
        weight: row.get::<_, f64>(3)? as f32,
        validity: Validity {
            valid_from: Timestamp(row.get(4)?),
            valid_until: row.get::<_, Option<i64>>(5)?.map(Timestamp),
        },
        recorded_at: Timestamp(row.get(6)?),
    })
}

pub fn query_edges(conn: &rusqlite::Connection, sql: &str, params: &[Value]) -> Result<Vec<Edge>> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(params.iter()), edge_from_row).map_err(storage)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
}

/// The inverse of [`vector_blob`].
pub fn blob_vector(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Serialises the JSON columns of a new memory.
pub fn json_columns(m: &NewMemory) -> Result<(String, String)> {
    let meta = serde_json::to_string(&m.meta).map_err(|e| AtlasError::Storage(e.to_string()))?;
    let body = serde_json::to_string(&m.body).map_err(|e| AtlasError::Storage(e.to_string()))?;
    Ok((meta, body))
}

/// Little-endian f32s, the blob layout vec0 reads.
pub fn vector_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn query_memories(conn: &rusqlite::Connection, sql: &str, params: &[Value]) -> Result<Vec<Memory>> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(params.iter()), memory_from_row).map_err(storage)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
}

/// Stores an edge, replacing one of the same (src, dst, kind): restores and the sleep cycle
/// write edges between memories that already exist.
pub fn put_edge(conn: &rusqlite::Connection, e: &atlas_domain::Edge) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO edges (src, dst, kind, weight, valid_from, valid_until, recorded_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .map_err(storage)?
    .execute(rusqlite::params![
        e.src.0,
        e.dst.0,
        e.kind.as_str(),
        f64::from(e.weight),
        e.validity.valid_from.millis(),
        e.validity.valid_until.map(atlas_domain::Timestamp::millis),
        e.recorded_at.millis(),
    ])
    .map_err(storage)?;
    Ok(())
}

pub(crate) fn vector_table_exists(conn: &Connection) -> Result<bool> {
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = ?", [VECTOR_TABLE], |r| r.get::<_, i64>(0))
        .map(|n| n > 0)
        .map_err(storage)
}
/// The first `limit` of `ranked` that pass the filter, in order. Asks SQL about the head of the
/// list first and about more only while the filter rejects too many, since most filters admit
/// most memories and each id checked costs a lookup.
pub(crate) fn first_admitted(
    conn: &Connection,
    ranked: &[ScoredId],
    clause: &str,
    filter_params: &[Value],
    limit: usize,
) -> Result<Vec<ScoredId>> {
    let mut hits = Vec::with_capacity(limit.min(ranked.len()));
    let (mut start, mut window) = (0, limit + limit / 4 + 16);
    while hits.len() < limit && start < ranked.len() {
        let end = (start + window).min(ranked.len());
        let ids: Vec<i64> = ranked[start..end].iter().map(|h| h.id.0).collect();
        let admitted = admitted_ids(conn, &ids, clause, filter_params)?;
        hits.extend(ranked[start..end].iter().filter(|h| admitted.contains(&h.id.0)).take(limit - hits.len()));
        start = end;
        window *= 4;
    }
    Ok(hits)
}

/// Which of `ids` pass the filter `clause`; asked in chunks to stay under SQLite's limit on
/// bound parameters.
pub(crate) fn admitted_ids(
    conn: &Connection,
    ids: &[i64],
    clause: &str,
    filter_params: &[Value],
) -> Result<std::collections::HashSet<i64>> {
    let mut admitted = std::collections::HashSet::with_capacity(ids.len());
    for chunk in ids.chunks(4096) {
        let marks = vec!["?"; chunk.len()].join(", ");
        // By rowid, always: with a kind in the filter the planner would rather walk the kind
        // index over every memory of those kinds (measured: 15 ms instead of 2 for 1,024 ids
        // among 100k memories).
        let sql = format!("SELECT m.id FROM memories m NOT INDEXED WHERE m.id IN ({marks}) AND {clause}");
        let mut params: Vec<Value> = chunk.iter().map(|id| Value::Integer(*id)).collect();
        params.extend(filter_params.iter().cloned());
        let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(0)).map_err(storage)?;
        for id in rows {
            admitted.insert(id.map_err(storage)?);
        }
    }
    Ok(admitted)
}
