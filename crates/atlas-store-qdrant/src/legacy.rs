//! A space file of an earlier version kept what now lives on the server: the ledger of
//! acknowledged writes, the edges, the vector queue, the sleep cycle's bookkeeping and the
//! receipts of keyed writes. The first open by this version moves all of it (written on the
//! server before the file forgets it, so an interrupted move is simply done again) and empties
//! those tables; afterwards the file holds only the space's settings.

use crate::meta::{self, Failure};
use crate::sidecar::sql;
use crate::{QdrantStore, ledger, queue, write};
use atlas_domain::{AtlasError, Edge, MemoryId, Result, decode_id_runs};
use rusqlite::Connection;
use serde_json::{Value, json};

/// A session's turns: (user, agent, session) and a number (its last turn's time, or the
/// turns its current summary covers).
type SessionRow = (Option<String>, Option<String>, String, i64);

/// What an earlier version's file holds that belongs on the server.
#[derive(Default)]
struct Legacy {
    /// Writes and forgets that never finished: their points go.
    unfinished: Vec<MemoryId>,
    edges: Vec<Edge>,
    queued: Vec<MemoryId>,
    /// Episodes the sleep cycle processed, and when.
    processed: Vec<(MemoryId, i64)>,
    failures: Vec<Failure>,
    sessions: Vec<SessionRow>,
    summarized: Vec<SessionRow>,
    /// Row id, time and report of each cycle.
    cycles: Vec<(i64, i64, String)>,
    /// Key, ids and time of each keyed write.
    receipts: Vec<(String, String, i64)>,
}

impl Legacy {
    fn is_empty(&self) -> bool {
        self.unfinished.is_empty()
            && self.edges.is_empty()
            && self.queued.is_empty()
            && self.processed.is_empty()
            && self.failures.is_empty()
            && self.sessions.is_empty()
            && self.cycles.is_empty()
            && self.receipts.is_empty()
    }

    fn read(conn: &Connection) -> Result<Legacy> {
        let ids = |query: &str| -> Result<Vec<MemoryId>> {
            let mut stmt = conn.prepare(query).map_err(sql)?;
            let rows = stmt.query_map([], |r| r.get(0).map(MemoryId)).map_err(sql)?;
            rows.collect::<rusqlite::Result<_>>().map_err(sql)
        };
        let sessions = |query: &str| -> Result<Vec<SessionRow>> {
            let mut stmt = conn.prepare(query).map_err(sql)?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).map_err(sql)?;
            rows.collect::<rusqlite::Result<_>>().map_err(sql)
        };
        let mut legacy = Legacy {
            unfinished: ids("SELECT id FROM ledger WHERE state <> 'stored' ORDER BY id")?,
            edges: crate::sidecar::legacy_edges(conn)?,
            queued: ids("SELECT id FROM vector_queue ORDER BY id")?,
            sessions: sessions(
                "SELECT scope_user, scope_agent, scope_session, max(event_time) FROM ledger WHERE kind = 'episode' \
                 AND state = 'stored' AND scope_session IS NOT NULL GROUP BY 1, 2, 3",
            )?,
            summarized: sessions(
                "SELECT l.scope_user, l.scope_agent, l.scope_session, max(x.turns) FROM summaries x JOIN ledger l \
                 ON l.id = x.id WHERE x.current = 1 AND l.state = 'stored' AND l.scope_session IS NOT NULL \
                 GROUP BY 1, 2, 3",
            )?,
            ..Legacy::default()
        };
        let mut stmt = conn
            .prepare(
                "SELECT id, processed_at, attempts, coalesce(last_attempt, 0), coalesce(last_error, '') \
                 FROM consolidation ORDER BY id",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    MemoryId(r.get(0)?),
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(sql)?;
        for row in rows {
            match row.map_err(sql)? {
                (id, Some(at), ..) => legacy.processed.push((id, at)),
                (episode, None, attempts, last_attempt, last_error) => {
                    legacy.failures.push(Failure { episode, attempts, last_attempt, last_error })
                }
            }
        }
        let mut stmt = conn.prepare("SELECT id, at, report FROM cycles ORDER BY id").map_err(sql)?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(sql)?;
        legacy.cycles = rows.collect::<rusqlite::Result<_>>().map_err(sql)?;
        let mut stmt = conn.prepare("SELECT key, ids, recorded_at FROM receipts ORDER BY key").map_err(sql)?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(sql)?;
        legacy.receipts = rows.collect::<rusqlite::Result<_>>().map_err(sql)?;
        Ok(legacy)
    }
}

/// Tables the move empties, children first.
const MOVED_TABLES: &str = "DELETE FROM edges; DELETE FROM vector_queue; DELETE FROM consolidation; \
    DELETE FROM summaries; DELETE FROM cycles; DELETE FROM receipts; DELETE FROM ledger;";

impl QdrantStore {
    pub(crate) async fn move_legacy_state(&self) -> Result<()> {
        let Some(side) = &self.side else { return Ok(()) };
        let legacy = side.read(Legacy::read).await?;
        if legacy.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            collection = self.collection(),
            edges = legacy.edges.len(),
            queued = legacy.queued.len(),
            cycles = legacy.cycles.len(),
            receipts = legacy.receipts.len(),
            "moving the space's ledger, edges, vector queue and sleep bookkeeping from its file to the server (once)"
        );
        self.collection.delete_points(&legacy.unfinished).await?;
        meta::delete_edges_of(&self.meta, &legacy.unfinished).await?;
        let unfinished: std::collections::HashSet<MemoryId> = legacy.unfinished.iter().copied().collect();
        let edges: Vec<Edge> =
            legacy.edges.into_iter().filter(|e| !unfinished.contains(&e.src) && !unfinished.contains(&e.dst)).collect();
        meta::put_edges(&self.meta, &edges, &[]).await?;
        let queued: Vec<MemoryId> = legacy.queued.into_iter().filter(|id| !unfinished.contains(id)).collect();
        queue::enqueue(&self.collection, &queued).await?;
        let mut processed: std::collections::BTreeMap<i64, Vec<MemoryId>> = Default::default();
        for (id, at) in &legacy.processed {
            processed.entry(*at).or_default().push(*id);
        }
        for (at, ids) in processed {
            let cycle = write::cycle_effect(at, &ids, &[], &[], &Value::Null);
            self.apply_effects(&json!({ "cycle": cycle })).await?;
        }
        meta::put_failures(&self.meta, &legacy.failures).await?;
        for (user, agent, session, last) in &legacy.sessions {
            meta::saw_turn(&self.meta, (user.as_deref(), agent.as_deref(), session), *last).await?;
        }
        for (user, agent, session, turns) in &legacy.summarized {
            meta::summarized(&self.meta, (user.as_deref(), agent.as_deref(), session), *turns).await?;
        }
        for (row, at, report) in &legacy.cycles {
            let report: Value = serde_json::from_str(report)
                .map_err(|e| AtlasError::Storage(format!("cycles row {row} of the space file: {e}")))?;
            let effects = json!({ "cycle": { "at": at, "report": report } });
            ledger::put_finished(&self.meta, *row, None, &[], *at, Some(effects)).await?;
        }
        for (key, ids, at) in &legacy.receipts {
            let ids = decode_id_runs(ids).map_err(|m| AtlasError::Storage(format!("receipts row {key:?}: {m}")))?;
            ledger::put_finished(&self.meta, ledger::unique_number(), Some(key), &ids, *at, None).await?;
        }
        side.write(|tx| {
            tx.execute_batch(MOVED_TABLES)
                .map_err(|e| AtlasError::Storage(format!("emptying the moved tables of the space file: {e}")))
        })
        .await
    }
}
