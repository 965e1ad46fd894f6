//! A space embedded through an embeddings endpoint that fails: memories are written while it is
//! away, recall answers from full text and says why, and when the endpoint returns, through
//! every fault it injects, the background embedder drains the backlog with nothing lost.

use atlas_domain::policy::fusion::Signal;
use atlas_runtime::config::EmbedderKind;
use atlas_runtime::{Atlas, Config, RecallRequest, Remember};
use atlas_testing::HashEmbedder;
use atlas_testing::embeddings::{EmbeddingsServer, Fault};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIMENSION: usize = 32;

fn config(dir: &tempfile::TempDir, server: &EmbeddingsServer) -> Config {
    let mut config = Config { db: dir.path().join("atlas.db"), embedder: EmbedderKind::Http, ..Config::default() };
    config.http.url = Some(server.url.clone());
    config.http.model = Some("test-model".into());
    config.http.dimensions = Some(DIMENSION);
    config.http.timeout_ms = 500;
    config.http.max_retries = 3;
    config.http.batch_size = 4;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_written_while_the_endpoint_is_away_get_their_vectors_when_it_returns() {
    let hashing = HashEmbedder::new(DIMENSION);
    let server = EmbeddingsServer::answering(Arc::new(move |text: &str| hashing.embed_one(text)));
    server.set_down(true);
    let dir = tempfile::tempdir().unwrap();
    let atlas = Atlas::open(config(&dir, &server)).await.expect("opens while the endpoint is away");

    let texts: Vec<String> = (0..24)
        .map(|i| format!("note {i}: the {} project ships on day {i}", ["red", "blue", "green"][i % 3]))
        .collect();
    for text in &texts {
        atlas
            .remember(Remember { text: text.clone(), ..Remember::default() })
            .await
            .expect("the hot path never waits for the endpoint");
    }
    let recall = atlas.recall(RecallRequest { query: "blue project".into(), k: 5, ..RecallRequest::default() }).await;
    let recall = recall.expect("recall answers while the endpoint is away");
    assert!(!recall.hits.is_empty(), "from full text");
    let vector = recall.signals.iter().find(|s| s.signal == Signal::Vector).unwrap();
    assert!(!vector.used, "the vector signal is not used");
    let note = vector.note.clone().unwrap_or_default();
    // Why: the endpoint's failure, or its deadline passing while the client retried.
    let why = note.contains("embedder failed") || note.contains("no query vector within");
    assert!(why && note.contains("full text"), "and recall says why: {note}");
    assert_eq!(atlas.pending_vectors().await.unwrap(), 24, "every memory waits for its vector");

    // The endpoint returns, failing in every way on the way back.
    server.inject([
        Fault::Status(429, Some(0)),
        Fault::Status(500, None),
        Fault::Reset,
        Fault::Truncated,
        Fault::Delay(Duration::from_secs(2)),
        Fault::Status(503, None),
        Fault::WrongDimension,
    ]);
    server.set_down(false);
    let started = Instant::now();
    while atlas.pending_vectors().await.unwrap() > 0 {
        assert!(started.elapsed() < Duration::from_secs(120), "the backlog drains by itself once the endpoint is back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.faults_left(), 0, "every fault was met");
    let stats = atlas.stats().await.unwrap();
    assert_eq!(
        (stats.store.memories(), stats.store.vectors, stats.store.pending_vectors),
        (24, 24, 0),
        "nothing lost, nothing doubled"
    );
    let usage = stats.embedder_usage.expect("the endpoint's calls are counted");
    assert!(usage.failures >= 7 && usage.texts >= 24, "{usage:?}");

    // Each memory's vector is its own: a memory's exact text finds it first, the vector signal on.
    for text in texts.iter().step_by(5) {
        let recall =
            atlas.recall(RecallRequest { query: text.clone(), k: 1, ..RecallRequest::default() }).await.unwrap();
        let vector = recall.signals.iter().find(|s| s.signal == Signal::Vector).unwrap();
        assert!(vector.used && vector.note.is_none(), "{vector:?}");
        assert_eq!(recall.hits[0].memory.text, *text);
        assert!(recall.hits[0].signals.contains_key(&Signal::Vector), "found by its vector too");
    }
}
