//! The vector queue as state of the points themselves, so that the background embedder of any
//! process on any host takes work from the server and no two embed the same memory.
//!
//! A memory awaits a vector while its point has `vector_queue` (indexed): the time in
//! milliseconds until which a claim holds it, 0 when nobody does. Every point written without
//! a vector gets `vector_queue = 0`; storing its vector removes the field. A claim is a
//! conditional write: `vector_queue` and `vector_claim` (the owner) are set only on points whose
//! claim has expired or is the owner's own (the condition is evaluated by the server, ordered
//! through the shard's leader, [`crate::collection::ordered`], so of two racing claims the second
//! sees the first), then the points are read back and the owner keeps those that carry its name.
//!
//! The sleep cycle claims the episodes it reads the same way ([`Claims::SLEEP`]), so that
//! cycles on two hosts at once never consolidate the same episode twice.

use crate::collection::Collection;
use crate::payload::point_id;
use atlas_domain::{MemoryId, Result};
use qdrant_client::qdrant::{
    Condition, DeletePayloadPointsBuilder, Filter, GetPointsBuilder, HasIdCondition, PointId, Range,
    SetPayloadPointsBuilder,
};
use serde_json::json;

pub use crate::schema::queue_field as field;

/// A kind of claim on points: the field of its deadline and the field of its owner.
#[derive(Debug, Clone, Copy)]
pub struct Claims {
    until: &'static str,
    owner: &'static str,
    what: &'static str,
}

impl Claims {
    /// The background embedder's claims on queued memories.
    pub const VECTORS: Claims =
        Claims { until: field::VECTOR_QUEUE, owner: field::VECTOR_CLAIM, what: "claim queued vector work" };
    /// A sleep cycle's claims on the episodes it reads.
    pub const SLEEP: Claims =
        Claims { until: field::SLEEP_UNTIL, owner: field::SLEEP_CLAIM, what: "claim episodes to consolidate" };
    /// A sleep cycle's claims on the closed sessions it summarises (points of the meta
    /// collection), so that two cycles never summarise one session at once.
    pub const SUMMARY: Claims =
        Claims { until: field::SUMMARY_UNTIL, owner: field::SUMMARY_CLAIM, what: "claim a session to summarise" };

    /// Points `owner` may claim at `now`: unclaimed, expired or its own (and committed).
    pub fn claimable(&self, owner: &str, now: i64) -> Filter {
        Filter {
            should: vec![
                Condition::is_empty(self.until),
                Condition::range(self.until, Range { lte: Some(now as f64), ..Range::default() }),
                Condition::matches(self.owner, owner.to_owned()),
            ],
            must_not: vec![crate::filter::pending()],
            ..Filter::default()
        }
    }

    /// Claims those of `ids` that `must` admits for `owner` until `until` where the claim is
    /// free; returns those it holds (its name on an unexpired claim: this one, or one another
    /// task of the same owner just renewed), in id order.
    pub async fn claim(
        &self,
        memories: &Collection,
        ids: &[MemoryId],
        must: Vec<Condition>,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<Vec<MemoryId>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let held = self.claim_points(memories, point_ids(ids)?, must, owner, now, until).await?;
        let mut held = held.iter().map(|id| crate::decode::memory_id(Some(id))).collect::<Result<Vec<_>>>()?;
        held.sort();
        Ok(held)
    }

    /// [`Claims::claim`] on points of any collection, named by their point ids; returns the
    /// ids of those it holds, in no particular order.
    pub async fn claim_points(
        &self,
        points: &Collection,
        ids: Vec<PointId>,
        must: Vec<Condition>,
        owner: &str,
        now: i64,
        until: i64,
    ) -> Result<Vec<PointId>> {
        let mut filter = self.claimable(owner, now);
        filter.must = must;
        filter.must.push(Condition::from(HasIdCondition { has_id: ids.clone() }));
        let mut payload = serde_json::Map::new();
        payload.insert(self.until.into(), until.into());
        payload.insert(self.owner.into(), owner.into());
        let request = SetPayloadPointsBuilder::new(points.name(), qdrant_client::Payload::from(payload))
            .points_selector(filter)
            .ordering(crate::collection::ordered())
            .wait(true);
        points.call(self.what, points.client().set_payload(request.build())).await?;
        let request = GetPointsBuilder::new(points.name(), ids)
            .with_payload(crate::decode::include(&[self.until, self.owner]))
            .with_vectors(false);
        let read = points.call("read the claims", points.client().get_points(request.build())).await?;
        Ok(read
            .into_iter()
            .filter(|p| {
                p.payload.get(self.owner).and_then(|v| v.as_str()).is_some_and(|o| o == owner)
                    && p.payload.get(self.until).and_then(|v| v.as_integer()).is_some_and(|t| t > now)
            })
            .filter_map(|p| p.id)
            .collect())
    }

    /// Lets go of the claims on `ids`.
    /// `held_by`: only claims of that owner (a late repeat of a roll-forward must not drop
    /// another process's newer claim); `None`: whoever holds them.
    pub async fn release(&self, memories: &Collection, ids: &[MemoryId], held_by: Option<&str>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.release_points(memories, point_ids(ids)?, held_by).await
    }

    /// Lets go of the claims on the points `ids` of any collection (those of `held_by` only,
    /// when given).
    pub async fn release_points(&self, points: &Collection, ids: Vec<PointId>, held_by: Option<&str>) -> Result<()> {
        // A filter, not a list: a point deleted meanwhile is no error.
        let mut filter = Filter::must([Condition::from(HasIdCondition { has_id: ids })]);
        if let Some(owner) = held_by {
            filter.must.push(Condition::matches(self.owner, owner.to_owned()));
        }
        let request =
            DeletePayloadPointsBuilder::new(points.name(), vec![self.until.to_owned(), self.owner.to_owned()])
                .points_selector(filter)
                .wait(true);
        points.call("release claims", points.client().delete_payload(request.build())).await
    }
}

/// Points awaiting a vector.
pub fn queued() -> Condition {
    Condition::range(field::VECTOR_QUEUE, Range { gte: Some(i64::MIN as f64), ..Range::default() })
}

fn point_ids(ids: &[MemoryId]) -> Result<Vec<PointId>> {
    ids.iter().map(|id| point_id(*id).map(PointId::from)).collect()
}

/// Up to `limit` ids of queued points `owner` may claim at `now`, in id order.
pub async fn candidates(memories: &Collection, owner: &str, now: i64, limit: usize) -> Result<Vec<MemoryId>> {
    if limit == 0 || !memories.exists().await? {
        return Ok(Vec::new());
    }
    let request = qdrant_client::qdrant::ScrollPointsBuilder::new(memories.name())
        .filter(Filter { must: vec![queued()], ..Claims::VECTORS.claimable(owner, now) })
        .limit(limit.min(u32::MAX as usize) as u32)
        .with_payload(false)
        .with_vectors(false);
    let page = memories.call("scroll", memories.client().scroll(request.build())).await?;
    page.points.into_iter().map(|p| crate::decode::memory_id(p.id.as_ref())).collect()
}

/// Claims queued `ids` for `owner` until `until`; returns those it holds.
pub async fn claim(
    memories: &Collection,
    ids: &[MemoryId],
    owner: &str,
    now: i64,
    until: i64,
) -> Result<Vec<MemoryId>> {
    Claims::VECTORS.claim(memories, ids, vec![queued()], owner, now, until).await
}

/// Takes `ids` off the queue (their vectors are stored), with why any of them was set aside.
pub async fn done(memories: &Collection, ids: &[MemoryId]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let filter = Filter::must([Condition::from(HasIdCondition { has_id: point_ids(ids)? })]);
    let fields = vec![field::VECTOR_QUEUE.to_owned(), field::VECTOR_CLAIM.to_owned(), field::VECTOR_FAILED.to_owned()];
    let request = DeletePayloadPointsBuilder::new(memories.name(), fields).points_selector(filter).wait(true);
    memories.call("release claims", memories.client().delete_payload(request.build())).await
}

/// Sets queued `items` aside until `until`: claimed by [`field::SET_ASIDE`], which no process is,
/// each with why. A point deleted or embedded meanwhile is left alone.
pub async fn set_aside(memories: &Collection, items: &[(MemoryId, String)], until: i64) -> Result<()> {
    for (id, why) in items {
        let payload =
            json!({ field::VECTOR_QUEUE: until, field::VECTOR_CLAIM: field::SET_ASIDE, field::VECTOR_FAILED: why });
        let serde_json::Value::Object(payload) = payload else { unreachable!("a JSON object") };
        let filter = Filter::must([Condition::from(HasIdCondition { has_id: point_ids(&[*id])? }), queued()]);
        let request = SetPayloadPointsBuilder::new(memories.name(), qdrant_client::Payload::from(payload))
            .points_selector(filter)
            .ordering(crate::collection::ordered())
            .wait(true);
        memories.call("set a memory aside", memories.client().set_payload(request.build())).await?;
    }
    Ok(())
}

/// Forgets why any memory was set aside (a re-embed tries every one again at once: the queue
/// was just set to 0 for all).
pub async fn clear_set_aside(memories: &Collection) -> Result<()> {
    let request = DeletePayloadPointsBuilder::new(memories.name(), vec![field::VECTOR_FAILED.to_owned()])
        .points_selector(set_aside_filter())
        .wait(true);
    memories.call("clear set-aside reasons", memories.client().delete_payload(request.build())).await
}

/// Queued points with a reason for being set aside.
fn set_aside_filter() -> Filter {
    Filter { must: vec![queued()], must_not: vec![Condition::is_empty(field::VECTOR_FAILED)], ..Filter::default() }
}

/// How many queued memories are set aside, and up to `limit` of them with why, in id order.
pub async fn set_aside_list(memories: &Collection, limit: usize) -> Result<(u64, Vec<(MemoryId, String)>)> {
    if !memories.exists().await? {
        return Ok((0, Vec::new()));
    }
    let total = memories.count(Some(set_aside_filter())).await?;
    if total == 0 || limit == 0 {
        return Ok((total, Vec::new()));
    }
    let request = qdrant_client::qdrant::ScrollPointsBuilder::new(memories.name())
        .filter(set_aside_filter())
        .limit(limit.min(u32::MAX as usize) as u32)
        .with_payload(crate::decode::include(&[field::VECTOR_FAILED]))
        .with_vectors(false);
    let page = memories.call("scroll", memories.client().scroll(request.build())).await?;
    let mut listed = Vec::with_capacity(page.points.len());
    for p in page.points {
        let id = crate::decode::memory_id(p.id.as_ref())?;
        let why =
            p.payload.get(field::VECTOR_FAILED).and_then(|v| v.as_str().map(ToOwned::to_owned)).unwrap_or_default();
        listed.push((id, why));
    }
    listed.sort();
    Ok((total, listed))
}

/// Puts the points `filter` selects (back) on the queue, unclaimed.
pub async fn enqueue_matching(memories: &Collection, filter: Filter) -> Result<()> {
    let payload = json!({ field::VECTOR_QUEUE: 0 });
    let serde_json::Value::Object(payload) = payload else { unreachable!("a JSON object") };
    let request = SetPayloadPointsBuilder::new(memories.name(), qdrant_client::Payload::from(payload))
        .points_selector(filter)
        .ordering(crate::collection::ordered())
        .wait(true);
    memories.call("queue memories for a vector", memories.client().set_payload(request.build())).await
}

/// Puts `ids` (back) on the queue, unclaimed.
pub async fn enqueue(memories: &Collection, ids: &[MemoryId]) -> Result<()> {
    for chunk in ids.chunks(256) {
        enqueue_matching(memories, Filter::must([Condition::from(HasIdCondition { has_id: point_ids(chunk)? })]))
            .await?;
    }
    Ok(())
}
