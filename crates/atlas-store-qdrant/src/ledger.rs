//! Acknowledged writes on the server: memory ids, and one record per write in the meta
//! collection that makes the write visible all at once, so that processes on any number of
//! hosts share a space with no shared file.
//!
//! **Ids** are `(milliseconds since 2025-01-01) << 12 | low`, below 2^53 (exact in JSON) and
//! ordered by time across hosts. Each process keeps a clock that never goes back (the next id
//! is above its last one and above the largest id in the space when it opened), and starts
//! each millisecond at a random `low`. Two processes may still pick one id; the server settles
//! it: a new memory is written insert-only, every point carries its write's number (`write`),
//! and a write reads its points back: a point that carries another number is a collision, and
//! the write takes new ids for the whole batch. So no id is ever acknowledged twice.
//!
//! **A write** (an insert, a restore, a sleep cycle's batch) first creates its record
//! (`type = write`, `state = writing`, a lease `until`), then writes its points and edges with
//! `pending` = its number, which every read excludes, then commits: one conditional update
//! of the record from `writing` to `committed`. That update is the moment the write happens:
//! before it nothing of it is visible, after it all of it will be. Rolling forward takes
//! `pending` off its points and edges, applies its effects (a sleep cycle's bookkeeping) and
//! marks the record `done`; any process does it for a committed record it finds. A record
//! still `writing` after its lease is abandoned by a conditional update (only one of commit
//! and abandon can win) and its points and edges deleted, by any process. A write renews its
//! lease while it runs.
//!
//! A keyed write's record is named after its key (point id from the key), created
//! insert-only: a second write under the key finds it, and answers with its receipt once it
//! is committed.

use crate::collection::Collection;
use crate::meta;
use atlas_domain::ports::Receipt;
use atlas_domain::{AtlasError, MemoryId, Result, Timestamp, decode_id_runs, encode_id_runs};
use qdrant_client::qdrant::{
    Condition, DeletePayloadPointsBuilder, Filter, GetPointsBuilder, PointId, PointStruct, PointsIdsList,
    RetrievedPoint, SetPayloadPointsBuilder, UpdateMode, UpsertPointsBuilder,
};
use serde_json::{Map, Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Milliseconds of 2025-01-01T00:00:00Z: ids count from it.
pub const ID_EPOCH_MS: i64 = 1_735_689_600_000;
/// Bits of an id below its millisecond.
const LOW_BITS: u32 = 12;

/// How long a write may go without renewing its lease before any process abandons it, by
/// default (`QdrantOptions::write_lease`). A running write renews it every fifth of it.
pub const WRITE_LEASE: Duration = Duration::from_secs(300);

pub use crate::schema::ledger_field as field;

/// The `type` of a write record.
pub const WRITE: &str = "write";

const WRITING: &str = "writing";
const COMMITTED: &str = "committed";
const DONE: &str = "done";
const ABANDONED: &str = "abandoned";

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A number no other process picks: a hash of this process, the time and a counter.
pub fn unique_number() -> i64 {
    use sha2::{Digest, Sha256};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let digest = Sha256::digest(format!("{}|{nanos}|{n}", std::process::id()).as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(bytes) >> 2) as i64 + 1
}

/// This process's id clock.
pub struct IdClock {
    last: Mutex<i64>,
}

impl IdClock {
    /// A clock whose ids are above `floor` (the largest id in the space).
    pub fn new(floor: i64) -> Self {
        IdClock { last: Mutex::new(floor) }
    }

    /// Never hands out an id at or below `floor` from now on.
    pub fn raise_to(&self, floor: i64) {
        let mut last = self.last.lock().expect("id clock lock");
        *last = (*last).max(floor);
    }

    /// `n` new ids, increasing.
    pub fn take(&self, n: u64) -> Vec<MemoryId> {
        let first = self.reserve(n).0;
        (0..n as i64).map(|i| MemoryId(first + i)).collect()
    }

    /// The first of `n` consecutive ids no later call of this clock returns.
    pub fn reserve(&self, n: u64) -> MemoryId {
        let mut last = self.last.lock().expect("id clock lock");
        let ms = (now_ms() - ID_EPOCH_MS).max(0);
        // A random start in the lower half of the millisecond: room for a batch after it.
        let low = unique_number() & ((1 << (LOW_BITS - 1)) - 1);
        let first = (*last + 1).max((ms << LOW_BITS) | low);
        *last = first + n.max(1) as i64 - 1;
        MemoryId(first)
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn payload_of(p: &RetrievedPoint) -> Map<String, Value> {
    p.payload.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect()
}

/// The record of a write under way.
pub struct Write {
    pub number: i64,
    pub record: PointId,
    /// Under a key: its record stays as the key's receipt.
    pub keyed: bool,
    /// It wrote edges (points of the meta collection) to reveal when it rolls forward.
    pub wrote_edges: bool,
    lease: Duration,
    renewed: Instant,
}

impl Write {
    /// The payload fields that mark a point or an edge as this write's, not yet visible.
    pub fn marks(&self) -> [(&'static str, Value); 2] {
        [(field::PENDING, Value::from(self.number)), (field::WRITE, Value::from(self.number))]
    }
}

/// A write begun, or the receipt of the earlier write under its key.
pub enum Begun {
    Write(Write),
    Replayed(Receipt),
}

fn record_id(key: Option<&str>, number: i64) -> PointId {
    match key {
        Some(key) => crate::payload::point_id_of(&format!("write-key\0{key}")),
        None => crate::payload::point_id_of(&format!("write\0{number}")),
    }
}

fn receipt_of(payload: &Map<String, Value>) -> Result<Receipt> {
    let ids = payload.get(field::IDS).and_then(Value::as_str).unwrap_or_default();
    let ids = decode_id_runs(ids).map_err(|m| AtlasError::Storage(format!("write record: {m}")))?;
    let at = payload.get(field::AT).and_then(Value::as_i64).unwrap_or_default();
    Ok(Receipt { ids, replayed: true, recorded_at: Timestamp(at) })
}

/// The receipt of a committed write under `key`, if there is one (a write under way is not
/// waited for: [`begin`] does that).
pub async fn committed_receipt(meta: &Collection, key: &str) -> Result<Option<Receipt>> {
    meta.ensure(None).await?;
    let found = get_record(meta, record_id(Some(key), 0)).await?.unwrap_or_default();
    match found.get(field::STATE).and_then(Value::as_str) {
        Some(COMMITTED | DONE) => Ok(Some(receipt_of(&found)?)),
        _ => Ok(None),
    }
}

async fn get_record(meta: &Collection, id: PointId) -> Result<Option<Map<String, Value>>> {
    let request = GetPointsBuilder::new(meta.name(), vec![id]).with_payload(true).with_vectors(false);
    let points = meta.call("read a write record", meta.client().get_points(request.build())).await?;
    Ok(points.first().map(payload_of))
}

/// Creates the record of a new write (under `key`, if given). A keyed write whose key was
/// used answers with that write's receipt; one still under way is waited for (up to its lease).
pub async fn begin(memories: &Collection, meta: &Collection, key: Option<&str>, lease: Duration) -> Result<Begun> {
    meta.ensure(None).await?;
    let waited = Instant::now();
    loop {
        let number = unique_number();
        let id = record_id(key, number);
        let mut record = object(json!({
            meta::field::TYPE: WRITE,
            field::STATE: WRITING,
            field::UNTIL: now_ms() + lease.as_millis() as i64,
            field::WRITE: number,
        }));
        if let Some(key) = key {
            record.insert(field::KEY.into(), Value::from(key));
        }
        let point = PointStruct::new(
            id.clone(),
            std::collections::HashMap::<String, qdrant_client::qdrant::Vector>::new(),
            record,
        );
        let request = UpsertPointsBuilder::new(meta.name(), vec![point])
            .update_mode(UpdateMode::InsertOnly)
            .ordering(crate::collection::ordered())
            .wait(true);
        meta.call("create a write record", meta.client().upsert_points(request.build())).await?;
        let begun = || Write {
            number,
            record: id.clone(),
            keyed: key.is_some(),
            wrote_edges: false,
            lease,
            renewed: Instant::now(),
        };
        // An unkeyed record's id is its own fresh number (62 random bits): no earlier record
        // holds it. (If one ever did, the commit's condition on the number would refuse this
        // write, and its pending points would wait for no record.)
        if key.is_none() {
            return Ok(Begun::Write(begun()));
        }
        let found = get_record(meta, id.clone()).await?.unwrap_or_default();
        if found.get(field::WRITE).and_then(Value::as_i64) == Some(number) {
            return Ok(Begun::Write(begun()));
        }
        // The key's record: an earlier write under it.
        match found.get(field::STATE).and_then(Value::as_str) {
            Some(COMMITTED | DONE) => return Ok(Begun::Replayed(receipt_of(&found)?)),
            Some(ABANDONED) | None => {
                // Rolled back: its remains go, and the key is free again.
                let earlier = found.get(field::WRITE).and_then(Value::as_i64).unwrap_or_default();
                roll_back(memories, meta, earlier, &id).await?;
            }
            _ if waited.elapsed() > lease => {
                let key = key.unwrap_or_default();
                return Err(AtlasError::Busy(format!(
                    "a write under key {key:?} has been under way for {} s in another process",
                    waited.elapsed().as_secs()
                )));
            }
            _ => {
                abandon_if_expired(meta, &found).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Sets `values` on the write record `record` if it is still `state` under `number`; true
/// when the record then holds them (this call or an identical one before won).
async fn update_record(
    meta: &Collection,
    record: &PointId,
    number: i64,
    state: &str,
    values: Map<String, Value>,
) -> Result<bool> {
    let wanted = values.get(field::STATE).cloned();
    let filter = Filter::must([
        Condition::has_id([record.clone()]),
        Condition::matches(field::WRITE, number),
        Condition::matches(field::STATE, state.to_owned()),
    ]);
    let request = SetPayloadPointsBuilder::new(meta.name(), qdrant_client::Payload::from(values))
        .points_selector(filter)
        .ordering(crate::collection::ordered())
        .wait(true);
    meta.call("update a write record", meta.client().set_payload(request.build())).await?;
    let now = get_record(meta, record.clone()).await?.unwrap_or_default();
    Ok(now.get(field::WRITE).and_then(Value::as_i64) == Some(number)
        && wanted.is_none_or(|w| now.get(field::STATE) == Some(&w)))
}

/// Records a write that finished elsewhere (moved from a space file of an earlier version):
/// a receipt (`key`) or a sleep cycle's report (`effects`). `number` names it; the same number
/// writes the same record again.
pub async fn put_finished(
    meta: &Collection,
    number: i64,
    key: Option<&str>,
    ids: &[MemoryId],
    at: i64,
    effects: Option<Value>,
) -> Result<()> {
    meta.ensure(None).await?;
    let mut record = object(json!({
        meta::field::TYPE: WRITE,
        field::STATE: DONE,
        field::WRITE: number,
        field::IDS: encode_id_runs(ids),
        field::AT: at,
    }));
    if let Some(key) = key {
        record.insert(field::KEY.into(), Value::from(key));
    }
    if let Some(effects) = effects {
        record.insert(field::EFFECTS.into(), effects);
    }
    let point = PointStruct::new(
        record_id(key, number),
        std::collections::HashMap::<String, qdrant_client::qdrant::Vector>::new(),
        record,
    );
    meta.upsert(vec![point]).await
}

/// Extends the lease of a long write; fails when another process abandoned it meanwhile.
pub async fn renew_if_due(meta: &Collection, write: &mut Write) -> Result<()> {
    if write.renewed.elapsed() < write.lease / 5 {
        return Ok(());
    }
    let until = now_ms() + write.lease.as_millis() as i64;
    let values = object(json!({ field::UNTIL: until, field::STATE: WRITING }));
    if !update_record(meta, &write.record, write.number, WRITING, values).await? {
        return Err(AtlasError::Storage(format!(
            "write {} was abandoned by another process (its lease expired); nothing of it was kept",
            write.number
        )));
    }
    write.renewed = Instant::now();
    Ok(())
}

/// Commits the write: from now on it happened. `effects` are applied by rolling forward.
pub async fn commit(meta: &Collection, write: &Write, ids: &[MemoryId], effects: Option<Value>) -> Result<Receipt> {
    let at = now_ms();
    let mut values = object(json!({ field::STATE: COMMITTED, field::IDS: encode_id_runs(ids), field::AT: at }));
    if let Some(effects) = effects {
        values.insert(field::EFFECTS.into(), effects);
    }
    if !update_record(meta, &write.record, write.number, WRITING, values).await? {
        return Err(AtlasError::Storage(format!(
            "write {} was abandoned by another process before it could commit (its lease expired); nothing of it \
             was kept",
            write.number
        )));
    }
    Ok(Receipt { ids: ids.to_vec(), replayed: false, recorded_at: Timestamp(at) })
}

/// Marks a rolled-forward write done (its record stays as a receipt or a cycle's report).
pub async fn finish(meta: &Collection, record: &PointId, number: i64) -> Result<()> {
    update_record(meta, record, number, COMMITTED, object(json!({ field::STATE: DONE }))).await.map(drop)
}

/// Deletes what write `number` wrote (its points and edges), then its record.
pub async fn roll_back(memories: &Collection, meta: &Collection, number: i64, record: &PointId) -> Result<()> {
    memories.delete_matching(pending_of(number)).await?;
    meta.delete_matching(pending_of(number)).await?;
    delete_record(meta, record.clone(), true).await
}

/// Deletes a write record; `wait`: until the server applied it (not needed for the record of a
/// finished write: still there a moment later, it is rolled forward again, changing nothing).
pub async fn delete_record(meta: &Collection, id: PointId, wait: bool) -> Result<()> {
    let request =
        qdrant_client::qdrant::DeletePointsBuilder::new(meta.name()).points(PointsIdsList { ids: vec![id] }).wait(wait);
    meta.call("delete a write record", meta.client().delete_points(request.build())).await
}

/// Abandons a write still `writing` past its lease; true when it is (now) abandoned.
async fn abandon_if_expired(meta: &Collection, record: &Map<String, Value>) -> Result<bool> {
    let (Some(number), Some(until)) =
        (record.get(field::WRITE).and_then(Value::as_i64), record.get(field::UNTIL).and_then(Value::as_i64))
    else {
        return Ok(false);
    };
    if until >= now_ms() {
        return Ok(false);
    }
    let key = record.get(field::KEY).and_then(Value::as_str);
    let id = record_id(key, number);
    update_record(meta, &id, number, WRITING, object(json!({ field::STATE: ABANDONED }))).await
}

/// A write record that needs finishing: rolled forward (committed) or back (abandoned, or
/// writing past its lease).
pub struct Unfinished {
    pub record: PointId,
    pub number: i64,
    pub committed: bool,
    pub keyed: bool,
    pub effects: Option<Value>,
    /// When it committed (milliseconds since the epoch), if it did.
    pub committed_at: Option<i64>,
}

/// The writes any process should finish now.
pub async fn unfinished(meta: &Collection) -> Result<Vec<Unfinished>> {
    let filter = Filter::must([
        Condition::matches(meta::field::TYPE, WRITE.to_owned()),
        Condition::matches(field::STATE, vec![WRITING.to_owned(), COMMITTED.to_owned(), ABANDONED.to_owned()]),
    ]);
    let mut out = Vec::new();
    for p in meta.scroll_matching(filter).await? {
        let payload = payload_of(&p);
        let Some(number) = payload.get(field::WRITE).and_then(Value::as_i64) else { continue };
        let Some(record) = p.id.clone() else { continue };
        let committed = match payload.get(field::STATE).and_then(Value::as_str) {
            Some(COMMITTED) => true,
            Some(ABANDONED) => false,
            _ if abandon_if_expired(meta, &payload).await? => false,
            _ => continue,
        };
        out.push(Unfinished {
            record,
            number,
            committed,
            keyed: payload.contains_key(field::KEY),
            effects: payload.get(field::EFFECTS).cloned(),
            committed_at: payload.get(field::AT).and_then(Value::as_i64).filter(|_| committed),
        });
    }
    Ok(out)
}

/// Points (or edges) of write `number`, still pending.
pub fn pending_of(number: i64) -> Filter {
    Filter::must([Condition::matches(field::PENDING, number)])
}

/// Makes the points or edges of write `number` in `collection` visible.
pub async fn reveal(collection: &Collection, number: i64) -> Result<()> {
    if !collection.exists().await? {
        return Ok(());
    }
    let request = DeletePayloadPointsBuilder::new(collection.name(), vec![field::PENDING.to_owned()])
        .points_selector(pending_of(number))
        .ordering(crate::collection::ordered())
        .wait(true);
    collection.call("make a committed write visible", collection.client().delete_payload(request.build())).await
}

/// Which of `ids`, just written by write `number`, carry another write's number (collisions).
pub async fn foreign_among(collection: &Collection, ids: &[MemoryId], number: i64) -> Result<Vec<MemoryId>> {
    let mut foreign = Vec::new();
    for chunk in ids.chunks(1000) {
        let point_ids =
            chunk.iter().map(|id| crate::payload::point_id(*id).map(PointId::from)).collect::<Result<Vec<_>>>()?;
        let request = GetPointsBuilder::new(collection.name(), point_ids)
            .with_payload(crate::decode::include(&[field::WRITE]))
            .with_vectors(false);
        let found =
            collection.call("read back written points", collection.client().get_points(request.build())).await?;
        let mine: std::collections::HashSet<MemoryId> = found
            .iter()
            .filter(|p| p.payload.get(field::WRITE).and_then(|v| v.as_integer()) == Some(number))
            .map(|p| crate::decode::memory_id(p.id.as_ref()))
            .collect::<Result<_>>()?;
        foreign.extend(chunk.iter().filter(|id| !mine.contains(id)));
    }
    Ok(foreign)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_fit_in_53_bits_and_follow_the_clock() {
        let clock = IdClock::new(0);
        let a = clock.take(3);
        assert!(a.windows(2).all(|w| w[1].0 == w[0].0 + 1));
        let reserved = clock.reserve(1000);
        assert!(reserved > a[2]);
        let b = clock.take(1)[0];
        assert!(b.0 >= reserved.0 + 1000, "a reservation is never handed out again");
        assert!(b.0 < 1 << 53, "exact as a JSON number");
        let ms = (b.0 >> LOW_BITS) + ID_EPOCH_MS;
        assert!((now_ms() - ms).abs() < 5_000, "the id says when it was taken");
        let behind = IdClock::new(b.0 + 1_000_000_000);
        assert!(behind.take(1)[0].0 > b.0 + 1_000_000_000, "never below the largest id seen");
    }

    #[test]
    fn numbers_are_positive_and_distinct() {
        let numbers: std::collections::HashSet<i64> = (0..10_000).map(|_| unique_number()).collect();
        assert_eq!(numbers.len(), 10_000);
        assert!(numbers.iter().all(|n| *n > 0));
    }
}
