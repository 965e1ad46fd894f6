//! The quality option, all-mpnet-base-v2: the graph models/export_mpnet.py writes without torch
//! gives transformers' own vectors, and its integer model stays close to them and conforms.

use atlas_embed_onnx::{OnnxEmbedder, OnnxOptions};
use std::path::Path;

fn load(model: &str) -> OnnxEmbedder {
    OnnxEmbedder::load(&OnnxOptions { model: model.into(), threads: 2, ..OnnxOptions::default() })
        .unwrap_or_else(|e| panic!("load {model}: {e}"))
}

fn lines(name: &str) -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/embeddings").join(name);
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The 20 golden sentences and transformers' vectors of them (fixtures/embeddings/
/// make_mpnet_reference.py: MPNetModel in torch, float32, mean pooling).
fn sentences_and_reference() -> (Vec<String>, Vec<Vec<f32>>) {
    let texts = lines("sentences.jsonl").iter().map(|s| s["text"].as_str().unwrap().to_owned()).collect();
    let reference = lines("mpnet-reference.jsonl")
        .iter()
        .map(|r| r["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect();
    (texts, reference)
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn the_float_model_gives_transformers_vectors() {
    let (texts, reference) = sentences_and_reference();
    let embedder = load("all-mpnet-base-v2");
    for (text, expected) in texts.iter().zip(&reference) {
        let vector = &embedder.embed_blocking(std::slice::from_ref(text)).unwrap()[0];
        assert_eq!(vector.len(), 768);
        let worst = vector.iter().zip(expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-4, "{text:?}: a component differs from transformers' by {worst}");
    }
}

#[test]
fn the_quality_model_is_close_to_the_float_one_and_conforms() {
    let (texts, reference) = sentences_and_reference();
    let embedder = load("quality");
    assert_eq!(atlas_domain::ports::Embedder::model(&embedder).name, "all-mpnet-base-v2-qint8-per-token");
    let vectors = embedder.embed_blocking(&texts).unwrap();
    let similarities: Vec<f32> = vectors.iter().zip(&reference).map(|(v, r)| cos(v, r)).collect();
    let mean = similarities.iter().sum::<f32>() / similarities.len() as f32;
    let worst = similarities.iter().copied().fold(1f32, f32::min);
    // Measured: 0.990 on average over these 20 (worst 0.958), 0.995 over 200 chat lines and
    // paragraphs (models/README.md), on a CPU with AVX-512 VNNI; 0.987 (worst 0.936) with the same
    // model file on one with AVX-512BW and no VNNI, where ONNX Runtime multiplies uint8 by int8
    // with another kernel (the same graph with uint8 weights gives 0.989 / 0.953 there). The
    // bound is below both: it catches a recipe that breaks on this model's activation outliers,
    // which falls far below (one scale per call: 0.69 on average, 0.36 at worst).
    assert!(mean >= 0.98 && worst >= 0.92, "cosine to the float model: mean {mean}, worst {worst}");
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(atlas_testing::embedder_conformance(&embedder, atlas_testing::Prefixes::None));
}
