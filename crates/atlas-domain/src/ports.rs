//! Ports: the small async traits that storage, embedding and LLM adapters implement.
//!
//! A store implements [`MemoryStore`], [`TextIndex`], [`VectorIndex`], [`Replica`] and
//! [`KeyStore`] (one adapter may implement all of them over one database); `atlas-testing` runs
//! one conformance suite over every
//! implementation, the in-memory fake included.

use crate::{Edge, EdgeKind, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Timestamp};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Called with the number of records written so far, for progress bars on bulk writes.
pub type ProgressFn = Arc<dyn Fn(usize) + Send + Sync>;

/// A search hit from one signal: the memory and that signal's raw score (higher is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredId {
    pub id: MemoryId,
    pub score: f64,
}

/// Counts a store reports about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub memories_by_kind: BTreeMap<MemoryKind, u64>,
    pub edges: u64,
    /// Memories soft-deleted (counted in `memories_by_kind` too), recoverable until archived.
    pub soft_deleted: u64,
    pub vectors: u64,
    /// Memories still waiting for a vector.
    pub pending_vectors: u64,
    /// Bytes on disk, where the store has a disk.
    pub bytes: Option<u64>,
    pub schema_version: Option<i64>,
    pub embedding_model: Option<EmbeddingModel>,
}

impl StoreStats {
    pub fn memories(&self) -> u64 {
        self.memories_by_kind.values().sum()
    }
}

/// Which model made a store's vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingModel {
    pub name: String,
    pub dimension: usize,
}

/// What a write keyed for idempotency did: the ids it stored, or, when the key had already
/// been used, the ids that first write stored (and nothing was written again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub ids: Vec<MemoryId>,
    /// The key had been used before: this call wrote nothing.
    pub replayed: bool,
    /// When the write under this key committed.
    pub recorded_at: Timestamp,
}

/// The pieces of one write, in order, pulled by the store while it writes them: an import
/// parses its file a piece at a time, so a file of any size is held one piece at a time. An
/// `Err` piece ends the write and nothing of it is stored.
pub type Pieces = Box<dyn Iterator<Item = Result<Vec<NewMemory>>> + Send>;

/// [`Pieces`] of a restore: stored memories in id order, pulled one piece at a time.
pub type StoredPieces = Box<dyn Iterator<Item = Result<Vec<StoredMemory>>> + Send>;

/// Every piece in one batch, or the first error: for a store that writes a batch whole.
pub fn gather<T>(pieces: impl Iterator<Item = Result<Vec<T>>>) -> Result<Vec<T>> {
    let mut batch = Vec::new();
    for piece in pieces {
        batch.extend(piece?);
    }
    Ok(batch)
}

/// How long a claim on queued vector work lasts before another process may take it over.
pub const VECTOR_CLAIM_MS: i64 = 60_000;

/// Durable records and their edges.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Stores the batch atomically (all or nothing) and returns the new ids in input order; the
    /// write is durable when this returns. Every episode with a session gets a `temporal` edge
    /// from the episode of the same session, user and agent that precedes it in (event time, id)
    /// order among those stored before it. Every new memory joins the queue of memories awaiting a vector.
    async fn insert(&self, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>>;

    /// [`MemoryStore::insert`] at most once per `key`: the key is recorded in the write's own
    /// transaction, so a retry after a timeout, a crash or a lost answer stores nothing again
    /// and gets the first write's ids back (`replayed`).
    async fn insert_once(&self, key: String, batch: Vec<NewMemory>, progress: Option<ProgressFn>) -> Result<Receipt>;

    /// One write of a batch that arrives in `pieces`: all or nothing, like [`MemoryStore::insert`]
    /// of their concatenation (ids in input order, temporal edges within and across pieces),
    /// and under a `key` at most once, like [`MemoryStore::insert_once`] (a key already used
    /// pulls no piece and answers with the first write's receipt). `progress` counts memories
    /// stored so far over all pieces.
    async fn insert_pieces(&self, key: Option<String>, pieces: Pieces, progress: Option<ProgressFn>)
    -> Result<Receipt>;

    async fn get(&self, id: MemoryId) -> Result<Option<Memory>>;

    /// Fetches many at once; missing ids are skipped, the order follows `ids`.
    async fn get_many(&self, ids: Vec<MemoryId>) -> Result<Vec<Memory>>;

    /// Deletes a memory with its edges, text index entry and vector. Returns whether it existed.
    /// This is the hard delete; forgetting on purpose soft-deletes through [`MemoryStore::update`].
    async fn forget(&self, id: MemoryId) -> Result<bool>;

    /// Replaces memories' [`crate::Lifecycle`] (use, review schedule, soft deletion) and, where
    /// given, their body, atomically, leaving text, id, times, vector and edges as they are.
    /// A new body must be of the memory's kind and never an episode's (its speaker is indexed).
    /// Returns how many of the ids exist; unknown ids are skipped.
    async fn update(&self, updates: Vec<Update>) -> Result<u64>;

    /// Up to `limit` memories with ids greater than `after`, in id order (for export and migration).
    async fn scan(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<Memory>>;

    /// Edges that start or end at `id`.
    async fn edges_of(&self, id: MemoryId) -> Result<Vec<Edge>>;

    /// [`MemoryStore::edges_of`] of each of `ids`, in one round trip where the store can (a
    /// store on a server); the default asks for each in turn.
    async fn edges_of_many(&self, ids: Vec<MemoryId>) -> Result<std::collections::HashMap<MemoryId, Vec<Edge>>> {
        let mut out = std::collections::HashMap::with_capacity(ids.len());
        for id in ids {
            let edges = self.edges_of(id).await?;
            out.insert(id, edges);
        }
        Ok(out)
    }

    /// The typed links (every edge but temporal ones) of each of `ids`, at most `at_most` of
    /// each: enough to tell a hub (an entity hundreds of turns name) from a memory recall walks
    /// through, without reading all of a hub's links. A memory with at most `at_most` links
    /// gets them all; which `at_most` of a busier one's come back is the store's choice. The
    /// default reads every edge and keeps the first links; a store that can stop early does.
    async fn links_of_many(
        &self,
        ids: Vec<MemoryId>,
        at_most: usize,
    ) -> Result<std::collections::HashMap<MemoryId, Vec<Edge>>> {
        let mut all = self.edges_of_many(ids).await?;
        for edges in all.values_mut() {
            edges.retain(|e| e.kind != EdgeKind::Temporal);
            edges.truncate(at_most);
        }
        Ok(all)
    }

    /// The `limit` newest memories the filter admits, newest first by (event time, id): a
    /// session's recent history.
    async fn latest(&self, filter: RecallFilter, limit: usize) -> Result<Vec<Memory>>;

    async fn stats(&self) -> Result<StoreStats>;
}

/// A change of a stored memory's lifecycle and, optionally, of its body (a strategy's success
/// statistics, a concept's usage).
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub id: MemoryId,
    pub lifecycle: crate::Lifecycle,
    pub body: Option<crate::Body>,
}

impl Update {
    /// Checks that `body` may replace `current`'s (the rule every store applies).
    pub fn check_body(&self, current: &crate::Body) -> Result<()> {
        match &self.body {
            Some(new) if new.kind() != current.kind() => Err(crate::AtlasError::invalid(
                format!("memory {}", self.id),
                format!("field \"body\": a {} cannot take a {} body", current.kind(), new.kind()),
            )),
            Some(crate::Body::Episode { .. }) => Err(crate::AtlasError::invalid(
                format!("memory {}", self.id),
                "field \"body\": an episode's body is what was said and is never rewritten",
            )),
            _ => Ok(()),
        }
    }
}

/// Full-text search.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait TextIndex: Send + Sync {
    /// Memories containing any of `terms` (plain words, already normalised by
    /// [`crate::policy::query::terms`]; never query syntax), best first, at most `limit`.
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>>;

    /// Loads now what a search would load first (an in-memory index, and its file for the next
    /// process), so that after a bulk write the next search costs what any search costs. A store
    /// that loads nothing does nothing.
    async fn prepare_search(&self) -> Result<()> {
        Ok(())
    }
}

/// Dense vectors of memories, made by one embedding model.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait VectorIndex: Send + Sync {
    /// Binds the store to a model. The first binding is recorded; a later one with another name
    /// or dimension fails with [`crate::AtlasError::ModelMismatch`].
    async fn bind_model(&self, model: EmbeddingModel) -> Result<()>;

    /// Switches the store to `model` in one transaction: drops every vector, records the new
    /// model and queues every memory for embedding. Returns how many memories were queued.
    async fn rebind_model(&self, model: EmbeddingModel) -> Result<u64>;

    /// Claims up to `limit` memories awaiting a vector, oldest first, for this store instance
    /// for [`VECTOR_CLAIM_MS`]: another instance (another process) skips them until the claim
    /// expires, so no two processes embed the same memories. This instance's own claims are
    /// renewed, not skipped. Claims are released by `put_vectors` or by expiry.
    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>>;

    /// Loads now what a search would load first (as [`TextIndex::prepare_search`]).
    async fn prepare_search(&self) -> Result<()> {
        Ok(())
    }

    /// How many memories wait for a vector (claimed or not): cheap enough to ask on every recall.
    async fn queued_vectors(&self) -> Result<u64>;

    /// Stores vectors (replacing any) and takes their memories off the queue. Vectors of
    /// memories forgotten in the meantime are dropped.
    async fn put_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<()>;

    /// Sets `memories` aside, each with why: they stay queued, but no embedder claims them until
    /// `until` (a text the embedder refuses, or whose vector is unusable, waits on a long
    /// backoff instead of holding up the queue behind it). `put_vectors` takes one off the
    /// queue as usual; `rebind_model` (a re-embed) queues it afresh, claimable at once.
    async fn set_aside(&self, memories: Vec<(MemoryId, String)>, until: Timestamp) -> Result<()>;

    /// How many queued memories are set aside (see [`VectorIndex::set_aside`]), and up to `limit`
    /// of them with why, in id order.
    async fn set_aside_vectors(&self, limit: usize) -> Result<(u64, Vec<(MemoryId, String)>)>;

    /// Nearest memories to `query` by cosine similarity (score = similarity), best first.
    async fn search_vector(&self, query: Vec<f32>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>>;

    /// The mean of the stored vectors, `None` while none is stored: exact, or estimated from a
    /// uniform sample of at least [`MEAN_VECTOR_SAMPLE`] of them, and cheap enough to ask on every
    /// recall (stores keep it or cache it). It is the direction every embedding of the space
    /// shares, which recall takes out of the query
    /// ([`crate::policy::embedding::away_from_mean`]).
    async fn mean_vector(&self) -> Result<Option<Vec<f32>>>;
}

/// How long a memory whose text the embedder refused waits before it is tried again (six
/// hours): long enough that a poisoned memory costs the endpoint a request a few times a day,
/// short enough that a content policy or a model changed meanwhile lets it through the same day.
pub const VECTOR_SET_ASIDE_MS: i64 = 6 * 3_600_000;

/// The fewest vectors a store estimates [`VectorIndex::mean_vector`] from when it does not keep
/// it exactly: the standard error of each component is then under 2% of its spread.
pub const MEAN_VECTOR_SAMPLE: usize = 4096;

/// A memory with everything a store keeps about it, for copying it to another store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMemory {
    pub memory: Memory,
    /// `None` while the memory waits for its vector.
    pub vector: Option<Vec<f32>>,
    /// The memory's edges whose other end has a smaller id (or is itself), so that restoring in
    /// id order always finds both ends already present.
    pub edges: Vec<Edge>,
    /// For an episode, when a sleep cycle consumed it: a restored space does not consolidate
    /// it again (nor revive a fact forgotten since).
    pub consolidated_at: Option<Timestamp>,
}

/// One row of the ledger of sleep cycles: when it ran, and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleRecord {
    pub at: Timestamp,
    pub report: serde_json::Value,
}

impl StoredMemory {
    /// Whether `edge` travels with the memory `id` (its later end).
    pub fn carries(id: MemoryId, edge: &Edge) -> bool {
        edge.src.max(edge.dst) == id
    }
}

/// Bulk copy between stores with ids preserved: migrations and backups.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Replica: Send + Sync {
    /// Up to `limit` memories with ids greater than `after`, in id order, each with its vector
    /// and the edges it carries ([`StoredMemory::carries`]).
    async fn export_batch(&self, after: Option<MemoryId>, limit: usize) -> Result<Vec<StoredMemory>>;

    /// Writes the batch atomically under the memories' own ids, replacing any memory, vector or
    /// edge already stored under the same key, so a re-run updates rather than duplicates. No
    /// temporal edges are derived: they come with the batch. Vectors need a bound model of their
    /// dimension; memories without one join the vector queue. Later inserts get larger ids.
    async fn restore(&self, batch: Vec<StoredMemory>) -> Result<()>;

    /// [`Replica::restore`] at most once per `key`, recorded in the restore's own transaction.
    async fn restore_once(&self, key: String, batch: Vec<StoredMemory>) -> Result<Receipt>;

    /// One restore of a batch that arrives in `pieces` (in id order across pieces): all or
    /// nothing like [`Replica::restore`], under a `key` at most once like
    /// [`Replica::restore_once`] (a key already used pulls no piece).
    async fn restore_pieces(&self, key: Option<String>, pieces: StoredPieces) -> Result<Receipt>;

    /// Reserves `count` consecutive ids that no insert will ever take and returns the first:
    /// a restore under them cannot collide with a concurrent writer. Reserved ids that stay
    /// unused are a gap, never reused.
    async fn reserve_ids(&self, count: u64) -> Result<MemoryId>;

    /// The whole ledger of sleep cycles, oldest first (a store without one has none).
    async fn export_cycles(&self) -> Result<Vec<CycleRecord>>;

    /// Adds `cycles` to the ledger, leaving out any it already holds (the same time and
    /// report), so that restoring the same backup twice keeps one of each.
    async fn restore_cycles(&self, cycles: Vec<CycleRecord>) -> Result<()>;
}

/// The access keys of a served space ([`crate::access`]): only their hashes are kept. A
/// server reads the list again at least once a second, so keys added or revoked by another
/// process take effect without a restart.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores a new key; a key with the same id (the same token) is refused as invalid input.
    async fn add_key(&self, key: crate::access::AccessKey) -> Result<()>;

    /// Every key, revoked ones included, oldest first.
    async fn keys(&self) -> Result<Vec<crate::access::AccessKey>>;

    /// Marks a key revoked at `at`; returns whether a live key of that id existed.
    async fn revoke_key(&self, id: String, at: Timestamp) -> Result<bool>;
}

/// What an embedder has done since it was opened (for `stats`, the health view and
/// `/metrics`): an embedder that calls a service counts its requests, retries and failures and
/// the tokens the service counted; one in process counts texts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedderUsage {
    /// Requests sent, retries included.
    pub calls: u64,
    /// Of those, the ones that were retries of a failed request.
    pub retries: u64,
    /// Requests that failed (each retry that failed again counts).
    pub failures: u64,
    /// Texts embedded.
    pub texts: u64,
    /// Tokens, as the service counted them (0 when it does not say).
    pub tokens: u64,
}

/// Turns text into unit-length vectors.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Embedder: Send + Sync {
    fn model(&self) -> EmbeddingModel;

    /// What this embedder has done since it was opened.
    fn usage(&self) -> EmbedderUsage {
        EmbedderUsage::default()
    }

    /// One vector per input, each of `model().dimension` floats and unit length.
    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>>;

    /// A recall's query: someone is waiting for it, so an embedder that shares its model with
    /// background work serves it first.
    async fn embed_query(&self, text: String) -> Result<Vec<f32>> {
        self.embed(vec![text])
            .await?
            .pop()
            .ok_or_else(|| crate::AtlasError::Embedding("the embedder returned no vector for the query".into()))
    }
}

/// One request to a language model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    pub system: String,
    pub prompt: String,
    /// The JSON schema the answer must follow, where the endpoint can constrain its output.
    pub json_schema: Option<serde_json::Value>,
}

/// A model's answer and what it cost.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// In US dollars, at the endpoint's configured prices (0 for a local model).
    pub cost: f64,
}

/// A language model, used off the hot path (consolidation), never on `remember`.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Llm: Send + Sync {
    async fn complete(&self, request: LlmRequest) -> Result<Completion>;
}

/// One end of an edge the sleep cycle adds: a stored memory, or one of the batch's new ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryRef {
    Stored(MemoryId),
    /// The index of a memory in [`Consolidation::memories`].
    New(usize),
}

/// An edge between stored or new memories.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEdge {
    pub src: MemoryRef,
    pub dst: MemoryRef,
    pub kind: crate::EdgeKind,
    pub weight: f32,
    pub validity: crate::Validity,
    pub recorded_at: Timestamp,
}

impl NewEdge {
    /// The edge between stored memories, the batch's new ones under `new_ids` (their ids in
    /// the order of [`Consolidation::memories`]).
    pub fn resolve(&self, new_ids: &[MemoryId]) -> Result<Edge> {
        let end = |r: MemoryRef| match r {
            MemoryRef::Stored(id) => Ok(id),
            MemoryRef::New(i) => new_ids.get(i).copied().ok_or_else(|| {
                crate::AtlasError::Storage(format!(
                    "an edge refers to new memory #{i}; the batch has {}",
                    new_ids.len()
                ))
            }),
        };
        Ok(Edge {
            src: end(self.src)?,
            dst: end(self.dst)?,
            kind: self.kind,
            weight: self.weight,
            validity: self.validity,
            recorded_at: self.recorded_at,
        })
    }
}

/// A change of a stored memory's validity and confidence, without rewriting the memory (a
/// supersession ends its validity; its text and id stay).
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub id: MemoryId,
    /// A new start of its validity, and of its event time (an earlier statement of the same
    /// fact was consolidated late); `None` leaves both as they are.
    pub valid_from: Option<Timestamp>,
    pub valid_until: Option<Timestamp>,
    /// The fact's new confidence, if it changes.
    pub confidence: Option<f32>,
}

/// Everything one sleep-cycle batch learned, applied in one transaction: new facts and
/// entities, their edges, revisions of older facts, which episodes are done or failed, and the
/// cycle's ledger row. Either all of it is stored or none.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    pub memories: Vec<NewMemory>,
    pub edges: Vec<NewEdge>,
    pub revisions: Vec<Revision>,
    /// Stored edges `(src, dst, kind)` the batch removes: a statement consolidated late moved
    /// to another fact, two facts that no longer follow each other. Removed before `edges` are
    /// added; one that does not exist is no error.
    pub unlinked: Vec<(MemoryId, MemoryId, crate::EdgeKind)>,
    /// Episodes whose outcome this batch is.
    pub processed: Vec<MemoryId>,
    /// Episodes that failed (their attempt count grows; retried after `retry_after`).
    pub failed: Vec<(MemoryId, String)>,
    /// The cycle's report, kept in the store's ledger of cycles.
    pub report: serde_json::Value,
    pub at: Timestamp,
}

impl Consolidation {
    /// A batch that changes nothing yet, to be filled in: learned at `at`, with no report.
    pub fn empty(at: Timestamp) -> Self {
        Consolidation {
            memories: Vec::new(),
            edges: Vec::new(),
            revisions: Vec::new(),
            unlinked: Vec::new(),
            processed: Vec::new(),
            failed: Vec::new(),
            report: serde_json::Value::Null,
            at,
        }
    }
}

/// A session the sleep cycle should summarise: its last turn was said before the cycle's
/// cut-off, and it has no current summary covering all its turns.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedSession {
    /// The session's user, agent and session.
    pub scope: crate::Scope,
    /// Its live turns, in (event time, id) order.
    pub turns: Vec<Memory>,
    /// Its current summary, which a new one supersedes (the session went on after it).
    pub previous: Option<MemoryId>,
}

/// What the sleep cycle reads and writes.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Consolidator: Send + Sync {
    /// Up to `limit` episodes never processed, oldest first, skipping those that failed
    /// `max_attempts` times or whose last failure is more recent than `retry_after_ms` before
    /// `now` times their attempt count (backoff).
    async fn unprocessed(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<Memory>>;

    /// Facts (current and past) whose subject is one of `subjects` (normalised), and entities
    /// whose normalised name is one of `names`, within `scope`'s user and agent.
    async fn known(&self, subjects: Vec<String>, names: Vec<String>, scope: crate::Scope) -> Result<Vec<Memory>>;

    /// Applies the batch atomically; returns the ids of its new memories, in order.
    async fn apply(&self, batch: Consolidation) -> Result<Vec<MemoryId>>;

    /// The reports of the last `limit` cycles, newest first.
    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>>;

    /// Up to `limit` sessions whose last live turn was said before `said_before` and whose
    /// current summary (a live `summary` memory of the same user, agent and session, still
    /// valid) covers fewer turns than they have, or that have none; the longest closed first.
    /// A store shared by several processes holds the sessions it returns for the caller for a
    /// while (a claim, released when a batch with their summaries is applied), so that no other
    /// process's cycle summarises them meanwhile: call it only to summarise what it returns.
    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>>;
}
