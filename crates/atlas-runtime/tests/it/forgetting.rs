//! Forgetting on purpose, end to end on SQLite: soft deletion and recovery, decay by kind and
//! use, the archive and its restore, and the hard forget that leaves nothing behind.

use atlas_domain::{EdgeKind, MemoryId, MemoryKind, Scope, Timestamp};
use atlas_runtime::forgetting::{ArchivePolicy, Recovered};
use atlas_runtime::{Atlas, Config, Parts, RecallRequest, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use std::path::Path;
use std::sync::Arc;

const DAY: i64 = 86_400_000;

async fn space(dir: &Path) -> Atlas {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap()
}

fn said(text: &str, day: i64) -> Remember {
    Remember {
        text: text.into(),
        speaker: Some("Ann".into()),
        scope: Scope { user: Some("ann".into()), agent: None, session: Some("s1".into()) },
        time: Some(Timestamp(day * DAY)),
        ..Remember::default()
    }
}

async fn found(atlas: &Atlas, query: &str, kinds: Vec<MemoryKind>) -> Vec<MemoryId> {
    let request = RecallRequest { query: query.into(), k: 10, kinds, ..RecallRequest::default() };
    atlas.recall(request).await.unwrap().hits.iter().map(|h| h.memory.id).collect()
}

#[tokio::test]
async fn a_soft_forget_hides_and_recover_brings_back() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let id = atlas.remember(said("My locker code is 4812", 1)).await.unwrap();
    assert_eq!(found(&atlas, "locker code", vec![]).await, vec![id]);
    assert!(atlas.forget(id).await.unwrap());
    assert!(found(&atlas, "locker code", vec![]).await.is_empty(), "recall skips a forgotten memory");
    let kept = atlas.get(id).await.unwrap().expect("still stored").memory;
    assert!(kept.lifecycle.deleted_at.is_some());
    assert_eq!(atlas.stats().await.unwrap().store.soft_deleted, 1);
    assert_eq!(atlas.recover(id).await.unwrap(), Some(Recovered::Undeleted));
    assert_eq!(found(&atlas, "locker code", vec![]).await, vec![id]);
    assert_eq!(atlas.recover(id).await.unwrap(), Some(Recovered::AlreadyLive));
    assert_eq!(atlas.recover(MemoryId(999)).await.unwrap(), None);
    assert!(!atlas.forget(MemoryId(999)).await.unwrap());
}

#[tokio::test]
async fn decay_fades_by_kind_and_use_and_never_touches_episodes_or_world_facts() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    for (text, day) in [
        ("- W: the office is in Lisbon", 1),
        ("- O(c=0.90): pair programming beats code review", 2),
        ("- S:checkout: running on Python", 3),
        ("- S:billing: running on Go", 4),
    ] {
        atlas.remember(said(text, day)).await.unwrap();
    }
    let report = atlas.consolidate().await.unwrap();
    assert_eq!(report.facts_added, 4, "{report:?}");
    let mut facts = Vec::new();
    for id in 1..=30 {
        if let Some(d) = atlas.get(MemoryId(id)).await.unwrap()
            && d.memory.kind() == MemoryKind::Fact
        {
            facts.push(d.memory);
        }
    }
    let id_of = |needle: &str| facts.iter().find(|m| m.text.contains(needle)).unwrap().id;
    let (world, opinion, checkout, billing) =
        (id_of("Lisbon"), id_of("pair programming"), id_of("checkout"), id_of("billing"));
    let learned = atlas.get(checkout).await.unwrap().unwrap().memory.recorded_at;
    let at = |days: i64| Timestamp(learned.millis() + days * DAY);

    // Day 31: the opinion (0.90 − 0.02 a day) has fallen below 0.30; nothing else has.
    let r = atlas.decay_at(at(31)).await.unwrap();
    assert_eq!(r.ids, vec![opinion], "{r:?}");
    assert_eq!(r.soft_deleted.get(&MemoryKind::Fact), Some(&1));
    assert!(r.decaying >= 3 && r.examined > r.decaying, "episodes and entities are examined, never decay: {r:?}");

    // The checkout state is used at day 150 (feedback); billing never is.
    atlas.feedback_at(checkout, true, at(150)).await.unwrap();
    let used = atlas.get(checkout).await.unwrap().unwrap().memory.lifecycle;
    assert_eq!(used.uses, 1);
    assert!(used.review.is_some_and(|r| r.repetitions == 1), "a fact's feedback is an SM-2 review");
    let r = atlas.decay_at(at(200)).await.unwrap();
    assert_eq!(r.ids, vec![billing], "the unused fact fades after ~180 days, the used one does not: {r:?}");
    let episodes = atlas.stats().await.unwrap().store.memories_by_kind[&MemoryKind::Episode];
    assert_eq!(episodes, 4);
    let r = atlas.decay_at(at(100_000)).await.unwrap();
    assert!(!r.ids.contains(&world), "world facts never decay");
    assert!(r.ids.contains(&checkout), "used once, it still fades in the end");
    assert_eq!(r.soft_deleted.get(&MemoryKind::Episode), None, "episodes never decay");
    assert_eq!(atlas.recover(billing).await.unwrap(), Some(Recovered::Undeleted), "decay only soft-deletes");
}

#[tokio::test]
async fn the_archive_moves_old_forgotten_memories_out_and_restores_them_with_their_edges() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let first = atlas.remember(said("We adopted a cat named Miso", 1)).await.unwrap();
    let second = atlas.remember(said("Miso knocked the plant over", 2)).await.unwrap();
    let third = atlas.remember(said("The vet says Miso is healthy", 3)).await.unwrap();
    assert!(atlas.forget(second).await.unwrap());
    let policy = ArchivePolicy { deleted_days: 30.0, episode_days: None };

    let soon = atlas.archive(policy).await.unwrap();
    assert_eq!(soon.archived, 0, "forgotten today: stays in the store");
    let later = Timestamp(atlas_runtime::now().millis() + 31 * DAY);
    let r = atlas.archive_at(later, policy).await.unwrap();
    assert_eq!((r.archived, r.soft_deleted, r.episodes), (1, 1, 0));
    let file = r.file.expect("an archive file");
    assert!(file.starts_with(dir.path().join("archive")) && file.to_string_lossy().ends_with(".jsonl.gz"));
    assert_eq!(atlas.archive_files().unwrap(), vec![file.clone()]);
    assert!(atlas.get(second).await.unwrap().is_none(), "archived: out of the store");
    // The file is plain gzip of the export format.
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap()), &mut text)
        .unwrap();
    assert!(text.contains("knocked the plant over") && text.contains("atlas_export_end"), "{text}");

    assert_eq!(atlas.recover(second).await.unwrap(), Some(Recovered::FromArchive));
    let back = atlas.get(second).await.unwrap().expect("restored under its own id");
    assert_eq!(back.memory.text, "Miso knocked the plant over");
    assert!(back.memory.lifecycle.deleted_at.is_none(), "restored live");
    let temporal: Vec<(MemoryId, MemoryId)> =
        back.edges.iter().filter(|e| e.kind == EdgeKind::Temporal).map(|e| (e.src, e.dst)).collect();
    assert!(temporal.contains(&(first, second)) && temporal.contains(&(second, third)), "{temporal:?}");
    assert!(atlas.archive_files().unwrap().is_empty(), "an emptied archive file is removed");

    // Old episodes go only when the policy asks.
    let r = atlas.archive_at(later, ArchivePolicy { deleted_days: 30.0, episode_days: Some(30.0) }).await.unwrap();
    assert_eq!((r.archived, r.episodes), (3, 3));
    let restored = atlas.restore_archive(None).await.unwrap();
    assert_eq!(restored.restored.len(), 3);
    assert_eq!(found(&atlas, "Miso", vec![]).await.len(), 3);
}

/// A memory only the archive holds can be forgotten softly too: the archive's copy records it,
/// nothing else is touched, and `recover` still brings it back.
#[tokio::test]
async fn a_soft_forget_reaches_an_archived_memory() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path()).await;
    let old = atlas.remember(said("Miso slept on the keyboard", 1)).await.unwrap();
    let later = Timestamp(atlas_runtime::now().millis() + 31 * DAY);
    atlas.archive_at(later, ArchivePolicy { deleted_days: 30.0, episode_days: Some(30.0) }).await.unwrap();
    assert!(atlas.get(old).await.unwrap().is_none() && atlas.archived_memory(old).unwrap().is_some());

    assert!(atlas.forget(old).await.unwrap(), "found in the archive");
    let copy = atlas.archived_memory(old).unwrap().expect("still archived, not erased");
    assert!(copy.lifecycle.deleted_at.is_some(), "{copy:?}");
    assert!(!atlas.forget(MemoryId(old.0 + 100)).await.unwrap(), "a memory that is nowhere");
    assert_eq!(atlas.recover(old).await.unwrap(), Some(Recovered::FromArchive));
    assert!(atlas.get(old).await.unwrap().is_some_and(|d| d.memory.lifecycle.deleted_at.is_none()));
}

#[tokio::test]
async fn a_hard_forget_leaves_nothing_in_the_database_files_or_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let token = "zyxwarblequux";
    {
        let atlas = space(dir.path()).await;
        let kept = atlas.remember(said("Ordinary turn about lunch", 1)).await.unwrap();
        let secret = atlas.remember(said(&format!("My passport number is {token}"), 2)).await.unwrap();
        let archived = atlas.remember(said(&format!("Backup code {token}-2"), 3)).await.unwrap();
        atlas.remember(said("Another turn after it", 4)).await.unwrap();
        atlas.forget(archived).await.unwrap();
        let later = Timestamp(atlas_runtime::now().millis() + 31 * DAY);
        atlas.archive_at(later, ArchivePolicy { deleted_days: 30.0, episode_days: None }).await.unwrap();
        assert_eq!(found(&atlas, token, vec![]).await.first(), Some(&secret));

        let done = atlas.forget_hard(secret).await.unwrap();
        assert!(done.from_store && done.archive_files == 1, "the archived turn's edge to it goes too: {done:?}");
        let done = atlas.forget_hard(archived).await.unwrap();
        assert!(!done.from_store && done.archive_files == 1, "{done:?}");
        assert!(!found(&atlas, token, vec![]).await.contains(&secret));
        assert!(atlas.get(secret).await.unwrap().is_none());
        assert!(atlas.get(kept).await.unwrap().is_some());
        assert!(atlas.recover(archived).await.unwrap().is_none(), "gone from the archive too");
    }
    // Closed: every byte of every file the space left behind is checked.
    let mut checked = 0;
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = if entry.to_string_lossy().ends_with(".gz") {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut s).unwrap();
            s.into_bytes()
        } else {
            bytes
        };
        assert!(
            !text.windows(token.len()).any(|w| w == token.as_bytes()),
            "{} still holds the forgotten text",
            entry.display()
        );
        checked += 1;
    }
    assert!(checked >= 1);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
