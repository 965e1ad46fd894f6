//! A model folder of one's own, made here from the built-in MiniLM's files: mean pooling gives
//! the built-in vectors, first-token pooling and prefixes change them as configured, and the
//! space-facing identity follows what changes vectors.

use super::{cos, embedder};
use atlas_domain::ports::Embedder;
use atlas_embed_onnx::{OnnxEmbedder, OnnxOptions, assets, manifest::Manifest};
use std::path::Path;

/// The built-in model's files in a folder laid out as sentence-transformers exports one
/// (`onnx/model.onnx`), with `extra` files beside them.
fn folder_of_the_builtin_model(extra: &[(&str, &str)]) -> tempfile::TempDir {
    let manifest = Manifest::builtin().unwrap();
    let spec = manifest.default_model();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("onnx")).unwrap();
    std::fs::copy(assets::model_file(spec, "model.onnx", None).unwrap(), dir.path().join("onnx/model.onnx")).unwrap();
    std::fs::copy(assets::model_file(spec, "tokenizer.json", None).unwrap(), dir.path().join("tokenizer.json"))
        .unwrap();
    for (name, text) in extra {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn load(dir: &Path) -> OnnxEmbedder {
    OnnxEmbedder::load(&OnnxOptions { threads: 1, model_dir: Some(dir.to_path_buf()), ..OnnxOptions::default() })
        .expect("load the folder")
}

const MEAN: (&str, &str) =
    ("1_Pooling/config.json", r#"{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}"#);
const WINDOW: (&str, &str) = ("sentence_bert_config.json", r#"{"max_seq_length": 256, "do_lower_case": false}"#);

fn texts() -> Vec<String> {
    ["Priya is training for the Berlin half marathon", "", "a much longer memory about the weekly standup at work"]
        .map(String::from)
        .to_vec()
}

fn query(embedder: &OnnxEmbedder, text: &str) -> Vec<f32> {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(embedder.embed_query(text.to_owned())).unwrap()
}

#[test]
fn a_folder_with_mean_pooling_gives_the_builtin_vectors() {
    let dir = folder_of_the_builtin_model(&[MEAN, WINDOW]);
    let own = load(dir.path());
    assert_eq!(own.model().dimension, 384, "the dimension is read from the model");
    let name = dir.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(own.model().name.starts_with(&format!("{name}@")), "{}", own.model().name);
    let (ours, builtin) = (own.embed_blocking(&texts()).unwrap(), embedder().embed_blocking(&texts()).unwrap());
    for (a, b) in ours.iter().zip(&builtin) {
        assert!(cos(a, b) > 0.999_999, "cosine {}", cos(a, b));
    }
    assert!(cos(&query(&own, "half marathon"), &query(embedder(), "half marathon")) > 0.999_999);
}

#[test]
fn first_token_pooling_changes_the_vectors_and_the_identity() {
    let mean = load(folder_of_the_builtin_model(&[MEAN, WINDOW]).path());
    let cls = folder_of_the_builtin_model(&[("1_Pooling/config.json", r#"{"pooling_mode_cls_token": true}"#), WINDOW]);
    let cls = load(cls.path());
    let (a, b) = (mean.embed_blocking(&texts()).unwrap(), cls.embed_blocking(&texts()).unwrap());
    for (m, c) in a.iter().zip(&b) {
        let norm = c.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
        assert!(cos(m, c) < 0.99, "first-token pooling must differ from the mean: cosine {}", cos(m, c));
    }
    let hash = |e: &OnnxEmbedder| e.model().name.split('@').nth(1).unwrap().to_owned();
    assert_ne!(hash(&mean), hash(&cls), "another pooling is another model for a space");
}

#[test]
fn prefixes_go_before_queries_and_memories_as_configured() {
    let settings = "name = \"minilm-e5-style\"\nquery_prefix = \"query: \"\ndocument_prefix = \"passage: \"\n";
    let dir = folder_of_the_builtin_model(&[MEAN, WINDOW, ("atlas-model.toml", settings)]);
    let own = load(dir.path());
    assert!(own.model().name.starts_with("minilm-e5-style@"), "{}", own.model().name);
    let memory = own.embed_blocking(&["the standup moved to 10".to_owned()]).unwrap().remove(0);
    let expected = embedder().embed_blocking(&["passage: the standup moved to 10".to_owned()]).unwrap().remove(0);
    assert!(cos(&memory, &expected) > 0.999_999);
    let plain = embedder().embed_blocking(&["the standup moved to 10".to_owned()]).unwrap().remove(0);
    assert!(cos(&memory, &plain) < 0.999, "the document prefix must change the vector");
    assert!(cos(&query(&own, "when is the standup"), &query(embedder(), "query: when is the standup")) > 0.999_999);
}

#[test]
fn a_folder_that_is_not_there_or_not_a_model_is_named() {
    let options = |dir: &Path| OnnxOptions { model_dir: Some(dir.to_path_buf()), ..OnnxOptions::default() };
    let err = OnnxEmbedder::load(&options(Path::new("/nonexistent/models/bge"))).err().unwrap().to_string();
    assert!(err.contains("/nonexistent/models/bge") && err.contains("not a folder"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.onnx"), b"not a graph").unwrap();
    std::fs::copy(
        assets::model_file(Manifest::builtin().unwrap().default_model(), "tokenizer.json", None).unwrap(),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = OnnxEmbedder::load(&options(dir.path())).err().unwrap().to_string();
    assert!(err.contains("model.onnx") && err.contains("not a loadable ONNX model"), "{err}");
}

/// The port's conformance suite, on the built-in model and on a folder with prefixes.
#[test]
fn the_builtin_model_and_a_prefixed_folder_conform() {
    use atlas_testing::{Prefixes, embedder_conformance};
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(embedder_conformance(embedder(), Prefixes::None));
    let prefixes = ("atlas-model.toml", "query_prefix = \"query: \"\ndocument_prefix = \"passage: \"\n");
    let dir = folder_of_the_builtin_model(&[MEAN, WINDOW, prefixes]);
    runtime.block_on(embedder_conformance(&load(dir.path()), Prefixes::Different));
}
