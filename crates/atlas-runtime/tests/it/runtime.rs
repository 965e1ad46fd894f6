//! The runtime's behaviour over fakes and the SQLite store: the hot path, background
//! embedding, degradation, filters, import errors and export.

use async_trait::async_trait;
use atlas_domain::policy::fusion::Signal;
use atlas_domain::ports::{Embedder, EmbeddingModel, ProgressFn};
use atlas_domain::{AtlasError, MemoryKind, Scope, Timestamp};
use atlas_runtime::config::EmbedderKind;
use atlas_runtime::{Atlas, Config, ImportOptions, Parts, RecallRequest, Remember};
use atlas_testing::{FakeStore, HashEmbedder};
use proptest::prelude::*;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Semaphore;

fn say(text: &str, session: &str) -> Remember {
    Remember {
        text: text.into(),
        speaker: Some("Ada".into()),
        scope: Scope { session: Some(session.into()), ..Scope::default() },
        ..Remember::default()
    }
}

async fn fake_atlas(embedder: Option<Arc<dyn Embedder>>) -> (Atlas, Arc<FakeStore>) {
    let store = Arc::new(FakeStore::new());
    let atlas = Atlas::from_parts(Parts::from_store(store.clone(), embedder), Config::default()).await.unwrap();
    (atlas, store)
}

fn query(q: &str, k: usize) -> RecallRequest {
    RecallRequest { query: q.into(), k, ..RecallRequest::default() }
}

/// An embedder that blocks on memories (not on queries) until the test opens its gate.
struct GatedEmbedder {
    inner: HashEmbedder,
    gate: Semaphore,
}

#[async_trait]
impl Embedder for GatedEmbedder {
    fn model(&self) -> EmbeddingModel {
        self.inner.model()
    }
    async fn embed(&self, texts: Vec<String>) -> atlas_domain::Result<Vec<Vec<f32>>> {
        let is_query = texts.len() == 1 && texts[0].starts_with("query:");
        let _permit = if is_query { None } else { Some(self.gate.acquire().await.unwrap()) };
        self.inner.embed(texts).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_commits_without_waiting_for_the_embedder() {
    let embedder = Arc::new(GatedEmbedder { inner: HashEmbedder::new(32), gate: Semaphore::new(0) });
    let (atlas, _store) = fake_atlas(Some(embedder.clone())).await;
    let id = atlas.remember(say("the launch moved to Thursday", "s1")).await.unwrap();
    assert!(atlas.get(id).await.unwrap().is_some(), "committed while the embedder is blocked");
    let stats = atlas.stats().await.unwrap().store;
    assert_eq!((stats.memories(), stats.vectors, stats.pending_vectors), (1, 0, 1));
    let recall = atlas.recall(query("query: launch thursday", 5)).await.unwrap();
    assert_eq!(recall.hits[0].memory.id, id, "full text finds it before its vector exists");
    let vector = recall.signals.iter().find(|s| s.signal == Signal::Vector).unwrap();
    assert!(vector.note.as_deref().unwrap_or("").contains("waiting for their vectors"), "{vector:?}");
    embedder.gate.add_permits(1000);
    atlas.flush_vectors(None).await.unwrap();
    let stats = atlas.stats().await.unwrap().store;
    assert_eq!((stats.vectors, stats.pending_vectors), (1, 0));
}

/// Counts its calls and the largest batch it was given; embeds as the hash embedder does.
struct CountingEmbedder {
    hash: HashEmbedder,
    calls: AtomicUsize,
    largest_batch: AtomicUsize,
}

#[async_trait]
impl Embedder for CountingEmbedder {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel { name: "counting".into(), dimension: self.hash.dimension }
    }

    async fn embed(&self, texts: Vec<String>) -> atlas_domain::Result<Vec<Vec<f32>>> {
        assert!(!texts.is_empty(), "an empty batch is never sent");
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.largest_batch.fetch_max(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|t| self.hash.embed_one(t)).collect())
    }
}

#[tokio::test]
async fn background_embeds_in_batches_of_the_configured_size() {
    let embedder = Arc::new(CountingEmbedder {
        hash: HashEmbedder::new(8),
        calls: AtomicUsize::new(0),
        largest_batch: AtomicUsize::new(0),
    });
    let store = Arc::new(FakeStore::new());
    let config = Config { embed_batch: 4, ..Config::default() };
    let atlas = Atlas::from_parts(Parts::from_store(store, Some(embedder.clone())), config).await.unwrap();
    let batch = (0..10)
        .map(|i| {
            (
                format!("t:{i}"),
                atlas_domain::NewMemory::episode(
                    format!("note {i}"),
                    Scope::default(),
                    None,
                    Timestamp(i),
                    Timestamp(i),
                ),
            )
        })
        .collect();
    atlas.import(batch, None).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    assert_eq!(embedder.calls.load(Ordering::SeqCst), 3, "10 memories in batches of at most 4");
    assert_eq!(embedder.largest_batch.load(Ordering::SeqCst), 4);
    assert_eq!(atlas.stats().await.unwrap().store.vectors, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_futures_are_send() {
    let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(8)))).await;
    let atlas = Arc::new(atlas);
    let a = atlas.clone();
    tokio::spawn(async move { a.remember(say("spawned", "s")).await.unwrap() }).await.unwrap();
    let a = atlas.clone();
    let recall = tokio::spawn(async move { a.recall(query("spawned", 1)).await.unwrap() }).await.unwrap();
    assert_eq!(recall.hits.len(), 1);
    assert!(recall.stages.text_ms >= 0.0 && recall.took_ms >= recall.stages.fusion_ms);
}

#[tokio::test]
async fn recall_without_an_embedder_runs_on_text_and_says_so() {
    let (atlas, _) = fake_atlas(None).await;
    let id = atlas.remember(say("Melanie painted a sunrise over the lake", "s")).await.unwrap();
    atlas.remember(say("unrelated chatter about taxes", "s")).await.unwrap();
    let recall = atlas.recall(query("What did Melanie paint?", 10)).await.unwrap();
    assert_eq!(recall.hits[0].memory.id, id);
    assert_eq!(recall.hits[0].rank(Signal::Text), Some(1));
    let skipped: Vec<_> = recall.skipped().collect();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].signal, Signal::Vector);
    assert!(skipped[0].note.as_deref().unwrap().contains("no embedder"));
}

#[tokio::test]
async fn recall_fuses_text_and_vector_ranks() {
    let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(64)))).await;
    for t in ["we adopted a grey cat named Pixel", "the cat food order is late", "quarterly revenue rose five percent"]
    {
        atlas.remember(say(t, "s")).await.unwrap();
    }
    atlas.flush_vectors(None).await.unwrap();
    let recall = atlas.recall(query("grey cat Pixel", 2)).await.unwrap();
    assert_eq!(recall.hits.len(), 2);
    assert_eq!(recall.hits[0].memory.text, "we adopted a grey cat named Pixel");
    let top = &recall.hits[0];
    assert!(top.rank(Signal::Text).is_some() && top.rank(Signal::Vector).is_some(), "both signals: {:?}", top.signals);
    let explained: f64 = recall.hits[0].signals.values().map(|s| s.contribution).sum();
    assert!((explained - recall.hits[0].score).abs() < 1e-12, "the explanation adds up to the score");
    assert!(recall.skipped().next().is_none());
    assert!(recall.hits[0].score > recall.hits[1].score);
}

#[tokio::test]
async fn as_of_recalls_what_was_valid_then() {
    let (atlas, _) = fake_atlas(None).await;
    let mut old =
        atlas_domain::NewMemory::episode("I prefer Python", Scope::default(), None, Timestamp(1_000), Timestamp(1_000));
    old.validity.valid_until = Some(Timestamp(5_000));
    let new = atlas_domain::NewMemory::episode(
        "I prefer Rust now",
        Scope::default(),
        None,
        Timestamp(5_000),
        Timestamp(5_000),
    );
    atlas.import(vec![("a".into(), old), ("b".into(), new)], None).await.unwrap();
    let texts = |r: atlas_runtime::Recall| r.hits.into_iter().map(|h| h.memory.text).collect::<Vec<_>>();
    assert_eq!(texts(atlas.recall(query("prefer", 10)).await.unwrap()), ["I prefer Rust now"]);
    let then = RecallRequest { as_of: Some(Timestamp(2_000)), ..query("prefer", 10) };
    assert_eq!(texts(atlas.recall(then).await.unwrap()), ["I prefer Python"]);
    let before = RecallRequest { as_of: Some(Timestamp(10)), ..query("prefer", 10) };
    assert!(atlas.recall(before).await.unwrap().hits.is_empty());
}

#[tokio::test]
async fn hostile_queries_and_limits_never_fail() {
    let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(16)))).await;
    atlas.remember(say("NEAR the \"quoted\" col:value (paren", "s")).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let long = "emoji 🎉 ".repeat(1500);
    for q in ["\"", "NEAR(", "a* -b :c ((", "🎉🎉", long.as_str(), "AND OR NOT"] {
        for k in [1, 10_000] {
            let r = atlas.recall(query(q, k)).await.unwrap();
            assert!(r.hits.len() <= k);
        }
    }
    let err = atlas.recall(query("   ", 5)).await.unwrap_err();
    assert!(matches!(err, AtlasError::InvalidInput { .. }), "{err}");
    // Limits that could only ever answer nothing are said to be wrong, not answered silently.
    let zero = atlas.recall(query("quoted", 0)).await.unwrap_err().to_string();
    assert!(zero.contains("field \"k\"") && zero.contains("at least 1"), "{zero}");
    let backwards =
        RecallRequest { since: Some(Timestamp(2_000)), until: Some(Timestamp(1_000)), ..query("quoted", 5) };
    let backwards = atlas.recall(backwards).await.unwrap_err().to_string();
    assert!(backwards.contains("field \"since\"") && backwards.contains("no memory can match"), "{backwards}");
    let nothing = RecallRequest { kinds: vec![MemoryKind::Strategy], ..query("quoted", 5) };
    assert!(atlas.recall(nothing).await.unwrap().hits.is_empty());
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]

    /// A recall in one scope never returns another scope's memory, whatever the data.
    #[test]
    fn recall_never_crosses_scopes(batch in proptest::collection::vec(atlas_testing::strategies::arb_new_memory(), 1..25),
                                   user in prop_oneof![Just("alice"), Just("bob")], pick in 0usize..25) {
        let rt = atlas_testing::runtime();
        rt.block_on(async {
            let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(16)))).await;
            let q = batch[pick % batch.len()].text.clone();
            atlas.import(batch.into_iter().enumerate().map(|(i, m)| (i.to_string(), m)).collect(), None).await.unwrap();
            let request = RecallRequest {
                scope: Scope { user: Some(user.into()), ..Scope::default() },
                as_of: Some(Timestamp::MAX),
                ..query(&q, 50)
            };
            for hit in atlas.recall(request).await.unwrap().hits {
                prop_assert_eq!(hit.memory.scope.user.as_deref(), Some(user));
            }
            Ok(())
        })?;
    }

    /// Whatever the data, the time window and the as-of time: every hit, whichever signal
    /// brought it (context included), lies in the window and was valid at the as-of time.
    #[test]
    fn recall_respects_time_and_validity(batch in proptest::collection::vec(atlas_testing::strategies::arb_new_memory(), 1..30),
                                         pick in 0usize..30,
                                         since in proptest::option::of(1_600_000_000_000i64..1_800_000_000_000),
                                         span in proptest::option::of(1i64..200_000_000_000),
                                         as_of in 1_600_000_000_000i64..1_900_000_000_000) {
        let rt = atlas_testing::runtime();
        rt.block_on(async {
            let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(16)))).await;
            let q = batch[pick % batch.len()].text.clone();
            atlas.import(batch.into_iter().enumerate().map(|(i, m)| (i.to_string(), m)).collect(), None).await.unwrap();
            let until = since.zip(span).map(|(s, d)| Timestamp(s + d));
            let request = RecallRequest {
                since: since.map(Timestamp),
                until,
                as_of: Some(Timestamp(as_of)),
                ..query(&q, 50)
            };
            let filter = atlas_domain::RecallFilter {
                since: since.map(Timestamp),
                until,
                valid_at: Some(Timestamp(as_of)),
                ..atlas_domain::RecallFilter::default()
            };
            for hit in atlas.recall(request).await.unwrap().hits {
                prop_assert!(filter.admits(&hit.memory), "{:?} outside {:?}", hit.memory, filter);
            }
            Ok(())
        })?;
    }
}

// --- the SQLite store behind the runtime: bad input and durability ---

/// SQLite without an embedder: these tests are about the store and input, not vectors.
fn sqlite_config(dir: &tempfile::TempDir) -> Config {
    Config { db: dir.path().join("atlas.db"), embedder: EmbedderKind::None, ..Config::default() }
}

fn write_file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
    path
}

async fn import_error(lines: &[u8]) -> (String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let atlas = Atlas::open(sqlite_config(&dir)).await.unwrap();
    atlas.remember(say("already stored before the bad import", "s")).await.unwrap();
    let path = write_file(&dir, "in.jsonl", lines);
    let err = atlas.import_file(&path, ImportOptions::default(), None).await.unwrap_err().to_string();
    (err, atlas.stats().await.unwrap().store.memories())
}

#[tokio::test]
async fn malformed_line_names_file_line_and_field_and_imports_nothing() {
    let (err, count) =
        import_error(b"{\"text\": \"fine\"}\n{\"text\": \"ok\", \"time\": \"noon\"}\n{\"text\": \"fine too\"}\n").await;
    assert!(err.contains("in.jsonl:2") && err.contains("field \"time\""), "{err}");
    assert_eq!(count, 1, "only what was stored before; nothing of the bad file");
    let (err, count) = import_error(b"{\"text\": \"fine\"}\n{\"text\": \"broken\"\n").await;
    assert!(err.contains("in.jsonl:2") && err.contains("not valid JSON"), "{err}");
    assert_eq!(count, 1);
}

#[tokio::test]
async fn invalid_utf8_empty_text_and_unknown_scope_are_clear_errors() {
    let (err, _) = import_error(b"{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n").await;
    assert!(err.contains("in.jsonl:2") && err.contains("UTF-8"), "{err}");
    let (err, _) = import_error(b"{\"text\": \"  \"}\n").await;
    assert!(err.contains("in.jsonl:1") && err.contains("field \"text\"") && err.contains("empty"), "{err}");
    let (err, count) = import_error(b"{\"text\": \"x\", \"scope\": {\"team\": \"red\"}}\n").await;
    assert!(err.contains("scope.team") && err.contains("unknown scope"), "{err}");
    assert_eq!(count, 1);
}

#[tokio::test]
async fn a_ten_megabyte_text_is_refused_by_the_limit() {
    let text = "a".repeat(10 * 1024 * 1024);
    let line = format!("{{\"text\": \"{text}\"}}\n");
    let (err, count) = import_error(line.as_bytes()).await;
    assert!(err.contains("in.jsonl:1") && err.contains("limit of 1048576 bytes (max_text_bytes)"), "{err}");
    assert_eq!(count, 1);
    let dir = tempfile::tempdir().unwrap();
    let atlas = Atlas::open(sqlite_config(&dir)).await.unwrap();
    let err = atlas.remember(Remember { text, ..Remember::default() }).await.unwrap_err().to_string();
    assert!(err.starts_with("remember: field \"text\""), "{err}");
}

#[tokio::test]
async fn a_missing_database_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { db: dir.path().join("no/such/dir/atlas.db"), ..Config::default() };
    let err = Atlas::open(config).await.err().expect("must fail").to_string();
    assert!(err.contains("no/such/dir") && err.contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_file_both_write_safely() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Atlas::open(sqlite_config(&dir)).await.unwrap());
    let b = Arc::new(Atlas::open(sqlite_config(&dir)).await.unwrap());
    let mut tasks = Vec::new();
    for (name, atlas) in [("a", a.clone()), ("b", b.clone())] {
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                atlas.remember(say(&format!("{name} turn {i}"), name)).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(a.stats().await.unwrap().store.memories(), 200);
    assert_eq!(b.stats().await.unwrap().store.edges, 198, "two sessions of 100 linked turns");
}

#[tokio::test]
async fn export_then_import_reproduces_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = Atlas::open(sqlite_config(&dir)).await.unwrap();
    let lines = "{\"text\": \"first\", \"session\": \"s\", \"speaker\": \"Ann\", \"time\": \"2024-01-01T10:00:00Z\", \"meta\": {\"dia_id\": \"D1:1\"}}\n\
                 {\"text\": \"a fact\", \"kind\": \"fact\", \"body\": {\"subject\": \"Ann\", \"predicate\": \"likes\", \"object\": \"tea\", \"confidence\": 0.5}, \"scope\": {\"user\": \"ann\"}}\n";
    let progress_seen = Arc::new(AtomicUsize::new(0));
    let seen = progress_seen.clone();
    let progress: ProgressFn = Arc::new(move |n| seen.store(n, Ordering::SeqCst));
    atlas
        .import_file(&write_file(&dir, "in.jsonl", lines.as_bytes()), ImportOptions::default(), Some(progress))
        .await
        .unwrap();
    assert_eq!(progress_seen.load(Ordering::SeqCst), 2);
    let mut exported = Vec::new();
    assert_eq!(atlas.export(&mut exported, false).await.unwrap(), 2);

    let dir2 = tempfile::tempdir().unwrap();
    let copy = Atlas::open(sqlite_config(&dir2)).await.unwrap();
    copy.import_file(&write_file(&dir2, "export.jsonl", &exported), ImportOptions::default(), None).await.unwrap();
    let mut again = Vec::new();
    copy.export(&mut again, false).await.unwrap();
    assert_eq!(String::from_utf8(again).unwrap(), String::from_utf8(exported).unwrap());
}

#[tokio::test]
async fn reopening_with_another_model_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let open = |dim: usize| {
        let config = sqlite_config(&dir);
        async move {
            let store = Arc::new(atlas_store_sqlite_open(&config));
            Atlas::from_parts(Parts::from_store(store, Some(Arc::new(HashEmbedder::new(dim)))), config).await
        }
    };
    drop(open(16).await.unwrap());
    let err = open(32).await.err().expect("must fail").to_string();
    assert!(
        err.contains("atlas-test-hash-16") && err.contains("atlas-test-hash-32") && err.contains("atlas reembed"),
        "{err}"
    );
}

fn atlas_store_sqlite_open(config: &Config) -> atlas_store_sqlite::SqliteStore {
    atlas_store_sqlite::SqliteStore::open(&config.db, &atlas_store_sqlite::SqliteOptions::default()).unwrap()
}

// --- the default embedded stack: SQLite + the ONNX embedder ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onnx_vectors_find_a_paraphrase_that_shares_no_words() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { db: dir.path().join("onnx.db"), embedder: EmbedderKind::Onnx, ..Config::default() };
    let atlas = Atlas::open(config).await.unwrap();
    let lines = "{\"text\": \"My daughter just started violin lessons.\"}\n\
                 {\"text\": \"The quarterly budget review moved to Friday.\"}\n\
                 {\"text\": \"We repainted the kitchen a pale green.\"}\n";
    atlas.import_file(&write_file(&dir, "in.jsonl", lines.as_bytes()), ImportOptions::default(), None).await.unwrap();
    // The background task may have embedded some already; this waits for the rest.
    atlas.flush_vectors(None).await.unwrap();
    let stats = atlas.stats().await.unwrap();
    assert_eq!((stats.store.vectors, stats.store.pending_vectors), (3, 0));
    assert_eq!(stats.store.embedding_model.unwrap().dimension, 384);
    let recall = atlas.recall(query("child music class", 1)).await.unwrap();
    assert_eq!(recall.hits[0].memory.text, "My daughter just started violin lessons.");
    assert_eq!(recall.hits[0].rank(Signal::Vector), Some(1));
    assert!(recall.skipped().next().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reembed_moves_a_store_to_the_configured_model() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { db: dir.path().join("switch.db"), embedder: EmbedderKind::Onnx, ..Config::default() };
    {
        let store = Arc::new(atlas_store_sqlite_open(&config));
        let old = Atlas::from_parts(Parts::from_store(store, Some(Arc::new(HashEmbedder::new(16)))), config.clone())
            .await
            .unwrap();
        for t in ["the ferry leaves at nine", "bring the blue umbrella", "call the plumber tomorrow"] {
            old.remember(say(t, "s")).await.unwrap();
        }
        old.flush_vectors(None).await.unwrap();
    }
    let err = Atlas::open(config.clone()).await.err().expect("another model").to_string();
    assert!(
        err.contains("atlas-test-hash-16")
            && err.contains("all-minilm-l6-v2-qint8-per-token")
            && err.contains("atlas reembed"),
        "{err}"
    );
    let seen = Arc::new(AtomicUsize::new(0));
    let progress = seen.clone();
    let done = Atlas::reembed(
        config.clone(),
        Some(Arc::new(move |done, total| {
            assert_eq!(total, 3);
            progress.store(done, Ordering::SeqCst);
        })),
    )
    .await
    .unwrap();
    assert_eq!((done, seen.load(Ordering::SeqCst)), (3, 3));
    let atlas = Atlas::open(config.clone()).await.unwrap();
    let stats = atlas.stats().await.unwrap().store;
    assert_eq!((stats.vectors, stats.pending_vectors), (3, 0));
    assert_eq!(Atlas::reembed(config, None).await.unwrap(), 0, "already done: nothing to resume");
}

/// A store embedded with a model of the manifest that is no longer the default keeps its
/// model when none is configured (an upgrade never forces `atlas reembed`), and refuses a
/// model configured otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_keeps_the_manifest_model_it_was_embedded_with_unless_another_is_configured() {
    use atlas_domain::ports::{EmbeddingModel, VectorIndex};
    let dir = tempfile::tempdir().unwrap();
    let config = Config { db: dir.path().join("older.db"), embedder: EmbedderKind::Onnx, ..Config::default() };
    let older = EmbeddingModel { name: "all-minilm-l6-v2-int8".into(), dimension: 384 };
    atlas_store_sqlite_open(&config).bind_model(older.clone()).await.unwrap();
    let atlas = Atlas::open(config.clone()).await.unwrap();
    assert_eq!(atlas.config().onnx.model.as_deref(), Some("all-minilm-l6-v2-int8"));
    let id = atlas.remember(say("the ferry leaves at nine", "s")).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let hits = atlas.recall(query("when does the boat depart", 1)).await.unwrap().hits;
    assert_eq!(hits[0].memory.id, id);
    assert_eq!(atlas.stats().await.unwrap().store.embedding_model, Some(older));
    drop(atlas);
    let mut configured = config.clone();
    configured.onnx.model = Some("all-minilm-l6-v2-qint8-per-token".into());
    let err = Atlas::open(configured).await.err().expect("another model configured").to_string();
    assert!(err.contains("all-minilm-l6-v2-int8") && err.contains("atlas reembed"), "{err}");
    // A new store takes the default.
    let fresh = Config { db: dir.path().join("new.db"), ..config };
    let atlas = Atlas::open(fresh).await.unwrap();
    atlas.remember(say("hello", "s")).await.unwrap();
    let model = atlas.stats().await.unwrap().store.embedding_model.unwrap();
    assert_eq!(model.name, "all-minilm-l6-v2-qint8-per-token");
}

#[tokio::test]
async fn replies_are_found_by_their_question_and_context_spreads_to_neighbours() {
    let (atlas, _) = fake_atlas(None).await;
    let before = atlas.remember(say("Guess where I went after work yesterday!", "s1")).await.unwrap();
    let question = atlas.remember(say("What did you think of the new pottery studio downtown?", "s1")).await.unwrap();
    let answer = atlas.remember(say("Honestly I loved it, the teacher was wonderful.", "s1")).await.unwrap();
    atlas.remember(say("unrelated: the printer is out of toner", "s2")).await.unwrap();
    let recall = atlas.recall(query("pottery studio", 5)).await.unwrap();
    let ids: Vec<_> = recall.hits.iter().map(|h| h.memory.id).collect();
    assert_eq!(ids[0], question, "{ids:?}");
    let hit = |id| recall.hits.iter().find(|h| h.memory.id == id).unwrap_or_else(|| panic!("{id} missing: {ids:?}"));
    assert!(hit(answer).rank(Signal::Text).is_some(), "the reply matches through the question it answers");
    assert!(hit(before).rank(Signal::Text).is_none(), "the turn before matches nothing itself");
    assert_eq!(hit(before).signals[&Signal::Context].rank, 1, "it is spread from the best hit");
    let off = Config {
        recall: atlas_runtime::config::RecallConfig { context_weight: 0.0, ..Default::default() },
        ..Config::default()
    };
    let store = Arc::new(FakeStore::new());
    let plain = Atlas::from_parts(Parts::from_store(store, None), off).await.unwrap();
    for text in ["Guess where I went after work yesterday!", "What did you think of the new pottery studio downtown?"] {
        plain.remember(say(text, "s1")).await.unwrap();
    }
    plain.remember(say("Honestly I loved it, the teacher was wonderful.", "s1")).await.unwrap();
    let found = plain.recall(query("pottery studio", 5)).await.unwrap().hits;
    assert_eq!(found.len(), 2, "without spreading: the question and its reply only");
}

/// A long message beside a hit is a memory of its own: it takes no share of the hit's score,
/// while the short reply on the other side still does.
#[tokio::test]
async fn context_spreads_to_turns_not_to_long_messages() {
    let (atlas, _) = fake_atlas(None).await;
    let long =
        format!("Here is everything about glazes. {}", "Glazes melt at high heat and coat the clay. ".repeat(15));
    let before = atlas.remember(say(&long, "s1")).await.unwrap();
    let question = atlas.remember(say("What did you think of the new pottery studio downtown?", "s1")).await.unwrap();
    let after = atlas.remember(say("Guess where I went after work yesterday!", "s1")).await.unwrap();
    atlas.remember(say("unrelated: the printer is out of toner", "s2")).await.unwrap();
    let recall = atlas.recall(query("pottery studio", 5)).await.unwrap();
    let ids: Vec<_> = recall.hits.iter().map(|h| h.memory.id).collect();
    assert_eq!(ids[0], question, "{ids:?}");
    let spread = recall.hits.iter().find(|h| h.memory.id == after).expect("the short turn after the hit");
    assert_eq!(spread.signals[&Signal::Context].rank, 1, "spread from the best hit");
    assert!(!ids.contains(&before), "the long message before it gets no share: {ids:?}");
}

/// Full text reads a long memory's match per turn of its length: the store's BM25 puts the long
/// answer that repeats the query's word first, recall puts the short turn about it first.
#[tokio::test]
async fn a_long_memory_is_matched_per_turn_of_its_length() {
    use atlas_domain::policy::long_text::{TURN_WORDS, per_turn, words};
    use atlas_domain::ports::TextIndex;
    let (atlas, store) = fake_atlas(None).await;
    let long = format!("The kiln log: {} {}", "kiln ".repeat(40), "and so on ".repeat(100));
    assert!(words(&long) > 3 * TURN_WORDS);
    let turn = atlas.remember(say("the kiln reached cone six", "s1")).await.unwrap();
    let answer = atlas.remember(say(&long, "s2")).await.unwrap();
    for t in ["the printer is out of toner", "lunch is at noon", "we moved the meeting"] {
        atlas.remember(say(t, "s3")).await.unwrap();
    }
    let filter = atlas_domain::RecallFilter::default();
    let raw = store.search_text(vec!["kiln".into()], filter, 10).await.unwrap();
    assert_eq!(raw[0].id, answer, "plain BM25 ranks the long answer first: {raw:?}");
    let recall = atlas.recall(query("kiln", 2)).await.unwrap();
    assert_eq!(recall.hits[0].memory.id, turn);
    let text = |id| recall.hits.iter().find(|h| h.memory.id == id).unwrap().signals[&Signal::Text];
    let bm25 = |id| raw.iter().find(|h| h.id == id).unwrap().score;
    assert_eq!(text(turn).raw, bm25(turn), "a turn keeps its score");
    assert_eq!(text(answer).raw, per_turn(bm25(answer), words(&long)));
    assert_eq!((text(turn).rank, text(answer).rank), (1, 2));
}

/// A long memory is found by words far past what the embedding model reads, and the hit says
/// which part matched: the wire quotes it (offsets in characters) and `context` quotes only it.
/// On the fake store and on SQLite (one stemmer for both: "craze" finds "crazed").
#[tokio::test]
async fn a_long_memory_is_found_past_its_opening_and_quotes_the_part_that_matched() {
    let (atlas, _) = fake_atlas(Some(Arc::new(HashEmbedder::new(16)))).await;
    long_memory_quotes_the_part_that_matched(atlas).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_long_memory_is_found_past_its_opening_and_quotes_the_part_that_matched() {
    let dir = tempfile::tempdir().unwrap();
    let config = sqlite_config(&dir);
    let store = Arc::new(atlas_store_sqlite_open(&config));
    let parts = Parts::from_store(store, Some(Arc::new(HashEmbedder::new(16))));
    long_memory_quotes_the_part_that_matched(Atlas::from_parts(parts, config).await.unwrap()).await;
}

async fn long_memory_quotes_the_part_that_matched(atlas: Atlas) {
    use atlas_domain::policy::long_text::{TURN_WORDS, words};
    let opening = "Über die Glasur: a long note on café pottery, ".repeat(20);
    let body = "the studio was quiet and the shelves were full of bowls ".repeat(60);
    let long = format!("{opening}{body}Later the Zanzibar glaze crazed in the second firing. {body}");
    assert!(words(&long[..long.find("Zanzibar").unwrap()]) > 8 * TURN_WORDS, "far past 256 tokens");
    let id = atlas.remember(say(&long, "s1")).await.unwrap();
    atlas.remember(say("the kiln reached cone six", "s2")).await.unwrap();
    atlas.remember(say("Zanzibar is an island", "s3")).await.unwrap();

    let recall = atlas.recall(query("why did the Zanzibar glaze craze?", 5)).await.unwrap();
    let hit = recall.hits.iter().find(|h| h.memory.id == id).expect("recalled");
    assert!(hit.signals.contains_key(&Signal::Text), "found by its words past the opening: {:?}", hit.signals);
    let passage = hit.passage.expect("a long memory says which part matched");
    assert!(passage.of(&long).contains("Zanzibar glaze crazed"), "{}", passage.of(&long));
    assert_eq!(words(passage.of(&long)), TURN_WORDS);
    let short = recall.hits.iter().find(|h| h.memory.text == "Zanzibar is an island").unwrap();
    assert_eq!(short.passage, None, "a turn matched whole");

    let wire = atlas_runtime::wire::recall_value(&recall, false);
    let line = wire["hits"].as_array().unwrap().iter().find(|h| h["id"] == id.0).unwrap();
    let (start, end) = (line["passage"]["start"].as_u64().unwrap(), line["passage"]["end"].as_u64().unwrap());
    let sliced: String = long.chars().skip(start as usize).take((end - start) as usize).collect();
    assert_eq!(sliced, line["passage"]["text"].as_str().unwrap(), "character offsets, past the umlauts");
    assert_eq!(sliced, passage.of(&long));

    let context = atlas.context("why did the Zanzibar glaze craze?", 4_000, Scope::default()).await.unwrap().text();
    assert!(context.contains(&format!("Ada: … {} …", passage.of(&long))), "{context}");
    assert!(!context.contains(&opening), "the rest of the long memory is not quoted");
}

#[tokio::test]
async fn context_never_crosses_the_filter() {
    let (atlas, _) = fake_atlas(None).await;
    let mut mine = say("the pottery studio opens on Monday", "s1");
    mine.scope.user = Some("ann".into());
    let mut theirs = say("great, I will bring clay", "s1");
    theirs.scope.user = Some("bob".into());
    atlas.remember(mine).await.unwrap();
    atlas.remember(theirs).await.unwrap();
    let request =
        RecallRequest { scope: Scope { user: Some("ann".into()), ..Scope::default() }, ..query("pottery", 5) };
    let hits = atlas.recall(request).await.unwrap().hits;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].memory.scope.user.as_deref(), Some("ann"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_recall_with_k_ten_thousand_and_beyond() {
    let dir = tempfile::tempdir().unwrap();
    let config = sqlite_config(&dir);
    let store = Arc::new(atlas_store_sqlite_open(&config));
    let atlas =
        Atlas::from_parts(Parts::from_store(store, Some(Arc::new(HashEmbedder::new(16)))), config).await.unwrap();
    let batch = (0..6_000)
        .map(|i| {
            let m = atlas_domain::NewMemory::episode(
                format!("shared word note {i}"),
                Scope::default(),
                None,
                Timestamp(i),
                Timestamp(i),
            );
            (i.to_string(), m)
        })
        .collect();
    atlas.import(batch, None).await.unwrap();
    let all = atlas.recall(query("shared word", 10_000)).await.unwrap();
    assert_eq!(all.hits.len(), 6_000, "every memory, without SQL parameter limits getting in the way");
    let err = atlas.recall(query("shared", 10_001)).await.unwrap_err().to_string();
    assert!(err.contains("10001") && err.contains("10000"), "{err}");
}

#[tokio::test]
async fn a_repeated_statement_takes_one_slot_and_names_its_copies_within_its_session() {
    let (atlas, _) = fake_atlas(None).await;
    // Said at the same moment, so that recency cannot tell them apart (a later restatement
    // would rightly win the tie).
    let at = |text: &str, session: &str| Remember { time: Some(Timestamp(1_000)), ..say(text, session) };
    let first = atlas.remember(at("I adopted a grey cat called Pixel last spring", "s1")).await.unwrap();
    let again = atlas.remember(at("I adopted a grey cat called Pixel last spring!", "s1")).await.unwrap();
    let other = atlas.remember(at("The cat clinic is on Elm Street", "s3")).await.unwrap();
    let recall = atlas.recall(query("grey cat Pixel", 2)).await.unwrap();
    let ids: Vec<_> = recall.hits.iter().map(|h| h.memory.id).collect();
    assert_eq!(ids, [first, other], "two slots, two different pieces of evidence");
    assert_eq!(recall.hits[0].duplicates, [again]);
    // Told in another session (or kept under another key of a store), the same words are a
    // memory the caller addressed apart: it keeps its own slot.
    let elsewhere = atlas.remember(at("I adopted a grey cat called Pixel last spring", "s2")).await.unwrap();
    let recall = atlas.recall(query("grey cat Pixel", 3)).await.unwrap();
    let ids: Vec<_> = recall.hits.iter().map(|h| h.memory.id).collect();
    assert!(ids.contains(&first) && ids.contains(&elsewhere), "{ids:?}");
    assert!(recall.hits.iter().all(|h| !h.duplicates.contains(&elsewhere)));
    let off = Config {
        recall: atlas_runtime::config::RecallConfig { duplicate_threshold: 1.1, ..Default::default() },
        ..Config::default()
    };
    let plain = Atlas::from_parts(Parts::from_store(Arc::new(FakeStore::new()), None), off).await.unwrap();
    for text in ["I adopted a grey cat called Pixel last spring", "I adopted a grey cat called Pixel last spring!"] {
        plain.remember(say(text, "s1")).await.unwrap();
    }
    let both = plain.recall(query("grey cat Pixel", 2)).await.unwrap().hits;
    assert!(both.len() == 2 && both.iter().all(|h| h.duplicates.is_empty()), "the threshold turns it off");
}

/// A standing instruction shares little with the requests it governs: it ranks below what
/// answers them, and recall lifts the best-ranked one to place 2 (policy::instructions), scored
/// between its neighbours and explained; the assistant's own advice is not lifted, nor is an
/// instruction when k leaves no room beside the best answer, nor for a question about what the
/// requester did.
#[tokio::test]
async fn the_standing_instruction_that_fits_a_request_best_comes_second() {
    const REQUEST: &str = "when is the grant deadline";
    let turns = [
        "The grant deadline is the first of May",
        "I moved the grant deadline review to Friday",
        "Greg checks the grant deadline budget tomorrow",
        "My grant deadline worries me a lot, the grant is big",
        "The grant deadline form needs two signatures",
    ];
    let advice = "Always keep a copy of every form when I ask about the grant deadline or the budget";
    let instruction = "Always format dates as Month Day, Year when I ask about a deadline of any kind or sort";
    // Every space gets the same times: with the clock's, recency told apart near-ties
    // differently from one space to the next on a loaded machine.
    let start = atlas_runtime::now().0 - 3_600_000;
    let at = |minute: i64| Some(Timestamp(start + minute * 60_000));
    let recall_with = |standing_instructions: bool, k: usize, said_by: Option<&'static str>, asked: &'static str| async move {
        let config = Config {
            recall: atlas_runtime::config::RecallConfig { standing_instructions, ..Default::default() },
            ..Config::default()
        };
        let atlas = Atlas::from_parts(Parts::from_store(Arc::new(FakeStore::new()), None), config).await.unwrap();
        let scope = Scope { agent: Some("Atlas".into()), ..Scope::default() };
        for (minute, t) in (0..).zip(turns) {
            atlas.remember(Remember { scope: scope.clone(), time: at(minute), ..say(t, "s1") }).await.unwrap();
        }
        let by = |speaker: &str, text: &str, minute: i64| Remember {
            speaker: Some(speaker.into()),
            scope: scope.clone(),
            time: at(minute),
            ..say(text, "s1")
        };
        atlas.remember(by("assistant", advice, 10)).await.unwrap();
        if let Some(speaker) = said_by {
            atlas.remember(by(speaker, instruction, 11)).await.unwrap();
        }
        atlas.recall(query(asked, k)).await.unwrap()
    };
    let place = |hits: &[atlas_runtime::Hit], text: &str| hits.iter().position(|h| h.memory.text == text);
    let plain = recall_with(false, 5, Some("Ada"), REQUEST).await.hits;
    assert!(place(&plain, instruction).is_none_or(|p| p > 1), "by its words alone it ranks lower: {plain:#?}");
    let recall = recall_with(true, 5, Some("Ada"), REQUEST).await;
    let hits = &recall.hits;
    assert_eq!(hits.len(), 5);
    assert_eq!(place(hits, instruction), Some(1), "{hits:#?}");
    assert_eq!(hits[0].memory.id, plain[0].memory.id, "the best answer keeps its place");
    let lifted = hits[1].signals[&Signal::Instruction];
    assert!(lifted.contribution > 0.0, "{lifted:?}");
    let explained: f64 = hits[1].signals.values().map(|s| s.contribution).sum();
    assert!((explained - hits[1].score).abs() < 1e-9, "the explanation adds up to the score");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "hits stay in score order");
    assert!(hits.iter().filter(|h| h.signals.contains_key(&Signal::Instruction)).count() == 1);
    assert!(recall.signals.iter().any(|r| r.signal == Signal::Instruction && r.used));
    // Nothing is lifted when the only instruction-like line is the agent's own, by role or by
    // the name its scope gives it.
    for agent in [None, Some("Atlas")] {
        let hits = recall_with(true, 5, agent, REQUEST).await.hits;
        assert!(hits.iter().all(|h| !h.signals.contains_key(&Signal::Instruction)), "{agent:?}: {hits:#?}");
        assert_eq!(hits[1].memory.id, plain[1].memory.id, "{agent:?}");
    }
    // A request for two memories gets the two best answers, not the instruction.
    let two = recall_with(true, 2, Some("Ada"), REQUEST).await.hits;
    assert_eq!(
        two.iter().map(|h| h.memory.id).collect::<Vec<_>>(),
        plain[..2].iter().map(|h| h.memory.id).collect::<Vec<_>>()
    );
    // A question about what the requester did is answered by that past: no instruction governs
    // it, so none is lifted.
    let asked = "when did I move the grant deadline review";
    let lifted = recall_with(true, 5, Some("Ada"), asked).await.hits;
    let unlifted = recall_with(false, 5, Some("Ada"), asked).await.hits;
    assert!(lifted.iter().all(|h| !h.signals.contains_key(&Signal::Instruction)), "{lifted:#?}");
    assert_eq!(
        lifted.iter().map(|h| h.memory.id).collect::<Vec<_>>(),
        unlifted.iter().map(|h| h.memory.id).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn recency_breaks_a_tie_for_the_newer_memory_as_of_the_recall_time() {
    let (atlas, _) = fake_atlas(None).await;
    let day = 86_400_000;
    let at = |text: &str, days: i64| Remember { time: Some(Timestamp(days * day)), ..say(text, &format!("s{days}")) };
    let old = atlas.remember(at("standup moved to ten", 1_000)).await.unwrap();
    let new = atlas.remember(at("standup moved to nine", 1_060)).await.unwrap();
    let as_of = |days: i64| RecallRequest { as_of: Some(Timestamp(days * day)), ..query("standup moved", 2) };
    let recall = atlas.recall(as_of(1_060)).await.unwrap();
    assert_eq!(recall.hits.iter().map(|h| h.memory.id).collect::<Vec<_>>(), [new, old]);
    let recency = recall.hits[0].signals[&Signal::Recency];
    assert_eq!(recency.rank, 1);
    assert!((recency.contribution - 0.1).abs() < 1e-9, "a memory from the recall's now gets the full weight");
    assert!(recall.hits[1].signals[&Signal::Recency].contribution < 0.03, "two half-lives older");
    // Before the newer one was said, only the older one exists at all.
    let then = atlas.recall(as_of(1_030)).await.unwrap();
    assert_eq!(then.hits.iter().map(|h| h.memory.id).collect::<Vec<_>>(), [old]);
}

/// Graph expansion walks typed edges (here restored ones: consolidation will write them) up to
/// the configured depth, follows cycles only once, and ignores links no longer valid.
#[tokio::test]
async fn graph_expansion_follows_valid_typed_edges_to_its_depth() {
    use atlas_domain::ports::{Replica, StoredMemory};
    use atlas_domain::{Edge, EdgeKind, MemoryId, NewMemory, Validity};
    let store = Arc::new(FakeStore::new());
    let memory = |id: i64, text: &str| {
        let scope = Scope { session: Some(format!("s{id}")), ..Scope::default() };
        NewMemory::episode(text, scope, None, Timestamp(1_000), Timestamp(1_000)).with_id(MemoryId(id))
    };
    let link = |src: i64, dst: i64, until: Option<i64>| Edge {
        src: MemoryId(src),
        dst: MemoryId(dst),
        kind: EdgeKind::Entity,
        weight: 1.0,
        validity: Validity { valid_from: Timestamp(0), valid_until: until.map(Timestamp) },
        recorded_at: Timestamp(0),
    };
    let batch = vec![
        (memory(1, "the pottery studio downtown"), vec![]),
        (memory(2, "Ann runs it"), vec![link(2, 1, None)]),
        (memory(3, "she trained in Kyoto"), vec![link(3, 2, None), link(2, 3, None)]),
        (memory(4, "her teacher retired"), vec![link(4, 3, None)]),
        (memory(5, "an old partner"), vec![link(5, 1, Some(500))]),
    ];
    let stored: Vec<StoredMemory> = batch
        .into_iter()
        .map(|(memory, edges)| StoredMemory { memory, vector: None, edges, consolidated_at: None })
        .collect();
    store.restore(stored).await.unwrap();
    let atlas = Atlas::from_parts(Parts::from_store(store.clone(), None), Config::default()).await.unwrap();
    let recall = atlas.recall(query("pottery studio", 10)).await.unwrap();
    let graph: Vec<(MemoryId, usize)> =
        recall.hits.iter().filter_map(|h| h.signals.get(&Signal::Graph).map(|s| (h.memory.id, s.rank))).collect();
    let ids: Vec<MemoryId> = graph.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [MemoryId(2), MemoryId(3)], "one and two hops, the 2-3 cycle once: {graph:?}");
    let score = |id: i64| recall.hits.iter().find(|h| h.memory.id == MemoryId(id)).unwrap().score;
    assert!(score(2) > score(3), "a further hop gets less");
    let deep = Config {
        recall: atlas_runtime::config::RecallConfig { graph_depth: 3, ..Default::default() },
        ..Config::default()
    };
    let atlas = Atlas::from_parts(Parts::from_store(store, None), deep).await.unwrap();
    let hits = atlas.recall(query("pottery studio", 10)).await.unwrap().hits;
    let reached: Vec<MemoryId> =
        hits.iter().filter(|h| h.signals.contains_key(&Signal::Graph)).map(|h| h.memory.id).collect();
    assert_eq!(reached, [MemoryId(2), MemoryId(3), MemoryId(4)], "depth 3 reaches the third hop; never the ended link");
}
