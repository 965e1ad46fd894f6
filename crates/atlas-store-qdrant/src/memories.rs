//! The memory store's port on Qdrant: inserts (plain and keyed, each one write of the ledger),
//! reads, updates and forgetting as whole points rewritten, the latest by event time, edges and
//! statistics.

use crate::collection::dense_vector_name;
use crate::decode::{Kept, decode};
use crate::{QdrantStore, SPACE_FORMAT, filter, ledger, meta, write};
use async_trait::async_trait;
use atlas_domain::ports::{MemoryStore, Pieces, ProgressFn, Receipt, Replica, StoreStats, Update, VectorIndex};
use atlas_domain::{Edge, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Timestamp};
use qdrant_client::qdrant::{Filter, ScrollPointsBuilder};
use std::collections::HashMap;

impl QdrantStore {
    async fn insert_keyed(
        &self,
        key: Option<String>,
        batch: Vec<NewMemory>,
        progress: Option<ProgressFn>,
    ) -> Result<Receipt> {
        // (Under a key, even an empty batch answers with the key's earlier receipt.)
        if batch.is_empty() && key.is_none() {
            return Ok(Receipt { ids: Vec::new(), replayed: false, recorded_at: Timestamp(ledger::now_ms()) });
        }
        let model = self.bound_model();
        self.collection.ensure(model.as_ref()).await?;
        let mut write = match self.begin(key.as_deref()).await? {
            ledger::Begun::Replayed(receipt) => return Ok(receipt),
            ledger::Begun::Write(write) => write,
        };
        let landed = self.land_new(&mut write, &batch, &[]).await.map(|(ids, memories)| {
            let effects = write::effects_of(&memories);
            write::Landed { ids, effects: (!effects.is_empty()).then_some(serde_json::Value::Object(effects)) }
        });
        let receipt = self.finish_write(write, landed).await?;
        if let Some(p) = progress {
            p(receipt.ids.len());
        }
        Ok(receipt)
    }
}

#[async_trait]
impl MemoryStore for QdrantStore {
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        Ok(self.insert_keyed(None, batch, progress).await?.ids)
    }

    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt> {
        self.insert_keyed(Some(key), batch, progress).await
    }

    async fn insert_pieces(
        &self,
        key: Option<String>,
        pieces: Pieces,
        progress: Option<ProgressFn>,
    ) -> Result<Receipt> {
        // A write on Qdrant is landed and revealed as one ledgered batch (ids taken together,
        // predecessors found within it, a collision retried whole), so the pieces are gathered
        // first: the parse is bounded, the batch is not (docs/ARCHITECTURE.md).
        if let Some(key) = &key
            && let Some(receipt) = ledger::committed_receipt(&self.meta, key).await?
        {
            return Ok(receipt);
        }
        let batch = atlas_domain::ports::gather(pieces)?;
        self.insert_keyed(key, batch, progress).await
    }

    async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
        Ok(self.get_many(vec![id]).await?.pop())
    }

    async fn get_many(&self, ids: Vec<MemoryId>) -> Result<Vec<Memory>> {
        Ok(self.fetch(&ids, false).await?.into_iter().map(|(m, _, _)| m).collect())
    }

    async fn forget(&self, id: MemoryId) -> Result<bool> {
        if self.fetch(&[id], false).await?.is_empty() {
            return Ok(false);
        }
        // The turns that answered it carry its text: rewrite them without it, and without the
        // dense vector embedded with it (an upsert replaces every vector), before it goes.
        let answers: Vec<MemoryId> = meta::edges_of(&self.meta, id)
            .await?
            .into_iter()
            .filter(|e| e.src == id && e.dst != id && e.kind == atlas_domain::EdgeKind::Temporal)
            .map(|e| e.dst)
            .collect();
        let mut rewritten = Vec::new();
        for (mut answer, _, kept) in self.fetch(&answers, false).await? {
            answer.context = None;
            rewritten.push(self.point(&answer, None, kept)?);
        }
        // Written without a vector, they are queued again.
        for chunk in rewritten.chunks(self.batch) {
            self.collection.upsert(chunk.to_vec()).await?;
        }
        self.collection.delete_points(&[id]).await?;
        self.vector_writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        meta::delete_edges_of(&self.meta, &[id]).await?;
        Ok(true)
    }

    async fn update(&self, updates: Vec<Update>) -> Result<u64> {
        // Qdrant replaces whole points: each is read with its vector, changed, and written back
        // in one upsert, after every change has been checked (all or nothing).
        let ids: Vec<MemoryId> = updates.iter().map(|u| u.id).collect();
        let mut found: HashMap<MemoryId, (Memory, Option<Vec<f32>>, Kept)> =
            self.fetch(&ids, true).await?.into_iter().map(|(m, v, k)| (m.id, (m, v, k))).collect();
        for u in &updates {
            if let Some((m, _, _)) = found.get(&u.id) {
                u.check_body(&m.body)?;
            }
        }
        let dense = self.bound_model().map(|m| dense_vector_name(&m));
        let mut points = Vec::new();
        for u in updates {
            let Some((mut m, vector, kept)) = found.remove(&u.id) else { continue };
            m.lifecycle = u.lifecycle;
            if let Some(body) = u.body {
                m.body = body;
            }
            points.push(self.point(&m, dense.as_deref().zip(vector), kept)?);
        }
        let n = points.len() as u64;
        for chunk in points.chunks(self.batch) {
            self.collection.upsert(chunk.to_vec()).await?;
        }
        Ok(n)
    }

    async fn scan(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<Memory>> {
        Ok(self.export_batch(after, limit).await?.into_iter().map(|s| s.memory).collect())
    }

    async fn latest(&self, filter: RecallFilter, limit: usize) -> Result<Vec<Memory>> {
        if limit == 0 || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        // Qdrant orders by the indexed event time; equal times are ordered by id here, so
        // a few more are read than asked for and the cut is made after sorting.
        let order = qdrant_client::qdrant::OrderByBuilder::new(crate::payload::field::EVENT_TIME)
            .direction(qdrant_client::qdrant::Direction::Desc as i32)
            .build();
        let request = ScrollPointsBuilder::new(self.collection.name())
            .filter(filter::to_qdrant(&filter))
            .order_by(order)
            .limit((limit * 2 + 8).min(u32::MAX as usize) as u32)
            .with_payload(true)
            .with_vectors(false);
        let points = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
        let mut found = points.into_iter().map(|p| decode(p, None).map(|(m, _, _)| m)).collect::<Result<Vec<_>>>()?;
        found.sort_by_key(|m| std::cmp::Reverse((m.event_time, m.id)));
        found.truncate(limit);
        Ok(found)
    }

    async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>> {
        meta::edges_of(&self.meta, id).await
    }

    async fn edges_of_many(&self, ids: Vec<MemoryId>) -> Result<HashMap<MemoryId, Vec<Edge>>> {
        meta::edges_of_many(&self.meta, &ids).await
    }

    async fn stats(&self) -> Result<StoreStats> {
        let mut stats = StoreStats {
            schema_version: Some(SPACE_FORMAT),
            embedding_model: meta::model(&self.meta).await?,
            ..StoreStats::default()
        };
        stats.edges = meta::count_edges(&self.meta).await?;
        if self.collection.exists().await? {
            for kind in MemoryKind::ALL {
                let n = self.collection.count(Some(filter::of_kind(kind))).await?;
                if n > 0 {
                    stats.memories_by_kind.insert(kind, n);
                }
            }
            stats.pending_vectors = self.queued_vectors().await?;
            let deleted =
                Filter { must: vec![filter::soft_deleted()], must_not: vec![filter::pending()], ..Default::default() };
            stats.soft_deleted = self.collection.count(Some(deleted)).await?;
            if let Some(model) = &stats.embedding_model {
                stats.vectors = self.collection.count_with_vector(&dense_vector_name(model)).await?;
            }
        }
        Ok(stats)
    }
}
