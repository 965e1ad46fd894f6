//! Idempotency receipts: the ids a keyed write made, read back and recorded in the write's own
//! transaction, and the wall clock they are stamped with.

use crate::error::storage;
use atlas_domain::ports::Receipt;
use atlas_domain::{AtlasError, MemoryId, Result, Timestamp, decode_id_runs, encode_id_runs};
use rusqlite::{Connection, OptionalExtension, params};

pub(crate) fn wall_clock_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since_epoch.as_millis() as i64
}

/// The receipt of an earlier write under `key`, if there was one.
pub(crate) fn read_receipt(conn: &Connection, key: &str) -> Result<Option<Receipt>> {
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
pub(crate) fn record_receipt(conn: &Connection, key: &str, ids: Vec<MemoryId>) -> Result<Receipt> {
    let at = wall_clock_ms();
    conn.prepare_cached("INSERT INTO receipts (key, ids, recorded_at) VALUES (?, ?, ?)")
        .map_err(storage)?
        .execute(params![key, encode_id_runs(&ids), at])
        .map_err(storage)?;
    Ok(Receipt { ids, replayed: false, recorded_at: Timestamp(at) })
}
