//! Runs the storage conformance suite against the SQLite store, each case on a fresh file: once
//! with float vectors in the vector cache, once with int8 codes.

use atlas_store_sqlite::{Precision, SqliteOptions, SqliteStore};
use atlas_testing::Subject;

fn fresh_with(precision: Precision) -> Subject<SqliteStore> {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions { vector_precision: Some(precision), ..SqliteOptions::default() };
    let store = SqliteStore::open(&dir.path().join("atlas.db"), &options).unwrap();
    Subject::new(store, dir)
}

fn fresh() -> Subject<SqliteStore> {
    fresh_with(Precision::F32)
}

fn fresh_int8() -> Subject<SqliteStore> {
    fresh_with(Precision::Int8)
}

atlas_testing::store_conformance!(sqlite, fresh);
atlas_testing::store_conformance!(sqlite_int8, fresh_int8);
atlas_testing::consolidator_conformance!(sqlite_consolidator, fresh);
