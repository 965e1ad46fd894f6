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

/// Issue 69: with the endpoint away and no `http.dimensions`, a space that recorded its model's
/// dimension opens, stores and recalls from full text (only a new space asks the endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_that_recorded_its_dimension_opens_while_the_endpoint_is_away() {
    let hashing = HashEmbedder::new(DIMENSION);
    let server = EmbeddingsServer::answering(Arc::new(move |text: &str| hashing.embed_one(text)));
    let dir = tempfile::tempdir().unwrap();
    let mut asking = config(&dir, &server);
    asking.http.dimensions = None;
    {
        let atlas = Atlas::open(asking.clone()).await.expect("a new space asks the endpoint, which answers");
        atlas
            .remember(Remember { text: "the red project ships on Friday".into(), ..Remember::default() })
            .await
            .unwrap();
        atlas.flush_vectors(None).await.unwrap();
    }
    server.set_down(true);
    let atlas = Atlas::open(asking).await.expect("the space's record is enough");
    atlas.remember(Remember { text: "the blue project ships on Monday".into(), ..Remember::default() }).await.unwrap();
    let recall = atlas.recall(RecallRequest { query: "blue project".into(), k: 2, ..RecallRequest::default() });
    let recall = recall.await.unwrap();
    assert_eq!(recall.hits[0].memory.text, "the blue project ships on Monday", "from full text");
    let other = tempfile::tempdir().unwrap();
    let mut fresh = config(&other, &server);
    fresh.http.dimensions = None;
    let refused = Atlas::open(fresh).await.err().expect("a new space without a dimension must ask").to_string();
    assert!(
        refused.starts_with("embedding error: embeddings endpoint") && !refused.contains("error: embedding error"),
        "{refused}"
    );
    assert!(refused.contains("set http.dimensions"), "{refused}");
}

/// Issue 69: an endpoint that accepts and never answers costs a recall its query deadline, and
/// the embedding a recall does first (`catch_up`) its budget; after the first, the breaker answers
/// from full text at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_endpoint_costs_a_recall_its_deadline_once() {
    let hashing = HashEmbedder::new(DIMENSION);
    let server = EmbeddingsServer::answering(Arc::new(move |text: &str| hashing.embed_one(text)));
    server.answer_slowly(Duration::from_secs(30));
    let dir = tempfile::tempdir().unwrap();
    let mut hung = config(&dir, &server);
    hung.http.timeout_ms = 30_000;
    hung.embed_batch = 1_000;
    let atlas = Atlas::open(hung).await.unwrap();
    atlas.remember(Remember { text: "the launch moved to Thursday".into(), ..Remember::default() }).await.unwrap();
    let started = Instant::now();
    atlas.catch_up().await;
    assert!(started.elapsed() < Duration::from_secs(2), "catch-up keeps its budget: {:?}", started.elapsed());
    let ask = || atlas.recall(RecallRequest { query: "launch".into(), k: 3, ..RecallRequest::default() });
    let started = Instant::now();
    let first = ask().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the first recall waits its deadline only: {:?}",
        started.elapsed()
    );
    assert_eq!(first.hits.len(), 1);
    let started = Instant::now();
    let second = ask().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(400), "then none: {:?}", started.elapsed());
    let note = second.signals.iter().find(|s| s.signal == Signal::Vector).unwrap().note.clone().unwrap();
    assert!(note.contains("in a row") && note.contains("full text"), "{note}");
}

/// Issue 69: a credential in an endpoint's URL (user-info, a query value) or a key the server
/// echoes appears in no note, no error, and no file of the space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_secret_appears_in_no_output_and_no_file() {
    let hashing = HashEmbedder::new(DIMENSION);
    let server = EmbeddingsServer::answering(Arc::new(move |text: &str| hashing.embed_one(text)));
    server.set_down(true);
    let dir = tempfile::tempdir().unwrap();
    let mut secret = config(&dir, &server);
    let with_user = server.url.replacen("http://", "http://ann:hunter2pass@", 1);
    secret.http.url = Some(format!("{with_user}?api_key=qwertyapikey"));
    secret.http.api_key = Some(atlas_runtime::config::Secret("sk-verysecretbearertoken123".into()));
    secret.llm.endpoints.push(atlas_runtime::config::LlmEndpointConfig {
        url: "http://bob:llmpassword9@127.0.0.1:9/v1".into(),
        model: "m".into(),
        timeout_ms: 200,
        max_retries: 0,
        ..Default::default()
    });
    let atlas = Atlas::open(secret).await.unwrap();
    atlas.remember(Remember { text: "I moved to Lisbon in May".into(), ..Remember::default() }).await.unwrap();
    let recall =
        atlas.recall(RecallRequest { query: "Lisbon".into(), k: 3, ..RecallRequest::default() }).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    let mut shown = format!("{:?}\n{report:?}\n{:?}", recall.signals, atlas.cycles(5).await.unwrap());
    shown.push_str(&format!("{:?}", atlas.flush_vectors(None).await.err()));
    drop(atlas);
    let secrets = ["hunter2pass", "qwertyapikey", "sk-verysecretbearertoken123", "llmpassword9"];
    for secret in secrets {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let path = file.unwrap().path();
        let bytes = std::fs::read(&path).unwrap_or_default();
        for secret in secrets {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{secret} in {}", path.display());
        }
    }
}
