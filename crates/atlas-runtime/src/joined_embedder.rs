//! An embedder of several models at once, whose vectors a space keeps side by side as one
//! (`policy::embedding::joined`): `[onnx] model = "nomic+all-minilm-l6-v2-qint8-per-token"`.

use async_trait::async_trait;
use atlas_domain::policy::embedding::joined;
use atlas_domain::ports::{Embedder, EmbedderUsage, EmbeddingModel};
use atlas_domain::{AtlasError, Result};
use std::sync::Arc;

/// The members' vectors of each text, joined. Its model is the members' names joined by `+`
/// with the sum of their dimensions, so a space records what it was embedded with, and a space
/// of one member alone is another model.
pub struct JoinedEmbedder {
    members: Vec<Arc<dyn Embedder>>,
    /// Each member's model, read once: `join` checks every text's parts against them.
    models: Vec<EmbeddingModel>,
    model: EmbeddingModel,
}

impl JoinedEmbedder {
    pub fn new(members: Vec<Arc<dyn Embedder>>) -> Result<JoinedEmbedder> {
        if members.is_empty() {
            return Err(AtlasError::Config("a joined embedder needs at least one model".into()));
        }
        let models: Vec<EmbeddingModel> = members.iter().map(|m| m.model()).collect();
        let name = models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join("+");
        let dimension = models.iter().map(|m| m.dimension).sum();
        Ok(JoinedEmbedder { members, models, model: EmbeddingModel { name, dimension } })
    }

    /// Each member's vector of one text, in member order, checked for its length: a member that
    /// answers with another dimension would shift every later member's part.
    fn join(&self, parts: Vec<Vec<f32>>) -> Result<Vec<f32>> {
        for (model, part) in self.models.iter().zip(&parts) {
            if part.len() != model.dimension {
                return Err(AtlasError::Embedding(format!(
                    "{} returned a vector of {} dimensions, not {}",
                    model.name,
                    part.len(),
                    model.dimension
                )));
            }
        }
        Ok(joined(&parts))
    }
}

#[async_trait]
impl Embedder for JoinedEmbedder {
    fn model(&self) -> EmbeddingModel {
        self.model.clone()
    }

    fn usage(&self) -> EmbedderUsage {
        self.members.iter().map(|m| m.usage()).fold(EmbedderUsage::default(), |a, b| EmbedderUsage {
            calls: a.calls + b.calls,
            retries: a.retries + b.retries,
            failures: a.failures + b.failures,
            texts: a.texts + b.texts,
            tokens: a.tokens + b.tokens,
        })
    }

    /// One member after the other: background work, where the members would only take each
    /// other's cores.
    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let mut by_member = Vec::with_capacity(self.members.len());
        for (member, model) in self.members.iter().zip(&self.models) {
            let vectors = member.embed(texts.clone()).await?;
            if vectors.len() != texts.len() {
                return Err(AtlasError::Embedding(format!(
                    "{} returned {} vectors for {} texts",
                    model.name,
                    vectors.len(),
                    texts.len()
                )));
            }
            by_member.push(vectors.into_iter());
        }
        (0..texts.len()).map(|_| self.join(by_member.iter_mut().filter_map(Iterator::next).collect())).collect()
    }

    /// Every member at once: someone waits, and a short text leaves a model's threads idle.
    async fn embed_query(&self, text: String) -> Result<Vec<f32>> {
        let asked: Vec<_> = self
            .members
            .iter()
            .map(|member| {
                let (member, text) = (Arc::clone(member), text.clone());
                tokio::spawn(async move { member.embed_query(text).await })
            })
            .collect();
        let mut parts = Vec::with_capacity(asked.len());
        for answer in asked {
            parts.push(answer.await.map_err(|e| AtlasError::Embedding(format!("embedding task failed: {e}")))??);
        }
        self.join(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_testing::HashEmbedder;

    #[tokio::test]
    async fn a_joined_vector_holds_each_members_vector_in_turn() {
        let a: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(8));
        let b: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(4));
        let both = JoinedEmbedder::new(vec![Arc::clone(&a), Arc::clone(&b)]).unwrap();
        assert_eq!(both.model().dimension, 12);
        assert_eq!(both.model().name, format!("{}+{}", a.model().name, b.model().name));
        let texts = vec!["Ann moved to Lyon".to_owned(), "Bo plays the cello".to_owned()];
        let joined = both.embed(texts.clone()).await.unwrap();
        let (from_a, from_b) = (a.embed(texts.clone()).await.unwrap(), b.embed(texts.clone()).await.unwrap());
        let share = std::f32::consts::FRAC_1_SQRT_2;
        for ((v, x), y) in joined.iter().zip(&from_a).zip(&from_b) {
            assert!(v[..8].iter().zip(x).all(|(v, x)| (v - x * share).abs() < 1e-5));
            assert!(v[8..].iter().zip(y).all(|(v, y)| (v - y * share).abs() < 1e-5));
        }
        let query = both.embed_query(texts[0].clone()).await.unwrap();
        let expected = joined_query(&a, &b, &texts[0]).await;
        assert!(query.iter().zip(&expected).all(|(q, e)| (q - e).abs() < 1e-6));
    }

    async fn joined_query(a: &Arc<dyn Embedder>, b: &Arc<dyn Embedder>, text: &str) -> Vec<f32> {
        joined(&[a.embed_query(text.to_owned()).await.unwrap(), b.embed_query(text.to_owned()).await.unwrap()])
    }
}
