//! Runs the storage conformance suite against the SQLite store, each case on a fresh file.

use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::Subject;

fn fresh() -> Subject<SqliteStore> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("atlas.db"), &SqliteOptions::default()).unwrap();
    Subject::new(store, dir)
}

atlas_testing::store_conformance!(sqlite, fresh);
