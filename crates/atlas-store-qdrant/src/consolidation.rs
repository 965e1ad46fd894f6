//! The sleep cycle's port on Qdrant: the points are the memories, the sidecar keeps what the
//! cycle tracks (processed episodes with attempts, the ledger of cycles, summary coverage) and
//! the edges. `apply` writes the new points, then the revised ones, then commits the rest in
//! one sidecar transaction; new points are acknowledged only by that commit (a crash before it
//! rolls them back, like any insert), and the cycle that re-runs the unprocessed episodes
//! converges on the same revisions.

use crate::collection::dense_vector_name;
use crate::payload::field;
use crate::{QdrantStore, filter, sidecar};
use async_trait::async_trait;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::ports::{ClosedSession, Consolidation, Consolidator, MemoryRef};
use atlas_domain::{AtlasError, Body, Edge, Memory, MemoryId, MemoryKind, Result, Scope, Timestamp};
use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::{Condition, Filter, PointId, RepeatedStrings, ScrollPointsBuilder};

/// Points read per scroll request.
const PAGE: u32 = 256;

impl QdrantStore {
    /// Every live memory under `filter` (soft-deleted ones never), in id order.
    async fn scroll_all(&self, mut must: Vec<Condition>) -> Result<Vec<Memory>> {
        if !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        let filter =
            Filter { must: std::mem::take(&mut must), must_not: vec![filter::soft_deleted()], ..Filter::default() };
        let mut found = Vec::new();
        let mut from = 1u64;
        loop {
            let request = ScrollPointsBuilder::new(self.collection.name())
                .filter(filter.clone())
                .offset(PointId::from(from))
                .limit(PAGE)
                .with_payload(true)
                .with_vectors(false);
            let points = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
            let n = points.len();
            for p in points {
                found.push(crate::decode(p, None)?.0);
            }
            match found.last() {
                Some(last) if n == PAGE as usize => from = crate::payload::point_id(last.id)? + 1,
                _ => break,
            }
        }
        let ids: Vec<MemoryId> = found.iter().map(|m| m.id).collect();
        let live = self.side.read(move |c| sidecar::stored_among(c, &ids)).await?;
        Ok(found.into_iter().filter(|m| live.contains(&m.id)).collect())
    }
}

/// The user's and agent's memories: equal where set, absent where not.
fn owned_by(scope: &Scope) -> Vec<Condition> {
    [(field::USER, &scope.user), (field::AGENT, &scope.agent)]
        .into_iter()
        .map(|(key, value)| match value {
            Some(v) => Condition::matches(key, MatchValue::Keyword(v.clone())),
            None => Condition::is_empty(key),
        })
        .collect()
}

fn of_kind(kind: MemoryKind) -> Condition {
    Condition::matches(field::KIND, MatchValue::Keyword(kind.as_str().into()))
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
        // Soft-deleted episodes are skipped, and the next ones read, until `limit` are found.
        let mut found = Vec::new();
        let mut after = 0;
        while found.len() < limit {
            let want = limit - found.len();
            let ids = self
                .side
                .read(move |c| sidecar::unprocessed(c, after, want, max_attempts, retry_after_ms, now.millis()))
                .await?;
            let Some(last) = ids.last() else { break };
            after = last.0;
            let done = ids.len() < want;
            found.extend(
                self.fetch(&ids, false).await?.into_iter().map(|(m, _)| m).filter(|m| !m.lifecycle.is_deleted()),
            );
            if done {
                break;
            }
        }
        Ok(found)
    }

    async fn known(&self, subjects: Vec<String>, names: Vec<String>, scope: Scope) -> Result<Vec<Memory>> {
        let mut found = Vec::new();
        for chunk in subjects.chunks(256) {
            let mut must = owned_by(&scope);
            must.push(of_kind(MemoryKind::Fact));
            must.push(Condition::matches(
                "body.subject",
                MatchValue::Keywords(RepeatedStrings { strings: chunk.to_vec() }),
            ));
            found.extend(self.scroll_all(must).await?);
        }
        if !names.is_empty() {
            // Names compare normalised, which Qdrant cannot: the entities of one user and agent
            // are few, so they are filtered here.
            let mut must = owned_by(&scope);
            must.push(of_kind(MemoryKind::Entity));
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
        if let Some(r) = batch.revisions.iter().find(|r| !revised.iter().any(|(m, _)| m.id == r.id)) {
            return Err(AtlasError::Storage(format!("revision of memory {}: no such memory", r.id)));
        }
        let model = self.bound_model();
        self.collection.ensure(model.as_ref()).await?;
        let rows = batch.memories.clone();
        let linked = if rows.is_empty() {
            Vec::new()
        } else {
            self.side.write(move |tx| sidecar::begin_insert(tx, &rows)).await?
        };
        let ids: Vec<MemoryId> = linked.iter().map(|(id, _)| *id).collect();
        let written: Result<()> = async {
            let memories = self.with_context(batch.memories.clone(), &linked).await?;
            let points = memories.iter().map(|m| self.point(m, None)).collect::<Result<Vec<_>>>()?;
            let links = crate::temporal_edges(&memories, &linked);
            if !points.is_empty() {
                self.upsert_or_roll_back(&ids, points, &links).await?;
            }
            let dense = model.as_ref().map(dense_vector_name);
            let mut points = Vec::new();
            for (m, vector) in &mut revised {
                let r = batch.revisions.iter().rev().find(|r| r.id == m.id).expect("checked above");
                m.validity.valid_until = r.valid_until;
                if let (Body::Fact { confidence, .. }, Some(c)) = (&mut m.body, r.confidence) {
                    *confidence = c;
                }
                points.push(self.point(m, dense.as_deref().zip(vector.take()))?);
            }
            for chunk in points.chunks(self.batch) {
                self.collection.upsert(chunk.to_vec()).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = written {
            self.roll_back(ids).await;
            return Err(e);
        }
        let resolve = |r: MemoryRef| match r {
            MemoryRef::Stored(id) => Ok(id),
            MemoryRef::New(i) => ids.get(i).copied().ok_or_else(|| {
                AtlasError::Storage(format!("an edge refers to new memory #{i}; the batch has {}", ids.len()))
            }),
        };
        let edges = batch
            .edges
            .iter()
            .map(|e| {
                Ok(Edge {
                    src: resolve(e.src)?,
                    dst: resolve(e.dst)?,
                    kind: e.kind,
                    weight: e.weight,
                    validity: e.validity,
                    recorded_at: e.recorded_at,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if let Err(e) = crate::meta::put_edges(&self.meta, &edges).await {
            self.roll_back(ids).await;
            return Err(e);
        }
        let summaries: Vec<(MemoryId, u32)> = batch
            .memories
            .iter()
            .zip(&ids)
            .filter_map(|(m, id)| match m.body {
                Body::Summary { turns, .. } => Some((*id, turns)),
                _ => None,
            })
            .collect();
        let ended: Vec<MemoryId> = batch.revisions.iter().filter(|r| r.valid_until.is_some()).map(|r| r.id).collect();
        let done = ids.clone();
        let report = batch.report.to_string();
        let committed = self
            .side
            .write(move |tx| {
                sidecar::finish_insert(tx, &done)?;
                sidecar::record_cycle(
                    tx,
                    batch.at.millis(),
                    &batch.processed,
                    &batch.failed,
                    &summaries,
                    &ended,
                    &report,
                )
            })
            .await;
        if let Err(e) = committed {
            self.roll_back(ids).await;
            return Err(e);
        }
        Ok(ids)
    }

    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        let reports = self.side.read(move |c| sidecar::cycles(c, limit)).await?;
        reports
            .into_iter()
            .map(|text| serde_json::from_str(&text).map_err(|e| AtlasError::Storage(format!("cycles: {e}"))))
            .collect()
    }

    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>> {
        let rows = self.side.read(move |c| sidecar::closed_sessions(c, said_before.millis(), limit)).await?;
        let mut closed = Vec::with_capacity(rows.len());
        for (user, agent, session, turn_ids, previous) in rows {
            let turns: Vec<Memory> = self
                .fetch(&turn_ids, false)
                .await?
                .into_iter()
                .map(|(m, _)| m)
                .filter(|m| !m.lifecycle.is_deleted())
                .collect();
            if turns.is_empty() {
                continue;
            }
            closed.push(ClosedSession { scope: Scope { user, agent, session: Some(session) }, turns, previous });
        }
        Ok(closed)
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
        let store = open(dir.path(), api).await;
        let batch = Consolidation {
            memories: Vec::new(),
            edges: Vec::new(),
            revisions: vec![atlas_domain::ports::Revision { id: MemoryId(9), valid_until: None, confidence: None }],
            processed: vec![MemoryId(9)],
            failed: Vec::new(),
            report: serde_json::json!({}),
            at: Timestamp(1),
        };
        let err = store.apply(batch).await.unwrap_err().to_string();
        assert!(err.contains("revision of memory 9"), "{err}");
        assert!(store.cycles(5).await.unwrap().is_empty(), "no ledger row either");
    }
}
