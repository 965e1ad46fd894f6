//! The fake's replica port: a full export read back, and a restore under the same ids.

use super::*;

#[async_trait]
impl Replica for FakeStore {
    async fn export_batch(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<StoredMemory>> {
        let s = self.state.lock().unwrap();
        let start = after.unwrap_or(MemoryId(0));
        Ok(s.memories
            .range(start..)
            .filter(|(id, _)| **id > start)
            .take(limit)
            .map(|(id, m)| StoredMemory {
                memory: m.clone(),
                vector: s.vectors.get(id).cloned(),
                edges: s.edges.iter().filter(|e| StoredMemory::carries(*id, e)).cloned().collect(),
                consolidated_at: match s.consolidation.get(id) {
                    Some((true, _, at)) => Some(Timestamp(*at)),
                    _ => None,
                },
            })
            .collect())
    }

    async fn restore(&self, batch: Vec<StoredMemory>) -> Result<()> {
        restore_locked(&mut self.state.lock().unwrap(), batch).map(|_| ())
    }

    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> Result<Receipt> {
        self.state.lock().unwrap().once(key, |s| restore_locked(s, batch))
    }

    async fn restore_pieces(&self, key: Option<String>, pieces: StoredPieces) -> Result<Receipt> {
        let mut s = self.state.lock().unwrap();
        if let Some(earlier) = key.as_ref().and_then(|k| s.receipts.get(k)) {
            return Ok(Receipt { replayed: true, ..earlier.clone() });
        }
        let batch = atlas_domain::ports::gather(pieces)?;
        match key {
            Some(key) => s.once(key, |s| restore_locked(s, batch)),
            None => Ok(Receipt { ids: restore_locked(&mut s, batch)?, replayed: false, recorded_at: wall_clock() }),
        }
    }

    async fn reserve_ids(&self, count: u64) -> Result<MemoryId> {
        let mut s = self.state.lock().unwrap();
        let first = s.last_id + 1;
        s.last_id += count as i64;
        Ok(MemoryId(first))
    }

    async fn export_cycles(&self) -> Result<Vec<CycleRecord>> {
        let mut cycles = self.state.lock().unwrap().cycles.clone();
        cycles.sort_by_key(|c| c.at);
        Ok(cycles)
    }

    async fn restore_cycles(&self, cycles: Vec<CycleRecord>) -> Result<()> {
        let mut s = self.state.lock().unwrap();
        for c in cycles {
            if !s.cycles.contains(&c) {
                s.cycles.push(c);
            }
        }
        Ok(())
    }
}

pub(super) fn restore_locked(s: &mut State, batch: Vec<StoredMemory>) -> Result<Vec<MemoryId>> {
    {
        let dim = s.model.as_ref().map(|m| m.dimension);
        for item in &batch {
            if let Some(v) = &item.vector {
                match dim {
                    None => return Err(AtlasError::Storage("no embedding model is bound to this store".into())),
                    Some(d) if d != v.len() => {
                        return Err(AtlasError::Embedding(format!(
                            "vector for memory {} has {} dimensions, expected {d}",
                            item.memory.id,
                            v.len()
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        let ids = batch.iter().map(|item| item.memory.id).collect();
        for item in batch {
            let id = item.memory.id;
            s.last_id = s.last_id.max(id.0);
            s.memories.insert(id, item.memory);
            match item.vector {
                Some(v) => {
                    s.queue.remove(&id);
                    s.vectors.insert(id, v);
                }
                None => {
                    s.vectors.remove(&id);
                    s.queue.insert(id);
                }
            }
            for edge in item.edges {
                s.edges.retain(|e| (e.src, e.dst, e.kind) != (edge.src, edge.dst, edge.kind));
                s.edges.push(edge);
            }
            if let Some(at) = item.consolidated_at {
                let attempts = s.consolidation.get(&id).map_or(1, |c| c.1);
                s.consolidation.insert(id, (true, attempts, at.millis()));
            }
        }
        Ok(ids)
    }
}
