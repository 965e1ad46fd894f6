//! The memory store's port on SQLite: inserts (plain and keyed), reads, updates, forgetting
//! (with the WAL emptied behind it), scans, edges and statistics.

use crate::error::storage;
use crate::receipts::{read_receipt, record_receipt, wall_clock_ms};
use crate::sql::{
    EDGE_COLUMNS, MEMORY_COLUMNS, filter_clause, lifecycle_columns, query_edges, query_memories, vector_table_exists,
};
use crate::text_cache::Fields;
use crate::writes::{TEXT_CACHE_BULK, insert_all, stored_fields};
use crate::{SqliteStore, VECTOR_TABLE, migrations};
use async_trait::async_trait;
use atlas_domain::ports::{MemoryStore, Pieces, ProgressFn, Receipt, StoreStats, Update};
use atlas_domain::{AtlasError, Edge, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn kind_of(text: &str) -> MemoryKind {
    text.parse().unwrap_or(MemoryKind::Episode)
}
/// Forgets `id` and, with it, every trace of its text in the turns that answered it: their
/// context is cleared and their vectors, which were embedded with it, are dropped and queued
/// again. Returns whether it existed, the memories whose vectors were dropped, and the indexed
/// fields that changed: their old versions (the forgotten row's and the replies') and the
/// replies' new ones.
#[allow(clippy::type_complexity)]
fn forget_sync(conn: &Connection, id: MemoryId) -> Result<(bool, Vec<i64>, Vec<Fields>, Vec<Fields>)> {
    let mut old: Vec<Fields> = stored_fields(conn, id.0)?.into_iter().collect();
    let has_vectors = vector_table_exists(conn)?;
    let mut answers = conn
        .prepare_cached("SELECT dst FROM edges WHERE src = ? AND kind = 'temporal' AND dst <> src")
        .map_err(storage)?;
    let answers: Vec<i64> =
        answers.query_map([id.0], |r| r.get(0)).map_err(storage)?.collect::<rusqlite::Result<_>>().map_err(storage)?;
    let mut replies = Vec::with_capacity(answers.len());
    for successor in &answers {
        let Some(before) = stored_fields(conn, *successor)? else { continue };
        conn.execute("UPDATE memories SET context = NULL WHERE id = ? AND context IS NOT NULL", [successor])
            .map_err(storage)?;
        conn.execute("INSERT OR IGNORE INTO vector_queue (id) VALUES (?)", [successor]).map_err(storage)?;
        replies.push(Fields { context: None, ..before.clone() });
        old.push(before);
    }
    let mut dropped = answers;
    dropped.push(id.0);
    if has_vectors {
        for v in &dropped {
            conn.execute(&format!("DELETE FROM {VECTOR_TABLE} WHERE rowid = ?"), [v]).map_err(storage)?;
        }
    }
    let n = conn.execute("DELETE FROM memories WHERE id = ?", [id.0]).map_err(storage)?;
    Ok((n > 0, dropped, old, replies))
}
/// The edges from or to `?1`.
fn edges_of_sql() -> String {
    format!(
        "SELECT {EDGE_COLUMNS} FROM edges WHERE src = ?1 UNION ALL SELECT {EDGE_COLUMNS} FROM edges \
         WHERE dst = ?1 AND src <> ?1"
    )
}

/// At most `?2` of the typed links from or to `?1`: SQLite stops reading at the limit.
fn links_of_sql() -> String {
    format!(
        "SELECT {EDGE_COLUMNS} FROM edges WHERE src = ?1 AND kind <> 'temporal' UNION ALL \
         SELECT {EDGE_COLUMNS} FROM edges WHERE dst = ?1 AND src <> ?1 AND kind <> 'temporal' LIMIT ?2"
    )
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        Ok(self.insert_pieces(None, Box::new(std::iter::once(Ok(batch))), progress).await?.ids)
    }

    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt> {
        self.insert_pieces(Some(key), Box::new(std::iter::once(Ok(batch))), progress).await
    }

    async fn insert_pieces(
        &self,
        key: Option<String>,
        pieces: Pieces,
        progress: Option<ProgressFn>,
    ) -> Result<Receipt> {
        // The pieces are pulled on the writer thread, inside the one transaction: a piece that
        // fails rolls back every piece before it.
        let (receipt, written) = self
            .writer
            .write(move |conn| {
                if let Some(receipt) = key.as_deref().map(|k| read_receipt(conn, k)).transpose()?.flatten() {
                    return Ok((receipt, None));
                }
                let mut ids = Vec::new();
                // Kept for the text cache only while a cache update is cheaper than a reload.
                let mut written = Some(Vec::new());
                for piece in pieces {
                    let piece = piece?;
                    let stored = ids.len();
                    let offset = progress.clone().map(|p| -> ProgressFn { Arc::new(move |n| p(stored + n)) });
                    let fields = insert_all(conn, &piece, offset.as_ref())?;
                    ids.extend(fields.iter().map(|f| MemoryId(f.id)));
                    if let Some(kept) = written.as_mut() {
                        kept.extend(fields);
                        if kept.len() > TEXT_CACHE_BULK {
                            written = None;
                        }
                    }
                }
                let receipt = match key {
                    Some(key) => record_receipt(conn, &key, ids)?,
                    None => Receipt { ids, replayed: false, recorded_at: Timestamp(wall_clock_ms()) },
                };
                Ok((receipt, written))
            })
            .await?;
        match written {
            Some(written) => self.update_text_cache(Vec::new(), written).await,
            // Replayed (nothing written) keeps the cache; a bulk write lets it go.
            None if !receipt.replayed => self.drop_text_cache(),
            None => {}
        }
        Ok(receipt)
    }

    async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
        Ok(self.get_many(vec![id]).await?.pop())
    }

    async fn get_many(&self, ids: Vec<MemoryId>) -> Result<Vec<Memory>> {
        self.readers
            .read(move |conn| {
                let mut found = std::collections::HashMap::with_capacity(ids.len());
                for chunk in ids.chunks(500) {
                    let marks = vec!["?"; chunk.len()].join(", ");
                    let sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id IN ({marks})");
                    let params: Vec<Value> = chunk.iter().map(|id| Value::Integer(id.0)).collect();
                    for m in query_memories(conn, &sql, &params)? {
                        found.insert(m.id, m);
                    }
                }
                Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
            })
            .await
    }

    async fn forget(&self, id: MemoryId) -> Result<bool> {
        let (forgotten, dropped, old, replies) = self.writer.write(move |conn| forget_sync(conn, id)).await?;
        if forgotten {
            self.truncate_wal().await?;
        }
        {
            let mut cache = self.vector_cache.write().expect("vector cache lock");
            if let Some(index) = cache.as_mut() {
                for v in dropped {
                    index.remove(v);
                }
                // Codes read from the cache file keep it open, and the forgotten memory's codes
                // with it, after the file is deleted below: the cache is let go (the next
                // search builds it again, as a new process would).
                if forgotten && index.codes_on_file() {
                    *cache = None;
                }
            }
        }
        self.update_text_cache(old, replies).await;
        if forgotten {
            let files = self.cache_files.clone();
            tokio::task::spawn_blocking(move || files.remove_files())
                .await
                .map_err(|e| AtlasError::Storage(format!("removing the cache files failed: {e}")))?;
        }
        Ok(forgotten)
    }

    async fn update(&self, updates: Vec<Update>) -> Result<u64> {
        self.writer
            .write(move |conn| {
                let mut found = 0;
                for u in &updates {
                    let current: Option<String> = conn
                        .prepare_cached("SELECT body FROM memories WHERE id = ?")
                        .map_err(storage)?
                        .query_row([u.id.0], |r| r.get(0))
                        .optional()
                        .map_err(storage)?;
                    let Some(current) = current else { continue };
                    found += 1;
                    let current: atlas_domain::Body = serde_json::from_str(&current)
                        .map_err(|e| AtlasError::Storage(format!("memory {}: column body: {e}", u.id)))?;
                    u.check_body(&current)?;
                    let body = u.body.as_ref().map(|b| serde_json::to_string(b).expect("a body serialises"));
                    let (deleted_at, lifecycle) = lifecycle_columns(&u.lifecycle);
                    conn.prepare_cached(
                        "UPDATE memories SET deleted_at = ?2, lifecycle = ?3, body = coalesce(?4, body) WHERE id = ?1",
                    )
                    .map_err(storage)?
                    .execute(params![u.id.0, deleted_at, lifecycle, body])
                    .map_err(storage)?;
                }
                Ok(found)
            })
            .await
    }

    async fn scan(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<Memory>> {
        self.readers
            .read(move |conn| {
                let sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id > ? ORDER BY m.id LIMIT ?");
                query_memories(conn, &sql, &[Value::Integer(after.map_or(0, |a| a.0)), Value::Integer(limit as i64)])
            })
            .await
    }

    async fn latest(&self, filter: RecallFilter, limit: usize) -> Result<Vec<Memory>> {
        self.readers
            .read(move |conn| {
                let (clause, mut params) = filter_clause(&filter);
                params.push(Value::Integer(limit as i64));
                let sql = format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories m WHERE {clause} ORDER BY m.event_time DESC, m.id DESC LIMIT ?"
                );
                query_memories(conn, &sql, &params)
            })
            .await
    }

    async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>> {
        self.readers.read(move |conn| query_edges(conn, &edges_of_sql(), &[Value::Integer(id.0)])).await
    }

    async fn edges_of_many(&self, ids: Vec<MemoryId>) -> Result<HashMap<MemoryId, Vec<Edge>>> {
        // One read task for all of them: one hop to the reader pool instead of one per memory.
        self.readers
            .read(move |conn| {
                let sql = edges_of_sql();
                ids.into_iter().map(|id| Ok((id, query_edges(conn, &sql, &[Value::Integer(id.0)])?))).collect()
            })
            .await
    }

    async fn links_of_many(&self, ids: Vec<MemoryId>, at_most: usize) -> Result<HashMap<MemoryId, Vec<Edge>>> {
        let limit = Value::Integer(i64::try_from(at_most).unwrap_or(i64::MAX));
        self.readers
            .read(move |conn| {
                let sql = links_of_sql();
                ids.into_iter()
                    .map(|id| Ok((id, query_edges(conn, &sql, &[Value::Integer(id.0), limit.clone()])?)))
                    .collect()
            })
            .await
    }

    async fn stats(&self) -> Result<StoreStats> {
        let path = self.path.clone();
        let model = self.bound_model();
        self.readers
            .read(move |conn| {
                let mut stats = StoreStats { embedding_model: model, ..StoreStats::default() };
                let mut stmt =
                    conn.prepare_cached("SELECT kind, count(*) FROM memories GROUP BY kind").map_err(storage)?;
                let rows =
                    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(storage)?;
                for row in rows {
                    let (kind, n) = row.map_err(storage)?;
                    stats.memories_by_kind.insert(kind_of(&kind), n as u64);
                }
                let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map_err(storage);
                stats.edges = count("SELECT count(*) FROM edges")? as u64;
                stats.soft_deleted = count("SELECT count(*) FROM memories WHERE deleted_at IS NOT NULL")? as u64;
                stats.pending_vectors = count("SELECT count(*) FROM vector_queue")? as u64;
                if vector_table_exists(conn)? {
                    stats.vectors = count(&format!("SELECT count(*) FROM {VECTOR_TABLE}"))? as u64;
                }
                stats.schema_version = Some(migrations::current_version(conn)?);
                let file_size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                stats.bytes = Some(file_size(path) + file_size(PathBuf::from(wal)));
                Ok(stats)
            })
            .await
    }
}
impl SqliteStore {
    /// Copies the WAL into the database and empties it, so that the page images of a row just
    /// deleted (which the WAL keeps until a checkpoint) leave the disk with it; the deletion
    /// itself zeroed the row's content (`secure_delete`; its full-text tokens live only in the
    /// in-memory text cache, whose file never keeps a token no row holds). Waits for readers like any write; a reader that outlasts the wait only
    /// delays the emptying to the next checkpoint (logged).
    async fn truncate_wal(&self) -> Result<()> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let _inside = crate::fork_gate::hold();
            let conn = Connection::open(&path).map_err(storage)?;
            conn.busy_timeout(Duration::from_secs(60)).map_err(storage)?;
            let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).map_err(storage)?;
            if busy != 0 {
                tracing::warn!(
                    db = %path.display(),
                    "the forgotten memory is deleted, but a reader kept the write-ahead log from being emptied; \
                     its old pages leave the disk at the next checkpoint"
                );
            }
            Ok(())
        })
        .await
        .map_err(|e| AtlasError::Storage(format!("checkpoint task: {e}")))?
    }
}
