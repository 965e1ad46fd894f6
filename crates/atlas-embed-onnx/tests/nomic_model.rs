//! The retrieval model, nomic-embed-text-v1.5: the graph models/export_nomic.py writes from the
//! GGUF file gives llama.cpp's own vectors of the same file, for documents and queries (each with
//! its prefix), and the built-in integer model stays close to them and conforms.

use atlas_domain::ports::Embedder;
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

/// The 20 golden sentences, and llama.cpp's vectors of each as a document and as a query
/// (fixtures/embeddings/make_nomic_reference.py).
fn sentences_and_reference() -> (Vec<String>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let texts: Vec<String> = lines("sentences.jsonl").iter().map(|s| s["text"].as_str().unwrap().to_owned()).collect();
    let reference = lines("nomic-reference.jsonl");
    let of = |prefix: &str| -> Vec<Vec<f32>> {
        reference
            .iter()
            .filter(|r| r["prefix"] == prefix)
            .map(|r| r["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
            .collect()
    };
    let (documents, queries) = (of("document"), of("query"));
    assert_eq!((documents.len(), queries.len()), (texts.len(), texts.len()));
    (texts, documents, queries)
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Each text's vector as a document and as a query, embedded one at a time.
fn both(embedder: &OnnxEmbedder, texts: &[String]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let documents = texts.iter().map(|t| embedder.embed_blocking(std::slice::from_ref(t)).unwrap().remove(0)).collect();
    let queries = texts.iter().map(|t| runtime.block_on(embedder.embed_query(t.clone())).unwrap()).collect();
    (documents, queries)
}

#[test]
fn the_float_model_gives_llama_cpps_vectors_with_both_prefixes() {
    let (texts, documents, queries) = sentences_and_reference();
    let embedder = load("nomic-embed-text-v1.5");
    let (ours, our_queries) = both(&embedder, &texts);
    for (i, text) in texts.iter().enumerate() {
        for (what, got, expected) in [("document", &ours[i], &documents[i]), ("query", &our_queries[i], &queries[i])] {
            assert_eq!(got.len(), 768);
            let similarity = cos(got, expected);
            // Measured: 0.999999 at worst (llama.cpp multiplies the F16 weights in F16).
            assert!(similarity > 0.999, "{text:?} as a {what}: cosine {similarity} to llama.cpp's");
        }
    }
    // The prefixes matter: a query's vector is not its document's.
    assert!(cos(&our_queries[0], &ours[0]) < 0.99);
}

#[test]
fn the_nomic_model_is_close_to_the_float_one_and_conforms() {
    let (texts, documents, queries) = sentences_and_reference();
    let embedder = load("nomic");
    assert_eq!(embedder.model().name, "nomic-embed-text-v1.5-qint8-per-token");
    let (ours, our_queries) = both(&embedder, &texts);
    let similarities: Vec<f32> =
        ours.iter().zip(&documents).chain(our_queries.iter().zip(&queries)).map(|(v, r)| cos(v, r)).collect();
    let mean = similarities.iter().sum::<f32>() / similarities.len() as f32;
    let worst = similarities.iter().copied().fold(1f32, f32::min);
    // Measured on 200 real texts: 0.994 on average (models/manifest.toml); all-integer it was
    // 0.987. The bound catches a recipe or graph that breaks, not the last thousandth.
    assert!(mean >= 0.98 && worst >= 0.95, "cosine to the float model: mean {mean}, worst {worst}");
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(atlas_testing::embedder_conformance(&embedder, atlas_testing::Prefixes::Different));
}

/// `[onnx] dimensions`: a cut model's vectors are the full ones cut as the model card says (layer
/// norm, the first 256, unit length), queries too; the space records the cut width; a width the
/// model was not trained at, and any cut of a model not trained to be cut, are refused by name.
#[test]
fn a_matryoshka_width_cuts_the_full_vectors_and_others_are_refused() {
    let (texts, _, _) = sentences_and_reference();
    let full = load("nomic");
    let cut = OnnxEmbedder::load(&OnnxOptions {
        model: "nomic".into(),
        threads: 2,
        dimensions: Some(256),
        ..OnnxOptions::default()
    })
    .unwrap();
    assert_eq!((cut.model().name.as_str(), cut.model().dimension), ("nomic-embed-text-v1.5-qint8-per-token", 256));
    let (documents, queries) = both(&full, &texts[..4]);
    let (cut_documents, cut_queries) = both(&cut, &texts[..4]);
    for (whole, part) in documents.iter().chain(&queries).zip(cut_documents.iter().chain(&cut_queries)) {
        assert_eq!(part.len(), 256);
        let expected = atlas_embed_onnx::pooling::matryoshka_cut(whole, 256);
        assert!(cos(part, &expected) > 0.9999, "cosine {} to the full vector's cut", cos(part, &expected));
    }
    let refused = |model: &str, width: usize| {
        OnnxEmbedder::load(&OnnxOptions { model: model.into(), dimensions: Some(width), ..OnnxOptions::default() })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let odd = refused("nomic", 300);
    assert!(odd.contains("dimensions = 300") && odd.contains("768, 512, 256, 128, 64"), "{odd}");
    let minilm = refused("all-minilm-l6-v2-qint8-per-token", 256);
    assert!(minilm.contains("not trained to be cut") && minilm.contains("384"), "{minilm}");
}
