//! Copies between stores: resumable after an interruption, idempotent, verified, source untouched.

use async_trait::async_trait;
use atlas_domain::ports::{Embedder, MemoryStore, Receipt, Replica, StoredMemory};
use atlas_domain::{AtlasError, MemoryId, NewMemory, Scope, Timestamp};
use atlas_runtime::config::RecallConfig;
use atlas_runtime::migrate::{Checkpoint, CopyOptions, copy, verify};
use atlas_runtime::{Atlas, Config, Parts};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::{FakeStore, HashEmbedder};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A target that fails its `fail_at`-th restore, as a server dropping mid-migration would.
struct Flaky {
    inner: Arc<FakeStore>,
    restores: AtomicUsize,
    fail_at: usize,
}

#[async_trait]
impl Replica for Flaky {
    async fn export_batch(&self, after: Option<MemoryId>, limit: usize) -> atlas_domain::Result<Vec<StoredMemory>> {
        self.inner.export_batch(after, limit).await
    }
    async fn restore(&self, batch: Vec<StoredMemory>) -> atlas_domain::Result<()> {
        if self.restores.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            return Err(AtlasError::Storage("connection reset by peer".into()));
        }
        self.inner.restore(batch).await
    }
    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> atlas_domain::Result<Receipt> {
        self.inner.restore_once(key, batch).await
    }
    async fn restore_pieces(
        &self,
        key: Option<String>,
        pieces: atlas_domain::ports::StoredPieces,
    ) -> atlas_domain::Result<Receipt> {
        self.inner.restore_pieces(key, pieces).await
    }
    async fn reserve_ids(&self, count: u64) -> atlas_domain::Result<MemoryId> {
        self.inner.reserve_ids(count).await
    }
    async fn export_cycles(&self) -> atlas_domain::Result<Vec<atlas_domain::ports::CycleRecord>> {
        self.inner.export_cycles().await
    }
    async fn restore_cycles(&self, cycles: Vec<atlas_domain::ports::CycleRecord>) -> atlas_domain::Result<()> {
        self.inner.restore_cycles(cycles).await
    }
}

async fn filled_sqlite(dir: &std::path::Path, embedder: Arc<dyn Embedder>) -> Parts {
    let store = Arc::new(SqliteStore::open(&dir.join("source.db"), &SqliteOptions::default()).unwrap());
    let atlas =
        Atlas::from_parts(Parts::from_store(Arc::clone(&store), Some(Arc::clone(&embedder))), Config::default())
            .await
            .unwrap();
    let batch: Vec<(String, NewMemory)> = (0..95)
        .map(|i| {
            let scope = Scope { session: Some(format!("s{}", i % 4)), ..Scope::default() };
            let text = format!("turn {i} about {} and {}", ["boats", "trains", "maps", "tea"][i % 4], i * 7);
            (
                format!("line {i}"),
                NewMemory::episode(text, scope, Some("Ana".into()), Timestamp(i as i64), Timestamp(i as i64)),
            )
        })
        .collect();
    atlas.import(batch, None).await.unwrap();
    // The turn after a forgotten one loses the vector embedded with its text; re-embed it.
    atlas.forget_hard(MemoryId(10)).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    drop(atlas);
    Parts::from_store(store, Some(embedder))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_copy_resumes_from_its_checkpoint_and_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(32));
    let source = filled_sqlite(dir.path(), Arc::clone(&embedder)).await;
    let before = source.store.stats().await.unwrap();
    let fake = Arc::new(FakeStore::new());
    let flaky = Arc::new(Flaky { inner: Arc::clone(&fake), restores: AtomicUsize::new(0), fail_at: 4 });
    let mut target = Parts::from_store(Arc::clone(&fake), Some(Arc::clone(&embedder)));
    target.replica = flaky.clone();
    let checkpoint = dir.path().join("copy.checkpoint");
    let options = CopyOptions {
        batch: 10,
        checkpoint: Some(checkpoint.clone()),
        source_name: "source.db".into(),
        target_name: "fake".into(),
    };

    let err = copy(&source, &target, &options, &|_| {}).await.unwrap_err();
    assert!(err.to_string().contains("connection reset"), "{err}");
    let saved = Checkpoint::load(&checkpoint).unwrap().unwrap();
    assert_eq!((saved.copied, saved.last_id), (30, 31), "three batches landed (id 10 was forgotten)");

    let outcome = copy(&source, &target, &options, &|_| {}).await.unwrap();
    assert_eq!(outcome.resumed_after, Some(31));
    assert_eq!(outcome.copied, 94);
    assert_eq!(flaky.restores.load(Ordering::SeqCst), 4 + 7, "the rerun restored only what was left");

    let report = verify(&source, &target, &RecallConfig::default(), 20).await.unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!((report.memories_source, report.memories_target), (94, 94));
    assert_eq!(report.vectors_compared, 20);
    assert_eq!(report.max_vector_diff, 0.0);
    assert!(report.recall_used_vectors);
    // One text pipeline and one BM25 on both stores, the same vectors: the same top 10.
    assert_eq!(report.top10_overlap, 1.0, "{report:?}");
    assert_eq!(source.store.stats().await.unwrap(), before, "the source is never changed");

    // A full rerun (no checkpoint) updates rather than duplicates.
    let again = CopyOptions { checkpoint: None, ..options.clone() };
    copy(&source, &target, &again, &|_| {}).await.unwrap();
    assert_eq!(fake.stats().await.unwrap().memories(), 94);

    // A checkpoint of another pair of stores is refused, not silently applied.
    let other = CopyOptions { target_name: "elsewhere".into(), ..options };
    let err = copy(&source, &target, &other, &|_| {}).await.unwrap_err().to_string();
    assert!(err.contains("copy.checkpoint") && err.contains("fake"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_catches_a_missing_memory_and_a_changed_vector() {
    let dir = tempfile::tempdir().unwrap();
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(32));
    let source = filled_sqlite(dir.path(), Arc::clone(&embedder)).await;
    let fake = Arc::new(FakeStore::new());
    let target = Parts::from_store(Arc::clone(&fake), Some(Arc::clone(&embedder)));
    let options = CopyOptions { batch: 50, checkpoint: None, source_name: "a".into(), target_name: "b".into() };
    copy(&source, &target, &options, &|_| {}).await.unwrap();
    let first = fake.export_batch(None, 1).await.unwrap().remove(0);
    let nudged: Vec<f32> = first.vector.clone().unwrap().iter().map(|x| x + 1e-3).collect();
    fake.restore(vec![StoredMemory { vector: Some(nudged), ..first }]).await.unwrap();
    // The last turn of its session: forgetting it changes no other record.
    fake.forget(MemoryId(95)).await.unwrap();
    let report = verify(&source, &target, &RecallConfig::default(), 94).await.unwrap();
    assert!(!report.ok);
    assert_eq!(report.memories_target, report.memories_source - 1);
    assert!(report.max_vector_diff > 5e-4 && report.records_differing == 1, "{report:?}");
}
