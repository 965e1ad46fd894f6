//! `[onnx] dimensions`: narrower vectors of a Matryoshka model, alone and beside another model, and
//! a space that reopens at the width it was embedded at.

use atlas_domain::Scope;
use atlas_domain::ports::{EmbeddingModel, VectorIndex};
use atlas_runtime::config::{EmbedderKind, OnnxConfig};
use atlas_runtime::{Atlas, Config, RecallRequest, Remember};

fn bound_store(config: &Config, model: &EmbeddingModel) -> impl std::future::Future<Output = ()> {
    let store =
        atlas_store_sqlite::SqliteStore::open(&config.db, &atlas_store_sqlite::SqliteOptions::default()).unwrap();
    let model = model.clone();
    async move { store.bind_model(model).await.unwrap() }
}

/// A space cut to 256 records 256 dimensions; reopened with no width configured it is cut at 256
/// again (alone and side by side with MiniLM, whose vectors stay whole), and a different width
/// configured is refused with what the space holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_reopens_at_the_matryoshka_width_it_was_embedded_at() {
    let dir = tempfile::tempdir().unwrap();
    let onnx = |model: &str, dimensions: Option<usize>| OnnxConfig {
        model: Some(model.into()),
        dimensions,
        ..OnnxConfig::default()
    };
    let config = Config {
        db: dir.path().join("cut.db"),
        embedder: EmbedderKind::Onnx,
        onnx: onnx("nomic", Some(256)),
        ..Config::default()
    };
    let atlas = Atlas::open(config.clone()).await.unwrap();
    let text = Remember {
        text: "the ferry leaves at nine".into(),
        speaker: Some("Ada".into()),
        scope: Scope::default(),
        ..Remember::default()
    };
    atlas.remember(text).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let recorded = atlas.stats().await.unwrap().store.embedding_model.unwrap();
    assert_eq!((recorded.name.as_str(), recorded.dimension), ("nomic-embed-text-v1.5-qint8-per-token", 256));
    drop(atlas);

    let unset = Config { onnx: onnx("nomic", None), ..config.clone() };
    let atlas = Atlas::open(unset).await.unwrap();
    assert_eq!(atlas.config().onnx.dimensions, Some(256));
    let hits = atlas.recall(RecallRequest { query: "when does the boat go".into(), k: 1, ..Default::default() });
    assert_eq!(hits.await.unwrap().hits.len(), 1);
    drop(atlas);

    let other = Config { onnx: onnx("nomic", Some(512)), ..config.clone() };
    let err = Atlas::open(other).await.err().expect("another width").to_string();
    assert!(err.contains("256") && err.contains("512") && err.contains("atlas reembed"), "{err}");

    let pair = "nomic-embed-text-v1.5-qint8-per-token+all-minilm-l6-v2-qint8-per-token";
    let joined = Config { db: dir.path().join("pair.db"), onnx: onnx(pair, None), ..config.clone() };
    bound_store(&joined, &EmbeddingModel { name: pair.into(), dimension: 256 + 384 }).await;
    let atlas = Atlas::open(joined).await.unwrap();
    assert_eq!(atlas.config().onnx.dimensions, Some(256));
    drop(atlas);

    let whole = Config {
        db: dir.path().join("minilm.db"),
        onnx: onnx("all-minilm-l6-v2-qint8-per-token", Some(256)),
        ..config
    };
    let err = Atlas::open(whole).await.err().expect("MiniLM is not Matryoshka").to_string();
    assert!(err.contains("dimensions = 256") && err.contains("not trained to be cut"), "{err}");
}
