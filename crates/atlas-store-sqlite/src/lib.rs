//! The SQLite adapter: every storage port of `atlas-domain` over one database file.
//!
//! Records live in `memories` and `edges`; FTS5 indexes the text with external content kept in
//! step by triggers; sqlite-vec's `vec0` table `memory_vectors` holds one vector per memory,
//! linked by rowid. One writer thread serialises all writes ([`writer`]); reads run on pooled
//! `query_only` connections ([`readers`]). WAL mode lets both proceed at once.

mod cache_file;
mod caches;
mod consolidation;
mod error;
mod keys;
pub mod migrations;
pub mod ownership;
mod readers;
mod sql;
mod text_cache;
mod vector_cache;
mod writer;

use crate::caches::CacheFiles;
pub use crate::caches::CacheLoads;
use crate::error::storage;
use crate::readers::Readers;
use crate::sql::{
    EDGE_COLUMNS, MEMORY_COLUMNS, blob_vector, filter_clause, json_columns, lifecycle_columns, put_edge, query_edges,
    query_memories, vector_blob,
};
use crate::text_cache::{Fields, TextCache, Tokenizer};
use crate::writer::Writer;
use async_trait::async_trait;
use atlas_domain::policy::embedding::speaker_line;
use atlas_domain::ports::{
    EmbeddingModel, MemoryStore, ProgressFn, Receipt, Replica, ScoredId, StoreStats, StoredMemory, TextIndex, Update,
    VECTOR_CLAIM_MS, VectorIndex,
};
use atlas_domain::{
    AtlasError, Edge, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Timestamp, decode_id_runs,
    encode_id_runs,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Once, RwLock};
use std::time::Duration;

/// How long a write (and the first open of a file) waits for another process's lock before
/// failing with a clear error, unless configured: long enough for an import of a million
/// memories (about 30 s here) to commit, so that bulk imports of other processes wait their
/// turn rather than fail.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// How hard each commit is pushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL` in WAL mode: a committed write survives a crash of the process;
    /// the last commits can be lost only if the operating system or the power fails.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is fsynced and survives power loss, at a latency cost.
    Full,
}

pub use crate::vector_cache::{Precision, int8_dot, quantize};

/// Below this many vectors, `vector_precision: None` keeps floats in the vector cache; from it
/// on, int8 codes (at 384 dimensions and 100k vectors: 154 MB of floats, against 38 MB of
/// codes). Int8 scores are within about 1% of the exact cosine; on 100k real MiniLM vectors the
/// int8 cache finds 0.995 of the exact top 10 against the float cache's 1.000 (docs/BENCHMARKS.md).
pub const INT8_FROM_VECTORS: usize = 50_000;

/// Sets of per-search buffers each cache keeps for reuse: as many as searches run at once on two
/// cores, and a spare. (Allocated anew, they are 8 MB and more a search at a million memories,
/// and the allocator keeps what each search thread freed.)
pub(crate) const SEARCH_BUFFERS_KEPT: usize = 3;

/// [`SqliteOptions::codes_in_file_from`] by default: from 250k vectors (96 MB of int8 codes at
/// 384 dimensions), the codes stay in the cache file. Below, memory is cheap and reading the
/// shortlist from the file (about 0.7 ms a search) is not worth it.
pub const CODES_IN_FILE_FROM: usize = 250_000;

/// [`SqliteOptions::vector_shortlist`] by default.
pub const DEFAULT_VECTOR_SHORTLIST: usize = 16;

/// Options for [`SqliteStore::open`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub durability: Durability,
    /// What the vector cache keeps for rescoring; `None` chooses by size
    /// ([`INT8_FROM_VECTORS`]).
    pub vector_precision: Option<Precision>,
    /// Create the file when it does not exist (commands that write); otherwise a missing file
    /// is an error (commands that only read never leave an empty database behind).
    pub create: bool,
    /// How long to wait for another process's lock, at open and on every write.
    pub busy_timeout: Duration,
    /// Vectors the sign-bit scan keeps per result wanted, for exact rescoring (at least 256 in
    /// all): the accuracy of vector search against its time (`cargo xtask bench recall`).
    pub vector_shortlist: usize,
    /// From this many vectors, an int8 vector cache read from its file (or written to one)
    /// leaves its codes there and reads the shortlist's codes by position, out of the
    /// process's memory ([`CODES_IN_FILE_FROM`]).
    pub codes_in_file_from: usize,
    /// Keep the text and vector caches in files beside the database (`<db>.text.cache`,
    /// `<db>.vectors.cache`), so that a new process's first search reads them instead of
    /// rebuilding them from SQL. They are checked against the database's state and rebuilt
    /// when stale; deleting them at any time is safe.
    pub cache_files: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::default(),
            vector_precision: None,
            create: true,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            vector_shortlist: DEFAULT_VECTOR_SHORTLIST,
            codes_in_file_from: CODES_IN_FILE_FROM,
            cache_files: true,
        }
    }
}

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    /// Names this instance's claims on queued vector work (unique per process and open).
    owner: String,
    writer: Writer,
    readers: Arc<Readers>,
    /// The model the vectors were made with, once known; `None` until an embedder binds.
    model: Arc<RwLock<Option<EmbeddingModel>>>,
    /// The quantised in-memory copy of the vectors; `None` until the first vector search.
    vector_cache: SharedCache,
    vector_precision: Option<Precision>,
    codes_in_file_from: usize,
    vector_shortlist: usize,
    /// The in-memory BM25 index; `None` until the first text search.
    text_cache: SharedTextCache,
    tokenizer: Arc<Tokenizer>,
    cache_files: CacheFiles,
}

type SharedTextCache = Arc<RwLock<Option<TextCache>>>;

impl Drop for SqliteStore {
    /// A closed store leaves no cache file half written and no thread writing one.
    fn drop(&mut self) {
        self.cache_files.settle();
    }
}

/// Above this many memories in one write, the text cache is dropped and rebuilt by the next
/// search rather than updated row by row (a reload reads the index far faster than the
/// private tokenizer re-tokenises a bulk import).
const TEXT_CACHE_BULK: usize = 5_000;

pub(crate) const VECTOR_TABLE: &str = "memory_vectors";

impl SqliteStore {
    /// Opens the database at `path` (creating it only with `options.create`) and migrates it
    /// to the latest schema. A file that is not empty and not ATLAS's is refused before
    /// anything is written to it. Waiting for other processes at open (the switch to WAL, the
    /// migrations) is bounded by `options.busy_timeout` like every write. A database whose
    /// directory this process cannot write is opened read-only: reads work, writes fail clearly.
    pub fn open(path: &Path, options: &SqliteOptions) -> Result<Self> {
        Self::open_checked(path, options).map_err(|e| error::at_path(&path.display().to_string(), e))
    }

    fn open_checked(path: &Path, options: &SqliteOptions) -> Result<Self> {
        register_sqlite_vec();
        let shown = path.display().to_string();
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(AtlasError::invalid(
                format!("database {shown}"),
                format!("directory {} does not exist (create it first)", dir.display()),
            ));
        }
        let exists = path.exists();
        if !exists && !options.create {
            return Err(AtlasError::invalid(
                format!("database {shown}"),
                "does not exist (check the path; commands that write, such as import and remember, create it)",
            ));
        }
        error::set_busy_timeout(options.busy_timeout);
        if exists && !options.create && !writable(dir) {
            return Self::open_read_only(path, options);
        }
        let mut flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if options.create {
            flags |= rusqlite::OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags)
            .map_err(|e| AtlasError::Storage(format!("cannot open database {shown}: {e}")))?;
        conn.busy_timeout(options.busy_timeout).map_err(storage)?;
        let started = std::time::Instant::now();
        // Before anything that writes: whose file is it?
        let owned = retry_busy(&shown, started, options.busy_timeout, || ownership::inspect(&conn, &shown))?;
        match owned {
            ownership::Ownership::Empty if !options.create => {
                return Err(AtlasError::invalid(
                    format!("database {shown}"),
                    "is empty, not an ATLAS database yet (commands that write, such as import and remember, make it one)",
                ));
            }
            ownership::Ownership::Atlas { version } if version > migrations::latest_version() => {
                return Err(AtlasError::SchemaTooNew {
                    path: shown,
                    found: version,
                    known: migrations::latest_version(),
                });
            }
            _ => {}
        }
        let synchronous = match options.durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        };
        // The switch to WAL on a new file does not go through SQLite's busy handler: retried here.
        retry_busy(&shown, started, options.busy_timeout, || {
            conn.execute_batch(&format!(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; \
                 PRAGMA cache_size = -32000; PRAGMA temp_store = MEMORY; PRAGMA secure_delete = ON;"
            ))
            .map_err(error::storage_at(&shown))
        })?;
        retry_busy(&shown, started, options.busy_timeout, || migrations::migrate(&mut conn, &shown))?;
        let model = read_model(&conn)?;
        Self::assemble(path, conn, false, model, options)
    }

    fn open_read_only(path: &Path, options: &SqliteOptions) -> Result<Self> {
        let shown = path.display().to_string();
        let conn = open_immutable(path)?;
        match ownership::inspect(&conn, &shown)? {
            ownership::Ownership::Atlas { version } if version == migrations::latest_version() => {}
            ownership::Ownership::Atlas { version } if version > migrations::latest_version() => {
                return Err(AtlasError::SchemaTooNew {
                    path: shown,
                    found: version,
                    known: migrations::latest_version(),
                });
            }
            ownership::Ownership::Atlas { version } => {
                return Err(AtlasError::Storage(format!(
                    "database {shown} has schema {version} and its directory is read-only, so it cannot be upgraded \
                     to schema {} here; open it once where it can be written",
                    migrations::latest_version()
                )));
            }
            ownership::Ownership::Empty => {
                return Err(AtlasError::invalid(format!("database {shown}"), "is empty, not an ATLAS database yet"));
            }
        }
        tracing::info!(path = %shown, "directory not writable: database opened read-only");
        let model = read_model(&conn)?;
        Self::assemble(path, conn, true, model, options)
    }

    fn assemble(
        path: &Path,
        conn: Connection,
        immutable: bool,
        model: Option<EmbeddingModel>,
        options: &SqliteOptions,
    ) -> Result<Self> {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Ok(SqliteStore {
            path: path.to_path_buf(),
            owner: format!("{}/{}-{}", boot_id(), std::process::id(), since_epoch.as_nanos()),
            writer: Writer::spawn(conn, path.display().to_string()),
            readers: Readers::new(path.to_path_buf(), immutable),
            model: Arc::new(RwLock::new(model)),
            vector_cache: Arc::new(RwLock::new(None)),
            vector_precision: options.vector_precision,
            codes_in_file_from: options.codes_in_file_from,
            vector_shortlist: options.vector_shortlist.max(1),
            text_cache: Arc::new(RwLock::new(None)),
            tokenizer: Arc::new(Tokenizer::new()?),
            cache_files: CacheFiles::new(options.cache_files.then(|| path.to_path_buf())),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How this store's caches were loaded so far: from their files or rebuilt from SQL.
    pub fn cache_loads(&self) -> CacheLoads {
        self.cache_files.loads()
    }

    fn bound_model(&self) -> Option<EmbeddingModel> {
        self.model.read().expect("model lock").clone()
    }

    /// Brings the text cache, if loaded, in step with rows just committed: `removed` are the old
    /// versions of rows gone or changed, `written` the new or changed rows. Called after the
    /// commit, so a cache loaded concurrently either already saw the commit (replaying it is
    /// harmless: versions are compared by fingerprint) or gets it here. Tokenising is SQLite
    /// work, so it runs on the blocking pool, not on the caller's executor thread. A cache that
    /// cannot follow is dropped (the next search rebuilds it), never left stale; the write
    /// itself has succeeded either way.
    async fn update_text_cache(&self, removed: Vec<Fields>, written: Vec<Fields>) {
        if self.text_cache.read().expect("text cache lock").is_none() {
            return;
        }
        let (cache, tokenizer) = (Arc::clone(&self.text_cache), Arc::clone(&self.tokenizer));
        let outcome = tokio::task::spawn_blocking(move || {
            let mut slot = cache.write().expect("text cache lock");
            let Some(index) = slot.as_mut() else {
                return Ok(());
            };
            if written.len() + removed.len() > TEXT_CACHE_BULK {
                *slot = None;
                return Ok(());
            }
            let old = removed.len();
            let mut rows = removed;
            rows.extend(written);
            match tokenizer.tokenize(&rows) {
                Ok(mut rows) => {
                    let added = rows.split_off(old);
                    for row in &rows {
                        index.remove(row);
                    }
                    index.add(added);
                    Ok(())
                }
                Err(e) => {
                    *slot = None;
                    Err(e)
                }
            }
        })
        .await;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "text cache dropped; the next search rebuilds it"),
            Err(e) => {
                *self.text_cache.write().expect("text cache lock") = None;
                tracing::warn!(error = %e, "text cache update failed; the next search rebuilds it");
            }
        }
    }
}

/// Whether this process may create files in `dir` (SQLite's `-wal` and `-shm` beside the
/// database): asked of the kernel, so it is right for root and for ACLs too.
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return true };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Opens a database read-only and immutable: for a file in a directory this process cannot
/// write, where SQLite could not create the `-shm` file a WAL reader otherwise needs.
pub(crate) fn open_immutable(path: &Path) -> Result<Connection> {
    let shown = path.display().to_string();
    let absolute = std::path::absolute(path).map_err(|e| AtlasError::Storage(format!("database {shown}: {e}")))?;
    let mut uri = String::from("file:");
    for b in absolute.to_string_lossy().bytes() {
        match b {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(b as char),
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    Connection::open_with_flags(
        &uri,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
            | rusqlite::OpenFlags::SQLITE_OPEN_URI
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| AtlasError::Storage(format!("cannot open database {shown} read-only: {e}")))
}

/// This boot of this machine (Linux: the kernel's boot id), so that a claim names a process
/// another one can check; empty where unknown, and then claims only expire.
fn boot_id() -> &'static str {
    static ID: LazyLock<String> = LazyLock::new(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_owned()).unwrap_or_default()
    });
    &ID
}

/// Whether a claim's owner (`boot/pid-nanos`) is a process of this boot that no longer runs.
/// Unknown boots, other machines and live processes are never dead.
fn owner_is_dead(owner: &str) -> bool {
    let Some((boot, rest)) = owner.split_once('/') else { return false };
    let Some(pid) = rest.split_once('-').and_then(|(pid, _)| pid.parse::<u32>().ok()) else { return false };
    !boot.is_empty() && boot == boot_id() && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Runs `op` until it stops answering "busy", for at most `timeout` since `started`; the error
/// then says how long it waited.
fn retry_busy<T>(
    shown: &str,
    started: std::time::Instant,
    timeout: Duration,
    mut op: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut pause = Duration::from_millis(2);
    loop {
        match op() {
            Err(AtlasError::Busy(_)) if started.elapsed() < timeout => {
                std::thread::sleep(pause.min(timeout.saturating_sub(started.elapsed())));
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(AtlasError::Busy(e)) => {
                return Err(AtlasError::Busy(format!(
                    "database {shown} is locked by another process: waited {} ms while opening it, then gave up \
                     (ATLAS_BUSY_TIMEOUT_MS or busy_timeout_ms waits longer; SQLite says: {e})",
                    started.elapsed().as_millis()
                )));
            }
            other => return other,
        }
    }
}

fn register_sqlite_vec() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_vec_init has exactly the signature SQLite expects of an extension entry
        // point; registering it once makes every connection opened afterwards load vec0.
        unsafe {
            #[allow(clippy::missing_transmute_annotations)]
            rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute(sqlite_vec::sqlite3_vec_init as *const ())));
        }
    });
}

pub(crate) fn read_model(conn: &Connection) -> Result<Option<EmbeddingModel>> {
    let get = |key: &str| -> Result<Option<String>> {
        conn.query_row("SELECT value FROM settings WHERE key = ?", [key], |r| r.get(0)).optional().map_err(storage)
    };
    match (get("embedding_model")?, get("embedding_dimension")?) {
        (Some(name), Some(dim)) => {
            let dimension = dim
                .parse()
                .map_err(|_| AtlasError::Storage(format!("settings.embedding_dimension is not a number: {dim:?}")))?;
            Ok(Some(EmbeddingModel { name, dimension }))
        }
        _ => Ok(None),
    }
}

fn kind_of(text: &str) -> MemoryKind {
    text.parse().unwrap_or(MemoryKind::Episode)
}

/// Inserts the batch; returns each new memory's indexed fields (its id, text, speaker and the
/// context derived here).
fn insert_all(conn: &Connection, batch: &[NewMemory], progress: Option<&ProgressFn>) -> Result<Vec<Fields>> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO memories (kind, text, speaker, scope_user, scope_agent, scope_session, event_time, \
             recorded_at, valid_from, valid_until, meta, body, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .map_err(storage)?;
    // Every stored row has a smaller id than the one about to be inserted, so "before in
    // (event time, id) order" is "event time not later".
    let mut previous = conn
        .prepare_cached(
            "SELECT id, speaker, text FROM memories WHERE scope_session = ?1 AND kind = 'episode' \
             AND scope_user IS ?3 AND scope_agent IS ?4 AND event_time <= ?2 \
             ORDER BY event_time DESC, id DESC LIMIT 1",
        )
        .map_err(storage)?;
    let mut link = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO edges (src, dst, kind, weight, valid_from, valid_until, recorded_at) \
             VALUES (?, ?, 'temporal', 1.0, ?, NULL, ?)",
        )
        .map_err(storage)?;
    let mut ids = Vec::with_capacity(batch.len());
    for (i, m) in batch.iter().enumerate() {
        let (meta, body) = json_columns(m)?;
        let prev: Option<(i64, String)> = match (m.kind(), &m.scope.session) {
            (MemoryKind::Episode, Some(session)) => previous
                .query_row(params![session, m.event_time.millis(), m.scope.user, m.scope.agent], |r| {
                    Ok((r.get(0)?, speaker_line(r.get::<_, Option<String>>(1)?.as_deref(), &r.get::<_, String>(2)?)))
                })
                .optional()
                .map_err(storage)?,
            _ => None,
        };
        insert
            .execute(params![
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
                prev.as_ref().map(|(_, line)| line),
            ])
            .map_err(storage)?;
        let id = conn.last_insert_rowid();
        let context = prev.map(|(prev, line)| {
            link.execute(params![prev, id, m.event_time.millis(), m.recorded_at.millis()]).map(|_| line)
        });
        let context = context.transpose().map_err(storage)?;
        ids.push(Fields { id, text: m.text.clone(), speaker: m.body.speaker().map(str::to_owned), context });
        if let Some(p) = progress
            && (i + 1) % 1000 == 0
        {
            p(i + 1);
        }
    }
    if let Some(p) = progress {
        p(batch.len());
    }
    Ok(ids)
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

/// The indexed fields of a stored memory.
fn stored_fields(conn: &Connection, id: i64) -> Result<Option<Fields>> {
    let mut stmt = conn.prepare_cached("SELECT text, speaker, context FROM memories WHERE id = ?").map_err(storage)?;
    stmt.query_row([id], |r| Ok(Fields { id, text: r.get(0)?, speaker: r.get(1)?, context: r.get(2)? }))
        .optional()
        .map_err(storage)
}

fn vector_table_exists(conn: &Connection) -> Result<bool> {
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = ?", [VECTOR_TABLE], |r| r.get::<_, i64>(0))
        .map(|n| n > 0)
        .map_err(storage)
}

/// The edges from or to `?1`.
fn edges_of_sql() -> String {
    format!(
        "SELECT {EDGE_COLUMNS} FROM edges WHERE src = ?1 UNION ALL SELECT {EDGE_COLUMNS} FROM edges \
         WHERE dst = ?1 AND src <> ?1"
    )
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        let written = self.writer.write(move |conn| insert_all(conn, &batch, progress.as_ref())).await?;
        let ids = written.iter().map(|f| MemoryId(f.id)).collect();
        self.update_text_cache(Vec::new(), written).await;
        Ok(ids)
    }

    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt> {
        let (receipt, written) = self
            .writer
            .write(move |conn| {
                if let Some(receipt) = read_receipt(conn, &key)? {
                    return Ok((receipt, Vec::new()));
                }
                let written = insert_all(conn, &batch, progress.as_ref())?;
                let ids: Vec<MemoryId> = written.iter().map(|f| MemoryId(f.id)).collect();
                Ok((record_receipt(conn, &key, ids)?, written))
            })
            .await?;
        self.update_text_cache(Vec::new(), written).await;
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

#[async_trait]
impl TextIndex for SqliteStore {
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let (cache, tokenizer, files) =
            (Arc::clone(&self.text_cache), Arc::clone(&self.tokenizer), self.cache_files.clone());
        self.readers.read(move |conn| search_text_sync(conn, &cache, &files, &tokenizer, &terms, &filter, limit)).await
    }
}

/// FTS5's `bm25()` weights of the columns text, speaker, context.
static BM25_WEIGHTS: LazyLock<String> = LazyLock::new(|| {
    use atlas_domain::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT, TEXT_WEIGHT};
    format!("{TEXT_WEIGHT:?}, {SPEAKER_WEIGHT:?}, {CONTEXT_WEIGHT:?}")
});

/// Most candidates the cache hands to the filter before FTS5 answers under the filter itself.
const TEXT_WINDOW_MAX: usize = 16_384;

/// BM25 from the in-memory cache (loaded here on first use), then the filter on the best of
/// them, widening the window while the filter rejects too many; past [`TEXT_WINDOW_MAX`], FTS5
/// scores the filtered matches itself. Both rank by the same formula.
fn search_text_sync(
    conn: &Connection,
    cache: &SharedTextCache,
    files: &CacheFiles,
    tokenizer: &Tokenizer,
    terms: &[String],
    filter: &RecallFilter,
    limit: usize,
) -> Result<Vec<ScoredId>> {
    let tokens = tokenizer.query_tokens(terms)?;
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    let (clause, filter_params) = filter_clause(filter);
    let mut window = (limit * 2 + 16).max(1024);
    loop {
        let best = {
            let shared = cache.read().expect("text cache lock");
            match shared.as_ref() {
                Some(index) => index.search(&tokens, window),
                None => {
                    drop(shared);
                    // Load and search under the same write guard: nothing can change it in between.
                    let mut slot = cache.write().expect("text cache lock");
                    if slot.is_none() {
                        *slot = Some(files.load_text(conn, cache, tokenizer)?);
                    }
                    slot.as_ref().expect("loaded").search(&tokens, window)
                }
            }
        };
        let hits = first_admitted(conn, &best, &clause, &filter_params, limit)?;
        if hits.len() >= limit || best.len() < window {
            return Ok(hits);
        }
        if window >= TEXT_WINDOW_MAX {
            break;
        }
        window *= 16;
    }
    // Every term is quoted, so nothing the user typed is read as FTS5 syntax.
    let query = terms.iter().map(|t| format!("\"{}\"", t.replace('"', "\"\""))).collect::<Vec<_>>().join(" OR ");
    let sql = format!(
        "SELECT m.id, bm25(memories_fts, {weights}) AS rank FROM memories_fts \
         JOIN memories m ON m.id = memories_fts.rowid \
         WHERE memories_fts MATCH ? AND {clause} ORDER BY rank LIMIT ?",
        weights = *BM25_WEIGHTS
    );
    let mut params = vec![Value::Text(query)];
    params.extend(filter_params);
    params.push(Value::Integer(limit as i64));
    let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), |r| {
            // bm25() is lower-is-better; negate so that higher is better everywhere.
            Ok(ScoredId { id: MemoryId(r.get(0)?), score: -r.get::<_, f64>(1)? })
        })
        .map_err(storage)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
}

#[async_trait]
impl VectorIndex for SqliteStore {
    async fn bind_model(&self, model: EmbeddingModel) -> Result<()> {
        if let Some(bound) = self.bound_model() {
            return check_same_model(&bound, &model);
        }
        let stored = model.clone();
        self.writer
            .write(move |conn| {
                if let Some(bound) = read_model(conn)? {
                    check_same_model(&bound, &stored)?;
                } else {
                    conn.execute(
                        "INSERT INTO settings (key, value) VALUES ('embedding_model', ?), ('embedding_dimension', ?)",
                        params![stored.name, stored.dimension.to_string()],
                    )
                    .map_err(storage)?;
                    create_vector_table(conn, stored.dimension)?;
                }
                Ok(())
            })
            .await?;
        // Published only once committed.
        *self.model.write().expect("model lock") = Some(model);
        Ok(())
    }

    async fn rebind_model(&self, model: EmbeddingModel) -> Result<u64> {
        let stored = model.clone();
        let queued = self
            .writer
            .write(move |conn| {
                conn.execute_batch(&format!("DROP TABLE IF EXISTS {VECTOR_TABLE}")).map_err(storage)?;
                // Every vector changes: no cache file made before can be caught up.
                crate::cache_file::forget_history(conn)?;
                conn.execute(
                    "INSERT OR REPLACE INTO settings (key, value) VALUES ('embedding_model', ?), ('embedding_dimension', ?)",
                    params![stored.name, stored.dimension.to_string()],
                )
                .map_err(storage)?;
                create_vector_table(conn, stored.dimension)?;
                let queued = conn
                    .execute("INSERT OR IGNORE INTO vector_queue (id) SELECT id FROM memories", [])
                    .map_err(storage)?;
                let total: i64 = conn.query_row("SELECT count(*) FROM vector_queue", [], |r| r.get(0)).map_err(storage)?;
                tracing::info!(model = %stored.name, queued, "vectors dropped; every memory queued for the new model");
                Ok(total as u64)
            })
            .await?;
        // After the commit, so that no search reloads the old vectors into it.
        *self.model.write().expect("model lock") = Some(model);
        *self.vector_cache.write().expect("vector cache lock") = None;
        Ok(queued)
    }

    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        const CLAIMABLE: &str = "claimed_until IS NULL OR claimed_until <= ?1 OR claimed_by = ?2";
        let (owner, now) = (self.owner.clone(), wall_clock_ms());
        // Asked on a read connection first, so that a store with nothing to embed (or all of it
        // claimed by another process) never takes the write lock for it.
        let probe = owner.clone();
        let (any, others): (bool, Vec<String>) = self
            .readers
            .read(move |conn| {
                let sql = format!("SELECT EXISTS (SELECT 1 FROM vector_queue WHERE {CLAIMABLE})");
                let any = conn.query_row(&sql, params![now, probe], |r| r.get(0)).map_err(storage)?;
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT DISTINCT claimed_by FROM vector_queue WHERE claimed_until > ?1 AND claimed_by <> ?2",
                    )
                    .map_err(storage)?;
                let others = stmt
                    .query_map(params![now, probe], |r| r.get(0))
                    .map_err(storage)?
                    .collect::<rusqlite::Result<Vec<String>>>()
                    .map_err(storage)?;
                Ok((any, others))
            })
            .await?;
        // A process of this machine that died (a kill, a crash) left its claims: they are
        // released now rather than after they expire.
        let dead: Vec<String> = others.into_iter().filter(|o| owner_is_dead(o)).collect();
        if !any && dead.is_empty() {
            return Ok(Vec::new());
        }
        let claimed: Vec<i64> = self
            .writer
            .write(move |conn| {
                for owner in &dead {
                    conn.prepare_cached(
                        "UPDATE vector_queue SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?",
                    )
                    .map_err(storage)?
                    .execute([owner])
                    .map_err(storage)?;
                }
                let sql = format!(
                    "UPDATE vector_queue SET claimed_by = ?2, claimed_until = ?1 + ?3 WHERE id IN \
                     (SELECT id FROM vector_queue WHERE {CLAIMABLE} ORDER BY id LIMIT ?4) RETURNING id"
                );
                let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
                let rows = stmt
                    .query_map(params![now, owner, VECTOR_CLAIM_MS, limit as i64], |r| r.get(0))
                    .map_err(storage)?;
                rows.collect::<rusqlite::Result<Vec<i64>>>().map_err(storage)
            })
            .await?;
        let mut ids: Vec<MemoryId> = claimed.into_iter().map(MemoryId).collect();
        ids.sort();
        self.get_many(ids).await
    }

    async fn queued_vectors(&self) -> Result<u64> {
        self.readers
            .read(|conn| {
                conn.query_row("SELECT count(*) FROM vector_queue", [], |r| r.get::<_, i64>(0)).map_err(storage)
            })
            .await
            .map(|n| n as u64)
    }

    async fn put_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<()> {
        let model = self.bound_model().ok_or_else(|| {
            AtlasError::Storage("no embedding model is bound to this store; bind one before storing vectors".into())
        })?;
        if let Some((id, v)) = vectors.iter().find(|(_, v)| v.len() != model.dimension) {
            return Err(AtlasError::Embedding(format!(
                "vector for memory {id} has {} dimensions, the store's model {} has {}",
                v.len(),
                model.name,
                model.dimension
            )));
        }
        let stored = self
            .writer
            .write(move |conn| {
                // Another instance may have switched the model since this one bound it.
                match read_model(conn)? {
                    Some(current) => check_same_model(&current, &model)?,
                    None => return Err(AtlasError::Storage("no embedding model is bound to this store".into())),
                }
                let mut exists = conn.prepare_cached("SELECT 1 FROM memories WHERE id = ?").map_err(storage)?;
                let mut delete =
                    conn.prepare_cached(&format!("DELETE FROM {VECTOR_TABLE} WHERE rowid = ?")).map_err(storage)?;
                let mut insert = conn
                    .prepare_cached(&format!("INSERT INTO {VECTOR_TABLE} (rowid, embedding) VALUES (?, ?)"))
                    .map_err(storage)?;
                let mut dequeue = conn.prepare_cached("DELETE FROM vector_queue WHERE id = ?").map_err(storage)?;
                let mut stored = Vec::with_capacity(vectors.len());
                for (id, v) in vectors {
                    if !exists.exists([id.0]).map_err(storage)? {
                        continue;
                    }
                    delete.execute([id.0]).map_err(storage)?;
                    insert.execute(params![id.0, vector_blob(&v)]).map_err(storage)?;
                    dequeue.execute([id.0]).map_err(storage)?;
                    crate::cache_file::log_changed(conn, id.0)?;
                    stored.push((id, v));
                }
                Ok(stored)
            })
            .await?;
        // After the commit: the cache never holds what the database does not.
        if let Some(index) = self.vector_cache.write().expect("vector cache lock").as_mut() {
            for (id, v) in &stored {
                index.upsert(id.0, v);
            }
        }
        Ok(())
    }

    async fn search_vector(&self, query: Vec<f32>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let Some(model) = self.bound_model() else {
            return Ok(Vec::new());
        };
        if query.len() != model.dimension {
            return Err(AtlasError::Embedding(format!(
                "query vector has {} dimensions, the store's model {} has {}",
                query.len(),
                model.name,
                model.dimension
            )));
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (cache, files) = (Arc::clone(&self.vector_cache), self.cache_files.clone());
        let (dim, precision, shortlist) = (model.dimension, self.vector_precision, self.vector_shortlist);
        let in_file_from = self.codes_in_file_from;
        self.readers
            .read(move |conn| {
                let settings = (dim, precision, shortlist, in_file_from);
                search_vector_sync(conn, &cache, &files, settings, &query, &filter, limit)
            })
            .await
    }
}

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
                Ok(memories
                    .into_iter()
                    .map(|memory| StoredMemory {
                        vector: vectors.remove(&memory.id.0),
                        edges: edges.remove(&memory.id.0).unwrap_or_default(),
                        memory,
                    })
                    .collect())
            })
            .await
    }

    async fn restore(&self, batch: Vec<StoredMemory>) -> Result<()> {
        self.restore_keyed(None, batch).await.map(|_| ())
    }

    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> Result<Receipt> {
        self.restore_keyed(Some(key), batch).await
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
}

impl SqliteStore {
    /// Copies the WAL into the database and empties it, so that the page images of a row just
    /// deleted (which the WAL keeps until a checkpoint) leave the disk with it; the deletion
    /// itself zeroed the row's content (`secure_delete`) and its full-text terms (FTS5
    /// `secure-delete`). Waits for readers like any write; a reader that outlasts the wait only
    /// delays the emptying to the next checkpoint (logged).
    async fn truncate_wal(&self) -> Result<()> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
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

    async fn restore_keyed(&self, key: Option<String>, batch: Vec<StoredMemory>) -> Result<Receipt> {
        let model = self.bound_model();
        let fields: Vec<Fields> = batch
            .iter()
            .map(|s| Fields {
                id: s.memory.id.0,
                text: s.memory.text.clone(),
                speaker: s.memory.body.speaker().map(str::to_owned),
                context: s.memory.context.clone(),
            })
            .collect();
        if let Some(item) = batch.iter().find(|m| m.vector.is_some()) {
            let dim = item.vector.as_ref().map_or(0, Vec::len);
            match &model {
                None => {
                    return Err(AtlasError::Storage(
                        "no embedding model is bound to this store; bind one before restoring vectors".into(),
                    ));
                }
                Some(m) if batch.iter().filter_map(|i| i.vector.as_ref()).any(|v| v.len() != m.dimension) => {
                    return Err(AtlasError::Embedding(format!(
                        "vector for memory {} has {dim} dimensions, the store's model {} has {}",
                        item.memory.id, m.name, m.dimension
                    )));
                }
                Some(_) => {}
            }
        }
        let outcome = self
            .writer
            .write(move |conn| {
                if let Some(key) = &key
                    && let Some(receipt) = read_receipt(conn, key)?
                {
                    return Ok(Err(receipt));
                }
                let ids: Vec<MemoryId> = batch.iter().map(|s| s.memory.id).collect();
                let has_vectors = vector_table_exists(conn)?;
                let mut replaced = Vec::new();
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
                let mut enqueue =
                    conn.prepare_cached("INSERT OR IGNORE INTO vector_queue (id) VALUES (?)").map_err(storage)?;
                let mut dequeue = conn.prepare_cached("DELETE FROM vector_queue WHERE id = ?").map_err(storage)?;
                let mut written = Vec::new();
                for item in batch {
                    let m = &item.memory;
                    replaced.extend(stored_fields(conn, m.id.0)?);
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
                    if has_vectors {
                        conn.execute(&format!("DELETE FROM {VECTOR_TABLE} WHERE rowid = ?"), [m.id.0])
                            .map_err(storage)?;
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
                            written.push((m.id, Some(v)));
                        }
                        None => {
                            enqueue.execute([m.id.0]).map_err(storage)?;
                            written.push((m.id, None));
                        }
                    }
                }
                let receipt = match &key {
                    Some(key) => record_receipt(conn, key, ids)?,
                    None => Receipt { ids, replayed: false, recorded_at: Timestamp(wall_clock_ms()) },
                };
                Ok(Ok((written, replaced, receipt)))
            })
            .await?;
        let (written, replaced, receipt) = match outcome {
            Ok(done) => done,
            Err(replayed) => return Ok(replayed),
        };
        if let Some(index) = self.vector_cache.write().expect("vector cache lock").as_mut() {
            for (id, v) in &written {
                match v {
                    Some(v) => index.upsert(id.0, v),
                    None => index.remove(id.0),
                }
            }
        }
        self.update_text_cache(replaced, fields).await;
        Ok(receipt)
    }
}

fn wall_clock_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since_epoch.as_millis() as i64
}

/// The receipt of an earlier write under `key`, if there was one.
fn read_receipt(conn: &Connection, key: &str) -> Result<Option<Receipt>> {
    let row: Option<(String, i64)> = conn
        .prepare_cached("SELECT ids, recorded_at FROM receipts WHERE key = ?")
        .map_err(storage)?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(storage)?;
    row.map(|(ids, at)| {
        let ids = decode_id_runs(&ids).map_err(|m| AtlasError::Storage(format!("receipts row {key:?}: {m}")))?;
        Ok(Receipt { ids, replayed: true, recorded_at: Timestamp(at) })
    })
    .transpose()
}

/// Records `key` in the write's own transaction.
fn record_receipt(conn: &Connection, key: &str, ids: Vec<MemoryId>) -> Result<Receipt> {
    let at = wall_clock_ms();
    conn.prepare_cached("INSERT INTO receipts (key, ids, recorded_at) VALUES (?, ?, ?)")
        .map_err(storage)?
        .execute(params![key, encode_id_runs(&ids), at])
        .map_err(storage)?;
    Ok(Receipt { ids, replayed: false, recorded_at: Timestamp(at) })
}

type SharedCache = Arc<RwLock<Option<vector_cache::Index>>>;

/// Nearest memories under `filter`, by exact cosine. Candidates come from the in-memory index
/// (loaded here on first use) and SQL keeps those that pass the filter. When the filter leaves
/// too few of them, an exact scan over the filtered memories answers instead.
fn search_vector_sync(
    conn: &Connection,
    cache: &SharedCache,
    files: &CacheFiles,
    (dim, precision, shortlist, in_file_from): (usize, Option<Precision>, usize, usize),
    query: &[f32],
    filter: &RecallFilter,
    limit: usize,
) -> Result<Vec<ScoredId>> {
    let ready = |slot: &Option<vector_cache::Index>| slot.as_ref().is_some_and(|index| index.dim() == dim);
    // Outer error: loading failed; inner: the codes' file could not be read.
    type Shortlist = std::io::Result<(Vec<(i64, f32)>, usize)>;
    let shortlisted = || -> Result<Shortlist> {
        let shared = cache.read().expect("vector cache lock");
        if ready(&shared) {
            let index = shared.as_ref().expect("checked");
            return Ok(index.candidates(query, limit, shortlist).map(|found| (found, index.len())));
        }
        drop(shared);
        // Load and search under the same write guard: nothing can clear it in between.
        let mut slot = cache.write().expect("vector cache lock");
        if !ready(&slot) {
            *slot = Some(files.load_vectors(conn, cache, (dim, precision, in_file_from))?);
        }
        let index = slot.as_ref().expect("loaded");
        Ok(index.candidates(query, limit, shortlist).map(|found| (found, index.len())))
    };
    let (candidates, total) = match shortlisted()? {
        Ok(found) => found,
        Err(e) => {
            // The file the codes are read from failed under this process (changed in place):
            // the cache is loaded again, from a file that passes its checks or from SQL.
            tracing::warn!(error = %e, "vector cache file unreadable; loading the cache again");
            *cache.write().expect("vector cache lock") = None;
            shortlisted()?.map_err(|e| AtlasError::Storage(format!("vector cache: {e}")))?
        }
    };
    let blob = vector_blob(query);
    let (clause, filter_params) = filter_clause(filter);
    let run = |sql: &str, params: Vec<Value>| -> Result<Vec<ScoredId>> {
        let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                Ok(ScoredId { id: MemoryId(r.get(0)?), score: 1.0 - r.get::<_, f64>(1)? })
            })
            .map_err(storage)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
    };
    if !candidates.is_empty() {
        // The index scored exactly; SQL only says which candidates pass the filter.
        let ranked: Vec<ScoredId> =
            candidates.iter().map(|(id, score)| ScoredId { id: MemoryId(*id), score: f64::from(*score) }).collect();
        let hits = first_admitted(conn, &ranked, &clause, &filter_params, limit)?;
        if hits.len() >= limit || candidates.len() >= total {
            return Ok(hits);
        }
    }
    let scan_sql = format!(
        "SELECT m.id, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m \
         JOIN {VECTOR_TABLE} v ON v.rowid = m.id WHERE {clause} ORDER BY distance, m.id LIMIT ?"
    );
    let mut params = vec![Value::Blob(blob)];
    params.extend(filter_params);
    params.push(Value::Integer(limit as i64));
    run(&scan_sql, params)
}

/// The first `limit` of `ranked` that pass the filter, in order. Asks SQL about the head of the
/// list first and about more only while the filter rejects too many, since most filters admit
/// most memories and each id checked costs a lookup.
fn first_admitted(
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
fn admitted_ids(
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

fn create_vector_table(conn: &Connection, dimension: usize) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS {VECTOR_TABLE} USING vec0(embedding float[{dimension}] distance_metric=cosine)"
    ))
    .map_err(storage)
}

fn check_same_model(bound: &EmbeddingModel, configured: &EmbeddingModel) -> Result<()> {
    if bound == configured {
        Ok(())
    } else {
        Err(AtlasError::ModelMismatch {
            stored_model: bound.name.clone(),
            stored_dim: bound.dimension,
            configured_model: configured.name.clone(),
            configured_dim: configured.dimension,
        })
    }
}
