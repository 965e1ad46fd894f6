//! The conformance suite of the `Embedder` port, run against every adapter (the hashing fake,
//! the built-in ONNX model, a model folder, an embeddings endpoint): what recall and the
//! background embedder rely on, whatever makes the vectors.

use atlas_domain::policy::embedding::cosine;
use atlas_domain::ports::Embedder;

/// Whether the adapter under test puts a prefix before queries or documents (then a query's
/// vector differs from the same text's as a document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefixes {
    None,
    Different,
}

/// How close two vectors of the same text must be, from separate calls or batches (an int8
/// model padded to a longer batch moves its vectors very slightly).
const SAME: f64 = 0.995;

fn assert_unit(vector: &[f32], dimension: usize, what: &str) {
    assert_eq!(vector.len(), dimension, "{what}: a vector of the model's dimension");
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-3, "{what}: unit length, got {norm}");
}

/// Every check, in order; panics naming the first that fails.
pub async fn embedder_conformance(embedder: &dyn Embedder, prefixes: Prefixes) {
    let dimension = embedder.model().dimension;
    assert!(dimension > 0, "the model states its dimension");
    assert!(!embedder.model().name.is_empty(), "the model has a name the space records");

    assert!(embedder.embed(Vec::new()).await.unwrap().is_empty(), "no texts, no vectors");

    let texts = [
        "Frank moved to Vienna last spring.",
        "The quarterly report is due on Friday.",
        "Priya is training for a half marathon.",
    ];
    let batch = embedder.embed(texts.iter().map(|t| t.to_string()).collect()).await.unwrap();
    assert_eq!(batch.len(), texts.len(), "one vector per text");
    for (i, v) in batch.iter().enumerate() {
        assert_unit(v, dimension, &format!("text {i}"));
    }

    // Order kept and batches independent: each text alone gives the vector it had in the batch.
    for (i, text) in texts.iter().enumerate() {
        let alone = embedder.embed(vec![text.to_string()]).await.unwrap().pop().unwrap();
        let similarity = cosine(&alone, &batch[i]);
        assert!(similarity > SAME, "text {i} alone and in a batch: cosine {similarity}");
    }
    let (a, b) = (cosine(&batch[0], &batch[1]), cosine(&batch[0], &batch[0]));
    assert!(a < b, "different texts differ ({a}) more than a text from itself ({b})");

    // The same text twice in one batch: the same vector twice.
    let twice = embedder.embed(vec![texts[0].to_string(), texts[0].to_string()]).await.unwrap();
    assert!(cosine(&twice[0], &twice[1]) > SAME, "the same text twice in a batch");

    // Edge texts still give usable vectors: empty, blank, very long, not English.
    let long = "memory ".repeat(20_000);
    let edges = vec![String::new(), "   ".to_owned(), long, "Ünïcødé — 日本語のテキスト 🙂".to_owned()];
    let vectors = embedder.embed(edges).await.unwrap();
    assert_eq!(vectors.len(), 4, "one vector per edge text");
    for (i, v) in vectors.iter().enumerate() {
        assert_unit(v, dimension, &format!("edge text {i}"));
    }

    // A query is embedded with the query prefix, a memory with the document prefix.
    let query = embedder.embed_query(texts[2].to_string()).await.unwrap();
    assert_unit(&query, dimension, "the query");
    let similarity = cosine(&query, &batch[2]);
    match prefixes {
        Prefixes::None => assert!(similarity > SAME, "without prefixes a query is a document: cosine {similarity}"),
        Prefixes::Different => {
            assert!(similarity < 0.9999, "with prefixes a query's vector differs from the document's: {similarity}");
            assert!(similarity > 0.2, "and still points the same way: {similarity}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_hashing_fake_conforms() {
        embedder_conformance(&crate::HashEmbedder::new(64), Prefixes::None).await;
    }
}
