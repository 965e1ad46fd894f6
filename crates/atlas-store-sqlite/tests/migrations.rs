//! Schema migrations: an old file migrates with its data, newer files are refused, and
//! migrating is idempotent from any starting version.

use atlas_domain::ports::{MemoryStore, TextIndex, VectorIndex};
use atlas_domain::{AtlasError, EdgeKind, MemoryId, RecallFilter};
use atlas_store_sqlite::migrations::{self, MIGRATIONS, latest_version};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn fixture_copy(dir: &Path) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/schema-v1.db");
    let path = dir.join("old.db");
    std::fs::copy(&fixture, &path).expect("fixtures/schema-v1.db (regenerate with `cargo xtask fixtures`)");
    path
}

#[tokio::test]
async fn a_schema_1_database_migrates_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(dir.path());
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(migrations::current_version(&conn).unwrap(), 1);
    drop(conn);

    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.schema_version, Some(latest_version()));
    assert_eq!((stats.memories(), stats.edges, stats.pending_vectors), (3, 2, 3), "old rows join the vector queue");
    let m = store.get(MemoryId(3)).await.unwrap().unwrap();
    assert_eq!(m.context.as_deref(), Some("Melanie: Lovely! Pottery always calms me down."), "context backfilled");
    assert_eq!(store.get(MemoryId(1)).await.unwrap().unwrap().context, None);
    let ids = |hits: Vec<atlas_domain::ports::ScoredId>| hits.iter().map(|h| h.id).collect::<Vec<_>>();
    let hit = store.search_text(vec!["pottery".into()], RecallFilter::default(), 10).await.unwrap();
    let hit = ids(hit);
    assert_eq!(hit.len(), 3, "old rows are in the new full-text index, by text and by context: {hit:?}");
    assert_eq!(hit[2], MemoryId(3), "a match in the context ranks below matches in the text");
    let speaker = store.search_text(vec!["melanie".into()], RecallFilter::default(), 10).await.unwrap();
    assert_eq!(ids(speaker), vec![MemoryId(2), MemoryId(3)]);
    assert_eq!(m.meta["dia_id"], "D1:3");
    assert_eq!(m.body.speaker(), Some("Caroline"));
    let edges = store.edges_of(MemoryId(3)).await.unwrap();
    assert_eq!((edges[0].src, edges[0].kind), (MemoryId(2), EdgeKind::Temporal));
    let ids = store
        .insert(
            vec![atlas_domain::NewMemory::episode("new turn", m.scope.clone(), None, m.event_time, m.event_time)],
            None,
        )
        .await
        .unwrap();
    assert_eq!(ids, vec![MemoryId(4)]);
    assert!(store.pending_vectors(10).await.unwrap().len() == 4);
}

/// Schema 10 clears contexts longer than a turn of conversation (stored by earlier builds) and
/// queues their memories to be embedded again; short contexts stay.
#[tokio::test]
async fn a_schema_9_database_drops_long_contexts_and_embeds_those_memories_again() {
    use atlas_domain::{NewMemory, Scope, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    let in_s = Scope { session: Some("s".into()), ..Scope::default() };
    let turn =
        |text: &str, t: i64| NewMemory::episode(text, in_s.clone(), Some("a".into()), Timestamp(t), Timestamp(t));
    {
        let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
        store.insert(vec![turn("hello", 1), turn("reply", 2), turn("short follow-up", 3)], None).await.unwrap();
    }
    // As an earlier build stored it: the whole long predecessor as context, vectors done.
    let long = format!("a: {}", "zebrafish\n ".repeat(120));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE memories SET context = ?1 WHERE id = 2", [&long]).unwrap();
    conn.execute_batch("DELETE FROM vector_queue; PRAGMA user_version = 9;").unwrap();
    drop(conn);

    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    assert_eq!(store.stats().await.unwrap().schema_version, Some(latest_version()));
    assert_eq!(store.get(MemoryId(2)).await.unwrap().unwrap().context, None, "the long context is gone");
    assert_eq!(store.get(MemoryId(3)).await.unwrap().unwrap().context.as_deref(), Some("a: reply"), "short stays");
    let queued: Vec<MemoryId> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(queued, vec![MemoryId(2)], "only the memory whose context changed is embedded again");
    let found = store.search_text(vec!["zebrafish".into()], RecallFilter::default(), 10).await.unwrap();
    assert!(found.is_empty(), "the full-text index forgot the long context: {found:?}");
}

/// The sleep cycle's state survives the upgrade: what was processed stays processed, what failed
/// keeps its attempts, the ledger keeps its cycles, and the new lifecycle starts empty.
#[tokio::test]
async fn a_schema_5_database_migrates_with_its_consolidation_state() {
    use atlas_domain::ports::Consolidator;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/schema-v5.db");
    std::fs::copy(&fixture, &path).expect("fixtures/schema-v5.db (regenerate with `cargo xtask fixtures`)");
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(migrations::current_version(&conn).unwrap(), 5);
    drop(conn);

    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.schema_version, Some(latest_version()));
    assert_eq!((stats.memories(), stats.edges, stats.soft_deleted), (3, 2, 0));
    let fact = store.get(MemoryId(3)).await.unwrap().unwrap();
    assert!(fact.lifecycle.is_fresh());
    assert_eq!(fact.meta["origin"], "tag:S");
    let now = atlas_domain::Timestamp(1_700_000_100_000 + 3_600_000);
    let waiting = store.unprocessed(10, 5, 60_000, now).await.unwrap();
    assert_eq!(waiting.iter().map(|m| m.id).collect::<Vec<_>>(), vec![MemoryId(2)], "only the failed turn is retried");
    let known = store.known(vec!["checkout".into()], vec![], fact.scope.clone()).await.unwrap();
    assert_eq!(known.iter().map(|m| m.id).collect::<Vec<_>>(), vec![MemoryId(3)]);
    assert_eq!(store.cycles(5).await.unwrap()[0]["facts_added"], 1);
    let hits = store.search_text(vec!["payments".into()], RecallFilter::default(), 10).await.unwrap();
    assert!(hits.iter().any(|h| h.id == MemoryId(3)));
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mark = atlas_store_sqlite::ownership::APPLICATION_ID;
    conn.execute_batch(&format!(
        "CREATE TABLE from_the_future (x); PRAGMA user_version = 99; PRAGMA application_id = {mark};"
    ))
    .unwrap();
    drop(conn);
    match SqliteStore::open(&path, &SqliteOptions::default()) {
        Err(AtlasError::SchemaTooNew { found: 99, known, .. }) => assert_eq!(known, latest_version()),
        Err(other) => panic!("expected SchemaTooNew, got {other}"),
        Ok(_) => panic!("expected SchemaTooNew, the store opened"),
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(migrations::current_version(&conn).unwrap(), 99);
}

fn schema(conn: &rusqlite::Connection) -> Vec<(String, String)> {
    let mut stmt = conn
        .prepare("SELECT name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(16))]

    /// From any version, migrating gives the same schema as a fresh database, and a second
    /// run applies nothing.
    #[test]
    fn migration_is_idempotent_from_any_start(start in 0i64..=(MIGRATIONS.len() as i64), repeats in 1usize..4) {
        let dir = tempfile::tempdir().unwrap();
        let mut fresh = rusqlite::Connection::open(dir.path().join("fresh.db")).unwrap();
        migrations::migrate(&mut fresh, "fresh").unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("partial.db")).unwrap();
        migrations::migrate_to(&mut conn, "partial", start).unwrap();
        prop_assert_eq!(migrations::current_version(&conn).unwrap(), start);
        let applied = migrations::migrate(&mut conn, "partial").unwrap();
        prop_assert_eq!(applied, ((start + 1)..=latest_version()).collect::<Vec<_>>());
        for _ in 0..repeats {
            prop_assert!(migrations::migrate(&mut conn, "partial").unwrap().is_empty());
        }
        prop_assert_eq!(schema(&conn), schema(&fresh));
    }
}

#[tokio::test]
async fn the_vector_table_takes_its_dimension_from_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dim.db");
    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    store.bind_model(atlas_domain::ports::EmbeddingModel { name: "m".into(), dimension: 384 }).await.unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let sql: String =
        conn.query_row("SELECT sql FROM sqlite_master WHERE name = 'memory_vectors'", [], |r| r.get(0)).unwrap();
    assert!(sql.contains("float[384]"), "{sql}");
    drop(conn);
    let reopened = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let err = reopened
        .bind_model(atlas_domain::ports::EmbeddingModel { name: "m".into(), dimension: 768 })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("384") && err.to_string().contains("768"), "{err}");
}
