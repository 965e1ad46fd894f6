//! The search indexes of a long-lived process: loaded once at its start
//! (`Atlas::keep_search_current`), then extended by every write, so that no recall pays for
//! what was written before it.

use atlas_domain::{NewMemory, Scope, Timestamp};
use atlas_runtime::{Atlas, Config, Parts, RecallRequest};
use atlas_store_sqlite::{CacheLoads, SqliteOptions, SqliteStore};
use atlas_testing::HashEmbedder;
use std::sync::Arc;

async fn space(db: &std::path::Path) -> (Atlas, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), Some(Arc::new(HashEmbedder::new(8))));
    let atlas = Atlas::from_parts(parts, Config { db: db.to_path_buf(), ..Config::default() }).await.unwrap();
    (atlas, store)
}

/// A day of writes: `n` turns, each naming its number, embedded.
async fn write_a_day(atlas: &Atlas, n: usize) {
    let turns = (0..n)
        .map(|i| {
            let time = Timestamp(1_700_000_000_000 + i as i64 * 60_000);
            let scope = Scope { session: Some(format!("day/{}", i / 20)), ..Scope::default() };
            (format!("turn:{i}"), NewMemory::episode(format!("turn number t{i} of the day"), scope, None, time, time))
        })
        .collect();
    atlas.import(turns, None).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
}

fn loads(l: CacheLoads) -> u64 {
    l.text_from_file + l.text_caught_up + l.text_rebuilt + l.vectors_from_file + l.vectors_caught_up + l.vectors_rebuilt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_after_the_start_extend_the_indexes_and_the_recall_loads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The space already holds a history, and its vectors' model is bound.
    let db = dir.path().join("space.db");
    {
        let (atlas, _) = space(&db).await;
        write_a_day(&atlas, 40).await;
    }
    let (atlas, store) = space(&db).await;
    atlas.keep_search_current().await.unwrap();
    let at_start = store.cache_loads();
    assert!(loads(at_start) >= 2, "both indexes loaded at the start: {at_start:?}");
    write_a_day(&atlas, 600).await;
    let answer = atlas.recall(RecallRequest { query: "t590".into(), k: 3, ..RecallRequest::default() }).await.unwrap();
    assert!(answer.hits.iter().any(|h| h.memory.text.contains("t590 ")), "a write after the start is found");
    assert_eq!(store.cache_loads(), at_start, "the recall loaded nothing: the writes had extended both indexes");

    // Without it, the same day's first recall brings the indexes up to date itself.
    let other = dir.path().join("other.db");
    {
        let (atlas, _) = space(&other).await;
        write_a_day(&atlas, 40).await;
    }
    let (atlas, store) = space(&other).await;
    write_a_day(&atlas, 600).await;
    let before = store.cache_loads();
    atlas.recall(RecallRequest { query: "t590".into(), k: 3, ..RecallRequest::default() }).await.unwrap();
    assert!(
        loads(store.cache_loads()) > loads(before),
        "a recall of a process that did not keep them current loads them"
    );
}
