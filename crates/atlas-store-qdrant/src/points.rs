//! Writing and fetching points: a memory as the point that stores it (payload, stems, sparse
//! text vector, dense vector or queue mark, what rewriting keeps), and committed memories
//! fetched back by id.

use crate::collection::{self, dense_vector_name};
use crate::decode::{CONSOLIDATED_AT, Kept, decode};
use crate::payload::{self, point_id, to_payload};
use crate::{QdrantStore, ledger, queue, sparse};
use atlas_domain::policy::bm25::Document;
use atlas_domain::{Memory, MemoryId, Result};
use qdrant_client::qdrant::{GetPointsBuilder, PointId, PointStruct, Vector, VectorsSelector};
use std::collections::HashMap;

impl QdrantStore {
    pub(crate) fn point(&self, m: &Memory, dense: Option<(&str, Vec<f32>)>, kept: Kept) -> Result<PointStruct> {
        let document = Document::of(&m.text, m.body.speaker(), m.context.as_deref());
        let text = self.bm25.document(&document);
        let mut vectors: HashMap<String, Vector> = HashMap::new();
        if !text.indices.is_empty() {
            vectors.insert(collection::TEXT_VECTOR.into(), Vector::new_sparse(text.indices, text.values));
        }
        let queued = dense.is_none();
        if let Some((name, v)) = dense {
            vectors.insert(name.into(), Vector::new_dense(v));
        }
        let mut record = to_payload(m);
        let terms: std::collections::BTreeSet<i64> =
            document.frequencies.keys().map(|t| i64::from(sparse::term_index(t))).collect();
        record.insert(payload::field::TERMS.into(), serde_json::Value::from(terms.into_iter().collect::<Vec<_>>()));
        record.insert(payload::field::TEXT_LEN.into(), serde_json::Value::from(document.length));
        if queued {
            record.insert(queue::field::VECTOR_QUEUE.into(), serde_json::Value::from(0));
        }
        if let Some(at) = kept.consolidated_at {
            record.insert(CONSOLIDATED_AT.into(), serde_json::Value::from(at));
        }
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PointStruct::new(point_id(m.id)?, vectors, qdrant_client::Payload::from(record)))
    }
    /// Committed memories by id (with their dense vectors if asked), in the order asked.
    pub(crate) async fn fetch(
        &self,
        ids: &[MemoryId],
        with_dense: bool,
    ) -> Result<Vec<(Memory, Option<Vec<f32>>, Kept)>> {
        if ids.is_empty() || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        let dense = if with_dense { self.bound_model().map(|m| dense_vector_name(&m)) } else { None };
        let mut found: HashMap<MemoryId, (Memory, Option<Vec<f32>>, Kept)> = HashMap::new();
        for chunk in ids.chunks(self.batch) {
            let point_ids = chunk.iter().map(|id| point_id(*id).map(PointId::from)).collect::<Result<Vec<_>>>()?;
            let mut request = GetPointsBuilder::new(self.collection.name(), point_ids).with_payload(true);
            request = match &dense {
                Some(name) => request.with_vectors(VectorsSelector::from(vec![name.clone()])),
                None => request.with_vectors(false),
            };
            let points =
                self.collection.call("get points", self.collection.client().get_points(request.build())).await?;
            for p in points {
                if p.payload.contains_key(ledger::field::PENDING) {
                    continue;
                }
                let (memory, vector, kept) = decode(p, dense.as_deref())?;
                found.insert(memory.id, (memory, vector, kept));
            }
        }
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }
}
