//! What the writing ports share: new memories inserted with their temporal links, a stored
//! memory's indexed fields, and the text cache brought in step after a commit.

use crate::SqliteStore;
use crate::error::storage;
use crate::sql::json_columns;
use crate::text_cache::{Fields, tokenize};
use atlas_domain::policy::embedding::{context_from, speaker_line};
use atlas_domain::ports::ProgressFn;
use atlas_domain::{MemoryKind, NewMemory, Result, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::Arc;

/// Above this many memories in one write, the text cache is dropped and rebuilt by the next
/// search rather than updated row by row: the write need not keep every old version's fields,
/// and a rebuild in id order leaves no growth slack in the posting lists.
pub(crate) const TEXT_CACHE_BULK: usize = 5_000;
impl SqliteStore {
    /// Lets the text cache go (the next search rebuilds it from the index).
    pub(crate) fn drop_text_cache(&self) {
        *self.text_cache.write().expect("text cache lock") = None;
    }

    /// Brings the text cache, if loaded, in step with rows just committed: `removed` are the old
    /// versions of rows gone or changed, `written` the new or changed rows. Called after the
    /// commit, so a cache loaded concurrently either already saw the commit (replaying it is
    /// harmless: versions are compared by fingerprint) or gets it here. Tokenising is CPU work,
    /// so it runs on the blocking pool, not on the caller's executor thread, and before the
    /// cache's lock is taken. A cache that cannot follow is dropped (the next search rebuilds
    /// it), never left stale; the write itself has succeeded either way.
    pub(crate) async fn update_text_cache(&self, removed: Vec<Fields>, written: Vec<Fields>) {
        if self.text_cache.read().expect("text cache lock").is_none() {
            return;
        }
        let cache = Arc::clone(&self.text_cache);
        let outcome = tokio::task::spawn_blocking(move || {
            if written.len() + removed.len() > TEXT_CACHE_BULK {
                *cache.write().expect("text cache lock") = None;
                return;
            }
            let (old, new) = (tokenize(&removed), tokenize(&written));
            let mut slot = cache.write().expect("text cache lock");
            if let Some(index) = slot.as_mut() {
                for row in &old {
                    index.remove(row);
                }
                index.add(new);
            }
        })
        .await;
        if let Err(e) = outcome {
            self.drop_text_cache();
            tracing::warn!(error = %e, "text cache update failed; the next search rebuilds it");
        }
    }
}

/// Inserts the batch; returns each new memory's indexed fields (its id, text, speaker and the
/// context derived here).
pub(crate) fn insert_all(conn: &Connection, batch: &[NewMemory], progress: Option<&ProgressFn>) -> Result<Vec<Fields>> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO memories (kind, text, speaker, scope_user, scope_agent, scope_session, event_time, \
             recorded_at, valid_from, valid_until, meta, body, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .map_err(storage)?;
    // Every stored row has a smaller id than the one about to be inserted, so "before in
    // (event time, id) order" is "event time not later". A version replaced by then is history,
    // not the turn a memory follows: a store key's new value never carries its old one's words.
    let mut previous = conn
        .prepare_cached(
            "SELECT id, speaker, text FROM memories WHERE scope_session = ?1 AND kind = 'episode' \
             AND scope_user IS ?3 AND scope_agent IS ?4 AND event_time <= ?2 \
             AND (valid_until IS NULL OR valid_until > ?2) \
             ORDER BY event_time DESC, id DESC LIMIT 1",
        )
        .map_err(storage)?;
    let mut link = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO edges (src, dst, kind, weight, valid_from, valid_until, recorded_at) \
             VALUES (?, ?, 'temporal', 1.0, ?, NULL, ?)",
        )
        .map_err(storage)?;
    let mut ids = Vec::with_capacity(batch.len());
    for (i, m) in batch.iter().enumerate() {
        let (meta, body) = json_columns(m)?;
        // The predecessor is always linked; its line is carried as context only when short.
        let prev: Option<(i64, Option<String>)> = match (m.kind(), &m.scope.session) {
            (MemoryKind::Episode, Some(session)) => previous
                .query_row(params![session, m.event_time.millis(), m.scope.user, m.scope.agent], |r| {
                    let line = speaker_line(r.get::<_, Option<String>>(1)?.as_deref(), &r.get::<_, String>(2)?);
                    Ok((r.get(0)?, context_from(&line)))
                })
                .optional()
                .map_err(storage)?,
            _ => None,
        };
        insert
            .execute(params![
                m.kind().as_str(),
                m.text,
                m.body.speaker(),
                m.scope.user,
                m.scope.agent,
                m.scope.session,
                m.event_time.millis(),
                m.recorded_at.millis(),
                m.validity.valid_from.millis(),
                m.validity.valid_until.map(Timestamp::millis),
                meta,
                body,
                prev.as_ref().and_then(|(_, line)| line.as_ref()),
            ])
            .map_err(storage)?;
        let id = conn.last_insert_rowid();
        let context = prev.map(|(prev, line)| {
            link.execute(params![prev, id, m.event_time.millis(), m.recorded_at.millis()]).map(|_| line)
        });
        let context = context.transpose().map_err(storage)?.flatten();
        ids.push(Fields { id, text: m.text.clone(), speaker: m.body.speaker().map(str::to_owned), context });
        if let Some(p) = progress
            && (i + 1) % 1000 == 0
        {
            p(i + 1);
        }
    }
    if let Some(p) = progress {
        p(batch.len());
    }
    Ok(ids)
}
/// The indexed fields of a stored memory.
pub(crate) fn stored_fields(conn: &Connection, id: i64) -> Result<Option<Fields>> {
    let mut stmt = conn.prepare_cached("SELECT text, speaker, context FROM memories WHERE id = ?").map_err(storage)?;
    stmt.query_row([id], |r| Ok(Fields { id, text: r.get(0)?, speaker: r.get(1)?, context: r.get(2)? }))
        .optional()
        .map_err(storage)
}
