//! The fake's full-text and vector search: the domain's BM25 over every live memory, and an
//! exact cosine scan.

use super::*;

#[async_trait]
impl TextIndex for FakeStore {
    /// The domain's BM25 ([`atlas_domain::policy::bm25`]) over every memory, computed without
    /// an index: the reference the conformance suite compares every store's text ranking with.
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let s = self.state.lock().unwrap();
        let (ids, docs): (Vec<MemoryId>, Vec<bm25::Document>) = s
            .memories
            .values()
            .map(|m| (m.id, bm25::Document::of(&m.text, m.body.speaker(), m.context.as_deref())))
            .unzip();
        let mut hits: Vec<ScoredId> = ids
            .iter()
            .zip(bm25::score_all(&docs, &terms))
            .filter(|(id, _)| filter.admits(&s.memories[id]))
            .filter_map(|(id, score)| score.map(|score| ScoredId { id: *id, score }))
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[async_trait]
impl VectorIndex for FakeStore {
    async fn bind_model(&self, model: EmbeddingModel) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        match &s.model {
            None => {
                s.model = Some(model);
                Ok(())
            }
            Some(bound) if *bound == model => Ok(()),
            Some(bound) => Err(AtlasError::ModelMismatch {
                stored_model: bound.name.clone(),
                stored_dim: bound.dimension,
                configured_model: model.name,
                configured_dim: model.dimension,
            }),
        }
    }

    async fn rebind_model(&self, model: EmbeddingModel) -> Result<u64> {
        let mut s = self.state.lock().unwrap();
        s.model = Some(model);
        s.vectors.clear();
        s.set_aside.clear();
        s.queue = s.memories.keys().copied().collect();
        Ok(s.queue.len() as u64)
    }

    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        let now = wall_clock_ms();
        let waiting = |id: &MemoryId| s.set_aside.get(id).is_some_and(|(_, until)| *until > now);
        Ok(s.queue.iter().filter(|id| !waiting(id)).take(limit).map(|id| s.memories[id].clone()).collect())
    }

    async fn set_aside(&self, memories: Vec<(MemoryId, String)>, until: Timestamp) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        for (id, why) in memories {
            if s.queue.contains(&id) {
                s.set_aside.insert(id, (why, until.millis()));
            }
        }
        Ok(())
    }

    async fn set_aside_vectors(&self, limit: usize) -> Result<(u64, Vec<(MemoryId, String)>)> {
        let s = self.state.lock().unwrap();
        // Only what is still queued: a memory deleted or given its vector since is not waiting.
        let aside: Vec<(MemoryId, String)> = s
            .set_aside
            .iter()
            .filter(|(id, _)| s.queue.contains(id))
            .map(|(id, (why, _))| (*id, why.clone()))
            .collect();
        Ok((aside.len() as u64, aside.into_iter().take(limit).collect()))
    }

    async fn queued_vectors(&self) -> Result<u64> {
        Ok(self.state.lock().unwrap().queue.len() as u64)
    }

    async fn put_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        let dim = s.model.as_ref().map(|m| m.dimension).ok_or_else(|| AtlasError::Storage("no model bound".into()))?;
        if let Some((id, v)) = vectors.iter().find(|(_, v)| v.len() != dim) {
            return Err(AtlasError::Embedding(format!(
                "vector for memory {id} has {} dimensions, expected {dim}",
                v.len()
            )));
        }
        for (id, v) in vectors {
            if s.memories.contains_key(&id) {
                s.queue.remove(&id);
                s.set_aside.remove(&id);
                s.vectors.insert(id, v);
            }
        }
        Ok(())
    }

    async fn mean_vector(&self) -> Result<Option<Vec<f32>>> {
        let s = self.state.lock().unwrap();
        let Some(dim) = s.vectors.values().next().map(Vec::len) else { return Ok(None) };
        let mut sum = vec![0.0f64; dim];
        for v in s.vectors.values() {
            for (acc, x) in sum.iter_mut().zip(v) {
                *acc += f64::from(*x);
            }
        }
        let n = s.vectors.len() as f64;
        Ok(Some(sum.into_iter().map(|x| (x / n) as f32).collect()))
    }

    async fn search_vector(&self, query: Vec<f32>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let s = self.state.lock().unwrap();
        if let Some(model) = &s.model
            && model.dimension != query.len()
        {
            return Err(AtlasError::Embedding(format!(
                "query vector has {} dimensions, expected {}",
                query.len(),
                model.dimension
            )));
        }
        let mut hits: Vec<ScoredId> = s
            .vectors
            .iter()
            .filter(|(id, _)| filter.admits(&s.memories[id]))
            .map(|(id, v)| ScoredId { id: *id, score: cosine(&query, v) })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }
}
