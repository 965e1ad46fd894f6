//! The embeddings endpoint adapter against a real socket: the port's conformance suite on a
//! test endpoint and on llama.cpp's server, batching, prefixes on the wire, and every fault an
//! endpoint has (each either survived by retrying or reported by name, never a wrong vector).

use atlas_domain::ports::Embedder;
use atlas_embed_http::{HttpEmbedder, HttpEmbedderOptions};
use atlas_test_servers::embeddings::{EmbeddingsServer, Fault};
use atlas_testing::{HashEmbedder, Prefixes, embedder_conformance};
use std::sync::Arc;
use std::time::Duration;

const DIMENSION: usize = 48;

fn endpoint() -> EmbeddingsServer {
    let hashing = HashEmbedder::new(DIMENSION);
    EmbeddingsServer::answering(Arc::new(move |text: &str| hashing.embed_one(text)))
}

/// The same vector, up to the rounding of scaling it to unit length again.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && atlas_testing::embedder::cosine(a, b) > 0.99999
}

/// Options for `server` with short waits, so that the retries of a test take milliseconds.
fn options(server: &EmbeddingsServer) -> HttpEmbedderOptions {
    let mut options = HttpEmbedderOptions::new(&server.url, "test-model");
    options.retry.backoff = Duration::from_millis(5);
    options.retry.max_wait = Duration::from_millis(50);
    options.timeout = Duration::from_secs(5);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_conforms_with_and_without_prefixes_and_learns_its_dimension() {
    let server = endpoint();
    let embedder = HttpEmbedder::connect(options(&server)).await.unwrap();
    assert_eq!(embedder.model().dimension, DIMENSION, "asked of the endpoint at start");
    assert!(embedder.model().name.starts_with("http:test-model@127.0.0.1:"), "{}", embedder.model().name);
    embedder_conformance(&embedder, Prefixes::None).await;

    let mut with_prefixes = options(&server);
    (with_prefixes.query_prefix, with_prefixes.document_prefix) = ("search_query: ".into(), "search_document: ".into());
    let embedder = HttpEmbedder::connect(with_prefixes).await.unwrap();
    embedder_conformance(&embedder, Prefixes::Different).await;
    embedder.embed_query("where does Frank live".into()).await.unwrap();
    embedder.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    let requests = server.requests();
    let last_two: Vec<&String> = requests.iter().rev().take(2).flatten().collect();
    assert_eq!(last_two, ["search_document: Frank lives in Vienna", "search_query: where does Frank live"]);
    let usage = embedder.usage();
    assert!(usage.calls > 0 && usage.texts > 0 && usage.tokens > 0 && usage.failures == 0, "{usage:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_go_in_batches_by_count_and_bytes_and_come_back_in_order() {
    let server = endpoint();
    let mut o = options(&server);
    (o.dimensions, o.batch_size, o.batch_bytes, o.concurrency) = (Some(DIMENSION), 7, 400, 3);
    let embedder = HttpEmbedder::connect(o).await.unwrap();
    let texts: Vec<String> = (0..100).map(|i| format!("memory number {i} {}", "word ".repeat(i % 13))).collect();
    let vectors = embedder.embed(texts.clone()).await.unwrap();
    let hashing = HashEmbedder::new(DIMENSION);
    for (text, vector) in texts.iter().zip(&vectors) {
        assert!(same(vector, &hashing.embed_one(text)), "the vector of {text:?}, in its place");
    }
    let requests = server.requests();
    assert!(requests.len() >= 100 / 7, "{} requests", requests.len());
    for r in &requests {
        let bytes: usize = r.iter().map(String::len).sum();
        assert!(r.len() <= 7 && (r.len() == 1 || bytes <= 400), "a request of {} texts, {bytes} bytes", r.len());
    }
    let sent: usize = requests.iter().map(Vec::len).sum();
    assert_eq!(sent, 100, "every text sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passing_faults_are_retried_and_lasting_ones_are_named() {
    let server = endpoint();
    let mut o = options(&server);
    o.dimensions = Some(DIMENSION);
    o.timeout = Duration::from_millis(300);
    o.retry.max_retries = 8;
    let embedder = HttpEmbedder::connect(o).await.unwrap();
    let hashing = HashEmbedder::new(DIMENSION);
    let faults = [
        Fault::Delay(Duration::from_secs(1)),
        Fault::Status(429, Some(0)),
        Fault::Status(500, None),
        Fault::Status(503, None),
        Fault::Reset,
        Fault::Truncated,
    ];
    let expected = faults.len() as u64;
    server.inject(faults);
    let vectors = embedder.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    assert!(
        vectors.len() == 1 && same(&vectors[0], &hashing.embed_one("Frank lives in Vienna")),
        "the right vector after every fault"
    );
    assert_eq!(server.faults_left(), 0);
    let usage = embedder.usage();
    assert_eq!((usage.retries, usage.failures), (expected, expected), "{usage:?}");

    // Well-formed answers that are not this space's vectors are refused at once, by name.
    server.inject([Fault::WrongDimension]);
    let err = embedder.embed(vec!["x".into()]).await.unwrap_err().to_string();
    assert!(err.contains(&format!("{} numbers", DIMENSION + 1)) && err.contains("reembed"), "{err}");

    // An outage past the retries fails the call, naming the endpoint; when it ends, calls work.
    server.set_down(true);
    let err = embedder.embed(vec!["y".into()]).await.unwrap_err().to_string();
    assert!(err.contains(&server.url) && err.contains("attempts"), "{err}");
    server.set_down(false);
    assert_eq!(embedder.embed(vec!["y".into()]).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_is_away_at_start_needs_the_dimension_stated() {
    let server = endpoint();
    server.set_down(true);
    let mut o = options(&server);
    o.retry.max_retries = 1;
    let err = HttpEmbedder::connect(o.clone()).await.err().expect("no dimension without the endpoint").to_string();
    assert!(err.contains("http.dimensions"), "{err}");
    o.dimensions = Some(DIMENSION);
    let embedder = HttpEmbedder::connect(o).await.expect("starts with the dimension stated");
    assert!(embedder.embed_query("q".into()).await.is_err(), "and fails calls while the endpoint is away");
}

/// llama.cpp's server given without `/v1` (`http://127.0.0.1:8080`): its own `/embeddings`
/// answers another shape; the `/v1` twin is tried once and kept, and where the base names a
/// route or a version already, the refusal is at once (no retries) and says what to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_without_v1_moves_to_the_v1_route_once_or_says_what_to_use() {
    let server = endpoint();
    let bare = server.url.trim_end_matches("/v1").to_owned();
    let mut o = options(&server);
    o.url = bare.clone();
    let embedder = HttpEmbedder::connect(o).await.expect("moves to /v1/embeddings at the first request");
    assert_eq!(embedder.model().dimension, DIMENSION);
    let vectors = embedder.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    assert!(same(&vectors[0], &HashEmbedder::new(DIMENSION).embed_one("Frank lives in Vienna")));
    assert_eq!(server.requests().len(), 3, "one native answer, then the /v1 twin for good");

    // The native route named outright: one request, refused at once, with the advice.
    let mut o = options(&server);
    (o.url, o.dimensions) = (format!("{bare}/embeddings"), Some(DIMENSION));
    let embedder = HttpEmbedder::connect(o).await.unwrap();
    let before = server.requests().len();
    let err = embedder.embed(vec!["x".into()]).await.unwrap_err().to_string();
    assert_eq!(server.requests().len(), before + 1, "a shape error is not retried: {err}");
    assert!(err.contains("llama.cpp's native route") && !err.contains("attempts"), "{err}");
    assert_eq!(err.matches("embedding error").count(), 1, "{err}");
}

/// Refused as too large, by a 400 or 413 or by a 500 that says so (llama.cpp's server), a
/// request is split and a long text shortened, without the retries a passing fault gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_as_too_large_is_split_and_a_long_text_shortened() {
    for status in [400, 500] {
        let server = endpoint();
        server.refuse_inputs_longer_than_with(100, status);
        let mut o = options(&server);
        o.dimensions = Some(DIMENSION);
        o.retry.backoff = Duration::from_secs(5);
        let embedder = HttpEmbedder::connect(o).await.unwrap();
        let long = "alpha beta gamma ".repeat(40);
        let texts = vec!["short one".to_owned(), long.clone(), "short two".to_owned()];
        let started = std::time::Instant::now();
        let vectors = embedder.embed(texts).await.unwrap();
        assert_eq!(embedder.usage().retries, 0, "{status}: a refusal is not retried as it was");
        assert!(started.elapsed() < Duration::from_secs(5), "{status}: no backoff was waited");
        let hashing = HashEmbedder::new(DIMENSION);
        assert!(same(&vectors[0], &hashing.embed_one("short one")));
        assert!(same(&vectors[2], &hashing.embed_one("short two")));
        let taken = server.requests().into_iter().flatten().find(|i| i.len() <= 100 && long.starts_with(i.as_str()));
        assert!(taken.is_some_and(|t| t.len() > 50), "{status}: the long text was embedded from its start");
    }
}

/// An endpoint that takes longer than the timeout for a whole batch (a CPU-bound server: every
/// text costs it time) gets the batch's halves, then theirs, and every text comes back in order.
/// Sending the same batch again would time out every time: llama.cpp's server on two cores with
/// 64 texts queued did, and kept computing the requests given up on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answered_too_slowly_is_sent_in_halves() {
    let server = endpoint();
    server.answer_slowly(Duration::from_millis(200));
    let mut o = options(&server);
    o.dimensions = Some(DIMENSION);
    o.timeout = Duration::from_millis(500);
    o.batch_size = 8;
    o.concurrency = 1;
    let embedder = HttpEmbedder::connect(o).await.unwrap();
    let texts: Vec<String> = (0..8).map(|i| format!("text number {i}")).collect();
    let vectors = embedder.embed(texts.clone()).await.unwrap();
    let hashing = HashEmbedder::new(DIMENSION);
    assert_eq!(vectors.len(), 8);
    for (text, vector) in texts.iter().zip(&vectors) {
        assert!(same(vector, &hashing.embed_one(text)), "{text}: not its vector, or out of order");
    }
    let sizes: Vec<usize> = server.requests().iter().map(Vec::len).collect();
    // 8 and 4 texts take 1.6 s and 0.8 s, past the timeout; 2 take 0.4 s.
    assert_eq!(sizes[..2], [8, 4], "{sizes:?}");
    assert!(sizes.iter().filter(|&&n| n <= 2).sum::<usize>() >= 8, "every text went in a request of two: {sizes:?}");
    assert!(embedder.usage().failures >= 3, "{:?}", embedder.usage());
}

/// The real llama.cpp server with `--embeddings` on the small model: the wire as a real server
/// speaks it, the dimension it reports, batching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpps_server_conforms() {
    let server = match atlas_test_servers::servers::embeddings_llama_server() {
        Ok(server) => server,
        Err(why) => {
            atlas_test_servers::servers::skipped("the llama.cpp embeddings test", &why);
            return;
        }
    };
    let mut o = HttpEmbedderOptions::new(&server.url, &server.model);
    o.batch_size = 4;
    // A 135M model on 2 shared cores: keep the longest edge text small and the wait long, so
    // that a busy machine (another llama-server in a parallel test) is not a failure.
    o.max_input_chars = 2_000;
    o.timeout = Duration::from_secs(120);
    let embedder = HttpEmbedder::connect(o).await.unwrap();
    assert!(embedder.model().dimension >= 64, "{:?}", embedder.model());
    embedder_conformance(&embedder, Prefixes::None).await;

    // Through the fault proxy: the same vectors after a 500, a reset and a cut answer.
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/v1").parse().unwrap();
    let proxy = EmbeddingsServer::proxy(addr);
    let mut o = options(&proxy);
    o.model = server.model.clone();
    o.timeout = Duration::from_secs(30);
    let through = HttpEmbedder::connect(o).await.unwrap();
    let direct = embedder.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    proxy.inject([Fault::Status(500, None), Fault::Reset, Fault::Truncated, Fault::Status(429, Some(0))]);
    let proxied = through.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    let similarity = atlas_testing::embedder::cosine(&direct[0], &proxied[0]);
    assert!(similarity > 0.999, "the same vector through the proxy: {similarity}");

    // The real server given without /v1: its native /embeddings answers another shape, and the
    // embedder moves to /v1/embeddings once.
    let mut o = HttpEmbedderOptions::new(server.url.trim_end_matches("/v1"), &server.model);
    o.timeout = Duration::from_secs(120);
    let bare = HttpEmbedder::connect(o).await.expect("a bare base of llama.cpp's server works");
    let moved = bare.embed(vec!["Frank lives in Vienna".into()]).await.unwrap();
    let similarity = atlas_testing::embedder::cosine(&direct[0], &moved[0]);
    assert!(similarity > 0.999, "the same vector from the bare base: {similarity}");
}
