//! The vector index's port on Qdrant: the model bound in the meta collection, the queue of
//! memories to embed (claimed on the points), dense vectors stored and nearest-neighbour search
//! pushed down to the server.

use crate::collection::dense_vector_name;
use crate::decode::memory_id;
use crate::payload::point_id;
use crate::{QdrantStore, filter, meta, now_nanos, queue};
use async_trait::async_trait;
use atlas_domain::ports::{EmbeddingModel, MemoryStore, ScoredId, VECTOR_CLAIM_MS, VectorIndex};
use atlas_domain::{AtlasError, Memory, MemoryId, RecallFilter, Result};
use qdrant_client::qdrant::{Filter, PointId, PointVectors, QueryPointsBuilder, UpdatePointVectorsBuilder, Vector};
use std::collections::HashMap;

impl QdrantStore {
    /// Runs a nearest-neighbour query under `filter`, pushed down to the server.
    async fn search(&self, mut request: QueryPointsBuilder, filter: &RecallFilter) -> Result<Vec<ScoredId>> {
        request = request.filter(filter::to_qdrant(filter));
        let hits = self.collection.call("query", self.collection.client().query(request.build())).await?;
        hits.into_iter().map(|p| Ok(ScoredId { id: memory_id(p.id.as_ref())?, score: f64::from(p.score) })).collect()
    }
}

#[async_trait]
impl VectorIndex for QdrantStore {
    async fn bind_model(&self, model: EmbeddingModel) -> Result<()> {
        let bound = meta::bind_model(&self.meta, &model).await?;
        if bound != model {
            return Err(AtlasError::ModelMismatch {
                stored_model: bound.name,
                stored_dim: bound.dimension,
                configured_model: model.name,
                configured_dim: model.dimension,
            });
        }
        self.collection.ensure(Some(&model)).await?;
        *self.model.write().expect("model lock") = Some(model);
        Ok(())
    }

    async fn rebind_model(&self, model: EmbeddingModel) -> Result<u64> {
        let previous = self.bound_model();
        self.collection.ensure(None).await?;
        if let Some(old) = &previous
            && dense_vector_name(old) != dense_vector_name(&model)
        {
            self.collection.drop_dense(old).await?;
        }
        self.collection.ensure(Some(&model)).await?;
        queue::enqueue_matching(&self.collection, Filter::default()).await?;
        meta::rebind_model(&self.meta, &model).await?;
        *self.model.write().expect("model lock") = Some(model);
        self.queued_vectors().await
    }

    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>> {
        // The background embedder asks often, also in a process that never writes.
        self.recover_if_due().await;
        // Another process may claim the same candidates first: those it took are not candidates
        // the next time round, so this ends when something is held or nothing is left.
        loop {
            let now = (now_nanos() / 1_000_000) as i64;
            let ids = queue::candidates(&self.collection, &self.owner, now, limit).await?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let held = queue::claim(&self.collection, &ids, &self.owner, now, now + VECTOR_CLAIM_MS).await?;
            if !held.is_empty() {
                return self.get_many(held).await;
            }
        }
    }

    async fn queued_vectors(&self) -> Result<u64> {
        if !self.collection.exists().await? {
            return Ok(0);
        }
        let queued = Filter { must: vec![queue::queued()], must_not: vec![filter::pending()], ..Default::default() };
        self.collection.count(Some(queued)).await
    }

    async fn put_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<()> {
        let model = meta::model(&self.meta).await?.ok_or_else(|| {
            AtlasError::Storage("no embedding model is bound to this store; bind one before storing vectors".into())
        })?;
        if let Some(bound) = self.bound_model()
            && bound != model
        {
            // Another process re-embedded with another model since this one bound.
            return Err(AtlasError::ModelMismatch {
                stored_model: model.name,
                stored_dim: model.dimension,
                configured_model: bound.name,
                configured_dim: bound.dimension,
            });
        }
        if let Some((id, v)) = vectors.iter().find(|(_, v)| v.len() != model.dimension) {
            return Err(AtlasError::Embedding(format!(
                "vector for memory {id} has {} dimensions, the store's model {} has {}",
                v.len(),
                model.name,
                model.dimension
            )));
        }
        let ids: Vec<MemoryId> = vectors.iter().map(|(id, _)| *id).collect();
        // Only committed memories still there (one may have been forgotten meanwhile).
        let live: std::collections::HashSet<MemoryId> =
            self.fetch(&ids, false).await?.into_iter().map(|(m, _, _)| m.id).collect();
        let name = dense_vector_name(&model);
        let mut points = Vec::new();
        let mut done = Vec::new();
        for (id, v) in vectors {
            if live.contains(&id) {
                let mut named: HashMap<String, Vector> = HashMap::new();
                named.insert(name.clone(), Vector::new_dense(v));
                points.push(PointVectors { id: Some(PointId::from(point_id(id)?)), vectors: Some(named.into()) });
                done.push(id);
            }
        }
        for chunk in points.chunks(self.batch) {
            let request = UpdatePointVectorsBuilder::new(self.collection.name(), chunk.to_vec()).wait(true);
            self.collection.call("update vectors", self.collection.client().update_vectors(request.build())).await?;
        }
        queue::done(&self.collection, &done).await
    }

    async fn search_vector(&self, query: Vec<f32>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let Some(model) = self.bound_model() else {
            return Ok(Vec::new());
        };
        if query.len() != model.dimension {
            return Err(AtlasError::Embedding(format!(
                "query vector has {} dimensions, the store's model {} has {}",
                query.len(),
                model.name,
                model.dimension
            )));
        }
        if limit == 0 || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        let request = QueryPointsBuilder::new(self.collection.name())
            .query(qdrant_client::qdrant::Query::new_nearest(query))
            .using(dense_vector_name(&model))
            .limit(limit as u64)
            .with_payload(false);
        self.search(request, &filter).await
    }
}
