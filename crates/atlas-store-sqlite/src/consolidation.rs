//! The sleep cycle's port on SQLite: unprocessed episodes (with attempts and backoff), the
//! facts and entities a batch meets, and the batch applied in one transaction with its ledger
//! row.

use crate::SqliteStore;
use crate::error::storage;
use crate::sql::{MEMORY_COLUMNS, put_edge, query_memories};
use crate::writes::insert_all;
use async_trait::async_trait;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::ports::{ClosedSession, Consolidation, Consolidator};
use atlas_domain::{AtlasError, MemoryId, Result, Scope, Timestamp};
use rusqlite::params;
use rusqlite::types::Value;

#[async_trait]
impl Consolidator for SqliteStore {
    async fn unprocessed(
        &self,
        limit: usize,
        max_attempts: u32,
        retry_after_ms: i64,
        now: Timestamp,
    ) -> Result<Vec<atlas_domain::Memory>> {
        self.readers
            .read(move |conn| {
                let sql = format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories m LEFT JOIN consolidation c ON c.id = m.id \
                     WHERE m.kind = 'episode' AND m.deleted_at IS NULL AND (c.id IS NULL OR (c.processed_at IS NULL AND c.attempts < ? \
                     AND coalesce(c.last_attempt, 0) + ? * c.attempts <= ?)) ORDER BY m.id LIMIT ?"
                );
                query_memories(
                    conn,
                    &sql,
                    &[
                        Value::Integer(i64::from(max_attempts)),
                        Value::Integer(retry_after_ms),
                        Value::Integer(now.millis()),
                        Value::Integer(limit as i64),
                    ],
                )
            })
            .await
    }

    async fn known(
        &self,
        subjects: Vec<String>,
        names: Vec<String>,
        scope: Scope,
    ) -> Result<Vec<atlas_domain::Memory>> {
        self.readers
            .read(move |conn| {
                let mut found = Vec::new();
                let in_scope = "m.deleted_at IS NULL AND m.scope_user IS ? AND m.scope_agent IS ?";
                let scope_params = [
                    scope.user.clone().map_or(Value::Null, Value::Text),
                    scope.agent.clone().map_or(Value::Null, Value::Text),
                ];
                for chunk in subjects.chunks(400) {
                    let marks = vec!["?"; chunk.len()].join(", ");
                    let sql = format!(
                        "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.kind = 'fact' \
                         AND json_extract(m.body, '$.subject') IN ({marks}) AND {in_scope} ORDER BY m.id"
                    );
                    let mut params: Vec<Value> = chunk.iter().cloned().map(Value::Text).collect();
                    params.extend(scope_params.iter().cloned());
                    found.extend(query_memories(conn, &sql, &params)?);
                }
                if !names.is_empty() {
                    // Names compare normalised, which SQL cannot do for every script: the
                    // entities of one user and agent are few, so they are filtered here.
                    let sql = format!("SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.kind = 'entity' AND {in_scope}");
                    let wanted: std::collections::HashSet<&String> = names.iter().collect();
                    found.extend(query_memories(conn, &sql, &scope_params)?.into_iter().filter(|m| match &m.body {
                        atlas_domain::Body::Entity { name, .. } => wanted.contains(&normalize(name)),
                        _ => false,
                    }));
                }
                Ok(found)
            })
            .await
    }

    async fn apply(&self, batch: Consolidation) -> Result<Vec<MemoryId>> {
        let written = self
            .writer
            .write(move |conn| {
                // Revisions first: a version they end is history before the new memories look
                // for the turn they follow.
                for r in &batch.revisions {
                    let changed = conn
                        .execute(
                            "UPDATE memories SET valid_until = ?2, body = CASE WHEN ?3 IS NULL THEN body \
                             ELSE json_set(body, '$.confidence', ?3) END, valid_from = coalesce(?4, valid_from), \
                             event_time = coalesce(?4, event_time) WHERE id = ?1",
                            params![
                                r.id.0,
                                r.valid_until.map(Timestamp::millis),
                                r.confidence.map(f64::from),
                                r.valid_from.map(Timestamp::millis)
                            ],
                        )
                        .map_err(storage)?;
                    if changed == 0 {
                        return Err(AtlasError::NotFound(r.id));
                    }
                }
                let written = insert_all(conn, &batch.memories, None)?;
                let ids: Vec<MemoryId> = written.iter().map(|f| MemoryId(f.id)).collect();
                for (src, dst, kind) in &batch.unlinked {
                    conn.execute(
                        "DELETE FROM edges WHERE src = ?1 AND dst = ?2 AND kind = ?3",
                        params![src.0, dst.0, kind.as_str()],
                    )
                    .map_err(storage)?;
                }
                for e in &batch.edges {
                    put_edge(conn, &e.resolve(&ids)?)?;
                }
                let at = batch.at.millis();
                let mut done = conn
                    .prepare_cached(
                        "INSERT INTO consolidation (id, processed_at, attempts, last_attempt) VALUES (?1, ?2, 1, ?2) \
                         ON CONFLICT (id) DO UPDATE SET processed_at = ?2, attempts = attempts + 1, last_attempt = ?2, \
                         last_error = NULL",
                    )
                    .map_err(storage)?;
                for id in &batch.processed {
                    done.execute(params![id.0, at]).map_err(storage)?;
                }
                let mut failed = conn
                    .prepare_cached(
                        "INSERT INTO consolidation (id, attempts, last_error, last_attempt) VALUES (?1, 1, ?2, ?3) \
                         ON CONFLICT (id) DO UPDATE SET attempts = attempts + 1, last_error = ?2, last_attempt = ?3",
                    )
                    .map_err(storage)?;
                for (id, error) in &batch.failed {
                    failed.execute(params![id.0, error, at]).map_err(storage)?;
                }
                conn.execute("INSERT INTO cycles (at, report) VALUES (?, ?)", params![at, batch.report.to_string()])
                    .map_err(storage)?;
                Ok(written)
            })
            .await?;
        let ids = written.iter().map(|f| MemoryId(f.id)).collect();
        self.update_text_cache(Vec::new(), written).await;
        Ok(ids)
    }

    async fn closed_sessions(&self, said_before: Timestamp, limit: usize) -> Result<Vec<ClosedSession>> {
        self.readers
            .read(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT g.u, g.a, g.s FROM (SELECT scope_user AS u, scope_agent AS a, scope_session AS s, \
                         count(*) AS n, max(event_time) AS last FROM memories WHERE kind = 'episode' \
                         AND scope_session IS NOT NULL AND deleted_at IS NULL GROUP BY 1, 2, 3) g \
                         WHERE g.last < ?1 AND NOT EXISTS (SELECT 1 FROM memories x \
                           WHERE x.kind = 'summary' AND x.deleted_at IS NULL AND x.valid_until IS NULL \
                           AND x.scope_session = g.s AND x.scope_user IS g.u AND x.scope_agent IS g.a \
                           AND json_extract(x.body, '$.turns') >= g.n) \
                         ORDER BY g.last, g.s LIMIT ?2",
                    )
                    .map_err(storage)?;
                let scopes = stmt
                    .query_map(params![said_before.millis(), limit as i64], |r| {
                        Ok(Scope { user: r.get(0)?, agent: r.get(1)?, session: r.get(2)? })
                    })
                    .map_err(storage)?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(storage)?;
                let same = "m.scope_session = ? AND m.scope_user IS ? AND m.scope_agent IS ? AND m.deleted_at IS NULL";
                scopes
                    .into_iter()
                    .map(|scope| {
                        let keys = [
                            scope.session.clone().map_or(Value::Null, Value::Text),
                            scope.user.clone().map_or(Value::Null, Value::Text),
                            scope.agent.clone().map_or(Value::Null, Value::Text),
                        ];
                        let turns = query_memories(
                            conn,
                            &format!(
                                "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.kind = 'episode' AND {same} \
                                 ORDER BY m.event_time, m.id"
                            ),
                            &keys,
                        )?;
                        let previous = query_memories(
                            conn,
                            &format!(
                                "SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.kind = 'summary' AND {same} \
                                 AND m.valid_until IS NULL ORDER BY m.id DESC LIMIT 1"
                            ),
                            &keys,
                        )?
                        .first()
                        .map(|m| m.id);
                        Ok(ClosedSession { scope, turns, previous })
                    })
                    .collect()
            })
            .await
    }

    async fn cycles(&self, limit: usize) -> Result<Vec<serde_json::Value>> {
        self.readers
            .read(move |conn| {
                let mut stmt = conn
                    .prepare_cached("SELECT report FROM cycles ORDER BY at DESC, id DESC LIMIT ?")
                    .map_err(storage)?;
                let rows = stmt.query_map([limit as i64], |r| r.get::<_, String>(0)).map_err(storage)?;
                rows.map(|row| {
                    let text = row.map_err(storage)?;
                    serde_json::from_str(&text).map_err(|e| AtlasError::Storage(format!("cycles: {e}")))
                })
                .collect()
            })
            .await
    }
}
