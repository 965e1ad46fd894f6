//! The vector index's port on SQLite: the bound model, the queue of memories to embed (with
//! claims), stored vectors and the nearest-neighbour search over the vector cache.

use crate::caches::CacheFiles;
use crate::error::storage;
use crate::receipts::wall_clock_ms;
use crate::sql::{filter_clause, first_admitted, vector_blob};
use crate::vector_cache::{self, Precision};
use crate::{SharedCache, SqliteStore, VECTOR_TABLE, boot_id, read_model};
use async_trait::async_trait;
use atlas_domain::ports::{EmbeddingModel, MemoryStore, ScoredId, VECTOR_CLAIM_MS, VectorIndex};
use atlas_domain::{AtlasError, Memory, MemoryId, RecallFilter, Result, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, params};
use std::path::Path;
use std::sync::Arc;

/// The claim's owner of a memory set aside ([`VectorIndex::set_aside`]): no process is named so,
/// and none is ever taken for dead.
const SET_ASIDE: &str = "set-aside";

/// Whether a claim's owner (`boot/pid-nanos`) is a process of this boot that no longer runs.
/// Unknown boots, other machines and live processes are never dead.
fn owner_is_dead(owner: &str) -> bool {
    let Some((boot, rest)) = owner.split_once('/') else { return false };
    let Some(pid) = rest.split_once('-').and_then(|(pid, _)| pid.parse::<u32>().ok()) else { return false };
    !boot.is_empty() && boot == boot_id() && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}
#[async_trait]
impl VectorIndex for SqliteStore {
    async fn bind_model(&self, model: EmbeddingModel) -> Result<()> {
        if let Some(bound) = self.bound_model() {
            return check_same_model(&bound, &model);
        }
        let stored = model.clone();
        self.writer
            .write(move |conn| {
                if let Some(bound) = read_model(conn)? {
                    check_same_model(&bound, &stored)?;
                } else {
                    conn.execute(
                        "INSERT INTO settings (key, value) VALUES ('embedding_model', ?), ('embedding_dimension', ?)",
                        params![stored.name, stored.dimension.to_string()],
                    )
                    .map_err(storage)?;
                    create_vector_table(conn, stored.dimension)?;
                }
                Ok(())
            })
            .await?;
        // Published only once committed.
        *self.model.write().expect("model lock") = Some(model);
        Ok(())
    }

    async fn rebind_model(&self, model: EmbeddingModel) -> Result<u64> {
        let stored = model.clone();
        let queued = self
            .writer
            .write(move |conn| {
                conn.execute_batch(&format!("DROP TABLE IF EXISTS {VECTOR_TABLE}")).map_err(storage)?;
                // Every vector changes: no cache file made before can be caught up.
                crate::cache_file::forget_history(conn)?;
                conn.execute(
                    "INSERT OR REPLACE INTO settings (key, value) VALUES ('embedding_model', ?), ('embedding_dimension', ?)",
                    params![stored.name, stored.dimension.to_string()],
                )
                .map_err(storage)?;
                create_vector_table(conn, stored.dimension)?;
                // What was set aside is tried again at once with the new model.
                conn.execute_batch(&format!(
                    "UPDATE vector_queue SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = '{SET_ASIDE}'; \
                     DELETE FROM vector_failures;"
                ))
                .map_err(storage)?;
                let queued = conn
                    .execute("INSERT OR IGNORE INTO vector_queue (id) SELECT id FROM memories", [])
                    .map_err(storage)?;
                let total: i64 = conn.query_row("SELECT count(*) FROM vector_queue", [], |r| r.get(0)).map_err(storage)?;
                tracing::info!(model = %stored.name, queued, "vectors dropped; every memory queued for the new model");
                Ok(total as u64)
            })
            .await?;
        // After the commit, so that no search reloads the old vectors into it.
        *self.model.write().expect("model lock") = Some(model);
        *self.vector_cache.write().expect("vector cache lock") = None;
        Ok(queued)
    }

    async fn pending_vectors(&self, limit: usize) -> Result<Vec<Memory>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        const CLAIMABLE: &str = "claimed_until IS NULL OR claimed_until <= ?1 OR claimed_by = ?2";
        let (owner, now) = (self.owner.clone(), wall_clock_ms());
        // Asked on a read connection first, so that a store with nothing to embed (or all of it
        // claimed by another process) never takes the write lock for it.
        let probe = owner.clone();
        let (any, others): (bool, Vec<String>) = self
            .readers
            .read(move |conn| {
                let sql = format!("SELECT EXISTS (SELECT 1 FROM vector_queue WHERE {CLAIMABLE})");
                let any = conn.query_row(&sql, params![now, probe], |r| r.get(0)).map_err(storage)?;
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT DISTINCT claimed_by FROM vector_queue WHERE claimed_until > ?1 AND claimed_by <> ?2",
                    )
                    .map_err(storage)?;
                let others = stmt
                    .query_map(params![now, probe], |r| r.get(0))
                    .map_err(storage)?
                    .collect::<rusqlite::Result<Vec<String>>>()
                    .map_err(storage)?;
                Ok((any, others))
            })
            .await?;
        // A process of this machine that died (a kill, a crash) left its claims: they are
        // released now rather than after they expire.
        let dead: Vec<String> = others.into_iter().filter(|o| owner_is_dead(o)).collect();
        if !any && dead.is_empty() {
            return Ok(Vec::new());
        }
        let claimed: Vec<i64> = self
            .writer
            .write(move |conn| {
                for owner in &dead {
                    conn.prepare_cached(
                        "UPDATE vector_queue SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?",
                    )
                    .map_err(storage)?
                    .execute([owner])
                    .map_err(storage)?;
                }
                let sql = format!(
                    "UPDATE vector_queue SET claimed_by = ?2, claimed_until = ?1 + ?3 WHERE id IN \
                     (SELECT id FROM vector_queue WHERE {CLAIMABLE} ORDER BY id LIMIT ?4) RETURNING id"
                );
                let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
                let rows = stmt
                    .query_map(params![now, owner, VECTOR_CLAIM_MS, limit as i64], |r| r.get(0))
                    .map_err(storage)?;
                rows.collect::<rusqlite::Result<Vec<i64>>>().map_err(storage)
            })
            .await?;
        let mut ids: Vec<MemoryId> = claimed.into_iter().map(MemoryId).collect();
        ids.sort();
        self.get_many(ids).await
    }

    async fn queued_vectors(&self) -> Result<u64> {
        self.readers
            .read(|conn| {
                conn.query_row("SELECT count(*) FROM vector_queue", [], |r| r.get::<_, i64>(0)).map_err(storage)
            })
            .await
            .map(|n| n as u64)
    }

    async fn put_vectors(&self, vectors: Vec<(MemoryId, Vec<f32>)>) -> Result<()> {
        let model = self.bound_model().ok_or_else(|| {
            AtlasError::Storage("no embedding model is bound to this store; bind one before storing vectors".into())
        })?;
        if let Some((id, v)) = vectors.iter().find(|(_, v)| v.len() != model.dimension) {
            return Err(AtlasError::Embedding(format!(
                "vector for memory {id} has {} dimensions, the store's model {} has {}",
                v.len(),
                model.name,
                model.dimension
            )));
        }
        let stored = self
            .writer
            .write(move |conn| {
                // Another instance may have switched the model since this one bound it.
                match read_model(conn)? {
                    Some(current) => check_same_model(&current, &model)?,
                    None => return Err(AtlasError::Storage("no embedding model is bound to this store".into())),
                }
                let mut exists = conn.prepare_cached("SELECT 1 FROM memories WHERE id = ?").map_err(storage)?;
                let mut delete =
                    conn.prepare_cached(&format!("DELETE FROM {VECTOR_TABLE} WHERE rowid = ?")).map_err(storage)?;
                let mut insert = conn
                    .prepare_cached(&format!("INSERT INTO {VECTOR_TABLE} (rowid, embedding) VALUES (?, ?)"))
                    .map_err(storage)?;
                let mut dequeue = conn.prepare_cached("DELETE FROM vector_queue WHERE id = ?").map_err(storage)?;
                let mut succeeded = conn.prepare_cached("DELETE FROM vector_failures WHERE id = ?").map_err(storage)?;
                let mut stored = Vec::with_capacity(vectors.len());
                for (id, v) in vectors {
                    if !exists.exists([id.0]).map_err(storage)? {
                        continue;
                    }
                    delete.execute([id.0]).map_err(storage)?;
                    insert.execute(params![id.0, vector_blob(&v)]).map_err(storage)?;
                    dequeue.execute([id.0]).map_err(storage)?;
                    succeeded.execute([id.0]).map_err(storage)?;
                    crate::cache_file::log_changed(conn, id.0)?;
                    stored.push((id, v));
                }
                Ok(stored)
            })
            .await?;
        // After the commit: the cache never holds what the database does not.
        if let Some(index) = self.vector_cache.write().expect("vector cache lock").as_mut() {
            for (id, v) in &stored {
                index.upsert(id.0, v);
            }
        }
        Ok(())
    }

    async fn set_aside(&self, memories: Vec<(MemoryId, String)>, until: Timestamp) -> Result<()> {
        if memories.is_empty() {
            return Ok(());
        }
        self.writer
            .write(move |conn| {
                let mut claim = conn
                    .prepare_cached("UPDATE vector_queue SET claimed_by = ?1, claimed_until = ?2 WHERE id = ?3")
                    .map_err(storage)?;
                let mut reason = conn
                    .prepare_cached("INSERT OR REPLACE INTO vector_failures (id, reason) VALUES (?1, ?2)")
                    .map_err(storage)?;
                for (id, why) in &memories {
                    if claim.execute(params![SET_ASIDE, until.millis(), id.0]).map_err(storage)? > 0 {
                        reason.execute(params![id.0, why]).map_err(storage)?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn set_aside_vectors(&self, limit: usize) -> Result<(u64, Vec<(MemoryId, String)>)> {
        self.readers
            .read(move |conn| {
                // Only memories still queued: one deleted or embedded meanwhile is not waiting.
                let total: i64 = conn
                    .query_row("SELECT count(*) FROM vector_failures f JOIN vector_queue q ON q.id = f.id", [], |r| {
                        r.get(0)
                    })
                    .map_err(storage)?;
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT f.id, f.reason FROM vector_failures f JOIN vector_queue q ON q.id = f.id \
                         ORDER BY f.id LIMIT ?",
                    )
                    .map_err(storage)?;
                let listed = stmt
                    .query_map([limit.min(i64::MAX as usize) as i64], |r| Ok((MemoryId(r.get(0)?), r.get(1)?)))
                    .map_err(storage)?
                    .collect::<rusqlite::Result<Vec<(MemoryId, String)>>>()
                    .map_err(storage)?;
                Ok((total as u64, listed))
            })
            .await
    }

    async fn search_vector(&self, query: Vec<f32>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let Some(model) = self.bound_model() else {
            return Ok(Vec::new());
        };
        if query.len() != model.dimension {
            return Err(AtlasError::Embedding(format!(
                "query vector has {} dimensions, the store's model {} has {}",
                query.len(),
                model.name,
                model.dimension
            )));
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (cache, files) = (Arc::clone(&self.vector_cache), self.cache_files.clone());
        let (dim, precision, shortlist) = (model.dimension, self.vector_precision, self.vector_shortlist);
        let in_file_from = self.codes_in_file_from;
        self.readers
            .read(move |conn| {
                let settings = (dim, precision, shortlist, in_file_from);
                search_vector_sync(conn, &cache, &files, settings, &query, &filter, limit)
            })
            .await
    }

    async fn prepare_search(&self) -> Result<()> {
        // No model bound: no vectors, nothing to load.
        let Some(model) = self.bound_model() else {
            return Ok(());
        };
        let (cache, files) = (Arc::clone(&self.vector_cache), self.cache_files.clone());
        let settings = (model.dimension, self.vector_precision, self.codes_in_file_from);
        self.readers.read(move |conn| on_index(conn, &cache, &files, settings, |_| ())).await
    }

    async fn mean_vector(&self) -> Result<Option<Vec<f32>>> {
        let Some(model) = self.bound_model() else {
            return Ok(None);
        };
        let (cache, files) = (Arc::clone(&self.vector_cache), self.cache_files.clone());
        let settings = (model.dimension, self.vector_precision, self.codes_in_file_from);
        self.readers
            .read(move |conn| {
                on_index(conn, &cache, &files, settings, vector_cache::Index::mean)?
                    .map_err(|e| AtlasError::Storage(format!("vector cache: {e}")))
            })
            .await
    }
}
/// Runs `f` on the vector cache, loading it first when it is not (under the write guard, so
/// that nothing clears it in between).
fn on_index<T>(
    conn: &Connection,
    cache: &SharedCache,
    files: &CacheFiles,
    (dim, precision, in_file_from): (usize, Option<Precision>, usize),
    f: impl Fn(&vector_cache::Index) -> T,
) -> Result<T> {
    let ready = |slot: &Option<vector_cache::Index>| slot.as_ref().is_some_and(|index| index.dim() == dim);
    let shared = cache.read().expect("vector cache lock");
    if ready(&shared) {
        return Ok(f(shared.as_ref().expect("checked")));
    }
    drop(shared);
    let mut slot = cache.write().expect("vector cache lock");
    if !ready(&slot) {
        *slot = Some(files.load_vectors(conn, cache, (dim, precision, in_file_from))?);
    }
    Ok(f(slot.as_ref().expect("loaded")))
}

/// Nearest memories under `filter`, by exact cosine. Candidates come from the in-memory index
/// (loaded here on first use) and SQL keeps those that pass the filter. When the filter leaves
/// too few of them, an exact scan over the filtered memories answers instead.
fn search_vector_sync(
    conn: &Connection,
    cache: &SharedCache,
    files: &CacheFiles,
    (dim, precision, shortlist, in_file_from): (usize, Option<Precision>, usize, usize),
    query: &[f32],
    filter: &RecallFilter,
    limit: usize,
) -> Result<Vec<ScoredId>> {
    // Outer error: loading failed; inner: the codes' file could not be read.
    type Shortlist = std::io::Result<(Vec<(i64, f32)>, usize)>;
    let shortlisted = || -> Result<Shortlist> {
        on_index(conn, cache, files, (dim, precision, in_file_from), |index| {
            index.candidates(query, limit, shortlist).map(|found| (found, index.len()))
        })
    };
    let (candidates, total) = match shortlisted()? {
        Ok(found) => found,
        Err(e) => {
            // The file the codes are read from failed under this process (changed in place):
            // the cache is loaded again, from a file that passes its checks or from SQL.
            tracing::warn!(error = %e, "vector cache file unreadable; loading the cache again");
            *cache.write().expect("vector cache lock") = None;
            shortlisted()?.map_err(|e| AtlasError::Storage(format!("vector cache: {e}")))?
        }
    };
    let blob = vector_blob(query);
    let (clause, filter_params) = filter_clause(filter);
    let run = |sql: &str, params: Vec<Value>| -> Result<Vec<ScoredId>> {
        let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                Ok(ScoredId { id: MemoryId(r.get(0)?), score: 1.0 - r.get::<_, f64>(1)? })
            })
            .map_err(storage)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
    };
    if !candidates.is_empty() {
        // The index scored exactly; SQL only says which candidates pass the filter.
        let ranked: Vec<ScoredId> =
            candidates.iter().map(|(id, score)| ScoredId { id: MemoryId(*id), score: f64::from(*score) }).collect();
        let hits = first_admitted(conn, &ranked, &clause, &filter_params, limit)?;
        if hits.len() >= limit || candidates.len() >= total {
            return Ok(hits);
        }
    }
    let scan_sql = format!(
        "SELECT m.id, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m \
         JOIN {VECTOR_TABLE} v ON v.rowid = m.id WHERE {clause} ORDER BY distance, m.id LIMIT ?"
    );
    let mut params = vec![Value::Blob(blob)];
    params.extend(filter_params);
    params.push(Value::Integer(limit as i64));
    run(&scan_sql, params)
}
fn create_vector_table(conn: &Connection, dimension: usize) -> Result<()> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS {VECTOR_TABLE} USING vec0(embedding float[{dimension}] distance_metric=cosine)"
    ))
    .map_err(storage)
}

fn check_same_model(bound: &EmbeddingModel, configured: &EmbeddingModel) -> Result<()> {
    if bound == configured {
        Ok(())
    } else {
        Err(AtlasError::ModelMismatch {
            stored_model: bound.name.clone(),
            stored_dim: bound.dimension,
            configured_model: configured.name.clone(),
            configured_dim: configured.dimension,
        })
    }
}
