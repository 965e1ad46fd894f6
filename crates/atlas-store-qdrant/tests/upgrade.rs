//! A collection written before the one text pipeline (no `tokens` and `text_len` payloads, no
//! `tokens` index) is upgraded when a store opens it: every point is written again with its
//! vectors kept, then `tokens` is indexed, and full text ranks as the fake ranks. Needs a
//! Qdrant server, like the conformance suite. So does what a space file of an earlier version kept.

use atlas_domain::ports::{EmbeddingModel, MemoryStore, TextIndex, VectorIndex};
use atlas_domain::{NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_qdrant::QdrantStore;
use atlas_testing::{FakeStore, HashEmbedder};
use qdrant_client::qdrant::{DeleteFieldIndexCollectionBuilder, DeletePayloadPointsBuilder, Filter};

mod server;

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn a_collection_without_stems_is_upgraded_at_open() {
    let mut options = server::options("atlas_upgrade");
    options.batch = 7; // several pages
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.db");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = server::client(&options);
    let words = ["amber", "basalt", "cobalt", "delta", "ember", "fjord"];
    let memories: Vec<NewMemory> = (0..30)
        .map(|i| {
            let text: Vec<&str> = (0..2 + i % 7).map(|j| words[(i * 7 + j * 3) % (1 + (i + j) % 6)]).collect();
            NewMemory::episode(
                text.join(" "),
                Scope::default(),
                Some("Tester".into()),
                Timestamp(i as i64),
                Timestamp(i as i64),
            )
        })
        .collect();
    let model = EmbeddingModel { name: "atlas-test-hash-16".into(), dimension: 16 };
    let (name, ids) = runtime.block_on(async {
        let store = QdrantStore::open(&space, options.clone()).await.unwrap();
        store.bind_model(model.clone()).await.unwrap();
        let ids = store.insert(memories.clone(), None).await.unwrap();
        let embedder = HashEmbedder::new(16);
        let vectors = ids.iter().zip(&memories).map(|(id, m)| (*id, embedder.embed_one(&m.text))).collect();
        store.put_vectors(vectors).await.unwrap();
        let name = store.collection().to_owned();
        // As an older version left it: no stems, no lengths, no index on stems.
        client.delete_field_index(DeleteFieldIndexCollectionBuilder::new(&name, "tokens").wait(true)).await.unwrap();
        client
            .delete_payload(
                DeletePayloadPointsBuilder::new(&name, vec!["tokens".to_owned(), "text_len".to_owned()])
                    .points_selector(Filter::default())
                    .wait(true),
            )
            .await
            .unwrap();
        (name, ids)
    });
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            let store = QdrantStore::open(&space, options.clone()).await.unwrap();
            let info = client.collection_info(&name).await.unwrap().result.unwrap();
            assert!(info.payload_schema.contains_key("tokens"), "indexed after the upgrade");
            let stats = store.stats().await.unwrap();
            assert_eq!((stats.memories(), stats.vectors), (30, 30), "every point and vector kept");
            let reference = FakeStore::new();
            let reference_ids = reference.insert(memories.clone(), None).await.unwrap();
            // The nth memory of either store, by its place in the batch.
            let nth = |all: &[atlas_domain::MemoryId], id| all.iter().position(|x| *x == id).unwrap();
            for query in [vec!["amber"], vec!["fjord", "delta"], vec!["cobalt", "ember", "basalt"]] {
                let query: Vec<String> = query.into_iter().map(String::from).collect();
                let got = store.search_text(query.clone(), RecallFilter::default(), 10).await.unwrap();
                let want = reference.search_text(query.clone(), RecallFilter::default(), 10).await.unwrap();
                let got: Vec<usize> = got.iter().map(|h| nth(&ids, h.id)).collect();
                let want: Vec<usize> = want.iter().map(|h| nth(&reference_ids, h.id)).collect();
                assert_eq!(got, want, "{query:?}");
            }
        })
    });
}

/// A space file of a version that kept the ledger, the edges, the vector queue, the sleep
/// cycle's bookkeeping and the receipts in it: the next open moves them to the server and
/// empties the tables, and the space behaves as before.
#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn what_the_space_file_kept_moves_to_the_server_at_open() {
    let options = server::options("atlas_upgrade_file");
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.db");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = server::client(&options);
    let scope = Scope { session: Some("s".into()), ..Scope::default() };
    let (name, ids, meta) = runtime.block_on(async {
        let store = QdrantStore::open(&space, options.clone()).await.unwrap();
        // Four turns; the fourth was still being written when the earlier version stopped.
        let turns: Vec<NewMemory> = (0..4)
            .map(|i| NewMemory::episode(format!("turn {i}"), scope.clone(), None, Timestamp(i), Timestamp(i)))
            .collect();
        let ids = store.insert(turns, None).await.unwrap();
        (store.collection().to_owned(), ids, store.meta_collection().to_owned())
    });
    // As an earlier version left it: everything in the file, nothing of it on the server.
    runtime.block_on(async {
        client.delete_collection(meta.clone()).await.unwrap();
        client
            .delete_payload(
                DeletePayloadPointsBuilder::new(&name, vec!["vector_queue".to_owned()])
                    .points_selector(Filter::default())
                    .wait(true),
            )
            .await
            .unwrap();
    });
    let file = rusqlite::Connection::open(&space).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let state = if i == 3 { "writing" } else { "stored" };
        file.execute(
            "INSERT INTO ledger (id, kind, scope_session, event_time, state, since) VALUES (?, 'episode', 's', ?, ?, 0)",
            rusqlite::params![id.0, i as i64, state],
        )
        .unwrap();
    }
    for (src, dst) in [(ids[0], ids[1]), (ids[1], ids[2]), (ids[2], ids[3])] {
        file.execute(
            "INSERT INTO edges (src, dst, kind, weight, valid_from, valid_until, recorded_at) \
             VALUES (?, ?, 'temporal', 1.0, 5, NULL, 6)",
            [src.0, dst.0],
        )
        .unwrap();
    }
    file.execute("INSERT INTO vector_queue (id) VALUES (?)", [ids[2].0]).unwrap();
    file.execute("INSERT INTO consolidation (id, processed_at, attempts) VALUES (?, 7, 1)", [ids[0].0]).unwrap();
    file.execute(
        "INSERT INTO consolidation (id, attempts, last_error, last_attempt) VALUES (?, 3, 'bad json', 8)",
        [ids[1].0],
    )
    .unwrap();
    file.execute("INSERT INTO cycles (at, report) VALUES (9, '{\"facts\": 2}')", []).unwrap();
    file.execute(
        "INSERT INTO receipts (key, ids, recorded_at) VALUES ('import:x', ?, 10)",
        [atlas_domain::encode_id_runs(&ids[..2])],
    )
    .unwrap();
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            use atlas_domain::ports::Consolidator;
            let store = QdrantStore::open(&space, options.clone()).await.unwrap();
            assert_eq!(store.get(ids[3]).await.unwrap(), None, "an unfinished write is rolled back");
            let edges = store.edges_of(ids[1]).await.unwrap();
            let ends: Vec<_> = edges.iter().map(|e| (e.src, e.dst, e.validity.valid_from.millis())).collect();
            assert_eq!(ends, [(ids[1], ids[2], 5), (ids[0], ids[1], 5)]);
            assert_eq!(store.stats().await.unwrap().edges, 2, "the edge to the rolled-back turn is gone");
            let queued: Vec<_> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
            assert_eq!(queued, [ids[2]]);
            // Processed: the first; given up after three attempts: the second.
            let todo: Vec<_> =
                store.unprocessed(10, 3, 0, Timestamp(100)).await.unwrap().iter().map(|m| m.id).collect();
            assert_eq!(todo, [ids[2]]);
            let retried: Vec<_> =
                store.unprocessed(10, 4, 0, Timestamp(100)).await.unwrap().iter().map(|m| m.id).collect();
            assert_eq!(retried, [ids[1], ids[2]], "a fourth attempt is allowed when four are");
            assert_eq!(store.cycles(5).await.unwrap(), [serde_json::json!({"facts": 2})]);
            let replay = store.insert_once("import:x".into(), Vec::new(), None).await.unwrap();
            assert!(replay.replayed);
            assert_eq!((replay.ids, replay.recorded_at.millis()), (ids[..2].to_vec(), 10));
            // Quiet since before 100, three turns, no summary: closed.
            let closed = store.closed_sessions(Timestamp(100), 5).await.unwrap();
            assert_eq!(closed.len(), 1);
            assert_eq!(closed[0].turns.iter().map(|m| m.id).collect::<Vec<_>>(), ids[..3]);
            let left: i64 = file
                .query_row(
                    "SELECT (SELECT count(*) FROM edges) + (SELECT count(*) FROM vector_queue) + \
                     (SELECT count(*) FROM ledger) + (SELECT count(*) FROM consolidation) + \
                     (SELECT count(*) FROM cycles) + (SELECT count(*) FROM receipts)",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(left, 0, "the file forgets them once the server has them");
        })
    });
}
