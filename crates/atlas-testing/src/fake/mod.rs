//! An in-memory store implementing every storage port, for tests of everything above storage.

use crate::embedder::cosine;
use async_trait::async_trait;
use atlas_domain::access::AccessKey;
use atlas_domain::policy::bm25;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::policy::embedding::{context_from, line};
use atlas_domain::ports::{
    ClosedSession, Consolidation, Consolidator, CycleRecord, EmbeddingModel, KeyStore, MemoryRef, MemoryStore, Pieces,
    ProgressFn, Receipt, Replica, ScoredId, StoreStats, StoredMemory, StoredPieces, TextIndex, Update, VectorIndex,
};
use atlas_domain::{
    AtlasError, Body, Edge, EdgeKind, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Scope, Timestamp,
    Validity,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

mod consolidator;
mod replica;
mod search;

#[derive(Default)]
struct State {
    last_id: i64,
    memories: BTreeMap<MemoryId, Memory>,
    edges: Vec<Edge>,
    queue: BTreeSet<MemoryId>,
    /// Queued memories set aside: why, and until when (milliseconds of the wall clock).
    set_aside: BTreeMap<MemoryId, (String, i64)>,
    vectors: HashMap<MemoryId, Vec<f32>>,
    model: Option<EmbeddingModel>,
    receipts: HashMap<String, Receipt>,
    /// Per episode: (processed, attempts, last attempt).
    consolidation: HashMap<MemoryId, (bool, u32, i64)>,
    cycles: Vec<CycleRecord>,
    keys: Vec<AccessKey>,
}

impl State {
    /// The receipt of an earlier write under `key`, or the new one of `write`'s ids.
    fn once(&mut self, key: String, write: impl FnOnce(&mut State) -> Result<Vec<MemoryId>>) -> Result<Receipt> {
        if let Some(earlier) = self.receipts.get(&key) {
            return Ok(Receipt { replayed: true, ..earlier.clone() });
        }
        let ids = write(self)?;
        let receipt = Receipt { ids, replayed: false, recorded_at: wall_clock() };
        self.receipts.insert(key, receipt.clone());
        Ok(receipt)
    }
}

fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(since_epoch.as_millis() as i64)
}

/// The reference implementation of the storage ports: simple and obviously correct, not fast.
#[derive(Default)]
pub struct FakeStore {
    state: Mutex<State>,
}

impl FakeStore {
    pub fn new() -> Self {
        Self::default()
    }
}

fn insert_locked(s: &mut State, batch: Vec<NewMemory>) -> Vec<MemoryId> {
    let mut ids = Vec::with_capacity(batch.len());
    for m in batch {
        s.last_id += 1;
        let id = MemoryId(s.last_id);
        let mut context = None;
        if let (MemoryKind::Episode, Some(session)) = (m.kind(), &m.scope.session) {
            let prev = s
                .memories
                .values()
                .filter(|o| o.kind() == MemoryKind::Episode && o.scope.session.as_ref() == Some(session))
                .filter(|o| o.scope.user == m.scope.user && o.scope.agent == m.scope.agent)
                .filter(|o| o.event_time <= m.event_time)
                // A version replaced by then is history, not the turn this one follows.
                .filter(|o| o.validity.valid_until.is_none_or(|until| until > m.event_time))
                .max_by_key(|o| (o.event_time, o.id));
            if let Some(prev) = prev {
                context = context_from(&line(prev));
                let prev = prev.id;
                s.edges.push(Edge {
                    src: prev,
                    dst: id,
                    kind: EdgeKind::Temporal,
                    weight: 1.0,
                    validity: Validity::from(m.event_time),
                    recorded_at: m.recorded_at,
                });
            }
        }
        s.queue.insert(id);
        s.memories.insert(id, Memory { context, ..m.with_id(id) });
        ids.push(id);
    }
    ids
}

#[async_trait]
impl MemoryStore for FakeStore {
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        let ids = insert_locked(&mut self.state.lock().unwrap(), batch);
        if let Some(p) = progress {
            p(ids.len());
        }
        Ok(ids)
    }

    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt> {
        let receipt = self.state.lock().unwrap().once(key, |s| Ok(insert_locked(s, batch)))?;
        if let Some(p) = progress {
            p(receipt.ids.len());
        }
        Ok(receipt)
    }

    async fn insert_pieces(
        &self,
        key: Option<String>,
        pieces: Pieces,
        progress: Option<ProgressFn>,
    ) -> Result<Receipt> {
        // Held for the whole write, as SQLite holds its writer: no other write interleaves.
        let mut s = self.state.lock().unwrap();
        if let Some(earlier) = key.as_ref().and_then(|k| s.receipts.get(k)) {
            return Ok(Receipt { replayed: true, ..earlier.clone() });
        }
        let batch = atlas_domain::ports::gather(pieces)?;
        if let Some(p) = &progress {
            p(batch.len());
        }
        match key {
            Some(key) => s.once(key, |s| Ok(insert_locked(s, batch))),
            None => Ok(Receipt { ids: insert_locked(&mut s, batch), replayed: false, recorded_at: wall_clock() }),
        }
    }

    async fn get(&self, id: MemoryId) -> Result<Option<Memory>> {
        Ok(self.state.lock().unwrap().memories.get(&id).cloned())
    }

    async fn get_many(&self, ids: Vec<MemoryId>) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(ids.iter().filter_map(|id| s.memories.get(id).cloned()).collect())
    }

    async fn forget(&self, id: MemoryId) -> Result<bool> {
        let mut s = self.state.lock().unwrap();
        let answers: Vec<MemoryId> = s
            .edges
            .iter()
            .filter(|e| e.src == id && e.dst != id && e.kind == EdgeKind::Temporal)
            .map(|e| e.dst)
            .collect();
        for answer in answers {
            if let Some(m) = s.memories.get_mut(&answer) {
                m.context = None;
            }
            s.vectors.remove(&answer);
            s.queue.insert(answer);
        }
        s.edges.retain(|e| e.src != id && e.dst != id);
        s.queue.remove(&id);
        s.vectors.remove(&id);
        Ok(s.memories.remove(&id).is_some())
    }

    async fn update(&self, updates: Vec<Update>) -> Result<u64> {
        let mut s = self.state.lock().unwrap();
        // All or nothing: check every update before applying any.
        for u in &updates {
            if let Some(m) = s.memories.get(&u.id) {
                u.check_body(&m.body)?;
            }
        }
        let mut found = 0;
        for u in updates {
            if let Some(m) = s.memories.get_mut(&u.id) {
                found += 1;
                m.lifecycle = u.lifecycle;
                if let Some(body) = u.body {
                    m.body = body;
                }
            }
        }
        Ok(found)
    }

    async fn scan(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        let start = after.map_or(MemoryId(0), |a| a);
        Ok(s.memories.range(start..).filter(|(id, _)| **id > start).take(limit).map(|(_, m)| m.clone()).collect())
    }

    async fn latest(&self, filter: RecallFilter, limit: usize) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        let mut found: Vec<Memory> = s.memories.values().filter(|m| filter.admits(m)).cloned().collect();
        found.sort_by_key(|m| std::cmp::Reverse((m.event_time, m.id)));
        found.truncate(limit);
        Ok(found)
    }

    async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>> {
        let s = self.state.lock().unwrap();
        Ok(s.edges.iter().filter(|e| e.src == id || e.dst == id).cloned().collect())
    }

    async fn stats(&self) -> Result<StoreStats> {
        let s = self.state.lock().unwrap();
        let mut by_kind = BTreeMap::new();
        for m in s.memories.values() {
            *by_kind.entry(m.kind()).or_insert(0) += 1;
        }
        Ok(StoreStats {
            memories_by_kind: by_kind,
            edges: s.edges.len() as u64,
            soft_deleted: s.memories.values().filter(|m| m.lifecycle.is_deleted()).count() as u64,
            vectors: s.vectors.len() as u64,
            pending_vectors: s.queue.len() as u64,
            bytes: None,
            schema_version: None,
            embedding_model: s.model.clone(),
        })
    }
}

#[async_trait]
impl KeyStore for FakeStore {
    async fn add_key(&self, key: AccessKey) -> Result<()> {
        let mut s = self.state.lock().expect("fake store lock");
        if s.keys.iter().any(|k| k.id == key.id) {
            return Err(AtlasError::invalid("keys add", format!("a key with id {} exists already", key.id)));
        }
        s.keys.push(key);
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<AccessKey>> {
        let mut keys = self.state.lock().expect("fake store lock").keys.clone();
        keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(keys)
    }

    async fn revoke_key(&self, id: String, at: Timestamp) -> Result<bool> {
        let mut s = self.state.lock().expect("fake store lock");
        match s.keys.iter_mut().find(|k| k.id == id && k.revoked_at.is_none()) {
            Some(key) => {
                key.revoked_at = Some(at);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
