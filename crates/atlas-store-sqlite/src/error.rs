//! Maps SQLite errors onto the domain's error type.

use atlas_domain::AtlasError;
use rusqlite::ErrorCode;

/// Turns a rusqlite error into [`AtlasError`]; a lock held by another process becomes
/// [`AtlasError::Busy`] with a message that says so.
pub fn storage(e: rusqlite::Error) -> AtlasError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => AtlasError::Busy(format!(
            "the database is locked by another writer (waited {} s): {e}",
            crate::BUSY_TIMEOUT.as_secs()
        )),
        Some(ErrorCode::NotADatabase) => AtlasError::Storage(format!("not an ATLAS database (SQLite says: {e})")),
        _ => AtlasError::Storage(e.to_string()),
    }
}

/// Copies an error so one failed commit can be reported to every job of its group.
pub fn duplicate(e: &AtlasError) -> AtlasError {
    match e {
        AtlasError::Busy(m) => AtlasError::Busy(m.clone()),
        other => AtlasError::Storage(other.to_string()),
    }
}
