//! Read connections: `query_only`, pooled, used from the blocking thread pool.

use crate::error::storage;
use atlas_domain::{AtlasError, Result};
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Idle read connections; a read takes one (or opens one) and gives it back. WAL lets any
/// number of them read while the writer writes.
pub struct Readers {
    path: PathBuf,
    immutable: bool,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// `immutable`: the file is opened as [`crate::open_immutable`] does (its directory is
    /// read-only to this process).
    pub fn new(path: PathBuf, immutable: bool) -> Arc<Self> {
        Arc::new(Readers { path, immutable, idle: Mutex::new(Vec::new()) })
    }

    /// Runs `op` on a read connection off the async executor.
    pub async fn read<T, F>(self: &Arc<Self>, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let readers = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _inside = crate::fork_gate::hold();
            let conn = readers.take()?;
            let out = op(&conn);
            readers.idle.lock().expect("reader pool lock").push(conn);
            out
        })
        .await
        .map_err(|e| AtlasError::Storage(format!("read task failed: {e}")))?
    }

    fn take(&self) -> Result<Connection> {
        if let Some(conn) = self.idle.lock().expect("reader pool lock").pop() {
            return Ok(conn);
        }
        let conn = if self.immutable {
            crate::open_immutable(&self.path)?
        } else {
            Connection::open_with_flags(
                &self.path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(storage)?
        };
        conn.busy_timeout(std::time::Duration::from_millis(crate::error::busy_timeout_ms())).map_err(storage)?;
        // A small page cache each: reads run on several connections at once, and the text and
        // vector caches already hold what searches scan (4 MB each, measured at 1M memories).
        conn.execute_batch("PRAGMA query_only = ON; PRAGMA cache_size = -4000;").map_err(storage)?;
        Ok(conn)
    }
}
