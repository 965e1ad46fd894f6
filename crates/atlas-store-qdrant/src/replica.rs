//! The replica port on Qdrant: committed points exported with their dense vectors and carried
//! edges, restores (plain and keyed, one write of the ledger) and reserved ids.

use crate::collection::dense_vector_name;
use crate::decode::{Kept, decode};
use crate::payload::point_id;
use crate::{QdrantStore, filter, ledger, meta, write};
use async_trait::async_trait;
use atlas_domain::ports::{CycleRecord, Receipt, Replica, StoredMemory, StoredPieces};
use atlas_domain::{AtlasError, Edge, Memory, MemoryId, Result, Timestamp};
use qdrant_client::qdrant::{Filter, PointId, ScrollPointsBuilder, VectorsSelector};

#[async_trait]
impl Replica for QdrantStore {
    async fn export_batch(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<StoredMemory>> {
        if limit == 0 || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        let start = after.map_or(0, |a| a.0);
        let dense = self.bound_model().map(|m| dense_vector_name(&m));
        // Only committed memories: a write under way is not part of the space yet.
        let mut request = ScrollPointsBuilder::new(self.collection.name())
            .filter(Filter { must_not: vec![filter::pending()], ..Default::default() })
            .offset(PointId::from(point_id(MemoryId(start + 1))?))
            .limit(limit.min(u32::MAX as usize) as u32)
            .with_payload(true);
        request = match &dense {
            Some(name) => request.with_vectors(VectorsSelector::from(vec![name.clone()])),
            None => request.with_vectors(false),
        };
        let points = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
        let decoded = points.into_iter().map(|p| decode(p, dense.as_deref())).collect::<Result<Vec<_>>>()?;
        let Some(last) = decoded.last().map(|(m, _, _)| m.id) else {
            return Ok(Vec::new());
        };
        let mut edges = meta::carried_edges(&self.meta, start, last.0).await?;
        Ok(decoded
            .into_iter()
            .map(|(memory, vector, kept)| StoredMemory {
                edges: edges.remove(&memory.id).unwrap_or_default(),
                vector,
                consolidated_at: kept.consolidated_at.map(Timestamp),
                memory,
            })
            .collect())
    }

    async fn restore(&self, batch: Vec<StoredMemory>) -> Result<()> {
        self.restore_keyed(None, batch).await.map(|_| ())
    }

    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> Result<Receipt> {
        self.restore_keyed(Some(key), batch).await
    }

    async fn restore_pieces(&self, key: Option<String>, pieces: StoredPieces) -> Result<Receipt> {
        // Gathered first, as an insert's pieces are (crate::memories): one ledgered write.
        if let Some(key) = &key
            && let Some(receipt) = crate::ledger::committed_receipt(&self.meta, key).await?
        {
            return Ok(receipt);
        }
        let batch = atlas_domain::ports::gather(pieces)?;
        self.restore_keyed(key, batch).await
    }

    async fn reserve_ids(&self, count: u64) -> Result<MemoryId> {
        Ok(self.clock.reserve(count))
    }

    async fn export_cycles(&self) -> Result<Vec<CycleRecord>> {
        self.ledger_of_cycles(usize::MAX, qdrant_client::qdrant::Direction::Asc).await
    }

    async fn restore_cycles(&self, cycles: Vec<CycleRecord>) -> Result<()> {
        // The space's own rows are write records: a restore into the space it came from adds none.
        let held = self.export_cycles().await?;
        let new: Vec<CycleRecord> = cycles.into_iter().filter(|c| !held.contains(c)).collect();
        if new.is_empty() {
            return Ok(());
        }
        self.collection.ensure(self.bound_model().as_ref()).await?;
        meta::put_cycles(&self.meta, &new).await
    }
}

impl QdrantStore {
    async fn restore_keyed(&self, key: Option<String>, batch: Vec<StoredMemory>) -> Result<Receipt> {
        // (Under a key, even an empty batch answers with the key's earlier receipt.)
        if batch.is_empty() && key.is_none() {
            return Ok(Receipt { ids: Vec::new(), replayed: false, recorded_at: Timestamp(ledger::now_ms()) });
        }
        let model = meta::model(&self.meta).await?;
        for item in &batch {
            if let Some(v) = &item.vector {
                match &model {
                    None => {
                        return Err(AtlasError::Storage(
                            "no embedding model is bound to this store; bind one before restoring vectors".into(),
                        ));
                    }
                    Some(m) if m.dimension != v.len() => {
                        return Err(AtlasError::Embedding(format!(
                            "vector for memory {} has {} dimensions, the store's model {} has {}",
                            item.memory.id,
                            v.len(),
                            m.name,
                            m.dimension
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        self.collection.ensure(model.as_ref()).await?;
        let name = model.as_ref().map(dense_vector_name);
        let points = batch
            .iter()
            .map(|s| {
                let vector = s.vector.clone().and_then(|v| name.as_deref().map(|n| (n, v)));
                self.point(&s.memory, vector, Kept { consolidated_at: s.consolidated_at.map(Timestamp::millis) })
            })
            .collect::<Result<Vec<_>>>()?;
        let ids: Vec<MemoryId> = batch.iter().map(|s| s.memory.id).collect();
        // Ids restored under are never handed out by this process afterwards.
        if let Some(top) = ids.iter().max() {
            self.clock.raise_to(top.0);
        }
        let recorded: Vec<i64> = batch.iter().map(|s| s.memory.recorded_at.millis()).collect();
        let memories: Vec<Memory> = batch.iter().map(|s| s.memory.clone()).collect();
        let edges: Vec<Edge> = batch.into_iter().flat_map(|s| s.edges).collect();
        let mut write = match self.begin(key.as_deref()).await? {
            ledger::Begun::Replayed(receipt) => return Ok(receipt),
            ledger::Begun::Write(write) => write,
        };
        let landed = match self.land(&mut write, &ids, points, &edges, write::Landing::Restore(&recorded)).await {
            Ok(foreign) if foreign.is_empty() => {
                let effects = write::effects_of(&memories);
                Ok(write::Landed { ids, effects: (!effects.is_empty()).then_some(serde_json::Value::Object(effects)) })
            }
            Ok(foreign) => Err(AtlasError::Storage(format!(
                "restore: {} of its ids (first {}) hold other memories, written by another process; nothing of it \
                 was kept (reserve ids again and retry)",
                foreign.len(),
                foreign[0]
            ))),
            Err(e) => Err(e),
        };
        self.finish_write(write, landed).await
    }
}
