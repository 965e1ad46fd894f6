//! A Qdrant cluster losing a node: three nodes on loopback, a collection of three shards with
//! two replicas each, a write and recall load, and the node the client speaks to killed with
//! SIGKILL in the middle of it and started again. Every acknowledged write must be on every
//! replica afterwards; how writes and recall behaved while the node was down is printed (and
//! recorded in docs/QDRANT.md). Starts its own cluster from the Qdrant binary (never
//! `QDRANT_URL`: it kills nodes); ignored unless run with `--run-ignored`, as `cargo xtask ci` does.

use atlas_domain::ports::{MemoryStore, TextIndex};
use atlas_domain::{MemoryId, NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_qdrant::{QdrantOptions, QdrantStore};
use atlas_testing::servers;
use qdrant_client::qdrant::{GetPointsBuilder, PointId, ReadConsistencyType, read_consistency};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one call saw: when it started (since the load began), how long it took, whether it worked.
#[derive(Clone, Copy)]
struct Call {
    at: Duration,
    took: Duration,
    ok: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Before,
    Down,
    After,
}

fn phase(at: Duration, killed: Duration, restarted: Duration) -> Phase {
    if at < killed {
        Phase::Before
    } else if at < restarted {
        Phase::Down
    } else {
        Phase::After
    }
}

fn summary(calls: &[Call], killed: Duration, restarted: Duration, which: Phase) -> String {
    let mut took: Vec<Duration> = Vec::new();
    let (mut ok, mut failed) = (0, 0);
    for call in calls.iter().filter(|c| phase(c.at, killed, restarted) == which) {
        if call.ok {
            ok += 1;
            took.push(call.took);
        } else {
            failed += 1;
        }
    }
    took.sort();
    let at = |q: f64| took.get(((took.len() as f64 - 1.0) * q).round() as usize).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    format!("{ok} ok, {failed} failed, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", at(0.5), at(0.99), at(1.0))
}

#[test]
#[ignore = "needs the Qdrant binary (cargo xtask ci runs it)"]
fn acknowledged_writes_survive_a_node_killed_during_a_write_load() {
    let mut cluster = match servers::qdrant_cluster(3) {
        Ok(cluster) => cluster,
        Err(why) => {
            servers::skipped("acknowledged_writes_survive_a_node_killed_during_a_write_load", &why);
            return;
        }
    };
    let mut options = QdrantOptions::new(cluster.url.clone());
    options.collection_prefix = "atlas_cluster".into();
    options.shards = Some(3);
    options.replication_factor = Some(2);
    options.timeout = Duration::from_secs(10);
    options.connect_timeout = Duration::from_secs(1);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let store = Arc::new(runtime.block_on(QdrantStore::open(&dir.path().join("space.db"), options)).unwrap());
    // The collection exists once something is written.
    runtime.block_on(store.insert(vec![turn(0, 0)], None)).unwrap();
    let collection = store.collection().to_string();

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged: Arc<Mutex<Vec<(MemoryId, String)>>> = Arc::default();
    let writes: Arc<Mutex<Vec<Call>>> = Arc::default();
    let recalls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let writer = {
        let (store, stop, acknowledged, writes, errors) = (
            Arc::clone(&store),
            Arc::clone(&stop),
            Arc::clone(&acknowledged),
            Arc::clone(&writes),
            Arc::clone(&errors),
        );
        runtime.spawn(async move {
            let mut n = 1;
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<NewMemory> = (0..1 + n % 3).map(|k| turn(n, k)).collect();
                let texts: Vec<String> = batch.iter().map(|m| m.text.clone()).collect();
                let at = started.elapsed();
                let result = store.insert(batch, None).await;
                let took = started.elapsed() - at;
                writes.lock().unwrap().push(Call { at, took, ok: result.is_ok() });
                match result {
                    Ok(ids) => acknowledged.lock().unwrap().extend(ids.into_iter().zip(texts)),
                    Err(e) => {
                        errors.lock().unwrap().push(format!("write at {at:.1?}: {e}"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                n += 1;
            }
        })
    };
    let reader = {
        let (store, stop, recalls, errors) =
            (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&recalls), Arc::clone(&errors));
        runtime.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let at = started.elapsed();
                let result = store.search_text(vec!["marker".into()], RecallFilter::default(), 10).await;
                let took = started.elapsed() - at;
                let ok = match result {
                    Ok(hits) if !hits.is_empty() => true,
                    Ok(_) => {
                        errors.lock().unwrap().push(format!("recall at {at:.1?}: nothing found"));
                        false
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(format!("recall at {at:.1?}: {e}"));
                        false
                    }
                };
                recalls.lock().unwrap().push(Call { at, took, ok });
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    std::thread::sleep(Duration::from_secs(2));
    // Node 0 is the one the client speaks to first, and the cluster's first peer.
    let killed = started.elapsed();
    cluster.kill(0);
    // Writes pause while the others elect a leader and mark the lost replicas dead (seconds);
    // the node stays down until writes have gone on for a while without it.
    let deadline = Instant::now() + Duration::from_secs(40);
    let written_since = |since: Duration| writes.lock().unwrap().iter().filter(|c| c.ok && c.at > since).count();
    while written_since(killed) < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let restarted = started.elapsed();
    cluster.start(0).expect("node 0 starts again");
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        writer.await.unwrap();
        reader.await.unwrap();
    });
    for node in 0..3 {
        cluster.wait_replicas_active(node, &collection, Duration::from_secs(120)).expect("replicas recover");
    }

    let acknowledged = acknowledged.lock().unwrap().clone();
    let (writes, recalls) = (writes.lock().unwrap().clone(), recalls.lock().unwrap().clone());
    eprintln!("node 0 killed at {killed:.1?}, started again at {restarted:.1?}");
    for (name, which) in [("before", Phase::Before), ("down", Phase::Down), ("after", Phase::After)] {
        eprintln!("  {name:>6}: writes {}", summary(&writes, killed, restarted, which));
        eprintln!("  {name:>6}: recall {}", summary(&recalls, killed, restarted, which));
    }
    for error in errors.lock().unwrap().iter() {
        eprintln!("  {error}");
    }
    let down_writes = writes.iter().filter(|c| c.ok && phase(c.at, killed, restarted) == Phase::Down).count();
    assert!(down_writes >= 10, "{down_writes} writes acknowledged in 40 s while one node of three was down");

    let mut ids: Vec<MemoryId> = acknowledged.iter().map(|(id, _)| *id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), acknowledged.len(), "an id was acknowledged twice");
    let stored = runtime.block_on(store.get_many(ids.clone())).unwrap();
    assert_eq!(stored.len(), acknowledged.len(), "acknowledged writes missing after the node came back");
    for (id, text) in &acknowledged {
        let memory = stored.iter().find(|m| m.id == *id).unwrap_or_else(|| panic!("memory {id:?} lost"));
        assert_eq!(&memory.text, text, "memory {id:?} changed");
    }
    // Every replica has every acknowledged point: read through each node, asking all replicas.
    let points: Vec<PointId> =
        ids.iter().map(|id| PointId::from(atlas_store_qdrant::payload::point_id(*id).unwrap())).collect();
    for url in cluster.node_urls() {
        let client = qdrant_client::Qdrant::from_url(&url).skip_compatibility_check().build().unwrap();
        let request = GetPointsBuilder::new(&collection, points.clone())
            .read_consistency(read_consistency::Value::Type(ReadConsistencyType::All as i32));
        let found = runtime
            .block_on(client.get_points(request))
            .unwrap_or_else(|e| panic!("node {url}, asking every replica: {e}"))
            .result
            .len();
        assert_eq!(found, points.len(), "node {url}, asking every replica, finds {found} of {}", points.len());
    }
    eprintln!("{} acknowledged writes, every one on every replica", acknowledged.len());
}

fn turn(n: usize, k: usize) -> NewMemory {
    NewMemory::episode(
        format!("load {n} part {k} marker word{n}"),
        Scope::default(),
        Some("Writer".into()),
        Timestamp(n as i64),
        Timestamp(n as i64),
    )
}
