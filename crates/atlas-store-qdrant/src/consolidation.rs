//! The sleep cycle's port on Qdrant. The points are the memories; an episode the cycle
//! processed carries `consolidated_at`; the meta collection keeps per session when its last
//! turn was said and how many turns its summary covers, and per episode the cycle failed on how
//! often ([`crate::meta`]). Cycles on several hosts claim what they take: the episodes they
//! read ([`Claims::SLEEP`]) and the sessions they summarise ([`Claims::SUMMARY`]).
//!
//! `apply` is one write of the ledger ([`crate::ledger`]): its new memories and edges land
//! invisible, the revisions are written, then one commit makes the new memories visible and,
//! rolled forward, marks the episodes processed, counts the failures, releases the cycle's
//! claims and keeps the cycle's report in the write's record. A crash before the commit rolls
//! the new memories back and leaves the episodes unprocessed; the revision may already be on
//! its point, and the re-run cycle converges on the same outcome.

use crate::collection::dense_vector_name;
use crate::payload::field;
use crate::queue::Claims;
use crate::schema::CONSOLIDATED_AT;
use crate::write::Landed;
use crate::{QdrantStore, filter, ledger, meta};
use async_trait::async_trait;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::ports::{ClosedSession, Consolidation, Consolidator, CycleRecord};
use atlas_domain::{AtlasError, Body, Memory, MemoryId, MemoryKind, Result, Scope, Timestamp};
use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::{Condition, Direction, Filter, PointId, Range, RepeatedStrings, ScrollPointsBuilder};

/// Points read per scroll request.
const PAGE: u32 = 256;
/// How long a cycle holds the episodes it read (extraction by a model on a CPU can be slow).
const SLEEP_CLAIM_MS: i64 = 10 * 60_000;
/// How long a cycle holds the closed sessions it was handed: it summarises up to
/// `summaries_per_cycle` of them with a model before it writes them all in one batch. One it
/// did not summarise (out of model calls, a failed batch) is free again when the claim ends.
const SUMMARY_CLAIM_MS: i64 = 30 * 60_000;
/// Times a cycle looks again after other cycles took every episode it found.
const SLEEP_CLAIM_ROUNDS: usize = 3;

impl QdrantStore {
    /// Every live memory under `must` (committed, never soft-deleted), in id order.
    async fn scroll_all(&self, must: Vec<Condition>) -> Result<Vec<Memory>> {
        let filter = Filter { must, must_not: vec![filter::soft_deleted(), filter::pending()], ..Filter::default() };
        self.collection
            .scroll_matching(filter)
            .await?
            .into_iter()
            .map(|p| crate::decode::decode(p, None).map(|d| d.0))
            .collect()
    }

    /// The live episodes of a session, in (event time, id) order.
    async fn turns_of(&self, scope: &Scope) -> Result<Vec<Memory>> {
        let Some(session) = &scope.session else { return Ok(Vec::new()) };
        let mut must = filter::owned_by(scope);
        must.push(filter::kind_is(MemoryKind::Episode));
        must.push(Condition::matches(field::SESSION, MatchValue::Keyword(session.clone())));
        let mut turns = self.scroll_all(must).await?;
        turns.sort_by_key(|m| (m.event_time, m.id));
        Ok(turns)
    }
}

impl QdrantStore {
    /// Up to `limit` unprocessed episodes, in id order, neither given up on, nor backing off,
    /// nor held by another process's cycle.
    async fn ready_episodes(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<Memory>> {
        let mut filter = Claims::SLEEP.claimable(&self.owner, ledger::now_ms());
        filter.must = vec![filter::kind_is(MemoryKind::Episode), Condition::is_empty(CONSOLIDATED_AT)];
        filter.must_not.push(filter::soft_deleted());
        // Episodes given up on or backing off are skipped, and the next ones read, until
        // `limit` are found.
        let mut found = Vec::new();
        let mut offset: Option<PointId> = None;
        loop {
            let mut request = ScrollPointsBuilder::new(self.collection.name())
                .filter(filter.clone())
                .limit(PAGE.max(limit as u32))
                .with_payload(true)
                .with_vectors(false);
            if let Some(o) = offset.take() {
                request = request.offset(o);
            }
            let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?;
            let episodes: Vec<Memory> =
                page.points.into_iter().map(|p| crate::decode::decode(p, None).map(|d| d.0)).collect::<Result<_>>()?;
            let ids: Vec<MemoryId> = episodes.iter().map(|m| m.id).collect();
            let attempts = meta::attempts_of(&self.meta, &ids).await?;
            for m in episodes {
                let ready = match attempts.get(&m.id) {
                    None => true,
                    Some(&(n, last)) => n < i64::from(max_attempts) && last + retry_after_ms * n <= now.millis(),
                };
                if ready {
                    found.push(m);
                    if found.len() == limit {
                        return Ok(found);
                    }
                }
            }
            match page.next {
                Some(next) => offset = Some(next),
                None => return Ok(found),
            }
        }
    }
}

#[async_trait]
impl Consolidator for QdrantStore {
    async fn unprocessed(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<Memory>> {
        if limit == 0 || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        // A cycle on another host may take the same episodes first: those it holds are not
        // candidates the next time round.
        for _ in 0..SLEEP_CLAIM_ROUNDS {
            let found = self.ready_episodes(limit, max_attempts, retry_after_ms, now).await?;
            if found.is_empty() {
                return Ok(found);
            }
            let ids: Vec<MemoryId> = found.iter().map(|m| m.id).collect();
            let wall = ledger::now_ms();
            let held = Claims::SLEEP
                .claim(&self.collection, &ids, Vec::new(), &self.owner, wall, wall + SLEEP_CLAIM_MS)
                .await?;
            if !held.is_empty() {
                return Ok(found.into_iter().filter(|m| held.binary_search(&m.id).is_ok()).collect());
            }
        }
        Ok(Vec::new())
    }

    async fn known(&self, subjects: Vec<String>, names: Vec<String>, scope: Scope) -> Result<Vec<Memory>> {
        let mut found = Vec::new();
        for chunk in subjects.chunks(256) {
            let mut must = filter::owned_by(&scope);
            must.push(filter::kind_is(MemoryKind::Fact));
            must.push(Condition::matches(
                "body.subject",
                MatchValue::Keywords(RepeatedStrings { strings: chunk.to_vec() }),
            ));
            found.extend(self.scroll_all(must).await?);
        }
        if !names.is_empty() {
            // Names compare normalised, which Qdrant cannot: the entities of one user and agent
            // are few, so they are filtered here.
            let mut must = filter::owned_by(&scope);
            must.push(filter::kind_is(MemoryKind::Entity));
            found.extend(self.scroll_all(must).await?.into_iter().filter(|m| match &m.body {
                Body::Entity { name, .. } => names.contains(&normalize(name)),
                _ => false,
            }));
        }
        found.sort_by_key(|m| m.id);
        Ok(found)
    }

    async fn apply(&self, batch: Consolidation) -> Result<Vec<MemoryId>> {
        // Every revision names a memory that exists, or nothing is written.
        let revised_ids: Vec<MemoryId> = batch.revisions.iter().map(|r| r.id).collect();
        let mut revised = self.fetch(&revised_ids, true).await?;
        if let Some(r) = batch.revisions.iter().find(|r| !revised.iter().any(|(m, _, _)| m.id == r.id)) {
            return Err(AtlasError::NotFound(r.id));
        }
        let model = self.bound_model();
        self.collection.ensure(model.as_ref()).await?;
        let ledger::Begun::Write(mut write) = self.begin(None).await? else {
            unreachable!("an unkeyed write is never a replay")
        };
        let landed: Result<Landed> = async {
            let (ids, memories) = if batch.memories.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                self.land_new(&mut write, &batch.memories, &revised_ids).await?
            };
            let dense = model.as_ref().map(dense_vector_name);
            let mut points = Vec::new();
            for (m, vector, kept) in &mut revised {
                let r = batch.revisions.iter().rev().find(|r| r.id == m.id).expect("checked above");
                m.validity.valid_until = r.valid_until;
                if let Some(from) = r.valid_from {
                    m.validity.valid_from = from;
                    m.event_time = from;
                }
                if let (Body::Fact { confidence, .. }, Some(c)) = (&mut m.body, r.confidence) {
                    *confidence = c;
                }
                points.push(self.point(m, dense.as_deref().zip(vector.take()), *kept)?);
            }
            for chunk in points.chunks(self.batch) {
                self.collection.upsert(chunk.to_vec()).await?;
            }
            let edges = batch.edges.iter().map(|e| e.resolve(&ids)).collect::<Result<Vec<_>>>()?;
            meta::put_edges(&self.meta, &edges, &write.marks()).await?;
            write.wrote_edges |= !edges.is_empty();
            let mut effects = crate::write::effects_of(&memories);
            effects.insert(
                "cycle".into(),
                crate::write::cycle_effect(
                    batch.at.millis(),
                    &batch.processed,
                    &batch.failed,
                    &batch.unlinked,
                    &batch.report,
                ),
            );
            effects.insert(crate::write::CLAIMANT.into(), serde_json::Value::from(self.owner.clone()));
            Ok(Landed { ids, effects: Some(serde_json::Value::Object(effects)) })
        }
        .await;
        Ok(self.finish_write(write, landed).await?.ids)
    }

    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        Ok(self.ledger_of_cycles(limit, Direction::Desc).await?.into_iter().map(|c| c.report).collect())
    }

    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>> {
        let mut closed = Vec::new();
        if limit == 0 || !self.meta.exists().await? {
            return Ok(closed);
        }
        for (user, agent, session, summarized) in meta::quiet_sessions(&self.meta, said_before.millis()).await? {
            let scope = Scope { user, agent, session: Some(session) };
            // Forgotten turns count for neither side, as on every store.
            let turns = self.turns_of(&scope).await?;
            if turns.is_empty() || summarized >= turns.len() as i64 {
                continue;
            }
            // A cycle on another host may be summarising it right now: only the holder of the
            // session's claim does (released when the summary's write rolls forward).
            let wall = ledger::now_ms();
            let key = (scope.user.as_deref(), scope.agent.as_deref(), scope.session.as_deref().unwrap_or_default());
            let said = turns.len() as i64;
            if !meta::claim_session(&self.meta, key, said, &self.owner, wall, wall + SUMMARY_CLAIM_MS).await? {
                continue;
            }
            let mut must = filter::owned_by(&scope);
            must.push(filter::kind_is(MemoryKind::Summary));
            must.push(Condition::matches(
                field::SESSION,
                MatchValue::Keyword(scope.session.clone().unwrap_or_default()),
            ));
            let open = Range { gte: Some(crate::payload::OPEN_END as f64), ..Range::default() };
            must.push(Condition::range(field::VALID_UNTIL, open));
            let previous = self.scroll_all(must).await?.iter().map(|m| m.id).max();
            closed.push(ClosedSession { scope, turns, previous });
            if closed.len() == limit {
                break;
            }
        }
        Ok(closed)
    }
}

impl QdrantStore {
    /// Up to `limit` rows of the ledger of cycles in `direction` of their time: the records of
    /// the cycles' writes, and the rows a restore brought ([`meta::CYCLE`] points).
    pub(crate) async fn ledger_of_cycles(&self, limit: usize, direction: Direction) -> Result<Vec<CycleRecord>> {
        if limit == 0 || !self.meta.exists().await? {
            return Ok(Vec::new());
        }
        let written = Filter::must([
            Condition::matches(meta::field::TYPE, ledger::WRITE.to_owned()),
            Condition::matches(ledger::field::STATE, vec!["committed".to_owned(), "done".to_owned()]),
            Condition::range("effects.cycle.at", Range { gte: Some(i64::MIN as f64), ..Range::default() }),
        ]);
        let restored = Filter::must([Condition::matches(meta::field::TYPE, meta::CYCLE.to_owned())]);
        let filter = Filter::should([Condition::from(written), Condition::from(restored)]);
        let mut out = Vec::new();
        let mut after: Option<i64> = None;
        // Pages of the ledger in time order; a page ends where the next starts.
        while out.len() < limit {
            let mut order = qdrant_client::qdrant::OrderByBuilder::new(ledger::field::AT).direction(direction as i32);
            if let Some(at) = after {
                order = order.start_from(qdrant_client::qdrant::start_from::Value::Integer(at));
            }
            let page = (limit - out.len()).min(1_000);
            let request = ScrollPointsBuilder::new(self.meta.name())
                .filter(filter.clone())
                .order_by(order.build())
                .limit(page as u32)
                .with_payload(crate::decode::include(&[
                    "effects.cycle",
                    ledger::field::AT,
                    "report",
                    meta::field::TYPE,
                ]))
                .with_vectors(false);
            let points = self.meta.call("scroll", self.meta.client().scroll(request.build())).await?.points;
            let got = points.len();
            for p in points {
                let payload: serde_json::Map<String, serde_json::Value> =
                    p.payload.into_iter().map(|(k, v)| (k, serde_json::Value::from(v))).collect();
                let record_at = payload.get(ledger::field::AT).and_then(serde_json::Value::as_i64).unwrap_or_default();
                if after == Some(record_at) && out.iter().any(|c: &(i64, CycleRecord)| c.0 == record_at) {
                    // `start_from` includes its bound: a row already read.
                    continue;
                }
                let record = match payload.get("effects").and_then(|e| e.get("cycle")) {
                    Some(cycle) => CycleRecord {
                        at: Timestamp(cycle.get("at").and_then(serde_json::Value::as_i64).unwrap_or(record_at)),
                        report: cycle.get("report").cloned().unwrap_or_default(),
                    },
                    None => CycleRecord {
                        at: Timestamp(record_at),
                        report: payload.get("report").cloned().unwrap_or_default(),
                    },
                };
                out.push((record_at, record));
            }
            if got < page {
                break;
            }
            after = out.last().map(|c| c.0);
        }
        out.truncate(limit);
        Ok(out.into_iter().map(|(_, c)| c).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QdrantOptions;
    use crate::api::MockQdrantApi;
    use qdrant_client::qdrant::ScrollPoints;
    use std::sync::Arc;

    async fn open(dir: &std::path::Path, api: MockQdrantApi) -> QdrantStore {
        QdrantStore::open_with(&dir.join("space.db"), QdrantOptions::new("http://q:6334"), Arc::new(api)).await.unwrap()
    }

    #[tokio::test]
    async fn known_facts_are_filtered_on_the_server_by_subject_kind_and_owner() {
        let dir = tempfile::tempdir().unwrap();
        let mut api = crate::tests::existing_collection();
        api.expect_scroll()
            .times(1)
            .withf(|s: &ScrollPoints| {
                let f = format!("{:?}", s.filter);
                f.contains("body.subject")
                    && f.contains("\"checkout\"")
                    && f.contains("Keyword(\"fact\")")
                    && f.contains("Keyword(\"ann\")")
                    // No agent: only memories without one (an `is_empty` condition).
                    && f.contains("IsEmpty")
                    && f.contains("deleted_at")
            })
            .returning(|_| Ok(Default::default()));
        let store = open(dir.path(), api).await;
        let scope = Scope { user: Some("ann".into()), agent: None, session: None };
        assert!(store.known(vec!["checkout".into()], Vec::new(), scope).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_revision_of_a_missing_memory_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut api = crate::tests::existing_collection();
        api.expect_get_points().times(1).returning(|_| Ok(Vec::new()));
        api.expect_upsert_points().never();
        api.expect_set_payload().never();
        // The ledger of cycles: no report either.
        api.expect_scroll()
            .withf(|r| r.order_by.as_ref().is_some_and(|o| o.key == "at"))
            .returning(|_| Ok(Default::default()));
        let store = open(dir.path(), api).await;
        let batch = Consolidation {
            memories: Vec::new(),
            edges: Vec::new(),
            revisions: vec![atlas_domain::ports::Revision {
                id: MemoryId(9),
                valid_from: None,
                valid_until: None,
                confidence: None,
            }],
            unlinked: Vec::new(),
            processed: vec![MemoryId(9)],
            failed: Vec::new(),
            report: serde_json::json!({}),
            at: Timestamp(1),
        };
        let err = store.apply(batch).await.unwrap_err();
        assert!(matches!(err, AtlasError::NotFound(MemoryId(9))), "{err:?}");
        assert!(store.cycles(5).await.unwrap().is_empty(), "no ledger row either");
    }
}
