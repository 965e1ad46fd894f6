//! Schema migrations: the numbered SQL files of `migrations/`, embedded and applied in order.

use atlas_domain::{AtlasError, Result};
use rusqlite::Connection;

/// One schema step. `version` is what `PRAGMA user_version` reads after it is applied.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, in order; versions are 1, 2, 3… without gaps.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "0001_init", sql: include_str!("../../../migrations/0001_init.sql") },
    Migration { version: 2, name: "0002_search", sql: include_str!("../../../migrations/0002_search.sql") },
    Migration { version: 3, name: "0003_context", sql: include_str!("../../../migrations/0003_context.sql") },
    Migration { version: 4, name: "0004_safety", sql: include_str!("../../../migrations/0004_safety.sql") },
    Migration {
        version: 5,
        name: "0005_consolidation",
        sql: include_str!("../../../migrations/0005_consolidation.sql"),
    },
    Migration { version: 6, name: "0006_lifecycle", sql: include_str!("../../../migrations/0006_lifecycle.sql") },
    Migration { version: 7, name: "0007_cache_epoch", sql: include_str!("../../../migrations/0007_cache_epoch.sql") },
    Migration { version: 8, name: "0008_cache_log", sql: include_str!("../../../migrations/0008_cache_log.sql") },
    Migration { version: 9, name: "0009_access_keys", sql: include_str!("../../../migrations/0009_access_keys.sql") },
    Migration {
        version: 10,
        name: "0010_short_context",
        sql: include_str!("../../../migrations/0010_short_context.sql"),
    },
    Migration {
        version: 11,
        name: "0011_one_text_pipeline",
        sql: include_str!("../../../migrations/0011_one_text_pipeline.sql"),
    },
    Migration {
        version: 12,
        name: "0012_vector_set_aside",
        sql: include_str!("../../../migrations/0012_vector_set_aside.sql"),
    },
];

/// The newest schema this build understands.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The schema version recorded in the database.
pub fn current_version(conn: &Connection) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(crate::error::storage)
}

/// Applies every migration newer than the database, each in its own transaction that also sets
/// ATLAS's mark (`application_id`), and returns the versions applied. Refuses, untouched, a
/// file that is not ATLAS's ([`crate::ownership::inspect`]) and a database newer than this
/// build. Running it twice is a no-op.
pub fn migrate(conn: &mut Connection, path_for_errors: &str) -> Result<Vec<i64>> {
    migrate_to(conn, path_for_errors, latest_version())
}

/// [`migrate`], stopping at `target` (used to build fixtures of older schemas).
pub fn migrate_to(conn: &mut Connection, path_for_errors: &str, target: i64) -> Result<Vec<i64>> {
    let found = match crate::ownership::inspect(conn, path_for_errors)? {
        crate::ownership::Ownership::Empty => 0,
        crate::ownership::Ownership::Atlas { version } => version,
    };
    if found > latest_version() {
        return Err(AtlasError::SchemaTooNew { path: path_for_errors.to_owned(), found, known: latest_version() });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > found && m.version <= target) {
        let tx =
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(crate::error::storage)?;
        // Another process may have applied it while this one waited for the lock.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(crate::error::storage)?;
        if now >= m.version {
            continue;
        }
        tx.execute_batch(m.sql)
            .map_err(|e| AtlasError::Storage(format!("migration {} failed on {path_for_errors}: {e}", m.name)))?;
        tx.pragma_update(None, "user_version", m.version).map_err(crate::error::storage)?;
        tx.pragma_update(None, "application_id", crate::ownership::APPLICATION_ID).map_err(crate::error::storage)?;
        tx.commit().map_err(crate::error::storage)?;
        tracing::info!(migration = m.name, path = path_for_errors, "applied schema migration");
        applied.push(m.version);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
            assert!(m.name.starts_with(&format!("{:04}_", m.version)), "{}", m.name);
        }
    }
}
