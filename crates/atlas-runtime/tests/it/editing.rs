//! Editing by hand on the SQLite store: a revision supersedes with history, a scope is
//! forgotten for good and nothing else, the newest memories are listed, and an episode marked
//! `"infer": false` is kept out of consolidation.

use atlas_domain::{AtlasError, Body, MemoryId, MemoryKind, RecallFilter, Scope, Timestamp};
use atlas_runtime::{Atlas, Config, Parts, RecallRequest, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use std::path::Path;
use std::sync::Arc;

async fn space(dir: &Path) -> Atlas {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap()
}

fn of(user: &str, text: &str) -> Remember {
    Remember {
        text: text.into(),
        speaker: Some(user.into()),
        scope: Scope { user: Some(user.into()), ..Scope::default() },
        ..Remember::default()
    }
}

async fn texts(atlas: &Atlas, query: &str, as_of: Option<Timestamp>) -> Vec<String> {
    let request = RecallRequest { query: query.into(), k: 10, as_of, ..RecallRequest::default() };
    atlas.recall(request).await.unwrap().hits.into_iter().map(|h| h.memory.text).collect()
}

#[tokio::test]
async fn a_revision_supersedes_and_keeps_the_old_version_in_history() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let old = atlas
        .remember(Remember {
            meta: serde_json::json!({"a": 1}).as_object().cloned().unwrap(),
            ..of("ann", "Ann lives in Berlin")
        })
        .await
        .unwrap();
    let before = atlas_runtime::now();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let revised = atlas.revise(old, "Ann lives in Vienna".into(), None).await.unwrap();
    assert_eq!(revised.previous, old);
    let new = atlas.get(revised.id).await.unwrap().unwrap().memory;
    assert_eq!(new.scope, Scope { user: Some("ann".into()), ..Scope::default() });
    assert_eq!(new.meta["a"], 1, "the new version inherits the metadata");
    assert!(matches!(new.body, Body::Episode { speaker: Some(ref s) } if s == "ann"));
    assert_eq!(texts(&atlas, "Ann lives", None).await, ["Ann lives in Vienna"]);
    assert_eq!(texts(&atlas, "Ann lives", Some(before)).await, ["Ann lives in Berlin"], "as it was then");
    let explained = atlas.explain(revised.id).await.unwrap().unwrap();
    assert_eq!(explained.replaced.iter().map(|m| m.id).collect::<Vec<_>>(), [old]);
    let explained = atlas.explain(old).await.unwrap().unwrap();
    assert_eq!(explained.replaced_by.iter().map(|m| m.id).collect::<Vec<_>>(), [revised.id]);
    // Only the current version is revised; an unknown id is not found.
    let again = atlas.revise(old, "Ann lives in Rome".into(), None).await.unwrap_err();
    assert!(matches!(again, AtlasError::InvalidInput { .. }), "{again}");
    let missing = atlas.revise(MemoryId(999), "x".into(), None).await.unwrap_err();
    assert!(matches!(missing, AtlasError::NotFound(_)), "{missing}");
    let meta = serde_json::json!({"b": 2}).as_object().cloned();
    let third = atlas.revise(revised.id, "Ann lives in Graz".into(), meta).await.unwrap();
    assert_eq!(atlas.get(third.id).await.unwrap().unwrap().memory.meta["b"], 2);
    let empty = atlas.revise(third.id, String::new(), None).await.unwrap_err();
    assert!(matches!(empty, AtlasError::InvalidInput { .. }), "{empty}");
}

#[tokio::test]
async fn forgetting_a_scope_removes_only_its_memories_and_latest_lists_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let ann: Vec<MemoryId> = atlas.remember_all(vec![of("ann", "one"), of("ann", "two")], None).await.unwrap();
    let bob = atlas.remember(of("bob", "three")).await.unwrap();
    atlas.forget(ann[0]).await.unwrap();
    let ann_filter = RecallFilter { scope: of("ann", "").scope, ..RecallFilter::default() };
    let listed: Vec<MemoryId> = atlas.latest(ann_filter.clone(), 10).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(listed, [ann[1]], "live memories only, newest first");
    assert_eq!(atlas.forget_scope(&of("ann", "").scope).await.unwrap(), 2, "the soft-forgotten one too");
    assert!(atlas.get(ann[0]).await.unwrap().is_none());
    assert!(atlas.get(ann[1]).await.unwrap().is_none());
    assert!(atlas.get(bob).await.unwrap().is_some());
    assert_eq!(atlas.forget_scope(&Scope::default()).await.unwrap(), 1, "an empty scope is the whole space");
    assert_eq!(atlas.stats().await.unwrap().store.memories(), 0);
}

#[tokio::test]
async fn an_episode_marked_not_to_infer_is_kept_as_said() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let keep = serde_json::json!({"infer": false}).as_object().cloned().unwrap();
    atlas.remember(Remember { meta: keep, ..of("ann", "I moved to Porto in 2021.") }).await.unwrap();
    atlas.remember(of("ann", "I moved to Lisbon in 2022.")).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.episodes_seen, report.not_inferred), (2, 1));
    let filter = RecallFilter { kinds: vec![MemoryKind::Fact], ..RecallFilter::default() };
    let facts: Vec<String> = atlas.latest(filter, 10).await.unwrap().into_iter().map(|m| m.text).collect();
    assert!(facts.iter().all(|f| !f.contains("Porto")), "{facts:?}");
}
