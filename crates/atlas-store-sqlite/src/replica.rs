//! The replica port on SQLite: batches exported with their vectors and edges, restores (plain
//! and keyed) that upsert rows as they were, and reserved id ranges.

use crate::error::storage;
use crate::receipts::{read_receipt, record_receipt, wall_clock_ms};
use crate::sql::{
    EDGE_COLUMNS, MEMORY_COLUMNS, blob_vector, json_columns, lifecycle_columns, put_edge, query_edges, query_memories,
    vector_blob, vector_table_exists,
};
use crate::text_cache::Fields;
use crate::writes::{TEXT_CACHE_BULK, stored_fields};
use crate::{SqliteStore, VECTOR_TABLE};
use async_trait::async_trait;
use atlas_domain::ports::{CycleRecord, EmbeddingModel, Receipt, Replica, StoredMemory, StoredPieces};
use atlas_domain::{AtlasError, Edge, MemoryId, Result, Timestamp};
use rusqlite::params;
use rusqlite::types::Value;

#[async_trait]
impl Replica for SqliteStore {
    async fn export_batch(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<StoredMemory>> {
        self.readers
            .read(move |conn| {
                let after = after.map_or(0, |a| a.0);
                let sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id > ? ORDER BY m.id LIMIT ?");
                let memories = query_memories(conn, &sql, &[Value::Integer(after), Value::Integer(limit as i64)])?;
                let Some(last) = memories.last().map(|m| m.id.0) else {
                    return Ok(Vec::new());
                };
                let range = [Value::Integer(after), Value::Integer(last)];
                let mut vectors = std::collections::HashMap::new();
                if vector_table_exists(conn)? {
                    let mut stmt = conn
                        .prepare_cached(&format!(
                            "SELECT rowid, embedding FROM {VECTOR_TABLE} WHERE rowid > ? AND rowid <= ?"
                        ))
                        .map_err(storage)?;
                    let rows = stmt
                        .query_map(rusqlite::params_from_iter(range.iter()), |r| {
                            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                        })
                        .map_err(storage)?;
                    for row in rows {
                        let (id, blob) = row.map_err(storage)?;
                        vectors.insert(id, blob_vector(&blob));
                    }
                }
                let mut edges: std::collections::HashMap<i64, Vec<Edge>> = std::collections::HashMap::new();
                let sql = format!(
                    "SELECT {EDGE_COLUMNS} FROM edges WHERE src > ?1 AND src <= ?2 AND src >= dst \
                     UNION ALL SELECT {EDGE_COLUMNS} FROM edges WHERE dst > ?1 AND dst <= ?2 AND dst > src"
                );
                for edge in query_edges(conn, &sql, &range)? {
                    edges.entry(edge.src.max(edge.dst).0).or_default().push(edge);
                }
                let mut consumed = std::collections::HashMap::new();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT id, processed_at FROM consolidation WHERE id > ? AND id <= ? AND processed_at IS NOT NULL",
                    )
                    .map_err(storage)?;
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(range.iter()), |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                    .map_err(storage)?;
                for row in rows {
                    let (id, at) = row.map_err(storage)?;
                    consumed.insert(id, Timestamp(at));
                }
                Ok(memories
                    .into_iter()
                    .map(|memory| StoredMemory {
                        vector: vectors.remove(&memory.id.0),
                        edges: edges.remove(&memory.id.0).unwrap_or_default(),
                        consolidated_at: consumed.remove(&memory.id.0),
                        memory,
                    })
                    .collect())
            })
            .await
    }

    async fn restore(&self, batch: Vec<StoredMemory>) -> Result<()> {
        self.restore_pieces(None, Box::new(std::iter::once(Ok(batch)))).await.map(|_| ())
    }

    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> Result<Receipt> {
        self.restore_pieces(Some(key), Box::new(std::iter::once(Ok(batch)))).await
    }

    async fn restore_pieces(&self, key: Option<String>, pieces: StoredPieces) -> Result<Receipt> {
        let model = self.bound_model();
        let outcome = self
            .writer
            .write(move |conn| {
                if let Some(key) = &key
                    && let Some(receipt) = read_receipt(conn, key)?
                {
                    return Ok(Err(receipt));
                }
                // What the caches need, kept only while updating them is cheaper than a reload.
                let mut changes = Some(CacheChanges::default());
                let mut ids = Vec::new();
                for piece in pieces {
                    let piece = piece?;
                    check_vectors(model.as_ref(), &piece)?;
                    ids.extend(piece.iter().map(|s| s.memory.id));
                    let kept = changes.as_mut().map(|c| (&mut c.written, &mut c.replaced, &mut c.fields));
                    restore_piece(conn, piece, kept)?;
                    if changes.as_ref().is_some_and(|c| c.fields.len() > TEXT_CACHE_BULK) {
                        changes = None;
                    }
                }
                let receipt = match &key {
                    Some(key) => record_receipt(conn, key, ids)?,
                    None => Receipt { ids, replayed: false, recorded_at: Timestamp(wall_clock_ms()) },
                };
                Ok(Ok((changes, receipt)))
            })
            .await?;
        let (changes, receipt) = match outcome {
            Ok(done) => done,
            Err(replayed) => return Ok(replayed),
        };
        match changes {
            Some(CacheChanges { written, replaced, fields }) => {
                if let Some(index) = self.vector_cache.write().expect("vector cache lock").as_mut() {
                    for (id, v) in &written {
                        match v {
                            Some(v) => index.upsert(id.0, v),
                            None => index.remove(id.0),
                        }
                    }
                }
                self.update_text_cache(replaced, fields).await;
            }
            None => {
                // A bulk restore: both caches are let go, and the next search builds them again.
                *self.vector_cache.write().expect("vector cache lock") = None;
                self.drop_text_cache();
            }
        }
        Ok(receipt)
    }

    async fn reserve_ids(&self, count: u64) -> Result<MemoryId> {
        self.writer
            .write(move |conn| {
                // AUTOINCREMENT never hands out an id at or below sqlite_sequence's: raising it
                // reserves the range for good.
                let top: i64 = conn
                    .query_row(
                        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0), \
                         coalesce((SELECT max(id) FROM memories), 0))",
                        [],
                        |r| r.get(0),
                    )
                    .map_err(storage)?;
                let end = top + count as i64;
                let updated = conn
                    .execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'memories'", [end])
                    .map_err(storage)?;
                if updated == 0 {
                    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('memories', ?)", [end])
                        .map_err(storage)?;
                }
                Ok(MemoryId(top + 1))
            })
            .await
    }
    async fn export_cycles(&self) -> Result<Vec<CycleRecord>> {
        self.readers
            .read(move |conn| {
                let mut stmt = conn.prepare_cached("SELECT at, report FROM cycles ORDER BY at, id").map_err(storage)?;
                let rows =
                    stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).map_err(storage)?;
                rows.map(|row| {
                    let (at, text) = row.map_err(storage)?;
                    let report =
                        serde_json::from_str(&text).map_err(|e| AtlasError::Storage(format!("cycles: {e}")))?;
                    Ok(CycleRecord { at: Timestamp(at), report })
                })
                .collect()
            })
            .await
    }

    async fn restore_cycles(&self, cycles: Vec<CycleRecord>) -> Result<()> {
        self.writer
            .write(move |conn| {
                for c in &cycles {
                    conn.execute(
                        "INSERT INTO cycles (at, report) SELECT ?1, ?2 \
                         WHERE NOT EXISTS (SELECT 1 FROM cycles WHERE at = ?1 AND report = ?2)",
                        params![c.at.millis(), c.report.to_string()],
                    )
                    .map_err(storage)?;
                }
                Ok(())
            })
            .await
    }
}

/// What a restore changed that the caches follow after the commit.
#[derive(Default)]
struct CacheChanges {
    written: Vec<(MemoryId, Option<Vec<f32>>)>,
    replaced: Vec<Fields>,
    fields: Vec<Fields>,
}

/// Vectors need a bound model of their dimension.
fn check_vectors(model: Option<&EmbeddingModel>, piece: &[StoredMemory]) -> Result<()> {
    let Some(item) = piece.iter().find(|m| m.vector.is_some()) else { return Ok(()) };
    let dim = item.vector.as_ref().map_or(0, Vec::len);
    match model {
        None => Err(AtlasError::Storage(
            "no embedding model is bound to this store; bind one before restoring vectors".into(),
        )),
        Some(m) if piece.iter().filter_map(|i| i.vector.as_ref()).any(|v| v.len() != m.dimension) => {
            Err(AtlasError::Embedding(format!(
                "vector for memory {} has {dim} dimensions, the store's model {} has {}",
                item.memory.id, m.name, m.dimension
            )))
        }
        Some(_) => Ok(()),
    }
}

/// Upserts one piece of a restore in the open transaction; `kept` gathers what the caches need.
#[allow(clippy::type_complexity)]
fn restore_piece(
    conn: &rusqlite::Connection,
    piece: Vec<StoredMemory>,
    mut kept: Option<(&mut Vec<(MemoryId, Option<Vec<f32>>)>, &mut Vec<Fields>, &mut Vec<Fields>)>,
) -> Result<()> {
    let has_vectors = vector_table_exists(conn)?;
    let mut upsert = conn
        .prepare_cached(
            "INSERT INTO memories (id, kind, text, speaker, scope_user, scope_agent, scope_session, \
             event_time, recorded_at, valid_from, valid_until, meta, body, context, deleted_at, \
             lifecycle) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET \
             kind = excluded.kind, text = excluded.text, speaker = excluded.speaker, \
             scope_user = excluded.scope_user, scope_agent = excluded.scope_agent, \
             scope_session = excluded.scope_session, event_time = excluded.event_time, \
             recorded_at = excluded.recorded_at, valid_from = excluded.valid_from, \
             valid_until = excluded.valid_until, meta = excluded.meta, body = excluded.body, \
             context = excluded.context, deleted_at = excluded.deleted_at, \
             lifecycle = excluded.lifecycle",
        )
        .map_err(storage)?;
    let mut enqueue = conn.prepare_cached("INSERT OR IGNORE INTO vector_queue (id) VALUES (?)").map_err(storage)?;
    let mut dequeue = conn.prepare_cached("DELETE FROM vector_queue WHERE id = ?").map_err(storage)?;
    for item in piece {
        let m = &item.memory;
        if let Some((_, replaced, fields)) = kept.as_mut() {
            replaced.extend(stored_fields(conn, m.id.0)?);
            fields.push(Fields {
                id: m.id.0,
                text: m.text.clone(),
                speaker: m.body.speaker().map(str::to_owned),
                context: m.context.clone(),
            });
        }
        let (meta, body) = json_columns(&m.to_new())?;
        let (deleted_at, lifecycle) = lifecycle_columns(&m.lifecycle);
        upsert
            .execute(params![
                m.id.0,
                m.kind().as_str(),
                m.text,
                m.body.speaker(),
                m.scope.user,
                m.scope.agent,
                m.scope.session,
                m.event_time.millis(),
                m.recorded_at.millis(),
                m.validity.valid_from.millis(),
                m.validity.valid_until.map(Timestamp::millis),
                meta,
                body,
                m.context,
                deleted_at,
                lifecycle,
            ])
            .map_err(storage)?;
        for e in &item.edges {
            put_edge(conn, e)?;
        }
        if let Some(at) = item.consolidated_at {
            conn.execute(
                "INSERT INTO consolidation (id, processed_at, attempts, last_attempt) VALUES (?1, ?2, 1, ?2) \
                 ON CONFLICT (id) DO UPDATE SET processed_at = ?2, last_error = NULL",
                params![m.id.0, at.millis()],
            )
            .map_err(storage)?;
        }
        if has_vectors {
            conn.execute(&format!("DELETE FROM {VECTOR_TABLE} WHERE rowid = ?"), [m.id.0]).map_err(storage)?;
        }
        match item.vector {
            Some(v) => {
                conn.execute(
                    &format!("INSERT INTO {VECTOR_TABLE} (rowid, embedding) VALUES (?, ?)"),
                    params![m.id.0, vector_blob(&v)],
                )
                .map_err(storage)?;
                dequeue.execute([m.id.0]).map_err(storage)?;
                crate::cache_file::log_changed(conn, m.id.0)?;
                if let Some((written, _, _)) = kept.as_mut() {
                    written.push((m.id, Some(v)));
                }
            }
            None => {
                enqueue.execute([m.id.0]).map_err(storage)?;
                if let Some((written, _, _)) = kept.as_mut() {
                    written.push((m.id, None));
                }
            }
        }
    }
    Ok(())
}
