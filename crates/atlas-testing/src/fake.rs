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

#[derive(Default)]
struct State {
    last_id: i64,
    memories: BTreeMap<MemoryId, Memory>,
    edges: Vec<Edge>,
    queue: BTreeSet<MemoryId>,
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
impl TextIndex for FakeStore {
    /// The domain's BM25 ([`atlas_domain::policy::bm25`]) over every memory, computed without
    /// an index: the reference the conformance suite compares every store's text ranking with.
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let s = self.state.lock().unwrap();
        let docs: Vec<(MemoryId, bm25::Document)> = s
            .memories
            .values()
            .map(|m| (m.id, bm25::Document::of(&m.text, m.body.speaker(), m.context.as_deref())))
            .collect();
        let rows = docs.len() as u64;
        let avg_len = docs.iter().map(|(_, d)| f64::from(d.length)).sum::<f64>() / (rows as f64).max(1.0);
        let weighted: Vec<(String, u32, f64)> = bm25::query_tokens(&terms)
            .into_iter()
            .map(|(token, times)| {
                let n = docs.iter().filter(|(_, d)| d.frequencies.contains_key(&token)).count() as u64;
                let idf = bm25::idf(rows, n);
                (token, times, idf)
            })
            .collect();
        let mut hits: Vec<ScoredId> = docs
            .iter()
            .filter(|(id, _)| filter.admits(&s.memories[id]))
            .filter_map(|(id, d)| bm25::score(d, &weighted, avg_len).map(|score| ScoredId { id: *id, score }))
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }
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
        s.queue = s.memories.keys().copied().collect();
        Ok(s.queue.len() as u64)
    }

    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(s.queue.iter().take(limit).map(|id| s.memories[id].clone()).collect())
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

fn restore_locked(s: &mut State, batch: Vec<StoredMemory>) -> Result<Vec<MemoryId>> {
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

#[async_trait]
impl Consolidator for FakeStore {
    async fn unprocessed(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(s.memories
            .values()
            .filter(|m| m.kind() == MemoryKind::Episode && !m.lifecycle.is_deleted())
            .filter(|m| match s.consolidation.get(&m.id) {
                None => true,
                Some((processed, attempts, last)) => {
                    !processed
                        && *attempts < max_attempts
                        && last + retry_after_ms * i64::from(*attempts) <= now.millis()
                }
            })
            .take(limit)
            .cloned()
            .collect())
    }

    async fn known(&self, subjects: Vec<String>, names: Vec<String>, scope: Scope) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(s.memories
            .values()
            .filter(|m| m.scope.user == scope.user && m.scope.agent == scope.agent && !m.lifecycle.is_deleted())
            .filter(|m| match &m.body {
                Body::Fact { subject, .. } => subjects.contains(subject),
                Body::Entity { name, .. } => names.contains(&normalize(name)),
                _ => false,
            })
            .cloned()
            .collect())
    }

    async fn apply(&self, batch: Consolidation) -> Result<Vec<MemoryId>> {
        let mut s = self.state.lock().unwrap();
        // All or nothing: every check before the first change.
        let n = batch.memories.len();
        let exists = |r: &MemoryRef| match r {
            MemoryRef::Stored(id) => s.memories.contains_key(id),
            MemoryRef::New(i) => *i < n,
        };
        if let Some(e) = batch.edges.iter().find(|e| !exists(&e.src) || !exists(&e.dst)) {
            return Err(AtlasError::Storage(format!("an edge refers to a memory that does not exist: {e:?}")));
        }
        if let Some(r) = batch.revisions.iter().find(|r| !s.memories.contains_key(&r.id)) {
            return Err(AtlasError::Storage(format!("revision of memory {}: no such memory", r.id)));
        }
        let ids = insert_locked(&mut s, batch.memories);
        for (src, dst, kind) in batch.unlinked {
            s.edges.retain(|e| (e.src, e.dst, e.kind) != (src, dst, kind));
        }
        for e in batch.edges {
            let edge = e.resolve(&ids)?;
            s.edges.retain(|o| (o.src, o.dst, o.kind) != (edge.src, edge.dst, edge.kind));
            s.edges.push(edge);
        }
        for r in batch.revisions {
            let m = s.memories.get_mut(&r.id).expect("checked");
            m.validity.valid_until = r.valid_until;
            if let Some(from) = r.valid_from {
                m.validity.valid_from = from;
                m.event_time = from;
            }
            if let (Some(c), Body::Fact { confidence, .. }) = (r.confidence, &mut m.body) {
                *confidence = c;
            }
        }
        let at = batch.at.millis();
        for id in batch.processed {
            let entry = s.consolidation.entry(id).or_insert((false, 0, at));
            *entry = (true, entry.1 + 1, at);
        }
        for (id, _) in batch.failed {
            let entry = s.consolidation.entry(id).or_insert((false, 0, at));
            *entry = (false, entry.1 + 1, at);
        }
        s.cycles.push(CycleRecord { at: batch.at, report: batch.report });
        Ok(ids)
    }

    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        let mut cycles = self.state.lock().unwrap().cycles.clone();
        cycles.sort_by_key(|c| c.at);
        Ok(cycles.into_iter().rev().take(limit).map(|c| c.report).collect())
    }

    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>> {
        let s = self.state.lock().unwrap();
        let live = |m: &&Memory| !m.lifecycle.is_deleted() && m.scope.session.is_some();
        let mut sessions: BTreeMap<(Option<String>, Option<String>, Option<String>), Vec<Memory>> = BTreeMap::new();
        for m in s.memories.values().filter(live).filter(|m| m.kind() == MemoryKind::Episode) {
            let key = (m.scope.user.clone(), m.scope.agent.clone(), m.scope.session.clone());
            sessions.entry(key).or_default().push(m.clone());
        }
        let mut closed: Vec<(Timestamp, ClosedSession)> = Vec::new();
        for ((user, agent, session), mut turns) in sessions {
            turns.sort_by_key(|m| (m.event_time, m.id));
            let last = turns.last().expect("a session has a turn").event_time;
            let scope = Scope { user, agent, session };
            let summaries: Vec<&Memory> = s
                .memories
                .values()
                .filter(live)
                .filter(|m| m.scope == scope && m.validity.valid_until.is_none())
                .filter(|m| matches!(m.body, Body::Summary { .. }))
                .collect();
            let covered =
                summaries.iter().any(|m| matches!(m.body, Body::Summary { turns: n, .. } if n as usize >= turns.len()));
            if last >= said_before || covered {
                continue;
            }
            let previous = summaries.iter().map(|m| m.id).max();
            closed.push((last, ClosedSession { scope, turns, previous }));
        }
        closed.sort_by(|a, b| (a.0, &a.1.scope.session).cmp(&(b.0, &b.1.scope.session)));
        Ok(closed.into_iter().take(limit).map(|(_, c)| c).collect())
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
