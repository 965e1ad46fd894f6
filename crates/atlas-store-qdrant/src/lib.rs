//! The Qdrant adapter: every storage port of `atlas-domain` on a Qdrant server or cluster.
//!
//! One collection per memory space holds every kind of memory as points (point id = memory id,
//! the record as payload with indexes on scope, kind, times and validity), a dense named vector
//! per embedding model and a sparse `text` vector that finds BM25 candidates, rescored as every
//! store scores them (see [`sparse`]). Filters are
//! pushed down to Qdrant. What Qdrant does not model (id allocation, the ledger of acknowledged
//! writes, settings) lives in the space's SQLite file ([`sidecar`]); typed edges are points of
//! the space's meta collection ([`meta`]), the vector queue is state of the points ([`queue`]).

pub mod api;
mod collection;
mod consolidation;
mod decode;
pub mod filter;
mod keys;
pub mod ledger;
mod legacy;
mod memories;
pub mod meta;
pub mod payload;
mod points;
mod queue;
mod replica;
mod schema;
pub mod sidecar;
pub mod sparse;
#[cfg(test)]
mod tests;
mod text_index;
mod vector_index;
mod write;

use crate::api::QdrantApi;
use crate::collection::{Collection, dense_vector_name};
use crate::decode::{decode, memory_id};
use crate::sidecar::Sidecar;
use crate::sparse::Bm25;
use atlas_domain::ports::EmbeddingModel;
use atlas_domain::{AtlasError, Result};
use qdrant_client::Qdrant;
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::{PointId, ScrollPointsBuilder, VectorsSelector};
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
    /// The space's mean vector as last estimated ([`vector_index`]).
    mean: tokio::sync::Mutex<Option<vector_index::MeanEstimate>>,
    /// Vectors this store wrote or deleted, to know when an exact mean is stale.
    vector_writes: std::sync::atomic::AtomicU64,
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
            mean: tokio::sync::Mutex::new(None),
            vector_writes: std::sync::atomic::AtomicU64::new(0),
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
            [(&self.collection, crate::schema::MEMORY_INDEXES.as_slice()), (&self.meta, &crate::schema::META_INDEXES)]
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
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
}
