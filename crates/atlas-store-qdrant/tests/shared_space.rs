//! Several store instances on one memory space, as several processes would open it: they share
//! the work of the vector queue without embedding a memory twice, and the sleep cycle's without
//! consolidating an episode or summarising a session twice. Needs a Qdrant server, like the conformance suite.

use atlas_domain::ports::{EmbeddingModel, MemoryStore, VectorIndex};
use atlas_domain::{MemoryId, NewMemory, Scope, Timestamp};
use atlas_store_qdrant::QdrantStore;
use atlas_testing::HashEmbedder;
use std::collections::HashMap;
use std::sync::Arc;

mod server;

/// Waits for every worker and counts how many times each item was taken; also how many workers
/// took anything.
async fn times_taken<K: std::hash::Hash + Eq + 'static>(
    mut workers: tokio::task::JoinSet<Vec<K>>,
) -> (HashMap<K, usize>, usize) {
    let mut times: HashMap<K, usize> = HashMap::new();
    let mut busy = 0;
    while let Some(done) = workers.join_next().await {
        let taken = done.unwrap();
        busy += usize::from(!taken.is_empty());
        for item in taken {
            *times.entry(item).or_default() += 1;
        }
    }
    (times, busy)
}

/// A sleep cycle's batch at time 1,000: new memories, episodes processed.
fn cycle_batch(memories: Vec<NewMemory>, processed: Vec<MemoryId>) -> atlas_domain::ports::Consolidation {
    atlas_domain::ports::Consolidation {
        memories,
        edges: Vec::new(),
        revisions: Vec::new(),
        unlinked: Vec::new(),
        report: serde_json::json!({ "episodes": processed.len() }),
        processed,
        failed: Vec::new(),
        at: Timestamp(1_000),
    }
}

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn embedders_of_several_processes_never_take_the_same_memory() {
    let options = server::options("atlas_shared");
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.db");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let model = EmbeddingModel { name: "atlas-test-hash-16".into(), dimension: 16 };
    let (stores, ids) = runtime.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..4 {
            let store = QdrantStore::open(&space, options.clone()).await.unwrap();
            store.bind_model(model.clone()).await.unwrap();
            stores.push(Arc::new(store));
        }
        let turns: Vec<NewMemory> = (0..200)
            .map(|i| NewMemory::episode(format!("turn {i}"), Scope::default(), None, Timestamp(i), Timestamp(i)))
            .collect();
        let ids = stores[0].insert(turns, None).await.unwrap();
        (stores, ids)
    });
    let name = stores[0].collection().to_owned();
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            let mut workers = tokio::task::JoinSet::new();
            for store in &stores {
                let store = Arc::clone(store);
                workers.spawn(async move {
                    let embedder = HashEmbedder::new(16);
                    let mut embedded: Vec<MemoryId> = Vec::new();
                    loop {
                        let work = store.pending_vectors(7).await.unwrap();
                        if work.is_empty() {
                            return embedded;
                        }
                        let vectors = work.iter().map(|m| (m.id, embedder.embed_one(&m.text))).collect();
                        store.put_vectors(vectors).await.unwrap();
                        embedded.extend(work.iter().map(|m| m.id));
                    }
                });
            }
            let (times, busy) = times_taken(workers).await;
            let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
            assert!(twice.is_empty(), "embedded by two processes: {twice:?}");
            assert_eq!(times.len(), ids.len(), "every memory embedded");
            assert!(busy >= 2, "the work was shared ({busy} of 4 took some)");
            assert_eq!(stores[3].queued_vectors().await.unwrap(), 0);
            assert_eq!(stores[2].stats().await.unwrap().vectors, ids.len() as u64);
        })
    });
}

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn sleep_cycles_of_several_processes_never_take_the_same_episode() {
    use atlas_domain::ports::Consolidator;
    let mut options = server::options("atlas_shared_sleep");
    options.space = Some(format!("sleep-{}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (stores, ids) = runtime.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..3 {
            stores.push(Arc::new(QdrantStore::open(std::path::Path::new("unused.db"), options.clone()).await.unwrap()));
        }
        let turns: Vec<NewMemory> = (0..60)
            .map(|i| NewMemory::episode(format!("turn {i}"), Scope::default(), None, Timestamp(i), Timestamp(i)))
            .collect();
        let ids = stores[0].insert(turns, None).await.unwrap();
        (stores, ids)
    });
    let name = stores[0].collection().to_owned();
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            let mut cycles = tokio::task::JoinSet::new();
            for store in &stores {
                let store = Arc::clone(store);
                cycles.spawn(async move {
                    let mut processed: Vec<MemoryId> = Vec::new();
                    loop {
                        let episodes = store.unprocessed(7, 5, 0, Timestamp(1_000)).await.unwrap();
                        if episodes.is_empty() {
                            return processed;
                        }
                        let batch: Vec<MemoryId> = episodes.iter().map(|m| m.id).collect();
                        store.apply(cycle_batch(Vec::new(), batch.clone())).await.unwrap();
                        processed.extend(batch);
                    }
                });
            }
            let (times, _) = times_taken(cycles).await;
            let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
            assert!(twice.is_empty(), "consolidated by two cycles: {twice:?}");
            assert_eq!(times.len(), ids.len(), "every episode consolidated");
            assert!(stores[1].unprocessed(10, 5, 0, Timestamp(1_000)).await.unwrap().is_empty());
        })
    });
}

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn sleep_cycles_of_several_processes_never_summarise_one_session_twice() {
    use atlas_domain::ports::Consolidator;
    use atlas_domain::{Body, Memory};
    let mut options = server::options("atlas_shared_summary");
    options.space = Some(format!("summary-{}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sessions = 12;
    let stores = runtime.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..3 {
            stores.push(Arc::new(QdrantStore::open(std::path::Path::new("unused.db"), options.clone()).await.unwrap()));
        }
        let turns: Vec<NewMemory> = (0..sessions * 3)
            .map(|i| {
                let scope = Scope { session: Some(format!("s{}", i % sessions)), ..Scope::default() };
                NewMemory::episode(format!("turn {i}"), scope, None, Timestamp(i), Timestamp(i))
            })
            .collect();
        stores[0].insert(turns, None).await.unwrap();
        stores
    });
    let name = stores[0].collection().to_owned();
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            let mut cycles = tokio::task::JoinSet::new();
            for store in &stores {
                let store = Arc::clone(store);
                cycles.spawn(async move {
                    let mut summarised: Vec<String> = Vec::new();
                    loop {
                        let closed = store.closed_sessions(Timestamp(1_000), 2).await.unwrap();
                        if closed.is_empty() {
                            return summarised;
                        }
                        let memories: Vec<NewMemory> = closed
                            .iter()
                            .map(|c| {
                                let session = c.scope.session.clone().unwrap();
                                let body = Body::Summary { session: session.clone(), turns: c.turns.len() as u32 };
                                let last: &Memory = c.turns.last().unwrap();
                                summarised.push(session);
                                NewMemory {
                                    body,
                                    ..NewMemory::episode(
                                        "summary",
                                        c.scope.clone(),
                                        None,
                                        last.event_time,
                                        last.event_time,
                                    )
                                }
                            })
                            .collect();
                        store.apply(cycle_batch(memories, Vec::new())).await.unwrap();
                    }
                });
            }
            let (times, _) = times_taken(cycles).await;
            let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
            assert!(twice.is_empty(), "summarised by two cycles: {twice:?}");
            assert_eq!(times.len(), sessions as usize, "every session summarised");
            assert!(stores[1].closed_sessions(Timestamp(1_000), 10).await.unwrap().is_empty());
        })
    });
}

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn a_long_lived_process_removes_a_write_another_one_left_once_its_lease_runs_out() {
    let mut options = server::options("atlas_shared_lease");
    options.space = Some(format!("lease-{}", std::process::id()));
    options.write_lease = std::time::Duration::from_secs(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (long_lived, name) = runtime.block_on(async {
        let store = QdrantStore::open(std::path::Path::new("unused.db"), options.clone()).await.unwrap();
        let first = NewMemory::episode("the first memory", Scope::default(), None, Timestamp(0), Timestamp(0));
        store.insert(vec![first], None).await.unwrap();
        let name = store.collection().to_owned();
        (store, name)
    });
    server::cleaning_up(&runtime, &options, &name, || {
        runtime.block_on(async {
            // Another process's import stops dead half-way (its future dropped at an await:
            // no rollback runs, as under SIGKILL).
            let other = QdrantStore::open(std::path::Path::new("unused.db"), options.clone()).await.unwrap();
            let turns: Vec<NewMemory> = (0..atlas_testing::size(20_000) as i64)
                .map(|i| NewMemory::episode(format!("turn {i}"), Scope::default(), None, Timestamp(i), Timestamp(i)))
                .collect();
            // Stopped once its first chunk is on the server, not after a fixed time: on a loaded
            // machine the import may not have written anything yet when a timer runs out.
            let mut import = std::pin::pin!(other.insert(turns, None));
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
            loop {
                let step = tokio::time::timeout(std::time::Duration::from_millis(20), &mut import).await;
                assert!(step.is_err(), "the import finished before it was stopped: make it larger");
                if server::count(&options, &name).await > 1 {
                    break; // the stopped import leaves points behind
                }
                assert!(tokio::time::Instant::now() < deadline, "the import wrote nothing in two minutes");
            }
        });
        assert_eq!(runtime.block_on(long_lived.stats()).unwrap().memories(), 1, "none of them visible");
        std::thread::sleep(std::time::Duration::from_millis(1500));
        // The process open since before never opens again: its background embedder's next
        // look at the queue finishes the stalled write.
        runtime.block_on(long_lived.pending_vectors(1)).unwrap();
        assert_eq!(server::points(&runtime, &options, &name), 1, "points left by the stopped import");
    });
}
