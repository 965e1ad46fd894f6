//! The ATLAS runtime: the only crate that knows which adapters exist. It composes them from a
//! [`Config`] and exposes the Rust API: [`Atlas::open`], `remember`, `import`, `recall`, `get`,
//! `forget`, `stats`, `export`.

pub mod agents;
mod background;
mod backup;
pub mod bank;
pub mod concepts;
pub mod config;
pub mod consolidation;
pub mod context;
mod docs;
mod editing;
mod embedder_config;
mod explain;
pub mod forgetting;
mod graph_export;
mod import_pieces;
pub mod in_process;
pub mod inspect;
mod joined_embedder;
pub mod keys;
mod markdown_files;
mod mem0_config;
pub mod migrate;
mod model_adapters;
mod query_embedding;
mod recall;
pub mod wire;

pub use mem0_config::apply_mem0_config;
pub use model_adapters::{open_embedder, open_llm};

pub use backup::{ImportOptions, Imported, import_key, parse_trajectories, tenant_label};
pub use config::Config;
pub use consolidation::CycleReport;
pub use docs::DocsSynced;
pub use editing::Revised;
pub use explain::{EXPLAINED_CYCLES, Explanation};
pub use graph_export::GraphExported;
/// The one JSON Lines reader (BOM, blank lines, `origin:N` in errors, a line limit) of every
/// door that reads JSON Lines: imports, and the CLI's batch inputs.
pub use import_pieces::Lines as JsonLines;
pub use recall::{Hit, Recall, RecallRequest, SignalReport, StageTimings, recall};

use atlas_domain::policy::limits::validate;
use atlas_domain::ports::{
    Consolidator, Embedder, KeyStore, Llm, MemoryStore, ProgressFn, Replica, StoreStats, TextIndex, VectorIndex,
};
use atlas_domain::{AtlasError, Body, Edge, Memory, MemoryId, NewMemory, Result, Scope, Timestamp, Validity};
use background::Background;
use std::sync::Arc;

/// The adapters an [`Atlas`] runs on. [`Atlas::open`] builds them from configuration; tests and
/// embedders with their own adapters pass them to [`Atlas::from_parts`].
pub struct Parts {
    pub store: Arc<dyn MemoryStore>,
    pub text: Arc<dyn TextIndex>,
    pub vectors: Arc<dyn VectorIndex>,
    pub replica: Arc<dyn Replica>,
    /// The access keys of a served space.
    pub keys: Arc<dyn KeyStore>,
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The sleep cycle's port, where the store has it.
    pub consolidator: Option<Arc<dyn Consolidator>>,
    /// The language model of consolidation; `None` runs it on rules only.
    pub llm: Option<Arc<dyn Llm>>,
    /// Stops a recall asking an embedder that just failed for its query's vector.
    pub(crate) query_breaker: Arc<query_embedding::Breaker>,
}

impl Parts {
    /// One adapter that implements every storage port.
    pub fn from_store<S: MemoryStore + TextIndex + VectorIndex + Replica + KeyStore + 'static>(
        store: Arc<S>,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Self {
        Parts {
            store: store.clone(),
            text: store.clone(),
            vectors: store.clone(),
            replica: store.clone(),
            keys: store,
            embedder,
            consolidator: None,
            llm: None,
            query_breaker: Arc::default(),
        }
    }

    /// With the sleep cycle's port (the store usually implements it too).
    pub fn with_consolidator(mut self, consolidator: Arc<dyn Consolidator>) -> Self {
        self.consolidator = Some(consolidator);
        self
    }

    /// With a language model for consolidation.
    pub fn with_llm(mut self, llm: Arc<dyn Llm>) -> Self {
        self.llm = Some(llm);
        self
    }

    /// The storage adapters `config` names, without an embedder and without starting anything:
    /// for tools that read or copy a store (migrations) and must not change it.
    pub async fn open_store(config: &Config) -> Result<Parts> {
        match config.storage {
            config::StorageKind::Sqlite => open_sqlite(config, None),
            config::StorageKind::Qdrant => open_qdrant(config, None).await,
        }
    }
}

/// An episode for the hot path; the runtime stamps it with the time it was learned.
#[derive(Debug, Clone, Default)]
pub struct Remember {
    pub text: String,
    pub speaker: Option<String>,
    pub scope: Scope,
    /// When it was said; defaults to now.
    pub time: Option<Timestamp>,
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// An idempotency key: a retry with the same key (after a timeout, a crash) stores nothing
    /// again and returns the first call's id.
    pub key: Option<String>,
}

/// A memory with the edges that touch it.
#[derive(Debug, Clone)]
pub struct MemoryDetail {
    pub memory: Memory,
    pub edges: Vec<Edge>,
}

/// What `stats` reports.
#[derive(Debug, Clone)]
pub struct Stats {
    pub store: StoreStats,
    pub embedder: Option<String>,
    /// What the embedder has done since this instance opened (its calls to an endpoint).
    pub embedder_usage: Option<atlas_domain::ports::EmbedderUsage>,
    /// Queued memories set aside because the embedder refused their text or gave an unusable
    /// vector (`vector_failed`): how many, and the first [`SET_ASIDE_SHOWN`] with why.
    pub vector_failed: (u64, Vec<(MemoryId, String)>),
}

/// How many set-aside memories `stats` lists with why.
pub const SET_ASIDE_SHOWN: usize = 10;

/// An ATLAS memory space.
pub struct Atlas {
    parts: Arc<Parts>,
    config: Config,
    background: Background,
    sleeper: consolidation::Sleeper,
}

/// Keeps ONNX Runtime from writing a device id under `~/.cache/Microsoft` and from sending
/// telemetry (its 1DS client runs on Linux too): sets `ORT_DISABLE_TELEMETRY=1` unless the
/// environment says otherwise. The embedder does the same at its first load; a host process
/// calls this first, while it has one thread.
///
/// # Safety
/// It writes the environment: no other thread may read or write it meanwhile.
pub unsafe fn quiet_onnx_runtime() {
    if std::env::var_os("ORT_DISABLE_TELEMETRY").is_none() {
        // SAFETY: the caller guarantees no concurrent access to the environment.
        unsafe { std::env::set_var("ORT_DISABLE_TELEMETRY", "1") };
    }
}

/// The current time.
pub fn now() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(since_epoch.as_millis() as i64)
}

impl Atlas {
    /// Opens the memory space `config.db` with the adapters this build was compiled with.
    pub async fn open(config: Config) -> Result<Atlas> {
        let parts = open_parts(&config).await?;
        match Atlas::from_parts(parts, config.clone()).await {
            // A store embedded with another model of the manifest (or another width of its
            // Matryoshka model) keeps it unless one is configured: a new default model never
            // forces a re-embedding.
            Err(AtlasError::ModelMismatch { stored_model, stored_dim, configured_model, configured_dim })
                if config.embedder == config::EmbedderKind::Onnx =>
            {
                let Some(onnx) = model_adapters::stored_onnx_settings(&config.onnx, &stored_model, stored_dim) else {
                    return Err(AtlasError::ModelMismatch {
                        stored_model,
                        stored_dim,
                        configured_model,
                        configured_dim,
                    });
                };
                tracing::info!(model = %stored_model, dimensions = stored_dim, "embedding with the model the store was embedded with");
                let config = Config { onnx, ..config };
                let parts = open_parts(&config).await?;
                Atlas::from_parts(parts, config).await
            }
            other => other,
        }
    }

    /// Composes an instance from explicit adapters; binds the embedder's model to the store (a
    /// different model is an error) and starts the background embedding of pending memories.
    pub async fn from_parts(parts: Parts, config: Config) -> Result<Atlas> {
        if let Some(embedder) = &parts.embedder {
            parts.vectors.bind_model(embedder.model()).await?;
        }
        Ok(Atlas::compose(parts, config, true))
    }

    /// Re-embeds every memory with the configured model, replacing vectors of another model.
    /// Resumable: the switch to the new model and the queue of memories to embed are committed
    /// first, so an interrupted run continues where it stopped (here or in any later open).
    /// `progress` receives (done, total).
    pub async fn reembed(config: Config, progress: Option<Arc<dyn Fn(usize, usize) + Send + Sync>>) -> Result<usize> {
        Self::reembed_all_or_pending(config, false, progress).await
    }

    /// [`Atlas::reembed`], and with `all` every memory queued again even when the model is the
    /// same: what a memory is embedded as ([`atlas_domain::policy::embedding::embedding_text`])
    /// may have changed since its vector was made. Its vectors are dropped in the same
    /// transaction (recall answers from full text until they are back); interrupted, a later
    /// `reembed` without `all` finishes the queue.
    pub async fn reembed_all_or_pending(
        config: Config,
        all: bool,
        progress: Option<Arc<dyn Fn(usize, usize) + Send + Sync>>,
    ) -> Result<usize> {
        let parts = open_parts(&config).await?;
        let embedder = parts.embedder.clone().ok_or_else(|| {
            AtlasError::Config("reembed needs an embedder; this configuration has embedder = \"none\"".into())
        })?;
        match parts.vectors.bind_model(embedder.model()).await {
            Ok(()) if all => {
                parts.vectors.rebind_model(embedder.model()).await?;
            }
            Ok(()) => {}
            Err(AtlasError::ModelMismatch { stored_model, .. }) => {
                tracing::info!(from = %stored_model, to = %embedder.model().name, "switching the store to a new embedding model");
                parts.vectors.rebind_model(embedder.model()).await?;
            }
            Err(e) => return Err(e),
        }
        // No background task: this call drains the queue itself and reports its progress.
        let atlas = Atlas::compose(parts, config, false);
        let total = atlas.parts.store.stats().await?.pending_vectors as usize;
        let report: Option<ProgressFn> = progress.map(|p| Arc::new(move |done| p(done, total)) as ProgressFn);
        atlas.background.drain(report).await
    }

    fn compose(parts: Parts, config: Config, background_task: bool) -> Atlas {
        let parts = Arc::new(parts);
        let background = Background::start(Arc::clone(&parts), config.embed_batch.max(1), background_task);
        Atlas { parts, config, background, sleeper: consolidation::Sleeper::new() }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The hot path: validates and commits one episode and returns its id. It never waits for
    /// an embedding or an LLM: the background task embeds it later.
    pub async fn remember(&self, input: Remember) -> Result<MemoryId> {
        let receipt = match &input.key {
            Some(key) if key.trim().is_empty() => {
                return Err(AtlasError::invalid("remember", "field \"key\": empty (omit it, or give a unique key)"));
            }
            Some(key) => Some(format!("remember:{key}")),
            None => None,
        };
        let mut ids = self.remember_all(vec![input], receipt).await?;
        ids.pop().ok_or_else(|| AtlasError::Storage("a write of one memory returned no id".into()))
    }

    /// Stores every item or none: each is validated before the first is written (an error
    /// names `location[i]`), and all are committed in one transaction. With `receipt` (an
    /// idempotency key, used as given: the caller names its space) a retry stores nothing and
    /// returns the first call's ids, and a retry with another payload is a
    /// [`AtlasError::Conflict`]. The items' own `key`s are ignored.
    pub async fn remember_all(&self, items: Vec<Remember>, receipt: Option<String>) -> Result<Vec<MemoryId>> {
        let now = now();
        let mut memories = Vec::with_capacity(items.len());
        for (i, input) in items.iter().enumerate() {
            let event_time = input.time.unwrap_or(now);
            let memory = NewMemory {
                scope: input.scope.clone(),
                text: input.text.clone(),
                event_time,
                recorded_at: now,
                validity: Validity::from(event_time),
                meta: input.meta.clone(),
                body: Body::Episode { speaker: input.speaker.clone() },
            };
            let location = if items.len() == 1 { "remember".to_owned() } else { format!("memories[{i}]") };
            validate(&memory, self.config.max_text_bytes, &location)?;
            memories.push(memory);
        }
        let ids = match receipt {
            Some(key) => {
                let receipt = self.parts.store.insert_once(key.clone(), memories, None).await?;
                if receipt.replayed {
                    self.check_replay(&key, &items, &receipt.ids).await?;
                    return Ok(receipt.ids);
                }
                receipt.ids
            }
            None => self.parts.store.insert(memories, None).await?,
        };
        self.background.wake();
        self.sleeper.written(ids.len(), self.config.consolidation.every);
        Ok(ids)
    }

    /// A replayed write must be the same write: the same number of memories with the same text,
    /// speaker, scope, meta and (where the retry gives one) time.
    async fn check_replay(&self, key: &str, items: &[Remember], ids: &[MemoryId]) -> Result<()> {
        let stored = self.parts.store.get_many(ids.to_vec()).await?;
        let same = stored.len() == items.len()
            && stored.iter().zip(items).all(|(m, item)| {
                let speaker = match &m.body {
                    Body::Episode { speaker } => speaker.as_ref(),
                    _ => None,
                };
                m.text == item.text
                    && speaker == item.speaker.as_ref()
                    && m.scope == item.scope
                    && m.meta == item.meta
                    && item.time.is_none_or(|t| t == m.event_time)
            });
        if same {
            Ok(())
        } else {
            let shown = key.split_once(':').map_or(key, |(_, k)| k);
            Err(AtlasError::Conflict(format!(
                "the idempotency key {shown:?} was used before for another payload; nothing was stored \
                 (use a new key for a new write)"
            )))
        }
    }

    /// Answers from every signal it has. It never waits for the backlog of memories without a
    /// vector: [`Atlas::catch_up`] bounds that work, full text covers the rest, and the answer
    /// says how many still wait (`pending_vectors`).
    pub async fn recall(&self, request: RecallRequest) -> Result<Recall> {
        let mut answer = recall::recall(&self.parts, &self.config.recall, request, now()).await?;
        answer.pending_vectors = self.parts.vectors.queued_vectors().await?;
        Ok(answer)
    }

    /// Runs the sleep cycle in the background from now on: after every `consolidation.every`
    /// new episodes, after `consolidation.idle_secs` without one, and at [`Atlas::end_session`].
    /// For long-lived processes; a no-op when the store cannot consolidate.
    pub fn start_sleep_cycle(&self) {
        if self.parts.consolidator.is_some() {
            self.sleeper.start(
                Arc::clone(&self.parts),
                self.config.consolidation.clone(),
                self.config.max_text_bytes,
                self.config.forgetting.decay_every_hours,
                self.config.bank.dir.clone(),
            );
        }
    }

    /// Says a session is over: the background sleep cycle runs now.
    pub fn end_session(&self) {
        self.sleeper.session_ended();
    }

    /// Runs one sleep cycle now (see [`consolidation`]): rules, and the model where one is
    /// configured, within its call budget.
    pub async fn consolidate(&self) -> Result<CycleReport> {
        let report =
            consolidation::run_cycle(&self.parts, &self.config.consolidation, self.config.max_text_bytes, now())
                .await?;
        self.write_configured_bank().await?;
        Ok(report)
    }

    /// With `[bank] dir` set, writes the bank after a cycle (its changes land whole).
    async fn write_configured_bank(&self) -> Result<()> {
        if let Some(dir) = &self.config.bank.dir {
            bank::write(&self.parts, dir).await?;
        }
        Ok(())
    }

    /// [`Atlas::consolidate`] with every session closed now: each gets its summary, however
    /// recently it was spoken in (what `end_session` does in the background).
    pub async fn consolidate_ending_sessions(&self) -> Result<CycleReport> {
        let config = config::ConsolidationConfig { session_idle_secs: 0, ..self.config.consolidation.clone() };
        let report = consolidation::run_cycle(&self.parts, &config, self.config.max_text_bytes, now()).await?;
        self.write_configured_bank().await?;
        Ok(report)
    }

    /// The reports of the last `limit` cycles, newest first.
    pub async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        match &self.parts.consolidator {
            Some(c) => c.cycles(limit).await,
            None => Ok(Vec::new()),
        }
    }

    /// Embeds queued memories for at most `recall.embed_budget_ms` (a process that just wrote
    /// them searches their vectors too); memories another process has claimed are left to it.
    /// A failure is logged, never fatal: recall still answers from full text.
    pub async fn catch_up(&self) -> usize {
        let budget = std::time::Duration::from_millis(self.config.recall.embed_budget_ms);
        match self.background.catch_up(budget).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "embedding pending memories before recall failed; recalling without them");
                0
            }
        }
    }

    pub async fn get(&self, id: MemoryId) -> Result<Option<MemoryDetail>> {
        let Some(memory) = self.parts.store.get(id).await? else {
            return Ok(None);
        };
        let edges = self.parts.store.edges_of(id).await?;
        Ok(Some(MemoryDetail { memory, edges }))
    }

    /// Many memories by id; missing ones are skipped, the order follows `ids`.
    pub async fn get_many(&self, ids: Vec<MemoryId>) -> Result<Vec<Memory>> {
        self.parts.store.get_many(ids).await
    }

    pub async fn stats(&self) -> Result<Stats> {
        Ok(Stats {
            store: self.parts.store.stats().await?,
            embedder: self.parts.embedder.as_ref().map(|e| e.model().name),
            embedder_usage: self.parts.embedder.as_ref().map(|e| e.usage()),
            vector_failed: self.parts.vectors.set_aside_vectors(SET_ASIDE_SHOWN).await?,
        })
    }

    /// Embeds every pending memory now; returns how many were embedded. `progress` receives
    /// the running count.
    pub async fn flush_vectors(&self, progress: Option<ProgressFn>) -> Result<usize> {
        self.background.drain(progress).await
    }

    /// Loads the search indexes now (and, on a store with cache files, writes them for the next
    /// process): after a bulk write, so that the next recall, here or in another process, does
    /// not pay for bringing them up to date with everything written.
    pub async fn prepare_search(&self) -> Result<()> {
        prepare_search(&self.parts).await
    }

    /// For a long-lived process (a server, a binding), at its start: loads the search indexes
    /// in the background now, so that every write from then on extends them as it commits and
    /// no recall, however much was written first, pays for bringing them up to date. A failure
    /// only warns: the first recall loads them instead.
    pub fn keep_search_current(&self) -> tokio::task::JoinHandle<()> {
        let parts = Arc::clone(&self.parts);
        tokio::spawn(async move {
            if let Err(why) = prepare_search(&parts).await {
                tracing::warn!(%why, "the search indexes were not loaded ahead; the first recall loads them");
            }
        })
    }

    /// How many memories still wait for a vector.
    pub async fn pending_vectors(&self) -> Result<u64> {
        self.parts.vectors.queued_vectors().await
    }

    /// The embedder, when one is configured (for `atlas embed`).
    pub fn embedder(&self) -> Option<Arc<dyn Embedder>> {
        self.parts.embedder.clone()
    }
}

/// Brings both search indexes up to date with the store, side by side.
async fn prepare_search(parts: &Parts) -> Result<()> {
    tokio::try_join!(parts.text.prepare_search(), parts.vectors.prepare_search())?;
    Ok(())
}

/// Builds the adapters `config` names, as this build has them.
async fn open_parts(config: &Config) -> Result<Parts> {
    // An endpoint whose dimension is not configured is asked for it at start, unless the space
    // has recorded it: then the space opens, imports and serves while the endpoint is away.
    let asks_endpoint = config.embedder == config::EmbedderKind::Http && config.http.dimensions.is_none();
    let parts = if asks_endpoint {
        let mut parts = Parts::open_store(config).await?;
        let recorded = parts.store.stats().await?.embedding_model;
        parts.embedder = model_adapters::open_embedder_recorded(config, recorded).await?;
        parts
    } else {
        let embedder = open_embedder(config).await?;
        match config.storage {
            config::StorageKind::Sqlite => open_sqlite(config, embedder),
            config::StorageKind::Qdrant => open_qdrant(config, embedder).await,
        }?
    };
    Ok(match open_llm(&config.llm)? {
        Some(llm) => parts.with_llm(llm),
        None => parts,
    })
}

#[cfg(feature = "store-sqlite")]
fn open_sqlite(config: &Config, embedder: Option<Arc<dyn Embedder>>) -> Result<Parts> {
    use atlas_store_sqlite::{Durability, SqliteOptions, SqliteStore};
    let durability = match config.durability {
        config::DurabilityKind::Normal => Durability::Normal,
        config::DurabilityKind::Full => Durability::Full,
    };
    let vector_precision = match config.vector_cache {
        config::VectorCacheKind::Auto => None,
        config::VectorCacheKind::F32 => Some(atlas_store_sqlite::Precision::F32),
        config::VectorCacheKind::Int8 => Some(atlas_store_sqlite::Precision::Int8),
    };
    let options = SqliteOptions {
        durability,
        vector_precision,
        create: config.create,
        busy_timeout: std::time::Duration::from_millis(config.busy_timeout_ms),
        ..SqliteOptions::default()
    };
    let store = Arc::new(SqliteStore::open(&config.db, &options)?);
    Ok(Parts::from_store(Arc::clone(&store), embedder).with_consolidator(store))
}

#[cfg(feature = "store-qdrant")]
async fn open_qdrant(config: &Config, embedder: Option<Arc<dyn Embedder>>) -> Result<Parts> {
    let store = Arc::new(atlas_store_qdrant::QdrantStore::open(&config.db, qdrant_options(&config.qdrant)?).await?);
    Ok(Parts::from_store(Arc::clone(&store), embedder).with_consolidator(store))
}

/// The Qdrant adapter's options from the `[qdrant]` section.
#[cfg(feature = "store-qdrant")]
pub fn qdrant_options(q: &config::QdrantConfig) -> Result<atlas_store_qdrant::QdrantOptions> {
    use atlas_store_qdrant::{QdrantOptions, Quantization};
    let url = q.url.clone().ok_or_else(|| {
        AtlasError::Config("storage = \"qdrant\" needs qdrant.url (or --qdrant-url, or ATLAS_QDRANT_URL)".into())
    })?;
    let mut options = QdrantOptions::new(url);
    options.api_key = q.api_key.clone();
    options.space = q.space.clone();
    options.timeout = std::time::Duration::from_millis(q.timeout_ms.max(1));
    options.connect_timeout = std::time::Duration::from_millis(q.connect_timeout_ms.max(1));
    options.collection_prefix = q.collection_prefix.clone();
    options.shards = q.shards;
    options.replication_factor = q.replication_factor;
    options.write_consistency_factor = q.write_consistency_factor;
    options.on_disk_vectors = q.on_disk_vectors;
    options.quantization = match q.quantization.as_str() {
        "none" => Quantization::None,
        "int8" => Quantization::Int8,
        other => return Err(AtlasError::Config(format!("qdrant.quantization: expected none or int8, got {other:?}"))),
    };
    options.batch = q.batch.max(1);
    Ok(options)
}

#[cfg(not(feature = "store-qdrant"))]
async fn open_qdrant(_: &Config, _: Option<Arc<dyn Embedder>>) -> Result<Parts> {
    Err(AtlasError::Config("storage = \"qdrant\" needs atlas built with the store-qdrant feature".into()))
}

#[cfg(not(feature = "store-sqlite"))]
fn open_sqlite(_: &Config, _: Option<Arc<dyn Embedder>>) -> Result<Parts> {
    Err(AtlasError::Config("storage = \"sqlite\" needs atlas built with the store-sqlite feature".into()))
}
