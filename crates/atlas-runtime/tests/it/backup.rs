//! Full-fidelity backups: an export restores a space exactly (ids, typed edges, context, bodies
//! with references, vectors), into an empty space under the same ids and into a space that
//! already holds memories under new ids with every reference mapped; a re-run is a no-op.

use atlas_domain::jsonl;
use atlas_domain::ports::{CycleRecord, EmbeddingModel, MemoryStore, Replica, StoredMemory, VectorIndex};
use atlas_domain::{Body, Edge, EdgeKind, MemoryId, NewMemory, Outcome, Scope, Timestamp, Validity};
use atlas_runtime::{Atlas, Config, ImportOptions, Parts};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const DIM: usize = 8;

fn model() -> EmbeddingModel {
    EmbeddingModel { name: "atlas-test-backup".into(), dimension: DIM }
}

/// A space on SQLite, without an embedder (so nothing changes it behind the test's back), its
/// store bound to the test model so that vectors can be restored.
async fn space(path: &Path) -> (Atlas, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(path, &SqliteOptions::default()).unwrap());
    store.bind_model(model()).await.unwrap();
    let config = Config { db: path.to_path_buf(), ..Config::default() };
    let atlas = Atlas::from_parts(Parts::from_store(Arc::clone(&store), None), config).await.unwrap();
    (atlas, store)
}

fn body(kind: u8, id: i64, earlier: &[i64]) -> Body {
    match kind % 7 {
        0 => Body::Episode { speaker: Some(format!("Speaker{}", id % 3)) },
        1 => Body::Fact {
            subject: "ann".into(),
            predicate: "likes".into(),
            object: format!("tea {id}"),
            confidence: 0.5,
        },
        2 => Body::Entity { name: format!("entity {id}"), entity_type: Some("place".into()) },
        3 => Body::Core { category: "user_profile".into() },
        4 => Body::Experience {
            task: format!("task {id}"),
            outcome: Outcome::Success,
            feedback: None,
            trajectory: Some(format!("t{id}")),
            steps: vec!["rotate(grid)".into()],
            output: String::new(),
            tags: Vec::new(),
            merged: Vec::new(),
        },
        5 => Body::Concept {
            name: format!("concept{id}"),
            code: "fn f() {}".into(),
            composed_of: earlier.iter().rev().take(3).map(|i| MemoryId(*i)).collect(),
            detail: Default::default(),
        },
        _ => Body::Strategy {
            situation: format!("situation {id}"),
            suggestion: "reflect".into(),
            successes: 2,
            failures: 1,
        },
    }
}

prop_compose! {
    /// A space with gaps in its ids (forgotten memories), every kind, concepts that refer to
    /// earlier memories, typed edges of every kind in both directions, some vectors, some
    /// context, some episodes a sleep cycle consumed.
    fn arb_space()(
        slots in proptest::collection::vec((any::<bool>(), 0u8..7, any::<bool>(), any::<bool>(), any::<bool>()), 1..24),
        links in proptest::collection::vec((0usize..24, 0usize..24, 0usize..5, any::<bool>()), 0..30),
    ) -> Vec<StoredMemory> {
        let mut items: Vec<StoredMemory> = Vec::new();
        for (i, (gap, kind, vector, context, consumed)) in slots.iter().enumerate() {
            let id = i as i64 + 1;
            if *gap && i > 0 {
                continue;
            }
            let earlier: Vec<i64> = items.iter().map(|s| s.memory.id.0).collect();
            let new = NewMemory {
                scope: Scope { user: Some(["ann", "bob"][i % 2].into()), agent: None, session: Some(format!("s{}", i % 3)) },
                text: format!("memory {id} about harbour {}", i * 7),
                event_time: Timestamp(1_000 * id),
                recorded_at: Timestamp(1_000 * id + 5),
                validity: Validity { valid_from: Timestamp(1_000 * id), valid_until: (id % 4 == 0).then_some(Timestamp(9_000_000)) },
                meta: serde_json::Map::new(),
                body: body(*kind, id, &earlier),
            };
            let mut memory = new.with_id(MemoryId(id));
            memory.context = context.then(|| format!("Someone: the turn before {id}"));
            let vector = vector.then(|| (0..DIM).map(|d| ((id as usize * 31 + d * 7) % 17) as f32 / 17.0 - 0.5).collect());
            // Consolidated spaces too: what a sleep cycle consumed travels with the episode.
            let consolidated_at = (*consumed && memory.kind() == atlas_domain::MemoryKind::Episode)
                .then_some(Timestamp(1_000 * id + 50));
            items.push(StoredMemory { memory, vector, edges: Vec::new(), consolidated_at });
        }
        let ids: Vec<i64> = items.iter().map(|s| s.memory.id.0).collect();
        let mut seen = std::collections::HashSet::new();
        for (a, b, kind, forward) in links {
            let (a, b) = (ids[a % ids.len()], ids[b % ids.len()]);
            let (src, dst) = if forward { (a, b) } else { (b, a) };
            if !seen.insert((src, dst, kind)) {
                continue;
            }
            let later = src.max(dst);
            let holder = items.iter_mut().find(|s| s.memory.id.0 == later).unwrap();
            holder.edges.push(Edge {
                src: MemoryId(src),
                dst: MemoryId(dst),
                kind: EdgeKind::ALL[kind],
                weight: 0.25 * (kind as f32 + 1.0),
                validity: Validity { valid_from: Timestamp(src * 10), valid_until: (kind == 4).then_some(Timestamp(src * 10 + 7)) },
                recorded_at: Timestamp(dst * 10),
            });
        }
        items
    }
}

async fn export(atlas: &Atlas) -> Vec<u8> {
    let mut out = Vec::new();
    atlas.export(&mut out, true).await.unwrap();
    out
}

fn stored(bytes: &[u8]) -> Vec<StoredMemory> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines[1..lines.len() - 1]
        .iter()
        .filter(|l| jsonl::parse_cycle(l).unwrap().is_none())
        .map(|l| jsonl::parse_stored_line(l, Timestamp(0)).unwrap())
        .collect()
}

fn sorted(mut items: Vec<StoredMemory>) -> Vec<StoredMemory> {
    for item in &mut items {
        item.edges.sort_by_key(|e| (e.src, e.dst, e.kind));
    }
    items
}

/// The item with every id it holds passed through `map`.
fn mapped(item: &StoredMemory, map: &BTreeMap<MemoryId, MemoryId>) -> StoredMemory {
    let mut item = item.clone();
    item.memory.id = map[&item.memory.id];
    for e in &mut item.edges {
        e.src = map[&e.src];
        e.dst = map[&e.dst];
    }
    if let Body::Concept { composed_of, .. } = &mut item.memory.body {
        composed_of.iter_mut().for_each(|id| *id = map[id]);
    }
    item
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]

    #[test]
    fn an_export_restores_any_space_exactly_and_once(
        space_items in arb_space(),
        existing in 1usize..4,
        ledger in proptest::collection::btree_set((0i64..2_000_000_000_000, 0u8..5), 0..4),
    ) {
        let rt = atlas_testing::runtime();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let (source, store) = space(&dir.path().join("source.db")).await;
            store.restore(space_items.clone()).await.unwrap();
            let cycles: Vec<CycleRecord> = ledger
                .iter()
                .map(|(at, n)| CycleRecord { at: Timestamp(*at), report: serde_json::json!({"facts_added": n}) })
                .collect();
            store.restore_cycles(cycles.clone()).await.unwrap();
            let backup = export(&source).await;
            let expected = sorted(space_items.clone());
            assert_eq!(sorted(stored(&backup)), expected, "the export holds the space as it is");

            // Into an empty space: the same ids, byte for byte the same export.
            let (fresh, _) = space(&dir.path().join("fresh.db")).await;
            let imported = fresh.import_bytes(&backup, "backup.jsonl", ImportOptions::default(), None).await.unwrap();
            assert!(imported.restored && !imported.renumbered && !imported.replayed);
            assert_eq!(imported.vectors, space_items.iter().filter(|s| s.vector.is_some()).count());
            assert_eq!(export(&fresh).await, backup);
            let again = fresh.import_bytes(&backup, "backup.jsonl", ImportOptions::default(), None).await.unwrap();
            assert!(again.replayed, "a re-run stores nothing");
            assert_eq!(export(&fresh).await, backup);
            let forced = ImportOptions { again: true, ..ImportOptions::default() };
            let twice = space(&dir.path().join("twice.db")).await;
            twice.0.import_bytes(&backup, "backup.jsonl", ImportOptions::default(), None).await.unwrap();
            twice.0.import_bytes(&backup, "backup.jsonl", forced, None).await.unwrap();
            assert_eq!(twice.1.export_cycles().await.unwrap(), cycles, "the ledger once, however often restored");

            // Into a space that already holds memories: new ids, every reference mapped.
            let (busy, busy_store) = space(&dir.path().join("busy.db")).await;
            let before: Vec<NewMemory> = (0..existing)
                .map(|i| NewMemory::episode(format!("already here {i}"), Scope::default(), None, Timestamp(i as i64), Timestamp(0)))
                .collect();
            let kept = busy_store.insert(before, None).await.unwrap();
            let imported = busy.import_bytes(&backup, "backup.jsonl", ImportOptions::default(), None).await.unwrap();
            assert!(imported.restored && imported.renumbered);
            let map: BTreeMap<MemoryId, MemoryId> =
                space_items.iter().map(|s| s.memory.id).zip(imported.ids.iter().copied()).collect();
            assert!(imported.ids.iter().all(|id| *id > *kept.last().unwrap()));
            let after = stored(&export(&busy).await);
            assert_eq!(after.len(), existing + space_items.len());
            let restored: Vec<StoredMemory> = after.into_iter().filter(|s| !kept.contains(&s.memory.id)).collect();
            let expected: Vec<StoredMemory> = space_items.iter().map(|s| mapped(s, &map)).collect();
            assert_eq!(sorted(restored), sorted(expected));
            for id in &kept {
                assert!(busy_store.get(*id).await.unwrap().unwrap().text.starts_with("already here"));
            }
        });
    }
}

#[tokio::test]
async fn a_reference_to_a_memory_neither_in_the_file_nor_in_the_space_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (source, store) = space(&dir.path().join("source.db")).await;
    let new = NewMemory::episode("a part", Scope::default(), None, Timestamp(1), Timestamp(1));
    let part = new.with_id(MemoryId(3));
    let concept = NewMemory {
        body: Body::Concept {
            name: "c".into(),
            code: "f()".into(),
            composed_of: vec![MemoryId(3)],
            detail: Default::default(),
        },
        ..NewMemory::episode("a concept", Scope::default(), None, Timestamp(2), Timestamp(2))
    }
    .with_id(MemoryId(5));
    store
        .restore(vec![
            StoredMemory { memory: part, vector: None, edges: Vec::new(), consolidated_at: None },
            StoredMemory { memory: concept, vector: None, edges: Vec::new(), consolidated_at: None },
        ])
        .await
        .unwrap();
    let backup = String::from_utf8(export(&source).await).unwrap();
    // The part is cut out of the file: the concept now points at nothing the target knows.
    let cut: String = backup.lines().filter(|l| !l.contains("a part")).map(|l| format!("{l}\n")).collect();
    let cut = cut.replace("{\"memories\":2}", "{\"memories\":1}");
    let (target, target_store) = space(&dir.path().join("target.db")).await;
    let err = target.import_bytes(cut.as_bytes(), "cut.jsonl", ImportOptions::default(), None).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("memory 5 refers to memory 3") && message.contains("composed_of"), "{message}");
    assert_eq!(target_store.stats().await.unwrap().memories(), 0, "nothing was restored");
    // A file cut short (no trailer) is refused too.
    let short: String = backup.lines().take(2).map(|l| format!("{l}\n")).collect();
    let err = target.import_bytes(short.as_bytes(), "short.jsonl", ImportOptions::default(), None).await.unwrap_err();
    assert!(err.to_string().contains("cut short"), "{err}");
}

/// An export of several pieces restores into a busy space with every reference mapped across
/// pieces, and the same export with its memories out of id order restores the same.
#[tokio::test]
async fn a_large_export_restores_a_piece_at_a_time_and_out_of_order_too() {
    let dir = tempfile::tempdir().unwrap();
    let (source, store) = space(&dir.path().join("source.db")).await;
    let turns: Vec<NewMemory> = (0..2_600)
        .map(|i| {
            let scope = Scope { session: Some(format!("s{}", i / 20)), ..Scope::default() };
            NewMemory::episode(format!("turn {i}"), scope, Some("Ann".into()), Timestamp(i), Timestamp(i))
        })
        .collect();
    store.insert(turns, None).await.unwrap();
    let backup = export(&source).await;
    let items = stored(&backup);
    assert_eq!(items.len(), 2_600);
    let text = String::from_utf8(backup.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut shuffled = vec![lines[0]];
    shuffled.extend(lines[1..lines.len() - 1].iter().rev());
    shuffled.push(lines[lines.len() - 1]);
    let out_of_order = format!("{}\n", shuffled.join("\n"));
    for (name, file) in [("in order", backup.clone()), ("out of order", out_of_order.into_bytes())] {
        let (busy, busy_store) = space(&dir.path().join(format!("busy {name}.db"))).await;
        let kept = busy_store
            .insert(vec![NewMemory::episode("already here", Scope::default(), None, Timestamp(0), Timestamp(0))], None)
            .await
            .unwrap();
        let imported = busy.import_bytes(&file, "backup.jsonl", ImportOptions::default(), None).await.unwrap();
        assert!(imported.restored && imported.renumbered, "{name}");
        let mut ids = imported.ids.clone();
        ids.sort();
        let map: BTreeMap<MemoryId, MemoryId> = items.iter().map(|s| s.memory.id).zip(ids).collect();
        let restored: Vec<StoredMemory> =
            stored(&export(&busy).await).into_iter().filter(|s| !kept.contains(&s.memory.id)).collect();
        let expected: Vec<StoredMemory> = items.iter().map(|s| mapped(s, &map)).collect();
        assert_eq!(sorted(restored), sorted(expected), "{name}");
    }
}
