//! The Qdrant adapter: every storage port of `atlas-domain` on a Qdrant server or cluster.
//!
//! One collection per memory space holds every kind of memory as points (point id = memory id,
//! the record as payload with indexes on scope, kind, times and validity), a dense named vector
//! per embedding model and a sparse `text` vector that finds BM25 candidates, rescored as FTS5
//! scores them (see [`sparse`]). Filters are
//! pushed down to Qdrant. What Qdrant does not model (id allocation, the ledger of acknowledged
//! writes, settings) lives in the space's SQLite file ([`sidecar`]); typed edges are points of
//! the space's meta collection ([`meta`]), the vector queue is state of the points ([`queue`]).

pub mod api;
mod collection;
mod consolidation;
pub mod filter;
mod keys;
pub mod ledger;
mod legacy;
pub mod meta;
pub mod payload;
mod queue;
pub mod sidecar;
pub mod sparse;
mod write;

use crate::api::QdrantApi;
use crate::collection::{Collection, dense_vector_name};
use crate::payload::{from_payload, point_id, to_payload};
use crate::sidecar::Sidecar;
use crate::sparse::Bm25;
use async_trait::async_trait;
use atlas_domain::policy::embedding::line;
use atlas_domain::ports::{
    EmbeddingModel, MemoryStore, ProgressFn, Receipt, Replica, ScoredId, StoreStats, StoredMemory, TextIndex, Update,
    VECTOR_CLAIM_MS, VectorIndex,
};
use atlas_domain::{AtlasError, Edge, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Timestamp};
use qdrant_client::Qdrant;
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::{
    Filter, GetPointsBuilder, PointId, PointStruct, PointVectors, QueryPointsBuilder, RetrievedPoint,
    ScrollPointsBuilder, UpdatePointVectorsBuilder, Vector, VectorsSelector,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How vectors are kept in RAM by Qdrant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quantization {
    #[default]
    None,
    /// Scalar int8 quantisation, kept in RAM, with the float vectors on disk for rescoring.
    Int8,
}

/// Connection and collection settings (config section `[qdrant]`).
#[derive(Debug, Clone)]
pub struct QdrantOptions {
    pub url: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Collections are named `{prefix}_{space}_{suffix}`.
    pub collection_prefix: String,
    pub shards: Option<u32>,
    pub replication_factor: Option<u32>,
    /// Replicas of a shard that must confirm a write before it is acknowledged.
    pub write_consistency_factor: Option<u32>,
    pub on_disk_vectors: bool,
    pub quantization: Quantization,
    /// Points per upsert request.
    pub batch: usize,
    /// Typical length of a memory in tokens, assumed by the sparse vectors that find text
    /// candidates (the exact rescoring uses the real average).
    pub bm25_avg_len: f32,
    /// The space's name on the server (`--space`): any process of any host opens it by this
    /// name, with no local file. Unset: the space file given to [`QdrantStore::open`] names it.
    pub space: Option<String>,
    /// How long a write may go without renewing its lease (it renews every fifth of it while it
    /// runs) before any process abandons it and deletes what it wrote.
    pub write_lease: Duration,
}

impl QdrantOptions {
    pub fn new(url: impl Into<String>) -> Self {
        QdrantOptions {
            url: url.into(),
            api_key: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            collection_prefix: "atlas".into(),
            shards: None,
            replication_factor: None,
            write_consistency_factor: None,
            on_disk_vectors: false,
            quantization: Quantization::None,
            batch: 256,
            bm25_avg_len: 20.0,
            space: None,
            write_lease: ledger::WRITE_LEASE,
        }
    }
}

/// The layout of a space, reported as its schema version: 4 since everything lives on the
/// server (the space file, if any, holds only the collection's name).
pub const SPACE_FORMAT: i64 = 4;

/// How many text candidates Qdrant finds for the exact rescoring, at least, and per hit asked.
const TEXT_POOL_MIN: usize = 200;
const TEXT_POOL_PER_HIT: usize = 2;
/// The corpus statistics of the rescoring (rows, average length) are read again after this
/// long, or once this store has written a hundredth of the rows since.
const CORPUS_STATS_TTL: Duration = Duration::from_secs(30);
/// The average length is read from at most this many points (all of them in smaller spaces).
const CORPUS_LENGTH_SAMPLE: usize = 20_000;

/// What the exact text rescoring needs of the whole collection.
#[derive(Debug, Clone, Copy)]
struct CorpusStats {
    rows: u64,
    avg_len: f64,
    read_at: std::time::Instant,
    writes_at: u64,
}

/// The Qdrant store of one memory space.
pub struct QdrantStore {
    collection: Collection,
    /// The space's meta collection: its edges.
    meta: Collection,
    /// The space file of a space named by one (an earlier layout); none for a named space.
    side: Option<Sidecar>,
    bm25: Bm25,
    corpus: std::sync::Mutex<Option<CorpusStats>>,
    /// Points holding each stem, counted since the corpus statistics were last read.
    stem_counts: std::sync::Mutex<HashMap<u32, u64>>,
    /// Points this store wrote, to know when the corpus statistics are stale.
    writes: std::sync::atomic::AtomicU64,
    batch: usize,
    model: RwLock<Option<EmbeddingModel>>,
    /// Names this instance's claims on queued vector work.
    owner: String,
    /// This process's memory ids ([`ledger`]).
    clock: ledger::IdClock,
    write_lease: Duration,
    /// When this instance last finished other processes' stalled writes.
    recovered: std::sync::Mutex<std::time::Instant>,
}

/// What a point holds besides its memory and vectors that rewriting it keeps.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kept {
    /// When the sleep cycle processed the episode.
    consolidated_at: Option<i64>,
}

impl QdrantStore {
    /// Opens the memory space `options.space` on the server in `options` (or, when no name is
    /// set, the one whose space file is `space`, created if new), checks the collection if it
    /// exists, and finishes the writes crashed processes left (rolled forward or back).
    pub async fn open(space: &Path, options: QdrantOptions) -> Result<Self> {
        let mut nodes = Vec::new();
        for url in options.url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let client = Qdrant::from_url(url)
                .api_key(options.api_key.clone())
                .timeout(options.timeout)
                .connect_timeout(options.connect_timeout)
                .skip_compatibility_check()
                .build()
                .map_err(|e| AtlasError::Config(format!("qdrant.url {url:?}: {e}")))?;
            nodes.push(client);
        }
        if nodes.is_empty() {
            return Err(AtlasError::Config("qdrant.url is empty: name a server's gRPC address".into()));
        }
        Self::open_with(space, options, Arc::new(api::Nodes::new(nodes))).await
    }

    /// [`QdrantStore::open`] over any implementation of the calls (a mock in unit tests).
    pub async fn open_with(space: &Path, options: QdrantOptions, client: Arc<dyn QdrantApi>) -> Result<Self> {
        let (side, name) = match &options.space {
            Some(space) => (None, collection::name_of_space(&options.collection_prefix, space)?),
            None => {
                let (side, name) = Self::space_file(space, &options).await?;
                (Some(side), name)
            }
        };
        let collection = Collection::new(client, name, options.clone());
        let meta = Collection::meta_of(&collection);
        let mut model = meta::model(&meta).await?;
        if let (None, Some(side)) = (&model, &side) {
            // A space file of an earlier version kept the model: it moves to the server.
            if let Some(kept) = side.read(sidecar::model).await? {
                model = Some(meta::bind_model(&meta, &kept).await?);
            }
        }
        collection.check(model.as_ref()).await?;
        let store = QdrantStore {
            meta,
            collection,
            side,
            bm25: Bm25::new(options.bm25_avg_len),
            corpus: std::sync::Mutex::new(None),
            stem_counts: std::sync::Mutex::new(HashMap::new()),
            writes: std::sync::atomic::AtomicU64::new(0),
            batch: options.batch.max(1),
            model: RwLock::new(model),
            owner: format!("{}-{}", std::process::id(), now_nanos()),
            clock: ledger::IdClock::new(0),
            write_lease: options.write_lease.max(Duration::from_millis(100)),
            recovered: std::sync::Mutex::new(std::time::Instant::now()),
        };
        store.index_new_fields().await?;
        store.move_legacy_state().await?;
        store.recover().await?;
        store.upgrade_text_index().await?;
        store.clock.raise_to(store.largest_id().await?);
        Ok(store)
    }

    /// The space file of a space named by a file (created if new), and the collection it names.
    async fn space_file(space: &Path, options: &QdrantOptions) -> Result<(Sidecar, String)> {
        let side = Sidecar::open(space)?;
        let name = match side.read(|c| sidecar::setting(c, "collection")).await? {
            Some(name) => name,
            None => {
                let name = collection::name_for(&options.collection_prefix, space);
                let chosen = name.clone();
                side.write(move |tx| {
                    // Another process may have chosen first.
                    match sidecar::setting(tx, "collection")? {
                        Some(existing) => Ok(existing),
                        None => sidecar::set_setting(tx, "collection", &chosen).map(|()| chosen),
                    }
                })
                .await?
            }
        };
        Ok((side, name))
    }

    /// A collection created by an earlier version gets the payload indexes added since.
    async fn index_new_fields(&self) -> Result<()> {
        for (c, fields) in
            [(&self.collection, collection::INDEXED_FIELDS.as_slice()), (&self.meta, &meta::INDEXED_FIELDS)]
        {
            if !c.exists().await? {
                continue;
            }
            for &(field, kind) in fields {
                // `terms` comes with its upgrade (upgrade_text_index).
                if field != payload::field::TERMS && !c.has_index(field).await? {
                    c.index(field, kind).await?;
                }
            }
        }
        Ok(())
    }

    /// The largest memory id in the space (0 if none): new ids are taken above it.
    async fn largest_id(&self) -> Result<i64> {
        if !self.collection.exists().await? {
            return Ok(0);
        }
        let order = qdrant_client::qdrant::OrderByBuilder::new(payload::field::ID)
            .direction(qdrant_client::qdrant::Direction::Desc as i32)
            .build();
        let request = ScrollPointsBuilder::new(self.collection.name())
            .order_by(order)
            .limit(1)
            .with_payload(false)
            .with_vectors(false);
        let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?;
        page.points.first().map_or(Ok(0), |p| memory_id(p.id.as_ref()).map(|id| id.0))
    }

    /// A collection written before the exact text rescoring lacks the `terms` and `text_len`
    /// payloads and the `terms` index: every point is written again (its vectors kept, its
    /// sparse vector recomputed), then `terms` is indexed. The index comes last, so that an
    /// interrupted upgrade starts again at the next open; rewriting a point twice is harmless.
    async fn upgrade_text_index(&self) -> Result<()> {
        if !self.collection.exists().await? || self.collection.has_index(payload::field::TERMS).await? {
            return Ok(());
        }
        let dense = self.bound_model().map(|m| dense_vector_name(&m));
        tracing::warn!(collection = self.collection(), "indexing the stems of every memory for exact BM25 (once)");
        let mut offset: Option<PointId> = None;
        let mut rewritten = 0usize;
        loop {
            let mut request =
                ScrollPointsBuilder::new(self.collection.name()).limit(self.batch as u32).with_payload(true);
            request = match &dense {
                Some(name) => request.with_vectors(VectorsSelector::from(vec![name.clone()])),
                None => request.with_vectors(false),
            };
            if let Some(o) = offset.take() {
                request = request.offset(o);
            }
            let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
            let Some(last) = page.last() else { break };
            let next = last.id.clone();
            let full = page.len() == self.batch;
            let points = page
                .into_iter()
                .map(|p| {
                    let (memory, vector, kept) = decode(p, dense.as_deref())?;
                    let vector = dense.as_deref().zip(vector);
                    self.point(&memory, vector, kept)
                })
                .collect::<Result<Vec<_>>>()?;
            rewritten += points.len();
            self.collection.upsert(points).await?;
            if !full {
                break;
            }
            // Scroll pages start at their offset: skip the point already rewritten.
            offset = next.and_then(|id| match id.point_id_options {
                Some(PointIdOptions::Num(n)) => Some(PointId::from(n + 1)),
                _ => None,
            });
            if offset.is_none() {
                break;
            }
        }
        self.collection.index_terms().await?;
        tracing::warn!(collection = self.collection(), rewritten, "indexed the stems of every memory");
        Ok(())
    }

    /// How many points hold each stem, counted once per stem while the corpus statistics last.
    async fn stem_frequencies(&self, terms: &[(u32, u32)]) -> Result<Vec<u64>> {
        let missing: Vec<u32> = {
            let known = self.stem_counts.lock().expect("stem counts lock");
            terms.iter().map(|(t, _)| *t).filter(|t| !known.contains_key(t)).collect()
        };
        let filters = missing
            .iter()
            .map(|t| {
                qdrant_client::qdrant::Filter::must([qdrant_client::qdrant::Condition::matches(
                    payload::field::TERMS,
                    i64::from(*t),
                )])
            })
            .collect();
        let counted = self.collection.count_each(filters).await?;
        let mut known = self.stem_counts.lock().expect("stem counts lock");
        known.extend(missing.into_iter().zip(counted));
        Ok(terms.iter().map(|(t, _)| known.get(t).copied().unwrap_or(0)).collect())
    }

    /// Rows and average length of the collection, read again when stale.
    async fn corpus_stats(&self) -> Result<CorpusStats> {
        use std::sync::atomic::Ordering;
        let writes = self.writes.load(Ordering::Relaxed);
        if let Some(stats) = *self.corpus.lock().expect("corpus lock")
            && stats.read_at.elapsed() < CORPUS_STATS_TTL
            && (writes - stats.writes_at) * 100 <= stats.rows
        {
            return Ok(stats);
        }
        let rows =
            self.collection.count(Some(Filter { must_not: vec![filter::pending()], ..Default::default() })).await?;
        let mut lengths = 0u64;
        let mut counted = 0u64;
        let mut offset: Option<PointId> = None;
        while (counted as usize) < CORPUS_LENGTH_SAMPLE {
            let mut request = ScrollPointsBuilder::new(self.collection.name())
                .limit(1000)
                .with_payload(include(&[payload::field::TEXT_LEN]))
                .with_vectors(false);
            if let Some(o) = offset.take() {
                request = request.offset(o);
            }
            let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
            let full = page.len() == 1000;
            for p in &page {
                if let Some(n) = p.payload.get(payload::field::TEXT_LEN).and_then(|v| v.as_integer()) {
                    lengths += n.max(0) as u64;
                    counted += 1;
                }
            }
            let next = page.last().and_then(|p| p.id.clone()).and_then(|id| match id.point_id_options {
                Some(PointIdOptions::Num(n)) => Some(PointId::from(n + 1)),
                _ => None,
            });
            match (full, next) {
                (true, Some(n)) => offset = Some(n),
                _ => break,
            }
        }
        let stats = CorpusStats {
            rows,
            avg_len: if counted == 0 { 1.0 } else { lengths as f64 / counted as f64 },
            read_at: std::time::Instant::now(),
            writes_at: writes,
        };
        *self.corpus.lock().expect("corpus lock") = Some(stats);
        self.stem_counts.lock().expect("stem counts lock").clear();
        Ok(stats)
    }

    /// The collection this space lives in.
    pub fn collection(&self) -> &str {
        self.collection.name()
    }

    /// The collection of the space's edges, beside [`QdrantStore::collection`].
    pub fn meta_collection(&self) -> &str {
        self.meta.name()
    }

    fn bound_model(&self) -> Option<EmbeddingModel> {
        self.model.read().expect("model lock").clone()
    }

    fn point(&self, m: &Memory, dense: Option<(&str, Vec<f32>)>, kept: Kept) -> Result<PointStruct> {
        let document = self.bm25.analyse(&m.text, m.body.speaker(), m.context.as_deref());
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
        let terms: Vec<i64> = document.frequencies.keys().map(|&t| i64::from(t)).collect();
        record.insert(payload::field::TERMS.into(), serde_json::Value::from(terms));
        record.insert(payload::field::TEXT_LEN.into(), serde_json::Value::from(document.length));
        if queued {
            record.insert(queue::field::VECTOR_QUEUE.into(), serde_json::Value::from(0));
        }
        if let Some(at) = kept.consolidated_at {
            record.insert(write::CONSOLIDATED_AT.into(), serde_json::Value::from(at));
        }
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PointStruct::new(point_id(m.id)?, vectors, qdrant_client::Payload::from(record)))
    }

    /// The batch as memories under their new ids, each episode carrying its predecessor's line
    /// as context (the predecessor is in the batch or already stored).
    async fn with_context(
        &self,
        batch: Vec<NewMemory>,
        linked: &[(MemoryId, Option<MemoryId>)],
    ) -> Result<Vec<Memory>> {
        let mut memories: Vec<Memory> = batch.into_iter().zip(linked).map(|(m, (id, _))| m.with_id(*id)).collect();
        let position: HashMap<MemoryId, usize> = memories.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        let outside: Vec<MemoryId> =
            linked.iter().filter_map(|(_, prev)| *prev).filter(|p| !position.contains_key(p)).collect();
        let stored: HashMap<MemoryId, String> = self.get_many(outside).await?.iter().map(|m| (m.id, line(m))).collect();
        for (i, (_, prev)) in linked.iter().enumerate() {
            memories[i].context = match prev {
                Some(p) => match position.get(p) {
                    Some(&j) => Some(line(&memories[j])),
                    None => stored.get(p).cloned(),
                },
                None => None,
            };
        }
        Ok(memories)
    }

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
        let landed = self.land_new(&mut write, &batch).await.map(|(ids, memories)| {
            let effects = write::effects_of(&memories);
            write::Landed { ids, effects: (!effects.is_empty()).then_some(serde_json::Value::Object(effects)) }
        });
        let receipt = self.finish_write(write, landed).await?;
        if let Some(p) = progress {
            p(receipt.ids.len());
        }
        Ok(receipt)
    }

    /// Committed memories by id (with their dense vectors if asked), in the order asked.
    async fn fetch(&self, ids: &[MemoryId], with_dense: bool) -> Result<Vec<(Memory, Option<Vec<f32>>, Kept)>> {
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

    /// Runs a nearest-neighbour query under `filter`, pushed down to the server.
    async fn search(&self, mut request: QueryPointsBuilder, filter: &RecallFilter) -> Result<Vec<ScoredId>> {
        request = request.filter(filter::to_qdrant(filter));
        let hits = self.collection.call("query", self.collection.client().query(request.build())).await?;
        hits.into_iter().map(|p| Ok(ScoredId { id: memory_id(p.id.as_ref())?, score: f64::from(p.score) })).collect()
    }
}

/// The temporal edge from each new episode's predecessor to it.
fn temporal_edges(memories: &[Memory], linked: &[(MemoryId, Option<MemoryId>)]) -> Vec<Edge> {
    memories
        .iter()
        .zip(linked)
        .filter_map(|(m, (id, prev))| {
            prev.map(|prev| Edge {
                src: prev,
                dst: *id,
                kind: atlas_domain::EdgeKind::Temporal,
                weight: 1.0,
                validity: atlas_domain::Validity { valid_from: m.event_time, valid_until: None },
                recorded_at: m.recorded_at,
            })
        })
        .collect()
}

/// Only these payload fields in the answer.
fn include(fields: &[&str]) -> qdrant_client::qdrant::PayloadIncludeSelector {
    qdrant_client::qdrant::PayloadIncludeSelector { fields: fields.iter().map(|f| (*f).to_owned()).collect() }
}

fn memory_id(id: Option<&PointId>) -> Result<MemoryId> {
    match id.and_then(|p| p.point_id_options.as_ref()) {
        Some(PointIdOptions::Num(n)) => i64::try_from(*n)
            .map(MemoryId)
            .map_err(|_| AtlasError::Storage(format!("Qdrant point id {n} is not an ATLAS memory id"))),
        other => Err(AtlasError::Storage(format!("Qdrant point id {other:?} is not an ATLAS memory id"))),
    }
}

fn decode(p: RetrievedPoint, dense: Option<&str>) -> Result<(Memory, Option<Vec<f32>>, Kept)> {
    let id = memory_id(p.id.as_ref())?;
    let kept = Kept { consolidated_at: p.payload.get(write::CONSOLIDATED_AT).and_then(|v| v.as_integer()) };
    let payload: serde_json::Map<String, serde_json::Value> =
        p.payload.into_iter().map(|(k, v)| (k, serde_json::Value::from(v))).collect();
    let memory = from_payload(id.0 as u64, payload)?;
    let vector = match (dense, p.vectors) {
        (Some(name), Some(vectors)) => match vectors.get_vector_by_name(name) {
            Some(qdrant_client::qdrant::vector_output::Vector::Dense(d)) => Some(d.data),
            Some(_) => return Err(AtlasError::Storage(format!("Qdrant point {id}: vector {name:?} is not dense"))),
            None => None,
        },
        _ => None,
    };
    Ok((memory, vector, kept))
}

#[async_trait]
impl MemoryStore for QdrantStore {
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        Ok(self.insert_keyed(None, batch, progress).await?.ids)
    }

    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt> {
        self.insert_keyed(Some(key), batch, progress).await
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

#[async_trait]
impl TextIndex for QdrantStore {
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let query = self.bm25.query(&terms);
        if limit == 0 || query.indices.is_empty() || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        // Candidates by the sparse vector, a pool wide enough to hold FTS5's best `limit`...
        let pairs: Vec<(u32, f32)> = query.indices.into_iter().zip(query.values).collect();
        let fields = [payload::field::TEXT, payload::field::SPEAKER, payload::field::CONTEXT];
        let request = QueryPointsBuilder::new(self.collection.name())
            .query(qdrant_client::qdrant::Query::new_nearest(pairs.as_slice()))
            .using(collection::TEXT_VECTOR)
            .limit((limit * TEXT_POOL_PER_HIT).max(TEXT_POOL_MIN) as u64)
            .with_payload(include(&fields))
            .filter(filter::to_qdrant(&filter));
        let candidates = self.collection.call("query", self.collection.client().query(request.build())).await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        // ... rescored exactly as FTS5 scores them, from their text and the corpus' statistics.
        let terms = self.bm25.query_terms(&terms);
        let stats = self.corpus_stats().await?;
        let frequencies = self.stem_frequencies(&terms).await?;
        let weighted: Vec<(u32, u32, f64)> = terms
            .iter()
            .zip(&frequencies)
            .map(|(&(term, times), &n)| (term, times, sparse::idf(stats.rows.max(n), n)))
            .collect();
        let mut hits = candidates
            .into_iter()
            .map(|p| {
                let id = memory_id(p.id.as_ref())?;
                let text = |f: &str| p.payload.get(f).and_then(|v| v.as_str()).map(String::as_str);
                let document = self.bm25.analyse(text(fields[0]).unwrap_or_default(), text(fields[1]), text(fields[2]));
                Ok(ScoredId { id, score: sparse::score(&document, &weighted, stats.avg_len) })
            })
            .collect::<Result<Vec<_>>>()?;
        // FTS5's order: best first, ties to the smaller id.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
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
            .map(|(memory, vector, _)| StoredMemory {
                edges: edges.remove(&memory.id).unwrap_or_default(),
                vector,
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

    async fn reserve_ids(&self, count: u64) -> Result<MemoryId> {
        Ok(self.clock.reserve(count))
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
                self.point(&s.memory, vector, Kept::default())
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

fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// The store's requests, checked against a mock of the client: what is sent, in which order, and
/// what happens when the server fails. (The conformance suite runs on a real server.)
#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MockQdrantApi;
    use atlas_domain::{Scope, Timestamp};
    use qdrant_client::qdrant::{DeletePoints, QueryPoints, ScoredPoint};
    use std::sync::Mutex;

    fn turn(text: &str, speaker: &str, t: i64) -> NewMemory {
        let scope = Scope { session: Some("s".into()), user: Some("ann".into()), ..Scope::default() };
        NewMemory::episode(text, scope, Some(speaker.into()), Timestamp(t), Timestamp(t))
    }

    /// A collection that exists, with the payload indexes of this version, and nothing for an
    /// open to finish (no write records, no memory ids yet).
    pub(crate) fn existing_collection() -> MockQdrantApi {
        let mut api = MockQdrantApi::new();
        api.expect_collection_exists().returning(|_| Ok(true));
        api.expect_collection_info().returning(|_| Ok(all_indexes()));
        api.expect_scroll()
            .withf(|r| to_meta(&r.collection_name) && format!("{:?}", r.filter).contains("\"writing\""))
            .returning(|_| Ok(Default::default()));
        api.expect_scroll()
            .withf(|r| r.order_by.as_ref().is_some_and(|o| o.key == "id"))
            .returning(|_| Ok(Default::default()));
        // The space's settings: no model bound yet.
        api.expect_get_points().withf(|r| to_meta(&r.collection_name)).returning(|_| Ok(Vec::new()));
        api
    }

    fn all_indexes() -> qdrant_client::qdrant::GetCollectionInfoResponse {
        let info = qdrant_client::qdrant::CollectionInfo {
            payload_schema: collection::INDEXED_FIELDS
                .iter()
                .chain(&meta::INDEXED_FIELDS)
                .map(|(f, _)| ((*f).to_owned(), Default::default()))
                .collect(),
            ..Default::default()
        };
        qdrant_client::qdrant::GetCollectionInfoResponse { result: Some(info), ..Default::default() }
    }

    async fn open(dir: &Path, api: MockQdrantApi) -> QdrantStore {
        QdrantStore::open_with(&dir.join("space.db"), QdrantOptions::new("http://q:6334"), Arc::new(api)).await.unwrap()
    }

    fn text_of(p: &PointStruct, key: &str) -> Option<String> {
        p.payload.get(key).map(|v| serde_json::Value::from(v.clone())).and_then(|v| v.as_str().map(str::to_owned))
    }

    fn to_meta(collection: &str) -> bool {
        collection.ends_with("_meta")
    }

    /// What a mock server holds: the points of each collection (by their id's debug form) and
    /// a log of the calls, "call collection". Writes ignore their conditions except
    /// insert-only; enough to follow a write from its record to its reveal.
    #[derive(Default)]
    struct Server {
        points: HashMap<String, Vec<PointStruct>>,
        log: Vec<String>,
    }

    impl Server {
        fn of(&mut self, collection: &str) -> &mut Vec<PointStruct> {
            self.points.entry(if to_meta(collection) { "meta" } else { "memories" }.to_owned()).or_default()
        }

        fn note(&mut self, call: &str, collection: &str) {
            self.log.push(format!("{call} {}", if to_meta(collection) { "meta" } else { "memories" }));
        }

        fn memories(&self) -> Vec<PointStruct> {
            self.points.get("memories").cloned().unwrap_or_default()
        }
    }

    fn retrieved(p: &PointStruct) -> RetrievedPoint {
        RetrievedPoint { id: p.id.clone(), payload: p.payload.clone(), ..Default::default() }
    }

    /// The points a selector names: listed ids, ids in a filter, or (any other filter) all.
    fn selected(selector: Option<&qdrant_client::qdrant::PointsSelector>, points: &[PointStruct]) -> Vec<usize> {
        use qdrant_client::qdrant::points_selector::PointsSelectorOneOf;
        let ids: Option<Vec<PointId>> = match selector.and_then(|s| s.points_selector_one_of.as_ref()) {
            Some(PointsSelectorOneOf::Points(list)) => Some(list.ids.clone()),
            Some(PointsSelectorOneOf::Filter(f)) => f.must.iter().find_map(|c| match &c.condition_one_of {
                Some(qdrant_client::qdrant::condition::ConditionOneOf::HasId(h)) => Some(h.has_id.clone()),
                _ => None,
            }),
            None => None,
        };
        (0..points.len())
            .filter(|i| ids.as_ref().is_none_or(|ids| ids.contains(points[*i].id.as_ref().unwrap())))
            .collect()
    }

    /// A mock server; `failing_upserts` makes every upsert of memories fail (unreachable).
    fn server(failing_upserts: bool) -> (MockQdrantApi, Arc<Mutex<Server>>) {
        let state: Arc<Mutex<Server>> = Arc::default();
        let mut api = MockQdrantApi::new();
        api.expect_collection_exists().returning(|_| Ok(true));
        api.expect_collection_info().returning(|_| Ok(all_indexes()));
        let s = Arc::clone(&state);
        api.expect_upsert_points().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note("upsert", &r.collection_name);
            if failing_upserts && !to_meta(&r.collection_name) {
                return Err(qdrant_client::QdrantError::ResponseError {
                    status: tonic::Status::unavailable("connection refused"),
                });
            }
            let insert_only = r.update_mode == Some(qdrant_client::qdrant::UpdateMode::InsertOnly as i32);
            let held = s.of(&r.collection_name);
            for p in r.points {
                match held.iter().position(|h| h.id == p.id) {
                    Some(_) if insert_only => {}
                    Some(i) => held[i] = p,
                    None => held.push(p),
                }
            }
            Ok(())
        });
        let s = Arc::clone(&state);
        api.expect_get_points().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note("get", &r.collection_name);
            let held = s.of(&r.collection_name);
            Ok(held.iter().filter(|p| r.ids.contains(p.id.as_ref().unwrap())).map(retrieved).collect())
        });
        let s = Arc::clone(&state);
        api.expect_set_payload().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note("set_payload", &r.collection_name);
            let held = s.of(&r.collection_name);
            for i in selected(r.points_selector.as_ref(), held) {
                held[i].payload.extend(r.payload.clone());
            }
            Ok(())
        });
        let s = Arc::clone(&state);
        api.expect_delete_payload().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note("delete_payload", &r.collection_name);
            let held = s.of(&r.collection_name);
            for i in selected(r.points_selector.as_ref(), held) {
                for key in &r.keys {
                    held[i].payload.remove(key);
                }
            }
            Ok(())
        });
        let s = Arc::clone(&state);
        api.expect_delete_points().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note(&format!("delete {}", deleted(&r)), &r.collection_name);
            Ok(())
        });
        let s = Arc::clone(&state);
        api.expect_scroll().returning(move |r| {
            let mut s = s.lock().unwrap();
            s.note("scroll", &r.collection_name);
            // Only the edges of a memory are ever found (the store's other scrolls: nothing).
            let edges = to_meta(&r.collection_name) && r.filter.as_ref().is_some_and(|f| !f.should.is_empty());
            let points = if edges {
                s.of(&r.collection_name).iter().filter(|p| p.payload.contains_key("src")).map(retrieved).collect()
            } else {
                Vec::new()
            };
            Ok(api::ScrollPage { points, next: None })
        });
        api.expect_count().returning(|_| Ok(0));
        (api, state)
    }

    fn deleted(request: &DeletePoints) -> String {
        format!("{:?}", request.points)
    }

    #[tokio::test]
    async fn an_insert_lands_invisible_is_read_back_then_one_commit_reveals_it() {
        let dir = tempfile::tempdir().unwrap();
        let (api, state) = server(false);
        let store = open(dir.path(), api).await;
        state.lock().unwrap().log.clear();
        let ids =
            store.insert(vec![turn("Been to Lisbon?", "Bo", 1), turn("Yes, twice", "Ann", 2)], None).await.unwrap();
        assert!(ids[0] < ids[1] && ids[1].0 < 1 << 53, "{ids:?}");
        {
            let s = state.lock().unwrap();
            let calls: Vec<&str> = s.log.iter().map(String::as_str).collect();
            assert_eq!(
                calls[..9],
                [
                    "upsert meta",             // the write's record, `writing` (unkeyed: its own id)
                    "scroll memories",         // the turn before the first one in its session
                    "upsert memories",         // the points, pending, insert-only
                    "get memories",            // ... read back: no id another write took
                    "upsert meta",             // the temporal edge, pending
                    "set_payload meta",        // the commit
                    "get meta",                // ... read back: committed by this write
                    "delete_payload memories", // revealed
                    "delete_payload meta",     // its edge too
                ],
                "{calls:#?}"
            );
            // The session's bookkeeping (created, then raised), then the record goes.
            assert_eq!(calls[9..11], ["upsert meta", "set_payload meta"], "{calls:#?}");
            assert!(calls[11].starts_with("delete Some") && calls.len() == 12, "{calls:#?}");
            // Two more writes, one to the same session: its bookkeeping exists, one raise and no
            // creation; no edges (this mock's scroll finds no earlier turn), nothing to reveal in meta.
        }
        state.lock().unwrap().log.clear();
        store.insert(vec![turn("And you?", "Ann", 3)], None).await.unwrap();
        store
            .insert(vec![NewMemory::episode("no session", Scope::default(), None, Timestamp(4), Timestamp(4))], None)
            .await
            .unwrap();
        let s = state.lock().unwrap();
        let calls: Vec<&str> = s.log.iter().map(String::as_str).collect();
        let count = |call: &str| calls.iter().filter(|c| **c == call).count();
        assert_eq!(count("upsert meta"), 2, "the two records: {calls:#?}");
        assert_eq!(count("set_payload meta"), 3, "two commits, one raise: {calls:#?}");
        assert_eq!(count("delete_payload meta"), 0, "{calls:#?}");
        let points = s.memories();
        let reply = points.iter().find(|p| p.id == Some(PointId::from(ids[1].0 as u64))).unwrap();
        assert_eq!(text_of(reply, "context").as_deref(), Some("Bo: Been to Lisbon?"));
        assert_eq!(text_of(reply, "user").as_deref(), Some("ann"));
        assert!(!reply.payload.contains_key(ledger::field::PENDING), "visible once committed");
        assert!(reply.payload.contains_key(ledger::field::WRITE));
        assert!(reply.payload.contains_key(queue::field::VECTOR_QUEUE), "queued for a vector");
    }

    #[tokio::test]
    async fn a_failed_upsert_removes_what_may_have_landed_and_names_the_collection() {
        let dir = tempfile::tempdir().unwrap();
        let (api, state) = server(true);
        let store = open(dir.path(), api).await;
        state.lock().unwrap().log.clear();
        let err = store.insert(vec![turn("a", "Bo", 1), turn("b", "Ann", 2)], None).await.unwrap_err().to_string();
        assert!(err.contains("unreachable") && err.contains(store.collection()), "{err}");
        let s = state.lock().unwrap();
        assert!(!s.log.iter().any(|c| c == "set_payload meta"), "never committed: {:?}", s.log);
        let deletes: Vec<&String> = s.log.iter().filter(|c| c.starts_with("delete")).collect();
        assert_eq!(deletes.len(), 3, "its points, its edges, its record: {deletes:?}");
        assert!(deletes[0].contains("pending") && deletes[0].ends_with("memories"), "{deletes:?}");
        assert!(deletes[1].contains("pending") && deletes[1].ends_with("meta"), "{deletes:?}");
    }

    #[tokio::test]
    async fn forgetting_a_turn_rewrites_its_reply_without_it_before_deleting_it() {
        let dir = tempfile::tempdir().unwrap();
        let (api, state) = server(false);
        let store = open(dir.path(), api).await;
        let ids =
            store.insert(vec![turn("Been to Lisbon?", "Bo", 1), turn("Yes, twice", "Ann", 2)], None).await.unwrap();
        state.lock().unwrap().log.clear();
        assert!(store.forget(ids[0]).await.unwrap());
        let s = state.lock().unwrap();
        let upserts: Vec<usize> = (0..s.log.len()).filter(|i| s.log[*i] == "upsert memories").collect();
        let delete = s.log.iter().position(|c| c.starts_with("delete") && c.ends_with("memories")).unwrap();
        assert_eq!(upserts.len(), 1, "{:?}", s.log);
        assert!(upserts[0] < delete, "the reply is rewritten first: {:?}", s.log);
        let reply = s.memories().into_iter().find(|p| p.id == Some(PointId::from(ids[1].0 as u64))).unwrap();
        assert_eq!(text_of(&reply, "context"), None);
        assert_eq!(text_of(&reply, "text").as_deref(), Some("Yes, twice"));
        assert!(reply.payload.contains_key(queue::field::VECTOR_QUEUE), "re-embedded without it");
        assert!(s.log[delete].contains(&format!("Num({})", ids[0].0)), "{:?}", s.log);
    }

    #[tokio::test]
    async fn text_search_finds_candidates_by_the_sparse_vector_and_ranks_them_as_fts5() {
        let dir = tempfile::tempdir().unwrap();
        let mut api = existing_collection();
        let long = "we went to Lisbon and Lisbon again on a long trip of many days";
        let candidate = |id: u64, score: f32, text: &str| ScoredPoint {
            id: Some(PointId::from(id)),
            score,
            payload: qdrant_client::Payload::from(serde_json::json!({"text": text}).as_object().unwrap().clone())
                .into(),
            ..Default::default()
        };
        let (long_text, short_text) = (long.to_owned(), "Lisbon".to_owned());
        api.expect_query()
            .times(1)
            .withf(|q: &QueryPoints| {
                let filter = format!("{:?}", q.filter);
                q.using.as_deref() == Some(collection::TEXT_VECTOR)
                    && q.limit == Some(TEXT_POOL_MIN as u64)
                    && filter.contains("\"user\"")
                    && filter.contains("Keyword(\"ann\")")
            })
            // Qdrant's order (its own IDF, an assumed average length) puts the long one first.
            .returning(move |_| Ok(vec![candidate(7, 9.0, &long_text), candidate(8, 1.0, &short_text)]));
        // 10 rows; the stem of "lisbon" in 2 of them.
        api.expect_count()
            .returning(|r| Ok(if r.filter.as_ref().is_some_and(|f| !f.must.is_empty()) { 2 } else { 10 }));
        api.expect_scroll().times(1).withf(|r| r.order_by.is_none() && !to_meta(&r.collection_name)).returning(|_| {
            let points = (1..=10u64)
                .map(|id| RetrievedPoint {
                    id: Some(PointId::from(id)),
                    payload: qdrant_client::Payload::from(
                        serde_json::json!({"text_len": 6}).as_object().unwrap().clone(),
                    )
                    .into(),
                    ..Default::default()
                })
                .collect();
            Ok(api::ScrollPage { points, next: None })
        });
        let store = open(dir.path(), api).await;
        let only_ann =
            RecallFilter { scope: Scope { user: Some("ann".into()), ..Scope::default() }, ..Default::default() };
        let hits = store.search_text(vec!["lisbon".into()], only_ann, 5).await.unwrap();
        let bm = Bm25::new(20.0);
        let term = bm.query_terms(&["lisbon".into()])[0].0;
        let idf = sparse::idf(10, 2);
        let exact = |text: &str| sparse::score(&bm.analyse(text, None, None), &[(term, 1, idf)], 6.0);
        assert_eq!(
            hits,
            [ScoredId { id: MemoryId(8), score: exact("Lisbon") }, ScoredId { id: MemoryId(7), score: exact(long) }]
        );
    }
}
