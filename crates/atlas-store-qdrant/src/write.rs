//! How the store writes new points: every insert, restore and sleep-cycle batch is one write of
//! the ledger ([`crate::ledger`]): begun, landed invisible, checked for id collisions,
//! committed, rolled forward. Also what rolling forward applies, and the recovery any process
//! runs at open and, while it lives, once per write lease.

use crate::decode::{CONSOLIDATED_AT, Kept, include, memory_id};
use crate::ledger::{self, Begun, Write};
use crate::payload::field;
use crate::{QdrantStore, meta};
use atlas_domain::policy::embedding::{context_from, line};
use atlas_domain::ports::{MemoryStore, Receipt};
use atlas_domain::{AtlasError, Edge, Memory, MemoryId, MemoryKind, NewMemory, Result, encode_id_runs};
use qdrant_client::qdrant::{Condition, Filter, PointStruct, SetPayloadPointsBuilder, UpdateMode, UpsertPointsBuilder};
use serde_json::{Value, json};
use std::collections::HashMap;

/// How many times a batch takes new ids after a collision before the insert fails.
const COLLISION_RETRIES: usize = 5;

/// Key of a sleep cycle's effects: the owner whose claims its roll-forward releases.
pub(crate) const CLAIMANT: &str = "claimant";

/// How a write's points land.
pub(crate) enum Landing<'a> {
    /// New memories under new ids: never over an existing point.
    New,
    /// Memories under their own ids (a restore): over an existing point only if it holds the
    /// same memory (same recorded time), never over another one.
    Restore(&'a [i64]),
}

/// What rolling a write forward needs to know of it besides its record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finishing {
    /// Under a key: its record stays as the key's receipt.
    pub keyed: bool,
    /// It wrote edges, to reveal in the meta collection.
    pub wrote_edges: bool,
}

/// What one write lands.
pub(crate) struct Landed {
    pub ids: Vec<MemoryId>,
    pub effects: Option<Value>,
}

impl QdrantStore {
    /// Begins a write (under `key`): the receipt of the key's earlier write, or a write to land.
    pub(crate) async fn begin(&self, key: Option<&str>) -> Result<Begun> {
        self.recover_if_due().await;
        ledger::begin(&self.collection, &self.meta, key, self.write_lease).await
    }

    /// Commits what `landed` wrote and rolls it forward; if landing failed, removes it.
    pub(crate) async fn finish_write(&self, write: Write, landed: Result<Landed>) -> Result<Receipt> {
        let landed = match landed {
            Ok(landed) => landed,
            Err(e) => {
                // Best effort: if this fails too, any process rolls it back after the lease.
                ledger::roll_back(&self.collection, &self.meta, write.number, &write.record).await.ok();
                return Err(e);
            }
        };
        // An error here leaves the record `writing` (rolled back after the lease) or, if the
        // commit landed, `committed` (rolled forward by the next process that looks).
        let receipt = ledger::commit(&self.meta, &write, &landed.ids, landed.effects.clone()).await?;
        let finishing = Finishing { keyed: write.keyed, wrote_edges: write.wrote_edges };
        self.roll_forward(&write.record, write.number, landed.effects.as_ref(), finishing).await?;
        Ok(receipt)
    }

    /// Makes a committed write visible, applies its effects, and marks it done (or forgets its
    /// record when it is neither a receipt nor a cycle's report). Idempotent.
    pub(crate) async fn roll_forward(
        &self,
        record: &qdrant_client::qdrant::PointId,
        number: i64,
        effects: Option<&Value>,
        write: Finishing,
    ) -> Result<()> {
        ledger::reveal(&self.collection, number).await?;
        if write.wrote_edges {
            ledger::reveal(&self.meta, number).await?;
        }
        if let Some(effects) = effects {
            self.apply_effects(effects).await?;
        }
        if write.keyed || effects.is_some_and(|e| e.get("cycle").is_some()) {
            ledger::finish(&self.meta, record, number).await
        } else {
            ledger::delete_record(&self.meta, record.clone(), false).await
        }
    }

    /// Runs the recovery when a write lease has passed since it last ran (at open, or here), so
    /// that a long-lived process that writes or embeds also finishes what other processes left:
    /// within about two leases of their crash (the stalled write's lease, then this process's
    /// next look), if it writes or embeds meanwhile. Committed writes younger than a lease are
    /// left to their writer, which is most likely rolling them forward at that moment. A
    /// failure is logged: recovery is housekeeping, retried next time, and never fails the
    /// caller's own work.
    pub(crate) async fn recover_if_due(&self) {
        {
            let mut last = self.recovered.lock().expect("not poisoned");
            if last.elapsed() < self.write_lease {
                return;
            }
            *last = std::time::Instant::now();
        }
        let young = ledger::now_ms() - self.write_lease.as_millis() as i64;
        if let Err(e) = self.recover_committed_before(young).await {
            tracing::warn!(collection = self.collection(), error = %e, "finishing other processes' writes failed");
        }
    }

    /// Finishes what crashed or stalled writes of any process left: committed ones rolled
    /// forward, abandoned ones rolled back.
    pub(crate) async fn recover(&self) -> Result<()> {
        self.recover_committed_before(i64::MAX).await
    }

    /// [`Self::recover`], rolling forward only writes committed before `cutoff` (ms).
    async fn recover_committed_before(&self, cutoff: i64) -> Result<()> {
        if !self.meta.exists().await? {
            return Ok(());
        }
        for u in ledger::unfinished(&self.meta).await? {
            if u.committed && u.committed_at.is_some_and(|at| at >= cutoff) {
                continue;
            }
            if u.committed {
                tracing::warn!(write = u.number, collection = self.collection(), "rolling forward a committed write");
                // Whether it wrote edges is not recorded: reveal them in any case.
                let finishing = Finishing { keyed: u.keyed, wrote_edges: true };
                self.roll_forward(&u.record, u.number, u.effects.as_ref(), finishing).await?;
            } else {
                tracing::warn!(write = u.number, collection = self.collection(), "rolling back an abandoned write");
                ledger::roll_back(&self.collection, &self.meta, u.number, &u.record).await?;
            }
        }
        Ok(())
    }

    /// Writes `points` and `edges` as `write`'s (invisible until it is rolled forward), renewing
    /// its lease on the way; returns the ids another write holds (empty: all landed).
    pub(crate) async fn land(
        &self,
        write: &mut Write,
        ids: &[MemoryId],
        mut points: Vec<PointStruct>,
        edges: &[Edge],
        landing: Landing<'_>,
    ) -> Result<Vec<MemoryId>> {
        for p in &mut points {
            for (key, value) in write.marks() {
                p.payload.insert(key.to_owned(), value.into());
            }
        }
        for chunk in points.chunks(self.batch) {
            ledger::renew_if_due(&self.meta, write).await?;
            let mut request = UpsertPointsBuilder::new(self.collection.name(), chunk.to_vec())
                .ordering(crate::collection::ordered())
                .wait(true);
            request = match landing {
                Landing::New => request.update_mode(UpdateMode::InsertOnly),
                Landing::Restore(recorded) => {
                    request.update_filter(Filter::must([Condition::matches(field::RECORDED_AT, recorded.to_vec())]))
                }
            };
            self.collection.call("upsert points", self.collection.client().upsert_points(request.build())).await?;
        }
        let foreign = ledger::foreign_among(&self.collection, ids, write.number).await?;
        if foreign.is_empty() {
            meta::put_edges(&self.meta, edges, &write.marks()).await?;
            write.wrote_edges |= !edges.is_empty();
        }
        Ok(foreign)
    }

    /// Removes what `write` landed so far (before it takes new ids).
    async fn discard(&self, write: &Write) -> Result<()> {
        self.collection.delete_matching(ledger::pending_of(write.number)).await?;
        self.meta.delete_matching(ledger::pending_of(write.number)).await
    }

    /// Lands `batch` as new memories of `write`: new ids, each episode linked to the turn before
    /// it, taken again if another process took one of them.
    pub(crate) async fn land_new(
        &self,
        write: &mut Write,
        batch: &[NewMemory],
        superseded: &[MemoryId],
    ) -> Result<(Vec<MemoryId>, Vec<Memory>)> {
        for _ in 0..COLLISION_RETRIES {
            let ids = self.clock.take(batch.len() as u64);
            let linked = self.predecessors(batch, &ids, superseded).await?;
            let memories = self.with_context(batch.to_vec(), &linked).await?;
            let points = memories.iter().map(|m| self.point(m, None, Kept::default())).collect::<Result<_>>()?;
            let edges = temporal_edges(&memories, &linked);
            let foreign = self.land(write, &ids, points, &edges, Landing::New).await?;
            if foreign.is_empty() {
                return Ok((ids, memories));
            }
            tracing::warn!(collided = foreign.len(), "ids taken by another process at the same time: new ids");
            self.discard(write).await?;
        }
        Err(AtlasError::Busy(format!(
            "memory ids collided with other writers {COLLISION_RETRIES} times in a row; retry the write"
        )))
    }

    /// Each memory's id with the episode it follows: the latest committed turn of its session
    /// (same user and agent) said no later and still current then, or an earlier one of the
    /// batch. A version the same write ends (`superseded`) is history already: a store key's new
    /// value never carries its old one's words.
    async fn predecessors(
        &self,
        batch: &[NewMemory],
        ids: &[MemoryId],
        superseded: &[MemoryId],
    ) -> Result<Vec<(MemoryId, Option<MemoryId>)>> {
        type Group = (Option<String>, Option<String>, String);
        let group_of = |m: &NewMemory| match (m.kind(), &m.scope.session) {
            (MemoryKind::Episode, Some(session)) => {
                Some((m.scope.user.clone(), m.scope.agent.clone(), session.clone()))
            }
            _ => None,
        };
        // One read per session: its latest turns up to the batch's last one in it.
        let mut latest: std::collections::HashMap<Group, i64> = std::collections::HashMap::new();
        for m in batch {
            if let Some(group) = group_of(m) {
                let t = latest.entry(group).or_insert(i64::MIN);
                *t = (*t).max(m.event_time.millis());
            }
        }
        let mut pages: std::collections::HashMap<Group, Vec<(i64, MemoryId)>> = std::collections::HashMap::new();
        for (group, t) in latest {
            let page = self.latest_turns(&group, t).await?;
            pages.insert(group, page);
        }
        let mut out = Vec::with_capacity(batch.len());
        for (i, (m, id)) in batch.iter().zip(ids).enumerate() {
            let Some(group) = group_of(m) else {
                out.push((*id, None));
                continue;
            };
            let session = &group.2;
            let t = m.event_time.millis();
            let page = &pages[&group];
            let current = |(_, id): &(i64, MemoryId)| !superseded.contains(id);
            let mut stored = page.iter().filter(|(et, _)| *et <= t).filter(|p| current(p)).max().copied();
            if stored.is_none() && page.len() == PREDECESSOR_PAGE {
                // Said before every turn the page holds: read the turns before it.
                stored = self.latest_turns(&group, t).await?.into_iter().filter(current).max();
            }
            let in_batch = batch[..i]
                .iter()
                .zip(ids)
                .filter(|(b, _)| {
                    b.kind() == MemoryKind::Episode
                        && b.scope.session.as_deref() == Some(session.as_str())
                        && b.scope.user == m.scope.user
                        && b.scope.agent == m.scope.agent
                        && b.event_time.millis() <= t
                })
                .map(|(b, id)| (b.event_time.millis(), *id))
                .max();
            out.push((*id, stored.max(in_batch).map(|(_, id)| id)));
        }
        Ok(out)
    }

    /// The latest committed turns of a session said at or before `t` (event time, id).
    async fn latest_turns(
        &self,
        (user, agent, session): &(Option<String>, Option<String>, String),
        t: i64,
    ) -> Result<Vec<(i64, MemoryId)>> {
        if !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        let owner = atlas_domain::Scope { user: user.clone(), agent: agent.clone(), session: None };
        let mut must = crate::filter::owned_by(&owner);
        must.push(crate::filter::kind_is(MemoryKind::Episode));
        must.push(Condition::matches(
            field::SESSION,
            qdrant_client::qdrant::r#match::MatchValue::Keyword(session.clone()),
        ));
        must.push(Condition::range(
            field::EVENT_TIME,
            qdrant_client::qdrant::Range { lte: Some(t as f64), ..Default::default() },
        ));
        // Still current at `t` (an open end is stored as `payload::OPEN_END`): a replaced version
        // is history, not a turn a later one follows.
        must.push(Condition::range(
            field::VALID_UNTIL,
            qdrant_client::qdrant::Range { gt: Some(t as f64), ..Default::default() },
        ));
        let order = qdrant_client::qdrant::OrderByBuilder::new(field::EVENT_TIME)
            .direction(qdrant_client::qdrant::Direction::Desc as i32)
            .build();
        let request = qdrant_client::qdrant::ScrollPointsBuilder::new(self.collection.name())
            .filter(Filter { must, must_not: vec![crate::filter::pending()], ..Filter::default() })
            .order_by(order)
            .limit(PREDECESSOR_PAGE as u32)
            .with_payload(include(&[field::EVENT_TIME]))
            .with_vectors(false);
        let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?;
        page.points
            .iter()
            .map(|p| {
                let et = p.payload.get(field::EVENT_TIME).and_then(|v| v.as_integer()).unwrap_or(i64::MIN);
                Ok((et, memory_id(p.id.as_ref())?))
            })
            .collect()
    }

    /// Applies what a committed write does besides becoming visible. Each part can be applied
    /// again without changing the outcome.
    pub(crate) async fn apply_effects(&self, effects: &Value) -> Result<()> {
        let text = |v: &Value| v.as_str().map(str::to_owned);
        // The claims a sleep cycle's batch releases are those of the process that wrote it.
        let claimant = effects.get(CLAIMANT).and_then(Value::as_str);
        for s in effects.get("sessions").and_then(Value::as_array).into_iter().flatten() {
            let (Some(session), Some(last)) = (s.get(2).and_then(text), s.get(3).and_then(Value::as_i64)) else {
                continue;
            };
            let (user, agent) = (s.get(0).and_then(text), s.get(1).and_then(text));
            meta::saw_turn(&self.meta, (user.as_deref(), agent.as_deref(), &session), last).await?;
        }
        for s in effects.get("summaries").and_then(Value::as_array).into_iter().flatten() {
            let (Some(session), Some(turns)) = (s.get(2).and_then(text), s.get(3).and_then(Value::as_i64)) else {
                continue;
            };
            let (user, agent) = (s.get(0).and_then(text), s.get(1).and_then(text));
            let session = (user.as_deref(), agent.as_deref(), session.as_str());
            meta::summarized(&self.meta, session, turns).await?;
            meta::release_session(&self.meta, session, claimant).await?;
        }
        if let Some(cycle) = effects.get("cycle") {
            let at = cycle.get("at").and_then(Value::as_i64).unwrap_or_default();
            let processed = cycle.get("processed").and_then(Value::as_str).unwrap_or_default();
            let processed = atlas_domain::decode_id_runs(processed)
                .map_err(|m| AtlasError::Storage(format!("a cycle's record: {m}")))?;
            for chunk in processed.chunks(1000) {
                let point_ids = chunk
                    .iter()
                    .map(|id| crate::payload::point_id(*id).map(qdrant_client::qdrant::PointId::from))
                    .collect::<Result<Vec<_>>>()?;
                let values = json!({ CONSOLIDATED_AT: at });
                let Value::Object(values) = values else { unreachable!("a JSON object") };
                // A filter, not a list: an episode forgotten meanwhile is no error.
                let request =
                    SetPayloadPointsBuilder::new(self.collection.name(), qdrant_client::Payload::from(values))
                        .points_selector(Filter::must([Condition::has_id(point_ids)]))
                        .wait(true);
                self.collection
                    .call("mark episodes processed", self.collection.client().set_payload(request.build()))
                    .await?;
            }
            let failed: Vec<(MemoryId, String)> = cycle
                .get("failed")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| Some((MemoryId(f.get(0)?.as_i64()?), f.get(1)?.as_str()?.to_owned())))
                .collect();
            meta::record_failures(&self.meta, &failed, at).await?;
            // Edges the cycle removed go once it committed: before, a crash would leave a moved
            // statement on neither fact.
            let unlinked: Vec<(MemoryId, MemoryId, atlas_domain::EdgeKind)> = cycle
                .get("unlinked")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|u| {
                    let id = |i: usize| u.get(i).and_then(Value::as_i64).map(MemoryId);
                    let kind = u.get(2).and_then(Value::as_str).and_then(|k| k.parse::<atlas_domain::EdgeKind>().ok());
                    match (id(0), id(1), kind) {
                        (Some(src), Some(dst), Some(kind)) => Ok((src, dst, kind)),
                        _ => Err(AtlasError::Storage(format!(
                            "a cycle's record: an edge to remove is not [src, dst, kind]: {u}"
                        ))),
                    }
                })
                .collect::<Result<_>>()?;
            meta::delete_edges(&self.meta, &unlinked).await?;
            // Their cycle is over: a failed episode waits only for its backoff.
            let done: Vec<MemoryId> = processed.iter().copied().chain(failed.iter().map(|(id, _)| *id)).collect();
            crate::queue::Claims::SLEEP.release(&self.collection, &done, claimant).await?;
        }
        Ok(())
    }
}

/// Turns of one session read at once when linking new ones.
const PREDECESSOR_PAGE: usize = 64;

/// The effects of new memories: the last turn of each session they add to, the turns each new
/// summary covers.
pub(crate) fn effects_of(memories: &[Memory]) -> serde_json::Map<String, Value> {
    let mut last: std::collections::BTreeMap<(Option<&str>, Option<&str>, &str), i64> = Default::default();
    let mut summaries = Vec::new();
    for m in memories {
        let Some(session) = m.scope.session.as_deref() else { continue };
        let group = (m.scope.user.as_deref(), m.scope.agent.as_deref(), session);
        match (&m.body, m.kind()) {
            (_, MemoryKind::Episode) => {
                let t = last.entry(group).or_insert(i64::MIN);
                *t = (*t).max(m.event_time.millis());
            }
            (atlas_domain::Body::Summary { turns, .. }, _) => {
                summaries.push(json!([group.0, group.1, group.2, turns]));
            }
            _ => {}
        }
    }
    let mut effects = serde_json::Map::new();
    if !last.is_empty() {
        let sessions: Vec<Value> = last.into_iter().map(|((u, a, s), t)| json!([u, a, s, t])).collect();
        effects.insert("sessions".into(), Value::from(sessions));
    }
    if !summaries.is_empty() {
        effects.insert("summaries".into(), Value::from(summaries));
    }
    effects
}

/// A sleep cycle's bookkeeping, applied when its batch rolls forward.
pub(crate) fn cycle_effect(
    at: i64,
    processed: &[MemoryId],
    failed: &[(MemoryId, String)],
    unlinked: &[(MemoryId, MemoryId, atlas_domain::EdgeKind)],
    report: &serde_json::Value,
) -> Value {
    let failed: Vec<Value> = failed.iter().map(|(id, e)| json!([id.0, e])).collect();
    let unlinked: Vec<Value> = unlinked.iter().map(|(src, dst, kind)| json!([src.0, dst.0, kind.as_str()])).collect();
    json!({ "at": at, "processed": encode_id_runs(processed), "failed": failed, "unlinked": unlinked, "report": report })
}

impl QdrantStore {
    /// The batch as memories under their new ids, each episode carrying its predecessor's line
    /// as context when it is short ([`context_from`]; the predecessor is in the batch or already
    /// stored).
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
            let predecessor = match prev {
                Some(p) => match position.get(p) {
                    Some(&j) => Some(line(&memories[j])),
                    None => stored.get(p).cloned(),
                },
                None => None,
            };
            memories[i].context = predecessor.as_deref().and_then(context_from);
        }
        Ok(memories)
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
