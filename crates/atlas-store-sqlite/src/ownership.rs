//! Whose file is this: ATLAS's mark (`PRAGMA application_id`), read before anything is written.
//!
//! Opening a file that is neither empty nor ATLAS's must leave it byte for byte as it was, so
//! this runs before any pragma that changes the file (the switch to WAL) and before migrations.

use atlas_domain::{AtlasError, Result};
use rusqlite::Connection;

/// `PRAGMA application_id` of an ATLAS SQLite store: "ATLS".
pub const APPLICATION_ID: i32 = 0x4154_4C53;

/// `PRAGMA application_id` of a Qdrant space's sidecar file: "ATLQ".
pub const SIDECAR_APPLICATION_ID: i32 = 0x4154_4C51;

/// What a file holds, as far as ATLAS is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// No schema at all: a new file, ATLAS may make it a store.
    Empty,
    /// An ATLAS store at this schema version (marked, or written before the mark existed).
    Atlas { version: i64 },
}

/// The tables (and prefixes of the virtual tables' shadow tables) an ATLAS store of schema 1–3
/// may hold; a file without the mark is recognised as ATLAS's only if it holds nothing else.
const ATLAS_TABLES: [&str; 7] =
    ["memories", "edges", "settings", "vector_queue", "memories_fts", "memory_vectors", "sqlite_"];

/// Reads the mark, the schema version and the table names in one read transaction (another
/// process may be creating the schema meanwhile); changes nothing.
pub fn inspect(conn: &Connection, shown: &str) -> Result<Ownership> {
    let in_transaction = !conn.is_autocommit();
    if !in_transaction {
        conn.execute_batch("BEGIN DEFERRED").map_err(crate::error::storage)?;
    }
    let found = read_ownership(conn, shown);
    if !in_transaction {
        // A read transaction: ending it writes nothing.
        let _ = conn.execute_batch("COMMIT");
    }
    found
}

fn read_ownership(conn: &Connection, shown: &str) -> Result<Ownership> {
    let not_atlas = |reason: String| AtlasError::NotAtlas { path: shown.to_owned(), reason };
    let read = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => not_atlas("not a SQLite file".into()),
        _ => crate::error::storage(e),
    };
    let application_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(read)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(read)?;
    let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").map_err(read)?;
    let tables: Vec<String> =
        stmt.query_map([], |r| r.get(0)).map_err(read)?.collect::<rusqlite::Result<_>>().map_err(read)?;
    let sidecar = || {
        not_atlas(
            "it is the sidecar of a Qdrant memory space, not a SQLite store; open it with --store qdrant --qdrant-url URL"
                .into(),
        )
    };
    match application_id {
        APPLICATION_ID => return Ok(Ownership::Atlas { version }),
        SIDECAR_APPLICATION_ID => return Err(sidecar()),
        0 => {}
        other => return Err(not_atlas(format!("it belongs to another application: application_id {other:#x}"))),
    }
    if tables.is_empty() && version == 0 {
        return Ok(Ownership::Empty);
    }
    if tables.iter().any(|t| t == "ledger") {
        return Err(sidecar());
    }
    let foreign: Vec<&str> =
        tables.iter().map(String::as_str).filter(|t| !ATLAS_TABLES.iter().any(|a| t.starts_with(a))).collect();
    let has_memories = tables.iter().any(|t| t == "memories") && tables.iter().any(|t| t == "edges");
    if !foreign.is_empty() || !has_memories || !(1..=3).contains(&version) {
        let what = if foreign.is_empty() {
            format!("user_version {version}, tables {}", tables.join(", "))
        } else {
            format!("it has tables ATLAS never makes: {}", foreign.join(", "))
        };
        return Err(not_atlas(what));
    }
    // An ATLAS store from before the mark: columns must be ATLAS's too.
    let body: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('memories') WHERE name IN ('body', 'meta', 'recorded_at')",
            [],
            |r| r.get(0),
        )
        .map_err(read)?;
    if body != 3 {
        return Err(not_atlas("its memories table is not ATLAS's".into()));
    }
    Ok(Ownership::Atlas { version })
}
