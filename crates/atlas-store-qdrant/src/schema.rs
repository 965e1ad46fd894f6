//! The payload fields of the space's two collections and the indexes on them: the names that
//! the collection, the queue, the ledger and the meta points write and filter by, kept below
//! all of those rooms so that none of them reaches into another for a name.

use crate::payload::field as memory_field;
use qdrant_client::qdrant::FieldType;

/// Payload fields of meta points.
pub mod meta_field {
    /// What the point is: [`crate::meta::EDGE`], ...
    pub const TYPE: &str = "type";
    pub const SRC: &str = "src";
    pub const DST: &str = "dst";
    pub const CARRIER: &str = "carrier";
    pub const KIND: &str = "kind";
    pub const WEIGHT: &str = "weight";
    pub const VALID_FROM: &str = "valid_from";
    pub const VALID_UNTIL: &str = "valid_until";
    pub const RECORDED_AT: &str = "recorded_at";
    pub const USER: &str = "user";
    pub const AGENT: &str = "agent";
    pub const SESSION: &str = "session";
    /// Of a session: when its last turn was said.
    pub const LAST_EVENT: &str = "last_event";
    /// Of a session: how many turns its current summary covers.
    pub const SUMMARIZED: &str = "summarized";
    /// Of an episode the sleep cycle failed on.
    pub const EPISODE: &str = "episode";
    pub const ATTEMPTS: &str = "attempts";
    pub const LAST_ATTEMPT: &str = "last_attempt";
    pub const LAST_ERROR: &str = "last_error";
    /// Of the settings: the bound embedding model.
    pub const MODEL: &str = "embedding_model";
    pub const DIMENSION: &str = "embedding_dimension";
}

/// Payload fields of write records (meta collection) and of pending points (both collections).
pub mod ledger_field {
    /// On points and edges of a write not yet rolled forward: the write's number.
    pub const PENDING: &str = "pending";
    /// On points: the number of the write that created them (read back to detect collisions).
    pub const WRITE: &str = "write";
    pub const STATE: &str = "state";
    pub const UNTIL: &str = "until";
    pub const KEY: &str = "key";
    pub const IDS: &str = "ids";
    pub const AT: &str = "at";
    /// What rolling forward applies besides visibility (a sleep cycle's bookkeeping).
    pub const EFFECTS: &str = "effects";
}

/// Payload fields of the queue and of the sleep cycle's claims.
pub mod queue_field {
    /// Present while the memory awaits a vector: until when a claim holds it (0: unclaimed).
    pub const VECTOR_QUEUE: &str = "vector_queue";
    /// Who holds the claim (meaningful while `vector_queue` lies in the future).
    pub const VECTOR_CLAIM: &str = "vector_claim";
    /// Why a queued memory is set aside (`VectorIndex::set_aside`): its claim is then held by
    /// [`SET_ASIDE`] until the backoff passes.
    pub const VECTOR_FAILED: &str = "vector_failed";
    /// The owner of a set-aside memory's claim: no process is named so.
    pub const SET_ASIDE: &str = "set-aside";
    /// Until when a sleep cycle holds the episode (absent: nobody does).
    pub const SLEEP_UNTIL: &str = "sleep_until";
    pub const SLEEP_CLAIM: &str = "sleep_claim";
    /// Until when a sleep cycle holds a session it summarises (on the session's meta point).
    pub const SUMMARY_UNTIL: &str = "summary_until";
    pub const SUMMARY_CLAIM: &str = "summary_claim";
}

/// Payload field of episodes the sleep cycle processed: when it did (indexed; kept by rewrites).
pub const CONSOLIDATED_AT: &str = "consolidated_at";

/// Payload indexes of the memories' collection: every field a filter touches.
pub const MEMORY_INDEXES: [(&str, FieldType); 13] = [
    (memory_field::KIND, FieldType::Keyword),
    (memory_field::USER, FieldType::Keyword),
    (memory_field::AGENT, FieldType::Keyword),
    (memory_field::SESSION, FieldType::Keyword),
    (memory_field::EVENT_TIME, FieldType::Integer),
    (memory_field::VALID_FROM, FieldType::Integer),
    (memory_field::VALID_UNTIL, FieldType::Integer),
    (memory_field::ID, FieldType::Integer),
    (memory_field::DELETED_AT, FieldType::Integer),
    (queue_field::VECTOR_QUEUE, FieldType::Integer),
    (ledger_field::PENDING, FieldType::Integer),
    (CONSOLIDATED_AT, FieldType::Integer),
    // Last: an existing collection without it gets it once its points carry `terms`
    // (QdrantStore::upgrade_text_index).
    (memory_field::TERMS, FieldType::Integer),
];

/// Payload indexes of the meta collection.
pub const META_INDEXES: [(&str, FieldType); 9] = [
    (meta_field::TYPE, FieldType::Keyword),
    (meta_field::SRC, FieldType::Integer),
    (meta_field::DST, FieldType::Integer),
    (meta_field::CARRIER, FieldType::Integer),
    (ledger_field::STATE, FieldType::Keyword),
    (ledger_field::WRITE, FieldType::Integer),
    (ledger_field::PENDING, FieldType::Integer),
    (ledger_field::AT, FieldType::Integer),
    (meta_field::LAST_EVENT, FieldType::Integer),
];
