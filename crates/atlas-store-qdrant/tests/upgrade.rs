//! A collection written before the exact text ranking (no `terms` and `text_len` payloads, no
//! `terms` index) is upgraded when a store opens it: every point is written again with its
//! vectors kept, then `terms` is indexed, and full text ranks as FTS5 (the fake) ranks. Needs a
//! Qdrant server, like the conformance suite. So are edges a space file of an earlier version kept.

use atlas_domain::ports::{EmbeddingModel, MemoryStore, TextIndex, VectorIndex};
use atlas_domain::{NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_qdrant::{QdrantOptions, QdrantStore};
use atlas_testing::{FakeStore, HashEmbedder};
use qdrant_client::qdrant::{DeleteFieldIndexCollectionBuilder, DeletePayloadPointsBuilder, Filter};

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn a_collection_without_stems_is_upgraded_at_open() {
    let url = std::env::var("QDRANT_URL").expect("QDRANT_URL");
    let mut options = QdrantOptions::new(url.clone());
    options.collection_prefix = "atlas_upgrade".into();
    options.batch = 7; // several pages
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.db");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = qdrant_client::Qdrant::from_url(&url).skip_compatibility_check().build().unwrap();
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
    let name = runtime.block_on(async {
        let store = QdrantStore::open(&space, options.clone()).await.unwrap();
        store.bind_model(model.clone()).await.unwrap();
        let ids = store.insert(memories.clone(), None).await.unwrap();
        let embedder = HashEmbedder::new(16);
        let vectors = ids.iter().zip(&memories).map(|(id, m)| (*id, embedder.embed_one(&m.text))).collect();
        store.put_vectors(vectors).await.unwrap();
        let name = store.collection().to_owned();
        // As an older version left it: no stems, no lengths, no index on stems.
        client.delete_field_index(DeleteFieldIndexCollectionBuilder::new(&name, "terms").wait(true)).await.unwrap();
        client
            .delete_payload(
                DeletePayloadPointsBuilder::new(&name, vec!["terms".to_owned(), "text_len".to_owned()])
                    .points_selector(Filter::default())
                    .wait(true),
            )
            .await
            .unwrap();
        name
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let store = QdrantStore::open(&space, options.clone()).await.unwrap();
            let info = client.collection_info(&name).await.unwrap().result.unwrap();
            assert!(info.payload_schema.contains_key("terms"), "indexed after the upgrade");
            let stats = store.stats().await.unwrap();
            assert_eq!((stats.memories(), stats.vectors), (30, 30), "every point and vector kept");
            let reference = FakeStore::new();
            reference.insert(memories.clone(), None).await.unwrap();
            for query in [vec!["amber"], vec!["fjord", "delta"], vec!["cobalt", "ember", "basalt"]] {
                let query: Vec<String> = query.into_iter().map(String::from).collect();
                let got = store.search_text(query.clone(), RecallFilter::default(), 10).await.unwrap();
                let want = reference.search_text(query.clone(), RecallFilter::default(), 10).await.unwrap();
                let ids = |h: &[atlas_domain::ports::ScoredId]| h.iter().map(|h| h.id).collect::<Vec<_>>();
                assert_eq!(ids(&got), ids(&want), "{query:?}");
            }
        })
    }));
    let _ = runtime.block_on(client.delete_collection(format!("{name}_meta")));
    let _ = runtime.block_on(client.delete_collection(name));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A space file of a version that kept the edges and the vector queue in it: the next open moves
/// them to the server and empties the tables, and they are found as before.
#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn edges_and_queue_kept_in_the_space_file_move_to_the_server_at_open() {
    let url = std::env::var("QDRANT_URL").expect("QDRANT_URL");
    let mut options = QdrantOptions::new(url.clone());
    options.collection_prefix = "atlas_upgrade_edges".into();
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.db");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = qdrant_client::Qdrant::from_url(&url).skip_compatibility_check().build().unwrap();
    let (name, ids, meta) = runtime.block_on(async {
        let store = QdrantStore::open(&space, options.clone()).await.unwrap();
        let scope = Scope { session: Some("s".into()), ..Scope::default() };
        let turns: Vec<NewMemory> = (0..3)
            .map(|i| NewMemory::episode(format!("turn {i}"), scope.clone(), None, Timestamp(i), Timestamp(i)))
            .collect();
        let ids = store.insert(turns, None).await.unwrap();
        (store.collection().to_owned(), ids, store.meta_collection().to_owned())
    });
    // As an older version left it: the edges and the queue in the file, none on the server.
    runtime.block_on(async {
        client.delete_collection(meta.clone()).await.unwrap();
        client
            .delete_field_index(DeleteFieldIndexCollectionBuilder::new(&name, "vector_queue").wait(true))
            .await
            .unwrap();
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
    for id in &ids[1..] {
        file.execute("INSERT INTO vector_queue (id) VALUES (?)", [id.0]).unwrap();
    }
    for (src, dst) in [(ids[0], ids[1]), (ids[1], ids[2])] {
        file.execute(
            "INSERT INTO edges (src, dst, kind, weight, valid_from, valid_until, recorded_at) \
             VALUES (?, ?, 'temporal', 1.0, 5, NULL, 6)",
            [src.0, dst.0],
        )
        .unwrap();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let store = QdrantStore::open(&space, options.clone()).await.unwrap();
            let edges = store.edges_of(ids[1]).await.unwrap();
            let ends: Vec<_> = edges.iter().map(|e| (e.src, e.dst, e.validity.valid_from.millis())).collect();
            assert_eq!(ends, [(ids[1], ids[2], 5), (ids[0], ids[1], 5)]);
            assert_eq!(store.stats().await.unwrap().edges, 2);
            let queued: Vec<_> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
            assert_eq!(queued, ids[1..]);
            let info = client.collection_info(&name).await.unwrap().result.unwrap();
            assert!(info.payload_schema.contains_key("vector_queue"), "the queue is indexed");
            let left: i64 = file
                .query_row("SELECT (SELECT count(*) FROM edges) + (SELECT count(*) FROM vector_queue)", [], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(left, 0, "the file forgets them once the server has them");
        })
    }));
    let _ = runtime.block_on(client.delete_collection(name));
    let _ = runtime.block_on(client.delete_collection(meta));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
