//! The text index's port on SQLite: BM25 from the in-memory text cache, then the filter on the
//! best of them; when the filter rejects too many, on every match the filter admits.

use crate::caches::CacheFiles;
use crate::error::storage;
use crate::sql::{filter_clause, first_admitted};
use crate::text_cache::query_tokens;
use crate::{SharedTextCache, SqliteStore};
use async_trait::async_trait;
use atlas_domain::ports::{ScoredId, TextIndex};
use atlas_domain::{RecallFilter, Result};
use rusqlite::Connection;
use rusqlite::types::Value;
use std::collections::HashSet;
use std::sync::Arc;

#[async_trait]
impl TextIndex for SqliteStore {
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let (cache, files) = (Arc::clone(&self.text_cache), self.cache_files.clone());
        self.readers.read(move |conn| search_text_sync(conn, &cache, &files, &terms, &filter, limit)).await
    }

    async fn prepare_search(&self) -> Result<()> {
        let (cache, files) = (Arc::clone(&self.text_cache), self.cache_files.clone());
        self.readers
            .read(move |conn| {
                let mut slot = cache.write().expect("text cache lock");
                if slot.is_none() {
                    *slot = Some(files.load_text(conn, &cache)?);
                }
                Ok(())
            })
            .await
    }
}

/// Most candidates the cache hands to the filter before the filter is asked for every memory
/// it admits instead.
const TEXT_WINDOW_MAX: usize = 16_384;

/// BM25 from the in-memory cache (loaded here on first use), then the filter on the best of
/// them, widening the window while the filter rejects too many; past [`TEXT_WINDOW_MAX`], every
/// match is ranked and kept where it is among the memories the filter admits (one query over
/// the filter's own indexes, cheaper than checking a long list id by id).
fn search_text_sync(
    conn: &Connection,
    cache: &SharedTextCache,
    files: &CacheFiles,
    terms: &[String],
    filter: &RecallFilter,
    limit: usize,
) -> Result<Vec<ScoredId>> {
    let tokens = query_tokens(terms);
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    let (clause, filter_params) = filter_clause(filter);
    // The best `window` matches, the cache loaded first if it is not (or no longer) there.
    let best = |window: usize| -> Result<Vec<ScoredId>> {
        let shared = cache.read().expect("text cache lock");
        if let Some(index) = shared.as_ref() {
            return Ok(index.search(&tokens, window));
        }
        drop(shared);
        // Load and search under the same write guard: nothing can change it in between.
        let mut slot = cache.write().expect("text cache lock");
        if slot.is_none() {
            *slot = Some(files.load_text(conn, cache)?);
        }
        Ok(slot.as_ref().expect("loaded").search(&tokens, window))
    };
    let mut window = (limit * 2 + 16).max(1024);
    loop {
        let best = best(window)?;
        let hits = first_admitted(conn, &best, &clause, &filter_params, limit)?;
        if hits.len() >= limit || best.len() < window {
            return Ok(hits);
        }
        if window >= TEXT_WINDOW_MAX {
            break;
        }
        window *= 16;
    }
    let every_match = best(usize::MAX)?;
    let admitted = filter_admits(conn, &clause, &filter_params)?;
    Ok(every_match.into_iter().filter(|h| admitted.contains(&h.id.0)).take(limit).collect())
}

/// Every memory id the filter `clause` admits.
fn filter_admits(conn: &Connection, clause: &str, filter_params: &[Value]) -> Result<HashSet<i64>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT m.id FROM memories m WHERE {clause}")).map_err(storage)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(filter_params.iter()), |r| r.get(0)).map_err(storage)?;
    rows.collect::<rusqlite::Result<HashSet<i64>>>().map_err(storage)
}
