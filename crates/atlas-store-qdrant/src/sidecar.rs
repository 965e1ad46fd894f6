//! The memory space's SQLite file: what is not yet on the server. It allocates memory ids, keeps
//! the ledger of which points are acknowledged and the store's settings (collection name,
//! embedding model, schema version). Edges and the vector queue are on the server
//! ([`crate::meta`], [`crate::queue`]); the `edges` and `vector_queue` tables only hold those of
//! an earlier version until the next open moves them.
//!
//! Invariant: a memory id is acknowledged to a caller only once its ledger row is `stored`,
//! which happens after Qdrant confirmed the point. A row left `writing` by a crash is rolled
//! back (point and row deleted) once its lease has expired; a row left `forgetting` is deleted
//! again. So Qdrant never keeps an unacknowledged memory for longer than the lease, and no
//! acknowledged write is ever lost.

use atlas_domain::ports::{EmbeddingModel, Receipt};
use atlas_domain::{
    AtlasError, Edge, EdgeKind, Memory, MemoryId, MemoryKind, NewMemory, Result, Timestamp, Validity, decode_id_runs,
    encode_id_runs,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Schema version of the sidecar file (its own, not the SQLite store's).
pub const SCHEMA_VERSION: i64 = 3;

/// `PRAGMA application_id` of a sidecar file ("ATLQ"; the SQLite store's is "ATLS").
pub const APPLICATION_ID: i32 = 0x4154_4C51;

/// Schema 2: receipts of idempotent writes, claims on queued vector work.
const SCHEMA_2: &str = "
CREATE TABLE receipts (key TEXT PRIMARY KEY, ids TEXT NOT NULL, recorded_at INTEGER NOT NULL) WITHOUT ROWID;
ALTER TABLE vector_queue ADD COLUMN claimed_by TEXT;
ALTER TABLE vector_queue ADD COLUMN claimed_until INTEGER;
";

/// Schema 3: what the sleep cycle keeps: which episodes it processed (or failed on), its
/// ledger of cycles, and which memories are session summaries covering how many turns.
const SCHEMA_3: &str = "
CREATE TABLE consolidation (
    id           INTEGER PRIMARY KEY REFERENCES ledger (id) ON DELETE CASCADE,
    processed_at INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    last_attempt INTEGER
);
CREATE TABLE cycles (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, report TEXT NOT NULL);
CREATE TABLE summaries (
    id      INTEGER PRIMARY KEY REFERENCES ledger (id) ON DELETE CASCADE,
    turns   INTEGER NOT NULL,
    current INTEGER NOT NULL DEFAULT 1
);
";

/// Up to `limit` stored episodes after `after`, never processed, not given up on and not
/// backing off (attempts × `retry_after_ms` since the last one), in id order.
pub fn unprocessed(
    conn: &Connection,
    after: i64,
    limit: usize,
    max_attempts: u32,
    retry_after_ms: i64,
    now: i64,
) -> Result<Vec<MemoryId>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT l.id FROM ledger l LEFT JOIN consolidation c ON c.id = l.id \
             WHERE l.id > ?1 AND l.kind = 'episode' AND l.state = 'stored' AND (c.id IS NULL OR \
             (c.processed_at IS NULL AND c.attempts < ?2 AND coalesce(c.last_attempt, 0) + ?3 * c.attempts <= ?4)) \
             ORDER BY l.id LIMIT ?5",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![after, i64::from(max_attempts), retry_after_ms, now, limit as i64], |r| r.get(0))
        .map_err(sql)?;
    rows.map(|r| r.map(MemoryId)).collect::<rusqlite::Result<_>>().map_err(sql)
}

/// Records a cycle's outcome: episodes processed or failed, its report, its summaries (and the
/// older summaries they replace).
pub fn record_cycle(
    tx: &Connection,
    at: i64,
    processed: &[MemoryId],
    failed: &[(MemoryId, String)],
    summaries: &[(MemoryId, u32)],
    ended_summaries: &[MemoryId],
    report: &str,
) -> Result<()> {
    let mut done = tx
        .prepare_cached(
            "INSERT INTO consolidation (id, processed_at, attempts, last_attempt) VALUES (?1, ?2, 1, ?2) \
             ON CONFLICT (id) DO UPDATE SET processed_at = ?2, attempts = attempts + 1, last_attempt = ?2, \
             last_error = NULL",
        )
        .map_err(sql)?;
    for id in processed {
        done.execute(params![id.0, at]).map_err(sql)?;
    }
    let mut failing = tx
        .prepare_cached(
            "INSERT INTO consolidation (id, attempts, last_error, last_attempt) VALUES (?1, 1, ?2, ?3) \
             ON CONFLICT (id) DO UPDATE SET attempts = attempts + 1, last_error = ?2, last_attempt = ?3",
        )
        .map_err(sql)?;
    for (id, error) in failed {
        failing.execute(params![id.0, error, at]).map_err(sql)?;
    }
    for (id, turns) in summaries {
        tx.execute("INSERT OR REPLACE INTO summaries (id, turns, current) VALUES (?, ?, 1)", params![id.0, turns])
            .map_err(sql)?;
    }
    for_each_id(tx, "UPDATE summaries SET current = 0 WHERE id = ?", ended_summaries)?;
    tx.execute("INSERT INTO cycles (at, report) VALUES (?, ?)", params![at, report]).map_err(sql)?;
    Ok(())
}

/// The reports of the last `limit` cycles, newest first.
pub fn cycles(conn: &Connection, limit: usize) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT report FROM cycles ORDER BY id DESC LIMIT ?").map_err(sql)?;
    let rows = stmt.query_map([limit as i64], |r| r.get(0)).map_err(sql)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql)
}

/// A session quiet since before the cut-off without a current summary of all its turns: its
/// scope, its stored turns (event time, id order) and its current summary, if any.
pub type SessionRows = (Option<String>, Option<String>, String, Vec<MemoryId>, Option<MemoryId>);

/// Up to `limit` such sessions, the longest closed first.
pub fn closed_sessions(conn: &Connection, said_before: i64, limit: usize) -> Result<Vec<SessionRows>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT g.u, g.a, g.s FROM (SELECT scope_user AS u, scope_agent AS a, scope_session AS s, \
             count(*) AS n, max(event_time) AS last FROM ledger WHERE kind = 'episode' AND state = 'stored' \
             AND scope_session IS NOT NULL GROUP BY 1, 2, 3) g WHERE g.last < ?1 AND NOT EXISTS \
             (SELECT 1 FROM summaries x JOIN ledger l ON l.id = x.id WHERE x.current = 1 AND l.state = 'stored' \
              AND l.scope_session = g.s AND l.scope_user IS g.u AND l.scope_agent IS g.a AND x.turns >= g.n) \
             ORDER BY g.last, g.s LIMIT ?2",
        )
        .map_err(sql)?;
    let groups = stmt
        .query_map(params![said_before, limit as i64], |r| {
            Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, String>(2)?))
        })
        .map_err(sql)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql)?;
    let same = "scope_session = ?1 AND scope_user IS ?2 AND scope_agent IS ?3 AND state = 'stored'";
    groups
        .into_iter()
        .map(|(user, agent, session)| {
            let mut turns = conn
                .prepare_cached(&format!(
                    "SELECT id FROM ledger WHERE kind = 'episode' AND {same} ORDER BY event_time, id"
                ))
                .map_err(sql)?;
            let turns = turns
                .query_map(params![session, user, agent], |r| r.get(0))
                .map_err(sql)?
                .map(|r| r.map(MemoryId))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql)?;
            let previous: Option<i64> = conn
                .query_row(
                    &format!(
                        "SELECT max(l.id) FROM ledger l JOIN summaries x ON x.id = l.id WHERE x.current = 1 AND \
                         l.kind = 'summary' AND {}",
                        same.replace("scope_", "l.scope_").replace("state", "l.state")
                    ),
                    params![session, user, agent],
                    |r| r.get(0),
                )
                .map_err(sql)?;
            Ok((user, agent, session, turns, previous.map(MemoryId)))
        })
        .collect()
}

/// How long an insert may stay unconfirmed before another open rolls it back.
pub const WRITE_LEASE: Duration = Duration::from_secs(300);

const SCHEMA: &str = "
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE ledger (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT    NOT NULL,
    scope_user    TEXT,
    scope_agent   TEXT,
    scope_session TEXT,
    event_time    INTEGER NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('writing', 'stored', 'forgetting')),
    since         INTEGER NOT NULL
);
CREATE INDEX ledger_session ON ledger (scope_session, kind, event_time) WHERE scope_session IS NOT NULL;
CREATE INDEX ledger_state ON ledger (state) WHERE state <> 'stored';
CREATE TABLE edges (
    src         INTEGER NOT NULL REFERENCES ledger (id) ON DELETE CASCADE,
    dst         INTEGER NOT NULL REFERENCES ledger (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL,
    weight      REAL    NOT NULL,
    valid_from  INTEGER NOT NULL,
    valid_until INTEGER,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (src, dst, kind)
) WITHOUT ROWID;
CREATE INDEX edges_dst ON edges (dst);
CREATE TABLE vector_queue (id INTEGER PRIMARY KEY REFERENCES ledger (id) ON DELETE CASCADE);
";

const EDGE_COLUMNS: &str = "src, dst, kind, weight, valid_from, valid_until, recorded_at";

fn storage(context: &str) -> impl Fn(rusqlite::Error) -> AtlasError + '_ {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            AtlasError::Busy(format!("{context}: locked by another writer: {e}"))
        }
        _ => AtlasError::Storage(format!("{context}: {e}")),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The sidecar file, shared by the store's tasks through one connection.
#[derive(Clone)]
pub struct Sidecar {
    conn: Arc<Mutex<Connection>>,
    shown: Arc<str>,
}

impl Sidecar {
    pub fn open(path: &Path) -> Result<Self> {
        let shown: Arc<str> = path.display().to_string().into();
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(AtlasError::invalid(
                format!("database {shown}"),
                format!("directory {} does not exist (create it first)", dir.display()),
            ));
        }
        let shown_for_errors = shown.clone();
        let err = storage(&shown_for_errors);
        let mut conn = Connection::open(path).map_err(&err)?;
        conn.busy_timeout(Duration::from_secs(60)).map_err(&err)?;
        conn.execute_batch("PRAGMA foreign_keys = ON;")
            .map_err(|e| AtlasError::Storage(format!("{shown}: not usable as an ATLAS Qdrant space: {e}")))?;
        let application_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(&err)?;
        if application_id != 0 && application_id != APPLICATION_ID {
            return Err(AtlasError::NotAtlas {
                path: shown.to_string(),
                reason: format!("application_id {application_id:#x} is not an ATLAS Qdrant space's"),
            });
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(&err)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(&err)?;
        let store_kind: Option<String> = if version == 0 {
            None
        } else {
            tx.query_row("SELECT value FROM settings WHERE key = 'store'", [], |r| r.get(0)).optional().unwrap_or(None)
        };
        match (version, store_kind.as_deref()) {
            (0, _) => {
                let tables: i64 = tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(&err)?;
                if tables > 0 {
                    return Err(AtlasError::invalid(
                        format!("database {shown}"),
                        "is not an ATLAS Qdrant space (it has tables but no ATLAS schema)",
                    ));
                }
                tx.execute_batch(SCHEMA).map_err(&err)?;
                tx.execute_batch(SCHEMA_2).map_err(&err)?;
                tx.execute_batch(SCHEMA_3).map_err(&err)?;
                tx.execute("INSERT INTO settings (key, value) VALUES ('store', 'qdrant')", []).map_err(&err)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(&err)?;
                tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(&err)?;
            }
            (1 | 2, Some("qdrant")) => {
                if version == 1 {
                    tx.execute_batch(SCHEMA_2).map_err(&err)?;
                }
                tx.execute_batch(SCHEMA_3).map_err(&err)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(&err)?;
                tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(&err)?;
            }
            (SCHEMA_VERSION, Some("qdrant")) => {}
            (v, Some("qdrant")) if v > SCHEMA_VERSION => {
                return Err(AtlasError::SchemaTooNew { path: shown.to_string(), found: v, known: SCHEMA_VERSION });
            }
            _ => {
                return Err(AtlasError::invalid(
                    format!("database {shown}"),
                    "is an ATLAS SQLite store, not a Qdrant space; to move it to Qdrant run \
                     `cargo xtask migrate-to-qdrant --from PATH --to URL`",
                ));
            }
        }
        tx.commit().map_err(&err)?;
        // Only now that the file is known to be ours: journal mode is persistent.
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;").map_err(&err)?;
        Ok(Sidecar { conn: Arc::new(Mutex::new(conn)), shown })
    }

    pub fn path(&self) -> &str {
        &self.shown
    }

    /// Runs `op` in one immediate transaction on the blocking pool.
    pub async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = this.conn.lock().expect("sidecar lock");
            let err = storage(&this.shown);
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(&err)?;
            let out = op(&tx)?;
            tx.commit().map_err(&err)?;
            Ok(out)
        })
        .await
        .map_err(|e| AtlasError::Storage(format!("sidecar task failed: {e}")))?
    }

    pub async fn read<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || op(&this.conn.lock().expect("sidecar lock")))
            .await
            .map_err(|e| AtlasError::Storage(format!("sidecar task failed: {e}")))?
    }
}

fn sql(e: rusqlite::Error) -> AtlasError {
    AtlasError::Storage(format!("Qdrant space ledger: {e}"))
}

pub fn setting(conn: &Connection, key: &str) -> Result<Option<String>> {
    conn.query_row("SELECT value FROM settings WHERE key = ?", [key], |r| r.get(0)).optional().map_err(sql)
}

pub fn set_setting(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", [key, value]).map(drop).map_err(sql)
}

pub fn model(conn: &Connection) -> Result<Option<EmbeddingModel>> {
    let (Some(name), Some(dim)) = (setting(conn, "embedding_model")?, setting(conn, "embedding_dimension")?) else {
        return Ok(None);
    };
    let dimension = dim.parse().map_err(|_| AtlasError::Storage(format!("bad embedding_dimension setting {dim:?}")))?;
    Ok(Some(EmbeddingModel { name, dimension }))
}

pub fn set_model(conn: &Connection, model: &EmbeddingModel) -> Result<()> {
    set_setting(conn, "embedding_model", &model.name)?;
    set_setting(conn, "embedding_dimension", &model.dimension.to_string())
}

/// Allocates ids for `batch` (rows in state `writing`) and finds each episode's predecessor in
/// the same session, user and agent. Returns each new id with
/// its predecessor (the temporal edge between them is the caller's to write).
pub fn begin_insert(tx: &Connection, batch: &[NewMemory]) -> Result<Vec<(MemoryId, Option<MemoryId>)>> {
    let since = now_ms();
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO ledger (kind, scope_user, scope_agent, scope_session, event_time, state, since) \
             VALUES (?, ?, ?, ?, ?, 'writing', ?)",
        )
        .map_err(sql)?;
    let mut previous = tx
        .prepare_cached(
            "SELECT id FROM ledger WHERE scope_session = ?1 AND kind = 'episode' AND id <> ?3 \
             AND scope_user IS ?4 AND scope_agent IS ?5 AND state <> 'forgetting' \
             AND (event_time < ?2 OR (event_time = ?2 AND id < ?3)) ORDER BY event_time DESC, id DESC LIMIT 1",
        )
        .map_err(sql)?;
    let mut ids = Vec::with_capacity(batch.len());
    for m in batch {
        insert
            .execute(params![
                m.kind().as_str(),
                m.scope.user,
                m.scope.agent,
                m.scope.session,
                m.event_time.millis(),
                since
            ])
            .map_err(sql)?;
        let id = tx.last_insert_rowid();
        let mut prev: Option<i64> = None;
        if let (MemoryKind::Episode, Some(session)) = (m.kind(), &m.scope.session) {
            prev = previous
                .query_row(params![session, m.event_time.millis(), id, m.scope.user, m.scope.agent], |r| r.get(0))
                .optional()
                .map_err(sql)?;
        }
        ids.push((MemoryId(id), prev.map(MemoryId)));
    }
    Ok(ids)
}

/// Records restored memories under their own ids (state `writing` until Qdrant confirms).
pub fn begin_restore(tx: &Connection, batch: &[Memory]) -> Result<()> {
    let since = now_ms();
    let mut upsert = tx
        .prepare_cached(
            "INSERT INTO ledger (id, kind, scope_user, scope_agent, scope_session, event_time, state, since) \
             VALUES (?, ?, ?, ?, ?, ?, 'writing', ?) ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, \
             scope_user = excluded.scope_user, scope_agent = excluded.scope_agent, \
             scope_session = excluded.scope_session, event_time = excluded.event_time, state = 'writing', \
             since = excluded.since",
        )
        .map_err(sql)?;
    for m in batch {
        upsert
            .execute(params![
                m.id.0,
                m.kind().as_str(),
                m.scope.user,
                m.scope.agent,
                m.scope.session,
                m.event_time.millis(),
                since
            ])
            .map_err(sql)?;
    }
    Ok(())
}

fn id_values(ids: &[MemoryId]) -> Vec<Value> {
    ids.iter().map(|id| Value::Integer(id.0)).collect()
}

fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Marks ids acknowledged: their points are in Qdrant.
pub fn finish_insert(tx: &Connection, ids: &[MemoryId]) -> Result<()> {
    for chunk in ids.chunks(500) {
        tx.execute(
            &format!("UPDATE ledger SET state = 'stored' WHERE id IN ({})", marks(chunk.len())),
            params_from_iter(id_values(chunk)),
        )
        .map_err(sql)?;
    }
    Ok(())
}

/// Deletes ledger rows (and with them their queue entries).
pub fn delete(tx: &Connection, ids: &[MemoryId]) -> Result<()> {
    for chunk in ids.chunks(500) {
        tx.execute(
            &format!("DELETE FROM ledger WHERE id IN ({})", marks(chunk.len())),
            params_from_iter(id_values(chunk)),
        )
        .map_err(sql)?;
    }
    Ok(())
}

/// The ids a one-parameter query selects.
fn memory_ids(conn: &Connection, query: &str, param: i64) -> Result<Vec<MemoryId>> {
    let mut stmt = conn.prepare_cached(query).map_err(sql)?;
    let ids = stmt.query_map([param], |r| r.get(0)).map_err(sql)?;
    ids.map(|r| r.map(MemoryId)).collect::<rusqlite::Result<_>>().map_err(sql)
}

/// Runs a one-parameter statement once per id.
fn for_each_id(tx: &Connection, statement: &str, ids: &[MemoryId]) -> Result<()> {
    let mut stmt = tx.prepare_cached(statement).map_err(sql)?;
    for id in ids {
        stmt.execute([id.0]).map_err(sql)?;
    }
    Ok(())
}

/// Marks a memory as being forgotten; false when it is not (or no longer) acknowledged.
pub fn begin_forget(tx: &Connection, id: MemoryId) -> Result<bool> {
    tx.execute(
        "UPDATE ledger SET state = 'forgetting', since = ? WHERE id = ? AND state = 'stored'",
        params![now_ms(), id.0],
    )
    .map(|n| n > 0)
    .map_err(sql)
}

/// Ids whose last write or forget never finished: inserts older than the lease and forgets.
pub fn unfinished(conn: &Connection) -> Result<Vec<MemoryId>> {
    let expired = now_ms() - WRITE_LEASE.as_millis() as i64;
    memory_ids(
        conn,
        "SELECT id FROM ledger WHERE (state = 'writing' AND since < ?) OR state = 'forgetting' ORDER BY id",
        expired,
    )
}

/// Memories a space file of an earlier version kept in its vector queue (the table is emptied
/// once they are queued on the server, `QdrantStore::move_legacy_state`).
pub fn legacy_queue(conn: &Connection) -> Result<Vec<MemoryId>> {
    let mut stmt = conn.prepare_cached("SELECT id FROM vector_queue ORDER BY id").map_err(sql)?;
    let ids = stmt.query_map([], |r| r.get(0)).map_err(sql)?;
    ids.map(|r| r.map(MemoryId)).collect::<rusqlite::Result<_>>().map_err(sql)
}

/// Edges a space file of an earlier version kept (the table is emptied once they are on the
/// server, `QdrantStore::move_legacy_state`).
pub fn legacy_edges(conn: &Connection) -> Result<Vec<Edge>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {EDGE_COLUMNS} FROM edges")).map_err(sql)?;
    let rows = stmt
        .query_map([], |row| {
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
        })
        .map_err(sql)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql)
}

/// The receipt of an earlier write under `key`, if there was one.
pub fn receipt(conn: &Connection, key: &str) -> Result<Option<Receipt>> {
    let row: Option<(String, i64)> = conn
        .query_row("SELECT ids, recorded_at FROM receipts WHERE key = ?", [key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(sql)?;
    row.map(|(ids, at)| {
        let ids = decode_id_runs(&ids).map_err(|m| AtlasError::Storage(format!("receipts row {key:?}: {m}")))?;
        Ok(Receipt { ids, replayed: true, recorded_at: Timestamp(at) })
    })
    .transpose()
}

/// Records `key` with the ids it acknowledges, in the acknowledging transaction.
pub fn record_receipt(tx: &Connection, key: &str, ids: Vec<MemoryId>) -> Result<Receipt> {
    let at = now_ms();
    tx.execute("INSERT INTO receipts (key, ids, recorded_at) VALUES (?, ?, ?)", params![key, encode_id_runs(&ids), at])
        .map_err(sql)?;
    Ok(Receipt { ids, replayed: false, recorded_at: Timestamp(at) })
}

/// Raises the ledger's id sequence by `count`; returns the first id so reserved.
pub fn reserve_ids(tx: &Connection, count: u64) -> Result<MemoryId> {
    let top: i64 = tx
        .query_row(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'ledger'), 0), \
             coalesce((SELECT max(id) FROM ledger), 0))",
            [],
            |r| r.get(0),
        )
        .map_err(sql)?;
    let end = top + count as i64;
    if tx.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'ledger'", [end]).map_err(sql)? == 0 {
        tx.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('ledger', ?)", [end]).map_err(sql)?;
    }
    Ok(MemoryId(top + 1))
}

pub fn count(conn: &Connection, sql_text: &str) -> Result<u64> {
    conn.query_row(sql_text, [], |r| r.get::<_, i64>(0)).map(|n| n as u64).map_err(sql)
}

/// Which of `ids` are acknowledged (stored) memories.
pub fn stored_among(conn: &Connection, ids: &[MemoryId]) -> Result<std::collections::HashSet<MemoryId>> {
    let mut out = std::collections::HashSet::new();
    for chunk in ids.chunks(500) {
        let mut stmt = conn
            .prepare(&format!("SELECT id FROM ledger WHERE state = 'stored' AND id IN ({})", marks(chunk.len())))
            .map_err(sql)?;
        let rows = stmt.query_map(params_from_iter(id_values(chunk)), |r| r.get(0)).map_err(sql)?;
        for r in rows {
            out.insert(MemoryId(r.map_err(sql)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_domain::Scope;

    fn episode(session: &str, t: i64) -> NewMemory {
        let scope = Scope { session: Some(session.into()), ..Scope::default() };
        NewMemory::episode("x", scope, None, Timestamp(t), Timestamp(t))
    }

    #[tokio::test]
    async fn inserts_are_unacknowledged_until_finished_and_expired_ones_roll_back() {
        let dir = tempfile::tempdir().unwrap();
        let side = Sidecar::open(&dir.path().join("space.db")).unwrap();
        let ids = side.write(|tx| begin_insert(tx, &[episode("s", 1), episode("s", 2)])).await.unwrap();
        let ((a, none), (b, after_a)) = (ids[0], ids[1]);
        assert_eq!((none, after_a), (None, Some(a)), "each insert names its predecessor");
        side.write(move |tx| finish_insert(tx, &[a])).await.unwrap();
        assert_eq!(side.read(move |c| stored_among(c, &[a, b])).await.unwrap(), [a].into_iter().collect());
        // Not expired yet: a concurrent insert of another process must not be rolled back.
        assert!(side.read(unfinished).await.unwrap().is_empty());
        side.write(move |tx| {
            tx.execute("UPDATE ledger SET since = 0 WHERE id = ?", [b.0]).unwrap();
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(side.read(unfinished).await.unwrap(), vec![b]);
        assert!(side.write(move |tx| begin_forget(tx, a)).await.unwrap());
        assert!(!side.write(move |tx| begin_forget(tx, a)).await.unwrap(), "already being forgotten");
        assert_eq!(side.read(unfinished).await.unwrap(), vec![a, b]);
        side.write(move |tx| delete(tx, &[a, b])).await.unwrap();
        assert_eq!(side.read(|c| count(c, "SELECT count(*) FROM ledger")).await.unwrap(), 0);
        let next = side.write(|tx| begin_insert(tx, &[episode("s", 3)])).await.unwrap();
        assert!(next[0].0 > b, "ids are never reused");
    }

    #[test]
    fn refuses_a_sqlite_store_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let foreign = dir.path().join("other.db");
        Connection::open(&foreign).unwrap().execute_batch("CREATE TABLE t (x)").unwrap();
        let err = Sidecar::open(&foreign).err().unwrap().to_string();
        assert!(err.contains("other.db") && err.contains("not an ATLAS Qdrant space"), "{err}");
        let store = dir.path().join("store.db");
        let conn = Connection::open(&store).unwrap();
        conn.execute_batch("CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT); PRAGMA user_version = 2;")
            .unwrap();
        let before = std::fs::read(&store).unwrap();
        let err = Sidecar::open(&store).err().unwrap().to_string();
        assert!(err.contains("migrate-to-qdrant"), "{err}");
        assert_eq!(std::fs::read(&store).unwrap(), before, "a refused file is left byte for byte as it was");
        let err = Sidecar::open(&dir.path().join("missing/space.db")).err().unwrap().to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
