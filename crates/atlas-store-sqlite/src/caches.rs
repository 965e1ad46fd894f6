//! Loading the text and vector caches on a process's first search: from their cache files when
//! these were made at the database's current state, or caught up when they are a few logged
//! writes behind (the memories those writes changed are read again), else from SQL; after a
//! catch-up or a rebuild the file is written again in the background (crate::cache_file says
//! how a file is checked and written).

use crate::cache_file::{self, Stamp};
use crate::error::storage;
use crate::text_cache::{Fields, TextCache, tokenize};
use crate::vector_cache::{Index, Precision};
use atlas_domain::{AtlasError, Result};
use rusqlite::{Connection, OptionalExtension};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

/// How this store's caches were loaded so far (for tests and the benchmark).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheLoads {
    pub text_from_file: u64,
    /// From a file some writes behind, caught up.
    pub text_caught_up: u64,
    pub text_rebuilt: u64,
    pub vectors_from_file: u64,
    pub vectors_caught_up: u64,
    pub vectors_rebuilt: u64,
}

#[derive(Default)]
struct Counters {
    text_from_file: AtomicU64,
    text_caught_up: AtomicU64,
    text_rebuilt: AtomicU64,
    vectors_from_file: AtomicU64,
    vectors_caught_up: AtomicU64,
    vectors_rebuilt: AtomicU64,
}

type CatchUp<'a, T> = &'a dyn Fn(&Connection, &mut T, &[i64]) -> Result<()>;

/// What differs between loading the text cache and the vector cache.
struct Kind<'a, T> {
    /// "text" or "vectors": names the file.
    name: &'static str,
    /// What the cache depends on besides the database's state ([`cache_file::read_accepting`]).
    key: String,
    /// Loads from the file as it was, caught up, and rebuilt.
    counters: [&'a AtomicU64; 3],
    decode: &'a dyn Fn(&mut cache_file::Decoder<'_>) -> std::result::Result<T, cache_file::Stale>,
    /// Reads the changed memories (ids) again into a cache read from a file behind.
    catch_up: CatchUp<'a, T>,
    rebuild: &'a dyn Fn(&Connection) -> Result<T>,
    encode: Encode<T>,
    /// Whether it reads from its file once that is in place.
    adopt: Option<Adoption<T>>,
}

/// How a cache is written to its file.
type Encode<T> = fn(&T, &mut cache_file::Encoder<'_>) -> std::io::Result<()>;

/// How a cache reads from the file written from it once that is in place
/// ([`Index::adopt_file`]): `state` names the state written (read under the same guard as the
/// encoding), and `adopt` takes the file (opened before it was put in place, and its path) only
/// if the cache is still in that state.
struct Adoption<T> {
    state: fn(&T) -> u64,
    adopt: fn(&mut T, u64, std::fs::File, &std::path::Path),
}

impl<T> Clone for Adoption<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Adoption<T> {}

/// A file behind by more changed memories than this is rebuilt instead: reading them again
/// would cost about as much.
const CATCH_UP_MAX: usize = 20_000;

/// Where a store's cache files are (none for a database without a folder of its own to write
/// in), what its loads did, and the threads writing its files.
#[derive(Clone)]
pub struct CacheFiles {
    db: Option<PathBuf>,
    counters: Arc<Counters>,
    writing: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl CacheFiles {
    pub fn new(db: Option<PathBuf>) -> Self {
        CacheFiles { db, counters: Arc::default(), writing: Arc::default() }
    }

    /// Waits for this store's cache files being written.
    pub fn settle(&self) {
        let writing = std::mem::take(&mut *self.writing.lock().expect("cache writers lock"));
        for thread in writing {
            let _ = thread.join();
        }
    }

    /// Deletes both cache files once this store's writes of them are done: a memory erased
    /// from the database must not live on in a file (files made from now on no longer hold it).
    pub fn remove_files(&self) {
        self.settle();
        let Some(db) = &self.db else { return };
        for kind in ["text", "vectors"] {
            let path = cache_file::path_for(db, kind);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(file = %path.display(), error = %e, "cache file not removed");
            }
        }
    }

    pub fn loads(&self) -> CacheLoads {
        let c = &self.counters;
        CacheLoads {
            text_from_file: c.text_from_file.load(Ordering::Relaxed),
            text_caught_up: c.text_caught_up.load(Ordering::Relaxed),
            text_rebuilt: c.text_rebuilt.load(Ordering::Relaxed),
            vectors_from_file: c.vectors_from_file.load(Ordering::Relaxed),
            vectors_caught_up: c.vectors_caught_up.load(Ordering::Relaxed),
            vectors_rebuilt: c.vectors_rebuilt.load(Ordering::Relaxed),
        }
    }

    /// The text cache, from its file (caught up if behind) or from SQL.
    pub fn load_text(&self, conn: &Connection, slot: &Arc<RwLock<Option<TextCache>>>) -> Result<TextCache> {
        let tx = conn.unchecked_transaction().map_err(storage)?;
        let c = &self.counters;
        let kind = Kind {
            name: "text",
            key: TextCache::file_key(),
            counters: [&c.text_from_file, &c.text_caught_up, &c.text_rebuilt],
            decode: &TextCache::decode,
            catch_up: &catch_up_text,
            rebuild: &TextCache::load,
            encode: TextCache::encode,
            // The text cache stays in memory: its lists are read whole by every search.
            adopt: None,
        };
        self.load(tx, slot, kind)
    }

    /// The vector cache of `dim` dimensions, from its file (caught up if behind) or from SQL;
    /// `precision` as configured (`None`: by size, [`crate::INT8_FROM_VECTORS`]); int8 codes
    /// left in the file from `in_file_from` vectors ([`crate::CODES_IN_FILE_FROM`]).
    pub fn load_vectors(
        &self,
        conn: &Connection,
        slot: &Arc<RwLock<Option<Index>>>,
        (dim, precision, in_file_from): (usize, Option<Precision>, usize),
    ) -> Result<Index> {
        let tx = conn.unchecked_transaction().map_err(storage)?;
        let model = crate::read_model(&tx)?.map(|m| m.name).unwrap_or_default();
        let c = &self.counters;
        let kind = Kind {
            name: "vectors",
            key: vectors_key(&model, dim, precision),
            counters: [&c.vectors_from_file, &c.vectors_caught_up, &c.vectors_rebuilt],
            decode: &|d| Index::decode(d, dim, precision, in_file_from),
            catch_up: &catch_up_vectors,
            rebuild: &|conn| load_vectors_from_sql(conn, dim, precision, in_file_from),
            encode: Index::encode,
            adopt: Some(Adoption { state: Index::version, adopt: Index::adopt_file }),
        };
        self.load(tx, slot, kind)
    }

    /// Either cache in the read transaction `tx`: from its file as it is, or caught up, or
    /// rebuilt from SQL; after a catch-up or a rebuild its file is written again.
    fn load<T: Send + Sync + 'static>(
        &self,
        tx: rusqlite::Transaction<'_>,
        slot: &Arc<RwLock<Option<T>>>,
        kind: Kind<'_, T>,
    ) -> Result<T> {
        let [from_file, caught_up, rebuilt] = kind.counters;
        let stamp = Stamp::read(&tx)?;
        let file = self.db.as_ref().map(|db| cache_file::path_for(db, kind.name));
        if let (Some(path), Some(stamp)) = (&file, stamp) {
            let accept = |found| cache_file::accept(&tx, stamp, found, CATCH_UP_MAX);
            match cache_file::read_accepting(path, &kind.key, accept, kind.decode) {
                Ok((None, cache)) => {
                    from_file.fetch_add(1, Ordering::Relaxed);
                    return Ok(cache);
                }
                Ok((Some(behind), mut cache)) => match (kind.catch_up)(&tx, &mut cache, &behind.changed) {
                    Ok(()) => {
                        drop(tx);
                        caught_up.fetch_add(1, Ordering::Relaxed);
                        self.write_later(path.clone(), stamp, kind.key, Arc::clone(slot), (kind.encode, kind.adopt));
                        return Ok(cache);
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "cache file not caught up; rebuilding")
                    }
                },
                Err(why) => tracing::debug!(file = %path.display(), %why, "cache file not used; rebuilding"),
            }
        }
        let cache = (kind.rebuild)(&tx)?;
        drop(tx);
        rebuilt.fetch_add(1, Ordering::Relaxed);
        if let (Some(path), Some(stamp)) = (file, stamp) {
            self.write_later(path, stamp, kind.key, Arc::clone(slot), (kind.encode, kind.adopt));
        }
        Ok(cache)
    }

    /// Writes the cache in `slot` to `path` on a thread of its own, once the loader has stored
    /// it there and released it. The file may then hold writes of this process made after
    /// `stamp`: the database has moved past `stamp` by then, so such a file is caught up from
    /// `stamp`, and replaying a change the file already holds is harmless.
    fn write_later<T: Send + Sync + 'static>(
        &self,
        path: PathBuf,
        stamp: Stamp,
        key: String,
        slot: Arc<RwLock<Option<T>>>,
        (encode, adoption): (Encode<T>, Option<Adoption<T>>),
    ) {
        let spawned = std::thread::Builder::new().name("atlas-cache-file".into()).spawn(move || {
            // Read while written: no copy of the cache is made. The guard is held until the bytes
            // are handed to the file, not while it is synced.
            let (written, state) = {
                let guard = slot.read().expect("cache lock");
                let Some(cache) = guard.as_ref() else { return };
                let written = cache_file::write(&path, stamp, &key, |e| encode(cache, e));
                (written, adoption.map(|a| (a.state)(cache)))
            };
            match written.and_then(cache_file::Written::commit) {
                Ok(file) => {
                    // The slot may hold another cache by now (reloaded): only the state written
                    // takes the file.
                    if let (Some(a), Some(state)) = (adoption, state)
                        && let Some(cache) = slot.write().expect("cache lock").as_mut()
                    {
                        (a.adopt)(cache, state, file, &path);
                    }
                    tracing::debug!(file = %path.display(), "cache file written");
                }
                Err(e) => tracing::info!(file = %path.display(), error = %e, "cache file not written"),
            }
        });
        match spawned {
            Ok(thread) => {
                let mut writing = self.writing.lock().expect("cache writers lock");
                writing.retain(|t| !t.is_finished());
                writing.push(thread);
            }
            Err(e) => tracing::info!(error = %e, "no thread to write a cache file"),
        }
    }
}

/// A vector cache file depends on the model and dimension, and on the precision when one is
/// configured (unset, the file's own is taken).
fn vectors_key(model: &str, dim: usize, precision: Option<Precision>) -> String {
    format!("vectors model={model:?} dim={dim} precision={precision:?}")
}

/// Brings a text cache read from a file up to the read transaction `conn`: the memories in
/// `changed` lose whatever version the file held and get the one the database holds, if any.
/// Replaying a change the file already holds is harmless.
fn catch_up_text(conn: &Connection, cache: &mut TextCache, changed: &[i64]) -> Result<()> {
    cache.remove_ids(changed);
    let mut stmt =
        conn.prepare_cached("SELECT id, text, speaker, context FROM memories WHERE id = ?1").map_err(storage)?;
    let mut rows = Vec::new();
    for &id in changed {
        let row = stmt
            .query_row([id], |r| Ok(Fields { id: r.get(0)?, text: r.get(1)?, speaker: r.get(2)?, context: r.get(3)? }))
            .optional()
            .map_err(storage)?;
        rows.extend(row);
    }
    cache.add(tokenize(&rows));
    Ok(())
}

/// [`catch_up_text`] for the vector cache: each changed memory's vector as the database holds
/// it, or none.
fn catch_up_vectors(conn: &Connection, index: &mut Index, changed: &[i64]) -> Result<()> {
    let table = crate::VECTOR_TABLE;
    let mut stmt = conn.prepare_cached(&format!("SELECT embedding FROM {table} WHERE rowid = ?1")).map_err(storage)?;
    let mut v = vec![0f32; index.dim()];
    for &id in changed {
        let blob: Option<Vec<u8>> = stmt.query_row([id], |r| r.get(0)).optional().map_err(storage)?;
        match blob {
            Some(blob) => {
                decode_vector(id, &blob, &mut v)?;
                index.upsert(id, &v);
            }
            None => index.remove(id),
        }
    }
    Ok(())
}

/// A stored vector (little-endian floats) into `v`, which has the cache's dimension.
fn decode_vector(id: i64, blob: &[u8], v: &mut [f32]) -> Result<()> {
    if blob.len() != v.len() * 4 {
        return Err(AtlasError::Storage(format!(
            "vector of memory {id} has {} bytes, expected {}",
            blob.len(),
            v.len() * 4
        )));
    }
    for (x, b) in v.iter_mut().zip(blob.chunks_exact(4)) {
        *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Ok(())
}

fn load_vectors_from_sql(
    conn: &Connection,
    dim: usize,
    precision: Option<Precision>,
    in_file_from: usize,
) -> Result<Index> {
    let table = crate::VECTOR_TABLE;
    let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).map_err(storage)?;
    let n = n as usize;
    let precision = precision.unwrap_or(if n >= crate::INT8_FROM_VECTORS { Precision::Int8 } else { Precision::F32 });
    let mut index = Index::with_capacity(dim, precision, n);
    index.keep_codes_in_file_from(in_file_from);
    let mut stmt = conn.prepare(&format!("SELECT rowid, embedding FROM {table}")).map_err(storage)?;
    let mut rows = stmt.query([]).map_err(storage)?;
    let mut v = vec![0f32; dim];
    while let Some(row) = rows.next().map_err(storage)? {
        let id: i64 = row.get(0).map_err(storage)?;
        let blob = row.get_ref(1).map_err(storage)?.as_blob().map_err(|e| AtlasError::Storage(e.to_string()))?;
        decode_vector(id, blob, &mut v)?;
        index.upsert(id, &v);
    }
    tracing::debug!(vectors = index.len(), ?precision, "vector cache loaded");
    Ok(index)
}
