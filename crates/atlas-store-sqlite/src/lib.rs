//! The SQLite adapter: every storage port of `atlas-domain` over one database file.
//!
//! Records live in `memories` and `edges`; full text is an in-memory index over the domain's
//! tokens built from `memories` ([`text_cache`], kept in a cache file); sqlite-vec's `vec0` table `memory_vectors` holds one vector per memory,
//! linked by rowid. One writer thread serialises all writes ([`writer`]); reads run on pooled
//! `query_only` connections ([`readers`]). WAL mode lets both proceed at once.

mod cache_file;
mod caches;
mod consolidation;
mod error;
mod fork_gate;
mod keys;
mod memories;
pub mod migrations;
pub mod ownership;
mod readers;
mod receipts;
mod replica;
mod sql;
mod text_cache;
mod text_index;
mod vector_cache;
mod vector_index;
mod writer;
mod writes;

use crate::caches::CacheFiles;
pub use crate::caches::CacheLoads;
use crate::error::storage;
use crate::readers::Readers;
use crate::text_cache::TextCache;
use crate::writer::Writer;
use atlas_domain::ports::EmbeddingModel;
use atlas_domain::{AtlasError, Result};
use rusqlite::{Connection, OptionalExtension};
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
    cache_files: CacheFiles,
}

type SharedTextCache = Arc<RwLock<Option<TextCache>>>;

impl Drop for SqliteStore {
    /// A closed store leaves no cache file half written and no thread writing one.
    fn drop(&mut self) {
        self.cache_files.settle();
    }
}
pub(crate) const VECTOR_TABLE: &str = "memory_vectors";

impl SqliteStore {
    /// Opens the database at `path` (creating it only with `options.create`) and migrates it
    /// to the latest schema. A file that is not empty and not ATLAS's is refused before
    /// anything is written to it. Waiting for other processes at open (the switch to WAL, the
    /// migrations) is bounded by `options.busy_timeout` like every write. A database whose
    /// directory this process cannot write is opened read-only: reads work, writes fail clearly.
    pub fn open(path: &Path, options: &SqliteOptions) -> Result<Self> {
        fork_gate::install();
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
            // Owner-only before SQLite creates it (its -wal and -shm take the same mode).
            atlas_files::touch(path)
                .map_err(|e| AtlasError::Storage(format!("cannot create database {shown}: {e}")))?;
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

type SharedCache = Arc<RwLock<Option<vector_cache::Index>>>;
