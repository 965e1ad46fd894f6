//! What the inspector reads, on the SQLite store and the in-memory fake: pages behind a cursor
//! that never repeat or skip a memory however many share an event time, the forgotten listed
//! apart, an entity's facts through time, sessions with the facts found in their turns.

use atlas_domain::{MemoryId, NewMemory, RecallFilter, Scope, Timestamp};
use atlas_runtime::inspect::Cursor;
use atlas_runtime::{Atlas, Config, Parts, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

async fn sqlite(dir: &Path) -> Atlas {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap()
}

async fn fake(dir: &Path) -> Atlas {
    let store = Arc::new(atlas_testing::FakeStore::default());
    Atlas::from_parts(Parts::from_store(store, None), Config { db: dir.join("fake.db"), ..Config::default() })
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Every page of `filter`, `limit` at a time, in order.
async fn all_pages(atlas: &Atlas, filter: &RecallFilter, limit: usize) -> Vec<MemoryId> {
    let (mut seen, mut before) = (Vec::new(), None);
    for _ in 0..10_000 {
        let page = atlas.list(filter.clone(), before, limit).await.unwrap();
        assert!(page.memories.len() <= limit);
        seen.extend(page.memories.iter().map(|m| m.id));
        match page.next {
            Some(next) => before = Some(next),
            None => return seen,
        }
    }
    panic!("the pages never ended");
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]

    /// Paging through with the cursors gives exactly the store's newest-first order: no memory
    /// twice, none skipped, even when most share one event time.
    #[test]
    fn pages_neither_repeat_nor_skip(times in proptest::collection::vec(0i64..4, 1..60), limit in 1usize..9, on_sqlite: bool) {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let atlas = if on_sqlite { sqlite(dir.path()).await } else { fake(dir.path()).await };
            let batch = times
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let at = Timestamp(1_700_000_000_000 + t * 1_000);
                    (format!("k{i}"), NewMemory::episode(format!("turn {i}"), Scope::default(), None, at, at))
                })
                .collect();
            atlas.import(batch, None).await.unwrap();
            let filter = RecallFilter::default();
            let expected: Vec<MemoryId> = atlas.latest(filter.clone(), 1_000).await.unwrap().iter().map(|m| m.id).collect();
            prop_assert_eq!(all_pages(&atlas, &filter, limit).await, expected);
            Ok(())
        })?;
    }

    #[test]
    fn a_cursor_reads_back_as_written(time in any::<i64>(), id in 1i64..i64::MAX) {
        let cursor = Cursor { event_time: Timestamp(time), id: MemoryId(id) };
        prop_assert_eq!(Cursor::parse(&cursor.to_string()), Ok(cursor));
    }

    #[test]
    fn a_cursor_never_panics_on_text(text in ".{0,40}") {
        let _ = Cursor::parse(&text);
    }
}

#[test]
fn a_bad_cursor_says_what_is_wrong() {
    assert!(Cursor::parse("12").unwrap_err().contains("<time>.<id>"));
    assert!(Cursor::parse("x.3").unwrap_err().contains("time"));
    assert!(Cursor::parse("12.0").unwrap_err().contains("id"));
}

#[tokio::test]
async fn forgotten_memories_are_listed_apart_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(dir.path()).await;
    let ids: Vec<MemoryId> = {
        let mut ids = Vec::new();
        for text in ["one", "two", "three"] {
            ids.push(atlas.remember(Remember { text: text.into(), ..Remember::default() }).await.unwrap());
        }
        ids
    };
    atlas.forget(ids[1]).await.unwrap();
    let live = atlas.list(RecallFilter::default(), None, 10).await.unwrap();
    assert_eq!(live.memories.iter().map(|m| m.id).collect::<Vec<_>>(), [ids[2], ids[0]]);
    let forgotten = RecallFilter { forgotten: true, ..RecallFilter::default() };
    let listed = atlas.list(forgotten.clone(), None, 10).await.unwrap();
    assert_eq!(listed.memories.iter().map(|m| m.id).collect::<Vec<_>>(), [ids[1]]);
    atlas.recover(ids[1]).await.unwrap();
    assert!(atlas.list(forgotten, None, 10).await.unwrap().memories.is_empty());
}

#[tokio::test]
async fn an_entity_shows_every_version_and_a_session_where_its_facts_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = sqlite(dir.path()).await;
    let ann = Scope { user: Some("ann".into()), session: Some("ops".into()), ..Scope::default() };
    for (text, time) in [
        ("Noted.\n- S:checkout-service: running on Python 3.11", "2024-03-04T09:00:00Z"),
        ("Great.\n- S:checkout-service: migrated to Rust", "2024-04-15T10:00:00Z"),
        ("ok thanks", "2024-04-15T10:01:00Z"),
    ] {
        let time = Some(Timestamp::parse(time).unwrap());
        atlas.remember(Remember { text: text.into(), scope: ann.clone(), time, ..Remember::default() }).await.unwrap();
    }
    atlas.consolidate_ending_sessions().await.unwrap();
    let view = atlas.entity("Checkout-Service", Scope { user: Some("ann".into()), ..Scope::default() }).await.unwrap();
    let objects: Vec<String> = view
        .facts
        .iter()
        .map(|m| match &m.body {
            atlas_domain::Body::Fact { object, .. } => object.clone(),
            other => panic!("not a fact: {other:?}"),
        })
        .collect();
    assert_eq!(objects, ["running on Python 3.11", "migrated to Rust"], "oldest first");
    assert!(view.facts[0].validity.valid_until.is_some() && view.facts[1].validity.valid_until.is_none());
    assert_eq!(view.entities.len(), 1);
    let mentioned: Vec<MemoryId> = view.mentions.iter().map(|m| m.id).collect();
    assert!(view.facts.iter().all(|f| mentioned.contains(&f.id)), "its facts name it: {:?}", view.mentions);
    assert!(view.mentions.windows(2).all(|w| w[0].event_time <= w[1].event_time), "oldest first");
    let elsewhere = atlas.entity("checkout-service", Scope { user: Some("bob".into()), ..Scope::default() }).await;
    assert!(elsewhere.unwrap().facts.is_empty(), "another user's entity of that name is another entity");

    let session = atlas.session(ann.clone(), None, 100).await.unwrap();
    assert_eq!(session.turns.len(), 3);
    assert!(session.turns.windows(2).all(|w| w[0].event_time <= w[1].event_time), "in spoken order");
    assert_eq!(session.found.len(), 2, "two turns yielded facts");
    assert_eq!(session.facts.len(), 2);
    assert!(session.summary.is_some(), "an ended session has its summary");
    let sessions = atlas.sessions(Scope { user: Some("ann".into()), ..Scope::default() }, None, 10).await.unwrap();
    assert_eq!(sessions.sessions.len(), 1);
    assert!(sessions.open.is_empty(), "summarised, so not open");
    assert_eq!(sessions.sessions[0].scope.session.as_deref(), Some("ops"));
}
