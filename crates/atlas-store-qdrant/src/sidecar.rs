//! The memory space's SQLite file: the store's settings (the collection's name, the embedding
//! model, the schema version). Everything else of a space is on the server ([`crate::ledger`],
//! [`crate::meta`], [`crate::queue`]); the file's other tables only hold what an earlier version
//! kept there until the next open moves it ([`crate::legacy`]).

use atlas_domain::ports::EmbeddingModel;
use atlas_domain::{AtlasError, Edge, EdgeKind, MemoryId, Result, Timestamp, Validity};
use rusqlite::{Connection, OptionalExtension};
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

pub(crate) fn sql(e: rusqlite::Error) -> AtlasError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
