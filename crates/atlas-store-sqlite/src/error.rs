//! Maps SQLite errors onto the domain's error type.

use atlas_domain::AtlasError;
use rusqlite::ErrorCode;
use std::sync::atomic::{AtomicU64, Ordering};

/// Turns a rusqlite error into [`AtlasError`]; a lock held by another process becomes
/// [`AtlasError::Busy`] with a message that says so.
pub fn storage(e: rusqlite::Error) -> AtlasError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => AtlasError::Busy(format!(
            "the database is locked by another process (busy timeout {} ms; ATLAS_BUSY_TIMEOUT_MS or \
             busy_timeout_ms raises it): {e}",
            busy_timeout_ms()
        )),
        Some(ErrorCode::NotADatabase) => AtlasError::Storage(format!("not an ATLAS database (SQLite says: {e})")),
        Some(ErrorCode::DiskFull) => {
            AtlasError::Storage("the disk is full; nothing of this write was stored (free space and retry)".into())
        }
        Some(ErrorCode::ReadOnly) => AtlasError::Storage(
            "the database is read-only here (its file or directory is not writable); nothing was written".into(),
        ),
        _ => AtlasError::Storage(e.to_string()),
    }
}

/// The same, naming the database file: for errors that reach a user without other context.
pub fn storage_at(path: &str) -> impl Fn(rusqlite::Error) -> AtlasError + '_ {
    move |e| at_path(path, storage(e))
}

/// Names the database file in a storage or lock error (once).
pub fn at_path(path: &str, e: AtlasError) -> AtlasError {
    let named = |m: String| if m.contains(path) { m } else { format!("database {path}: {m}") };
    match e {
        AtlasError::Storage(m) => AtlasError::Storage(named(m)),
        AtlasError::Busy(m) => AtlasError::Busy(named(m)),
        other => other,
    }
}

static BUSY_TIMEOUT_MS: AtomicU64 = AtomicU64::new(crate::DEFAULT_BUSY_TIMEOUT.as_millis() as u64);

/// Records the busy timeout in force, so that errors state it truthfully.
pub fn set_busy_timeout(timeout: std::time::Duration) {
    BUSY_TIMEOUT_MS.store(timeout.as_millis() as u64, Ordering::Relaxed);
}

pub fn busy_timeout_ms() -> u64 {
    BUSY_TIMEOUT_MS.load(Ordering::Relaxed)
}

/// Copies an error so one failed commit can be reported to every job of its group.
pub fn duplicate(e: &AtlasError) -> AtlasError {
    match e {
        AtlasError::Busy(m) => AtlasError::Busy(m.clone()),
        AtlasError::Storage(m) => AtlasError::Storage(m.clone()),
        other => AtlasError::Storage(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_names_the_file_once_and_says_nothing_was_stored() {
        let full = rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL), None);
        let message = storage_at("/data/atlas.db")(full).to_string();
        assert_eq!(message.matches("storage error").count(), 1, "{message}");
        assert!(message.contains("/data/atlas.db") && message.contains("disk is full"), "{message}");
        assert!(message.contains("nothing of this write was stored"), "{message}");
    }
}
