//! Models are untrusted input (issue 69): a sleep cycle's model that answers beyond its schema is
//! refused and the space stays restorable; one memory the embedder refuses, or whose vector is
//! unusable, never holds up the others; an embedder that hangs costs a recall its deadline once.

use async_trait::async_trait;
use atlas_domain::policy::fusion::Signal;
use atlas_domain::ports::{Embedder, EmbeddingModel};
use atlas_domain::{AtlasError, Scope, Timestamp};
use atlas_runtime::config::{ConsolidationConfig, RecallConfig};
use atlas_runtime::{Atlas, Config, ImportOptions, Parts, RecallRequest, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::{FakeStore, HashEmbedder, ScriptedLlm};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DAY: i64 = 86_400_000;

async fn space(db: &Path, llm: Option<Arc<ScriptedLlm>>) -> Atlas {
    let store = Arc::new(SqliteStore::open(db, &SqliteOptions::default()).unwrap());
    let mut parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    if let Some(llm) = llm {
        parts = parts.with_llm(llm);
    }
    let config = Config {
        db: db.to_owned(),
        consolidation: ConsolidationConfig { retry_after_ms: 0, llm_calls: 4, ..ConsolidationConfig::default() },
        ..Config::default()
    };
    Atlas::from_parts(parts, config).await.unwrap()
}

fn said(text: &str, day: i64) -> Remember {
    Remember {
        text: text.into(),
        speaker: Some("Ann".into()),
        scope: Scope { user: Some("ann".into()), agent: None, session: Some(format!("day{day}")) },
        time: Some(Timestamp(day * DAY)),
        ..Remember::default()
    }
}

fn fact(subject: &str, object: &str) -> String {
    format!(r#"{{"turn": 1, "fact": "{subject} enjoys {object}"}}"#)
}

/// The high finding: a model's answer beyond its schema (a 300-character subject, a 3 MiB
/// object, 1,000 facts for one turn, a 3 MiB summary) is refused with the reason in the cycle's
/// report, the turns wait for the next cycle, and the space exports and imports back whole.
#[tokio::test]
async fn answers_beyond_their_schema_are_refused_and_the_space_restores_whole() {
    let dir = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..1000).map(|i| fact("Ann", &format!("tea number {i}"))).collect();
    let llm = Arc::new(ScriptedLlm::new(vec![
        Ok(format!(r#"{{"facts": [{}]}}"#, fact(&"S".repeat(300), "tea"))),
        Ok(format!(r#"{{"summary": "{}"}}"#, "long ".repeat(600_000))),
        Ok(format!(r#"{{"facts": [{}]}}"#, fact("Ann", &"o".repeat(3 << 20)))),
        Ok(format!(r#"{{"facts": [{}]}}"#, many.join(","))),
        Ok(format!(r#"{{"facts": [{}]}}"#, fact("Ann", "green tea"))),
    ]));
    let db = dir.path().join("atlas.db");
    let atlas = space(&db, Some(Arc::clone(&llm))).await;
    atlas.remember(said("I really enjoy a cup of green tea in the morning", 1)).await.unwrap();

    let first = atlas.consolidate_ending_sessions().await.unwrap();
    assert_eq!((first.failed, first.facts_added, first.answers_refused), (1, 0, 2), "{first:?}");
    assert!(first.refusals[0].contains("characters, more than the schema's 120"), "{:?}", first.refusals);
    assert!(first.refusals[1].contains("summary"), "{:?}", first.refusals);
    assert_eq!(first.summaries_added, 1, "the session is summarised without the model");
    let ledger = atlas.cycles(1).await.unwrap().remove(0);
    assert_eq!(ledger["answers_refused"], 2, "the ledger says so too: {ledger}");
    for why in ["more than the schema's 120", "1000 items, more than the schema's 3"] {
        let again = atlas.consolidate().await.unwrap();
        assert_eq!((again.failed, again.facts_added, again.answers_refused), (1, 0, 1), "{again:?}");
        assert!(again.refusals[0].contains(why), "{why}: {:?}", again.refusals);
    }
    let last = atlas.consolidate().await.unwrap();
    assert_eq!((last.failed, last.facts_added), (0, 1), "the turn was read once the model kept its schema");

    let backup = dir.path().join("full.jsonl");
    let exported = atlas.export_file(&backup, false).await.unwrap();
    let restored = space(&dir.path().join("new.db"), None).await;
    restored.import_file(&backup, ImportOptions::default(), None).await.expect("every line restores");
    let (before, after) = (atlas.stats().await.unwrap().store, restored.stats().await.unwrap().store);
    assert_eq!(before.memories_by_kind, after.memories_by_kind, "{exported} lines, all of them restored");
}

/// Refuses any batch holding a poisoned text (as an endpoint's content policy does), and
/// answers NaN for another (as a broken model file does).
struct Poisoned {
    hash: HashEmbedder,
}

#[async_trait]
impl Embedder for Poisoned {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel { name: "poisoned".into(), dimension: self.hash.dimension }
    }

    async fn embed(&self, texts: Vec<String>) -> atlas_domain::Result<Vec<Vec<f32>>> {
        if texts.iter().any(|t| t.contains("POISON")) {
            return Err(AtlasError::EmbeddingRefused("HTTP 400: content policy".into()));
        }
        Ok(texts
            .iter()
            .map(|t| if t.contains("NOT A NUMBER") { vec![f32::NAN; 8] } else { self.hash.embed_one(t) })
            .collect())
    }
}

async fn poisoned_space() -> Atlas {
    let store = Arc::new(FakeStore::new());
    let embedder: Arc<dyn Embedder> = Arc::new(Poisoned { hash: HashEmbedder::new(8) });
    let config = Config::default();
    Atlas::from_parts(Parts::from_store(store, Some(embedder)), config).await.unwrap()
}

#[tokio::test]
async fn one_poisoned_memory_never_blocks_the_others() {
    let atlas = poisoned_space().await;
    for i in 0..300 {
        let text = match i {
            17 => "this one is POISON to the endpoint".to_owned(),
            250 => "this one comes back NOT A NUMBER".to_owned(),
            _ => format!("note {i} about the launch"),
        };
        atlas.remember(Remember { text, ..Remember::default() }).await.unwrap();
    }
    atlas.flush_vectors(None).await.unwrap();
    let stats = atlas.stats().await.unwrap();
    assert_eq!((stats.store.vectors, stats.store.pending_vectors), (298, 2), "all but the two embedded");
    let (count, listed) = &stats.vector_failed;
    assert_eq!(*count, 2);
    assert!(listed[0].1.contains("content policy"), "{listed:?}");
    assert!(listed[1].1.contains("not a finite number"), "{listed:?}");
    // Set aside, they are not tried again at once: another drain has nothing to do.
    assert_eq!(atlas.flush_vectors(None).await.unwrap(), 0);
}

/// Accepts a query and never answers it, as a hung endpoint does.
struct Hung {
    hash: HashEmbedder,
}

#[async_trait]
impl Embedder for Hung {
    fn model(&self) -> EmbeddingModel {
        self.hash.model()
    }

    async fn embed(&self, texts: Vec<String>) -> atlas_domain::Result<Vec<Vec<f32>>> {
        self.hash.embed(texts).await
    }

    async fn embed_query(&self, _: String) -> atlas_domain::Result<Vec<f32>> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_hung_embedder_costs_a_recall_its_deadline_once_and_then_nothing() {
    let store = Arc::new(FakeStore::new());
    let embedder: Arc<dyn Embedder> = Arc::new(Hung { hash: HashEmbedder::new(8) });
    let config = Config {
        recall: RecallConfig { query_embedding_timeout_ms: 200, ..RecallConfig::default() },
        ..Config::default()
    };
    let atlas = Atlas::from_parts(Parts::from_store(store, Some(embedder)), config).await.unwrap();
    atlas.remember(Remember { text: "the launch moved to Thursday".into(), ..Remember::default() }).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let ask = || atlas.recall(RecallRequest { query: "launch".into(), k: 5, ..RecallRequest::default() });
    let started = Instant::now();
    let first = ask().await.unwrap();
    let first_took = started.elapsed();
    assert!(first_took >= Duration::from_millis(200), "the deadline was waited for");
    assert!(first_took < Duration::from_secs(5), "and no longer: {first_took:?}");
    assert_eq!(first.hits.len(), 1, "full text answers");
    let note = first.signals.iter().find(|s| s.signal == Signal::Vector).unwrap().note.clone().unwrap();
    assert!(note.contains("no query vector within 200 ms"), "{note}");
    let started = Instant::now();
    let second = ask().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(200), "the breaker answers at once: {:?}", started.elapsed());
    let note = second.signals.iter().find(|s| s.signal == Signal::Vector).unwrap().note.clone().unwrap();
    assert!(note.contains("failed 1 time in a row") && note.contains("full text"), "{note}");
}

/// An LLM endpoint whose key's variable is unset stops that endpoint, not the space: writes,
/// recalls and stats work, and the sleep cycle's model band waits, saying why.
#[tokio::test]
async fn an_unset_key_variable_stops_the_model_not_the_space() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        db: dir.path().join("atlas.db"),
        embedder: atlas_runtime::config::EmbedderKind::None,
        create: true,
        ..Config::default()
    };
    config.llm.endpoints.push(atlas_runtime::config::LlmEndpointConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "m".into(),
        api_key_env: Some("ATLAS_TEST_A_VARIABLE_NOBODY_SETS".into()),
        ..Default::default()
    });
    let atlas = Atlas::open(config).await.expect("opens without the key");
    atlas.remember(said("I really enjoy a cup of green tea in the morning", 1)).await.unwrap();
    assert_eq!(atlas.stats().await.unwrap().store.memories(), 1);
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.failed, report.llm_calls), (1, 1), "the turn waits for the model: {report:?}");
}
