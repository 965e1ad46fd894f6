//! The vector index's port on Qdrant: the model bound in the meta collection, the queue of
//! memories to embed (claimed on the points), dense vectors stored and nearest-neighbour search
//! pushed down to the server.

use crate::collection::dense_vector_name;
use crate::decode::memory_id;
use crate::payload::point_id;
use crate::{QdrantStore, filter, meta, now_nanos, queue};
use async_trait::async_trait;
use atlas_domain::ports::{EmbeddingModel, MEAN_VECTOR_SAMPLE, MemoryStore, ScoredId, VECTOR_CLAIM_MS, VectorIndex};
use atlas_domain::{AtlasError, Memory, MemoryId, RecallFilter, Result, Timestamp};
use qdrant_client::qdrant::{
    Filter, PointId, PointVectors, Query, QueryPointsBuilder, Sample, UpdatePointVectorsBuilder, Vector,
    VectorsSelector, vector_output,
};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

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
        queue::clear_set_aside(&self.collection).await?;
        meta::rebind_model(&self.meta, &model).await?;
        *self.mean.lock().await = None;
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

    async fn set_aside(&self, memories: Vec<(MemoryId, String)>, until: Timestamp) -> Result<()> {
        if memories.is_empty() || !self.collection.exists().await? {
            return Ok(());
        }
        queue::set_aside(&self.collection, &memories, until.millis()).await
    }

    async fn set_aside_vectors(&self, limit: usize) -> Result<(u64, Vec<(MemoryId, String)>)> {
        queue::set_aside_list(&self.collection, limit).await
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
        self.vector_writes.fetch_add(done.len() as u64, Ordering::Relaxed);
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

    async fn mean_vector(&self) -> Result<Option<Vec<f32>>> {
        let Some(model) = self.bound_model() else {
            return Ok(None);
        };
        // Memories and vectors this store wrote: restores and imports carry vectors too.
        let writes = self.vector_writes.load(Ordering::Relaxed) + self.writes.load(Ordering::Relaxed);
        // One estimate at a time; recalls meanwhile wait for it rather than each asking.
        let mut cached = self.mean.lock().await;
        if let Some(estimate) = cached.as_ref()
            && estimate.model == model
            && estimate.at.elapsed() < MEAN_VECTOR_MAX_AGE
            && (estimate.sampled >= MEAN_VECTOR_SAMPLE || estimate.writes == writes)
        {
            return Ok(estimate.mean.clone());
        }
        let (mean, sampled) = self.sampled_mean(&model).await?;
        *cached = Some(MeanEstimate { at: std::time::Instant::now(), writes, sampled, model, mean: mean.clone() });
        Ok(mean)
    }
}

/// The space's mean vector as estimated at `at`, from `sampled` vectors, when this store had
/// written `writes` vectors.
pub(crate) struct MeanEstimate {
    at: std::time::Instant,
    writes: u64,
    sampled: usize,
    model: EmbeddingModel,
    mean: Option<Vec<f32>>,
}

/// How long an estimate of the mean vector serves before it is sampled again: a space's mean
/// moves slowly (a new memory changes it by 1 / n of its difference), and sampling costs a
/// round trip with thousands of vectors. An exact mean (a space smaller than the sample) is
/// counted again after this store writes vectors, so that a small space's recall is the same on
/// every store.
const MEAN_VECTOR_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);

impl QdrantStore {
    /// The mean of a uniform random sample of [`MEAN_VECTOR_SAMPLE`] committed points' vectors,
    /// drawn by the server (all of them in a smaller space: then exact).
    async fn sampled_mean(&self, model: &EmbeddingModel) -> Result<(Option<Vec<f32>>, usize)> {
        if !self.collection.exists().await? {
            return Ok((None, 0));
        }
        let name = dense_vector_name(model);
        let committed = Filter { must_not: vec![filter::pending()], ..Default::default() };
        let request = QueryPointsBuilder::new(self.collection.name())
            .query(Query::new_sample(Sample::Random))
            .filter(committed)
            .limit(MEAN_VECTOR_SAMPLE as u64)
            .with_payload(false)
            .with_vectors(VectorsSelector::from(vec![name.clone()]));
        let points = self.collection.call("sample vectors", self.collection.client().query(request.build())).await?;
        let mut sum = vec![0.0f64; model.dimension];
        let mut n = 0usize;
        for p in points {
            if let Some(vector_output::Vector::Dense(d)) = p.vectors.as_ref().and_then(|v| v.get_vector_by_name(&name))
                && d.data.len() == sum.len()
            {
                for (acc, x) in sum.iter_mut().zip(&d.data) {
                    *acc += f64::from(*x);
                }
                n += 1;
            }
        }
        Ok(((n > 0).then(|| sum.into_iter().map(|x| (x / n as f64) as f32).collect()), n))
    }
}
