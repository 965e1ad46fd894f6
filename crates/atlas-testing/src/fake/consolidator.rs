//! The fake's side of the sleep cycle: unprocessed episodes, claims, one consolidation applied
//! at once, the ledger of cycles.

use super::*;

#[async_trait]
impl Consolidator for FakeStore {
    async fn unprocessed(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(s.memories
            .values()
            .filter(|m| m.kind() == MemoryKind::Episode && !m.lifecycle.is_deleted())
            .filter(|m| match s.consolidation.get(&m.id) {
                None => true,
                Some((processed, attempts, last)) => {
                    !processed
                        && *attempts < max_attempts
                        && last + retry_after_ms * i64::from(*attempts) <= now.millis()
                }
            })
            .take(limit)
            .cloned()
            .collect())
    }

    async fn known(&self, subjects: Vec<String>, names: Vec<String>, scope: Scope) -> Result<Vec<Memory>> {
        let s = self.state.lock().unwrap();
        Ok(s.memories
            .values()
            .filter(|m| m.scope.user == scope.user && m.scope.agent == scope.agent && !m.lifecycle.is_deleted())
            .filter(|m| match &m.body {
                Body::Fact { subject, .. } => subjects.contains(subject),
                Body::Entity { name, .. } => names.contains(&normalize(name)),
                _ => false,
            })
            .cloned()
            .collect())
    }

    async fn apply(&self, batch: Consolidation) -> Result<Vec<MemoryId>> {
        let mut s = self.state.lock().unwrap();
        // All or nothing: every check before the first change.
        let n = batch.memories.len();
        let exists = |r: &MemoryRef| match r {
            MemoryRef::Stored(id) => s.memories.contains_key(id),
            MemoryRef::New(i) => *i < n,
        };
        if let Some(e) = batch.edges.iter().find(|e| !exists(&e.src) || !exists(&e.dst)) {
            return Err(AtlasError::Storage(format!("an edge refers to a memory that does not exist: {e:?}")));
        }
        if let Some(r) = batch.revisions.iter().find(|r| !s.memories.contains_key(&r.id)) {
            return Err(AtlasError::NotFound(r.id));
        }
        // Revisions first: a version they end is history before the new memories look for the
        // turn they follow.
        for r in batch.revisions {
            let m = s.memories.get_mut(&r.id).expect("checked");
            m.validity.valid_until = r.valid_until;
            if let Some(from) = r.valid_from {
                m.validity.valid_from = from;
                m.event_time = from;
            }
            if let (Some(c), Body::Fact { confidence, .. }) = (r.confidence, &mut m.body) {
                *confidence = c;
            }
        }
        let ids = insert_locked(&mut s, batch.memories);
        for (src, dst, kind) in batch.unlinked {
            s.edges.retain(|e| (e.src, e.dst, e.kind) != (src, dst, kind));
        }
        for e in batch.edges {
            let edge = e.resolve(&ids)?;
            s.edges.retain(|o| (o.src, o.dst, o.kind) != (edge.src, edge.dst, edge.kind));
            s.edges.push(edge);
        }
        let at = batch.at.millis();
        for id in batch.processed {
            let entry = s.consolidation.entry(id).or_insert((false, 0, at));
            *entry = (true, entry.1 + 1, at);
        }
        for (id, _) in batch.failed {
            let entry = s.consolidation.entry(id).or_insert((false, 0, at));
            *entry = (false, entry.1 + 1, at);
        }
        s.cycles.push(CycleRecord { at: batch.at, report: batch.report });
        Ok(ids)
    }

    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        let mut cycles = self.state.lock().unwrap().cycles.clone();
        cycles.sort_by_key(|c| c.at);
        Ok(cycles.into_iter().rev().take(limit).map(|c| c.report).collect())
    }

    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>> {
        let s = self.state.lock().unwrap();
        let live = |m: &&Memory| !m.lifecycle.is_deleted() && m.scope.session.is_some();
        let mut sessions: BTreeMap<(Option<String>, Option<String>, Option<String>), Vec<Memory>> = BTreeMap::new();
        for m in s.memories.values().filter(live).filter(|m| m.kind() == MemoryKind::Episode) {
            let key = (m.scope.user.clone(), m.scope.agent.clone(), m.scope.session.clone());
            sessions.entry(key).or_default().push(m.clone());
        }
        let mut closed: Vec<(Timestamp, ClosedSession)> = Vec::new();
        for ((user, agent, session), mut turns) in sessions {
            turns.sort_by_key(|m| (m.event_time, m.id));
            let last = turns.last().expect("a session has a turn").event_time;
            let scope = Scope { user, agent, session };
            let summaries: Vec<&Memory> = s
                .memories
                .values()
                .filter(live)
                .filter(|m| m.scope == scope && m.validity.valid_until.is_none())
                .filter(|m| matches!(m.body, Body::Summary { .. }))
                .collect();
            let covered =
                summaries.iter().any(|m| matches!(m.body, Body::Summary { turns: n, .. } if n as usize >= turns.len()));
            if last >= said_before || covered {
                continue;
            }
            let previous = summaries.iter().map(|m| m.id).max();
            closed.push((last, ClosedSession { scope, turns, previous }));
        }
        closed.sort_by(|a, b| (a.0, &a.1.scope.session).cmp(&(b.0, &b.1.scope.session)));
        Ok(closed.into_iter().take(limit).map(|(_, c)| c).collect())
    }
}
