//! The text index's port on SQLite: BM25 from the in-memory cache under the filter, with FTS5
//! answering when the filter rejects too many.

use crate::caches::CacheFiles;
use crate::error::storage;
use crate::sql::{filter_clause, first_admitted};
use crate::text_cache::Tokenizer;
use crate::{SharedTextCache, SqliteStore};
use async_trait::async_trait;
use atlas_domain::ports::{ScoredId, TextIndex};
use atlas_domain::{MemoryId, RecallFilter, Result};
use rusqlite::Connection;
use rusqlite::types::Value;
use std::sync::{Arc, LazyLock};

#[async_trait]
impl TextIndex for SqliteStore {
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let (cache, tokenizer, files) =
            (Arc::clone(&self.text_cache), Arc::clone(&self.tokenizer), self.cache_files.clone());
        self.readers.read(move |conn| search_text_sync(conn, &cache, &files, &tokenizer, &terms, &filter, limit)).await
    }
}

/// FTS5's `bm25()` weights of the columns text, speaker, context.
static BM25_WEIGHTS: LazyLock<String> = LazyLock::new(|| {
    use atlas_domain::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT, TEXT_WEIGHT};
    format!("{TEXT_WEIGHT:?}, {SPEAKER_WEIGHT:?}, {CONTEXT_WEIGHT:?}")
});

/// Most candidates the cache hands to the filter before FTS5 answers under the filter itself.
const TEXT_WINDOW_MAX: usize = 16_384;

/// BM25 from the in-memory cache (loaded here on first use), then the filter on the best of
/// them, widening the window while the filter rejects too many; past [`TEXT_WINDOW_MAX`], FTS5
/// scores the filtered matches itself. Both rank by the same formula.
fn search_text_sync(
    conn: &Connection,
    cache: &SharedTextCache,
    files: &CacheFiles,
    tokenizer: &Tokenizer,
    terms: &[String],
    filter: &RecallFilter,
    limit: usize,
) -> Result<Vec<ScoredId>> {
    let tokens = tokenizer.query_tokens(terms)?;
    if tokens.is_empty() {
        return Ok(Vec::new());
    }
    let (clause, filter_params) = filter_clause(filter);
    let mut window = (limit * 2 + 16).max(1024);
    loop {
        let best = {
            let shared = cache.read().expect("text cache lock");
            match shared.as_ref() {
                Some(index) => index.search(&tokens, window),
                None => {
                    drop(shared);
                    // Load and search under the same write guard: nothing can change it in between.
                    let mut slot = cache.write().expect("text cache lock");
                    if slot.is_none() {
                        *slot = Some(files.load_text(conn, cache, tokenizer)?);
                    }
                    slot.as_ref().expect("loaded").search(&tokens, window)
                }
            }
        };
        let hits = first_admitted(conn, &best, &clause, &filter_params, limit)?;
        if hits.len() >= limit || best.len() < window {
            return Ok(hits);
        }
        if window >= TEXT_WINDOW_MAX {
            break;
        }
        window *= 16;
    }
    // Every term is quoted, so nothing the user typed is read as FTS5 syntax.
    let query = terms.iter().map(|t| format!("\"{}\"", t.replace('"', "\"\""))).collect::<Vec<_>>().join(" OR ");
    let sql = format!(
        "SELECT m.id, bm25(memories_fts, {weights}) AS rank FROM memories_fts \
         JOIN memories m ON m.id = memories_fts.rowid \
         WHERE memories_fts MATCH ? AND {clause} ORDER BY rank LIMIT ?",
        weights = *BM25_WEIGHTS
    );
    let mut params = vec![Value::Text(query)];
    params.extend(filter_params);
    params.push(Value::Integer(limit as i64));
    let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params.iter()), |r| {
            // bm25() is lower-is-better; negate so that higher is better everywhere.
            Ok(ScoredId { id: MemoryId(r.get(0)?), score: -r.get::<_, f64>(1)? })
        })
        .map_err(storage)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
}
