//! A deterministic embedder for tests: hashed bag of words, unit length, no model files.

use async_trait::async_trait;
use atlas_domain::Result;
use atlas_domain::ports::{Embedder, EmbeddingModel};

/// Maps each word to a signed slot by FNV-1a hash and normalises the sum, so texts that share
/// words have positive cosine similarity and identical texts have similarity 1.
#[derive(Debug, Clone)]
pub struct HashEmbedder {
    pub dimension: usize,
}

impl HashEmbedder {
    pub fn new(dimension: usize) -> Self {
        assert!(dimension > 0);
        HashEmbedder { dimension }
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimension];
        for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            let h = fnv1a(word.to_lowercase().as_bytes());
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[(h % self.dimension as u64) as usize] += sign;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 {
            v[0] = 1.0;
        } else {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn model(&self) -> EmbeddingModel {
        EmbeddingModel { name: format!("atlas-test-hash-{}", self.dimension), dimension: self.dimension }
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

pub use atlas_domain::policy::embedding::cosine;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_words_make_similar_vectors() {
        let e = HashEmbedder::new(64);
        let cat = e.embed_one("the cat sat on the mat");
        assert!((cosine(&cat, &cat) - 1.0).abs() < 1e-5);
        assert!(cosine(&cat, &e.embed_one("a cat on a mat")) > cosine(&cat, &e.embed_one("quarterly revenue rose")));
    }
}
