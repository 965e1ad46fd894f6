//! The SQLite store's full-text index: an in-memory inverted index over the domain's tokens
//! ([`atlas_domain::policy::text`]), scoring by the domain's BM25 ([`bm25`]).
//!
//! The cache holds, per token, the rows containing it with their field-weighted frequency, and
//! per row its length in tokens; summing over a query's postings gives the score (checked
//! against [`bm25::score`] over every row by a property test). A search scores the rarest terms
//! first and stops reading a common term's list once no row it alone matches can make the cut
//! ([`TextCache::search`]), so the top k is the exhaustive one without reading every posting of
//! "the". SQLite stays the truth: the cache is built from the `memories` rows on the first text
//! search (or read from its file, caught up by the change log) and kept in step by this
//! process's own writes. Writes by another process reach it when the store is next opened.

mod search;
#[cfg(test)]
mod tests;

use crate::error::storage;
use atlas_domain::Result;
use atlas_domain::policy::bm25::{self, FIELD_WEIGHTS};
use atlas_domain::policy::text;
use rusqlite::Connection;
use search::{ListBound, SearchBuffers};
use std::collections::HashMap;

/// Rows tokenised and added at a time while the cache is built from SQL.
const LOAD_CHUNK: usize = 4096;

/// The indexed fields of one memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Fields {
    pub id: i64,
    pub text: String,
    pub speaker: Option<String>,
    pub context: Option<String>,
}

impl Fields {
    /// Identifies the version of a row's indexed fields (within one process).
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.text, &self.speaker, &self.context).hash(&mut h);
        h.finish()
    }
}

/// A row's tokens: (token, field index into [`FIELD_WEIGHTS`]) for every token instance.
pub type Tokens = Vec<(String, usize)>;

/// A row as tokenised by [`tokenize`]: its id, fields' fingerprint and tokens.
pub struct TokenizedRow {
    pub id: i64,
    pub fingerprint: u64,
    pub tokens: Tokens,
}

/// Plain data (`repr(C)`, no padding), so that a cache file's posting lists are read straight
/// into their own memory.
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Posting {
    slot: u32,
    /// Column-weighted frequency of the token in the row.
    weight: f32,
}

#[derive(Default)]
pub struct TextCache {
    token_ids: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    /// Per token: bounds of its list's scores, for pruning ([`TextCache::list_bound`]).
    list_bounds: Vec<std::sync::OnceLock<ListBound>>,
    /// Per slot: the memory id (0 once removed), its length in tokens, and the fingerprint of
    /// the fields indexed ([`Fields::fingerprint`]). A row's tokens are not kept (at a million
    /// memories they would cost more than the posting lists' slots); to remove a row, the store
    /// hands in its old fields, and the fingerprint says whether this cache holds that version.
    ids: Vec<i64>,
    lengths: Vec<u32>,
    fingerprints: Vec<u64>,
    /// Whether the slot's row is still indexed (a removed row's slot stays, with no postings).
    alive: Vec<bool>,
    /// `ids[..sorted]` increase strictly (rows load in id order and new ids only grow), so a
    /// slot is found by binary search; rows appended out of order are in `out_of_order`.
    /// (A map of every id would cost tens of megabytes at a million rows.)
    sorted: usize,
    out_of_order: HashMap<i64, u32>,
    /// Rows indexed (memories with no token count too) and their total token count.
    rows: u64,
    total_tokens: u64,
    /// Working memory of past searches, kept for reuse ([`crate::SEARCH_BUFFERS_KEPT`]).
    score_buffers: std::sync::Mutex<Vec<SearchBuffers>>,
}

impl crate::cache_file::Plain for Posting {}

impl TextCache {
    /// Tokenises every memory, in id order (so every posting list is sorted by slot), a chunk
    /// at a time; each list is then cut to its exact size, so none carries growth slack
    /// (hundreds of megabytes at a million rows).
    pub fn load(conn: &Connection) -> Result<Self> {
        let mut cache = TextCache::default();
        let mut stmt = conn.prepare("SELECT id, text, speaker, context FROM memories ORDER BY id").map_err(storage)?;
        let mut rows = stmt.query([]).map_err(storage)?;
        let mut chunk = Vec::with_capacity(LOAD_CHUNK);
        while let Some(r) = rows.next().map_err(storage)? {
            chunk.push(Fields {
                id: r.get(0).map_err(storage)?,
                text: r.get(1).map_err(storage)?,
                speaker: r.get(2).map_err(storage)?,
                context: r.get(3).map_err(storage)?,
            });
            if chunk.len() == LOAD_CHUNK {
                cache.add(tokenize(&chunk));
                chunk.clear();
            }
        }
        cache.add(tokenize(&chunk));
        cache.postings.iter_mut().for_each(Vec::shrink_to_fit);
        Ok(cache)
    }

    /// What a cache file of this cache depends on: the text pipeline, the field weights and the
    /// fingerprint function (a file from a build that fingerprints differently is rebuilt).
    pub fn file_key() -> String {
        let probe = Fields { id: 1, text: "probe".into(), speaker: Some("s".into()), context: None };
        let pipeline = text::PIPELINE;
        format!("text pipeline={pipeline} weights={FIELD_WEIGHTS:?} fingerprint={:016x}", probe.fingerprint())
    }

    /// Writes the cache as a cache file's body (crate::cache_file).
    pub fn encode(&self, e: &mut crate::cache_file::Encoder<'_>) -> std::io::Result<()> {
        let mut tokens = vec![""; self.postings.len()];
        for (token, id) in &self.token_ids {
            tokens[*id as usize] = token;
        }
        // Tokens no row holds any more are left out: the words of a forgotten memory must not
        // reach a file.
        let kept: Vec<usize> = (0..tokens.len()).filter(|t| !self.postings[*t].is_empty()).collect();
        e.array(&kept.iter().map(|t| tokens[*t].len() as u32).collect::<Vec<_>>())?;
        e.array(kept.iter().map(|t| tokens[*t]).collect::<String>().as_bytes())?;
        for t in &kept {
            e.array(&self.postings[*t])?;
        }
        e.array(&self.ids)?;
        e.array(&self.lengths)?;
        e.array(&self.fingerprints)?;
        e.array(&self.alive.iter().map(|a| u8::from(*a)).collect::<Vec<_>>())?;
        e.u64(self.sorted as u64)?;
        e.u64(self.rows)?;
        e.u64(self.total_tokens)
    }

    /// A cache from what [`TextCache::encode`] wrote, checked whole.
    pub fn decode(d: &mut crate::cache_file::Decoder<'_>) -> std::result::Result<Self, crate::cache_file::Stale> {
        let token_lengths: Vec<u32> = d.array("token lengths")?;
        let text: Vec<u8> = d.array("tokens")?;
        let text = String::from_utf8(text).map_err(|e| format!("tokens: {e}"))?;
        let mut cache = TextCache::default();
        cache.token_ids.reserve(token_lengths.len());
        let mut at = 0usize;
        for len in &token_lengths {
            let token = text.get(at..at + *len as usize).ok_or("tokens: lengths past the text")?;
            at += *len as usize;
            let id = cache.token_ids.len() as u32;
            if cache.token_ids.insert(token.to_owned(), id).is_some() {
                return Err(format!("token {token:?} twice"));
            }
        }
        cache.postings = Vec::with_capacity(token_lengths.len());
        for _ in 0..token_lengths.len() {
            cache.postings.push(d.array("postings")?);
        }
        cache.list_bounds = (0..token_lengths.len()).map(|_| std::sync::OnceLock::new()).collect();
        cache.ids = d.array("ids")?;
        cache.lengths = d.array("row lengths")?;
        cache.fingerprints = d.array("fingerprints")?;
        cache.alive = d.array::<u8>("alive")?.into_iter().map(|b| b != 0).collect();
        cache.sorted = d.u64("sorted")? as usize;
        cache.rows = d.u64("rows")?;
        cache.total_tokens = d.u64("total tokens")?;
        let n = cache.ids.len();
        if at != text.len()
            || cache.lengths.len() != n
            || cache.fingerprints.len() != n
            || cache.alive.len() != n
            || cache.sorted > n
            || cache.postings.iter().flatten().any(|p| p.slot as usize >= n)
        {
            return Err("arrays of the text cache do not match one another".into());
        }
        for slot in cache.sorted..n {
            if cache.alive[slot] {
                cache.out_of_order.insert(cache.ids[slot], slot as u32);
            }
        }
        Ok(cache)
    }

    /// The slot of a row this cache holds.
    fn slot(&self, id: i64) -> Option<u32> {
        if let Ok(i) = self.ids[..self.sorted].binary_search(&id)
            && self.alive[i]
        {
            return Some(i as u32);
        }
        self.out_of_order.get(&id).copied()
    }

    /// Gives the next slot to `id`.
    fn push_slot(&mut self, id: i64) {
        let slot = self.ids.len();
        if self.sorted == slot && self.ids.last().is_none_or(|last| *last < id) {
            self.sorted += 1;
        } else {
            self.out_of_order.insert(id, slot as u32);
        }
        self.ids.push(id);
        self.alive.push(true);
    }

    fn token_id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.token_ids.get(term) {
            return id;
        }
        let id = self.postings.len() as u32;
        self.token_ids.insert(term.to_owned(), id);
        self.postings.push(Vec::new());
        self.list_bounds.push(std::sync::OnceLock::new());
        id
    }

    /// Adds new versions of rows; a row this cache already holds in the same version is left
    /// as it is (a cache loaded after the write already has it). Remove the old version first.
    pub fn add(&mut self, rows: Vec<TokenizedRow>) {
        for row in rows {
            if self.slot(row.id).is_some() {
                continue;
            }
            let mut weights: HashMap<u32, f64> = HashMap::new();
            let length = row.tokens.len() as u32;
            for (term, column) in row.tokens {
                let token = self.token_id(&term);
                *weights.entry(token).or_default() += FIELD_WEIGHTS[column];
            }
            let slot = self.ids.len() as u32;
            for (token, weight) in weights {
                // Slots only grow, so every posting list stays sorted by slot.
                self.postings[token as usize].push(Posting { slot, weight: weight as f32 });
                let list = &self.postings[token as usize];
                let bounds = &mut self.list_bounds[token as usize];
                if let Some(bound) = bounds.get_mut() {
                    if list.len() > 2 * bound.made_for {
                        // Twice as long as when its buckets were sized: they are sized again.
                        *bounds = std::sync::OnceLock::new();
                    } else {
                        bound.include(list.len() - 1, &list[list.len() - 1], length);
                    }
                }
            }
            self.push_slot(row.id);
            self.lengths.push(length);
            self.fingerprints.push(row.fingerprint);
            self.total_tokens += u64::from(length);
            self.rows += 1;
        }
    }

    /// Removes the version `old` of a row (its id, fingerprint and tokens). A row absent, or
    /// held in another version (a cache loaded after the write), is left alone, so replaying a
    /// removal is harmless.
    pub fn remove(&mut self, old: &TokenizedRow) {
        let Some(slot) = self.slot(old.id) else {
            return;
        };
        if self.fingerprints[slot as usize] != old.fingerprint {
            return;
        }
        self.alive[slot as usize] = false;
        self.out_of_order.remove(&old.id);
        let mut seen = std::collections::HashSet::new();
        for (term, _) in &old.tokens {
            let Some(&token) = self.token_ids.get(term) else { continue };
            if !seen.insert(token) {
                continue;
            }
            let list = &mut self.postings[token as usize];
            if let Ok(i) = list.binary_search_by_key(&slot, |p| p.slot) {
                list.remove(i);
                // The postings after it moved: its blocks' bounds are worked out again.
                self.list_bounds[token as usize] = std::sync::OnceLock::new();
            }
        }
        self.total_tokens -= u64::from(self.lengths[slot as usize]);
        self.lengths[slot as usize] = 0;
        self.rows = self.rows.saturating_sub(1);
    }

    /// Removes the rows `ids` in whatever version this cache holds them, without their old
    /// fields: one pass over every posting list finds their postings. For catching a cache file
    /// up (crate::cache_file::Behind); a store's own writes use [`TextCache::remove`].
    pub fn remove_ids(&mut self, ids: &[i64]) {
        let mut dead = vec![false; self.ids.len()];
        let mut any = false;
        for &id in ids {
            let Some(slot) = self.slot(id) else { continue };
            let slot = slot as usize;
            dead[slot] = true;
            any = true;
            self.alive[slot] = false;
            self.out_of_order.remove(&id);
            self.total_tokens -= u64::from(self.lengths[slot]);
            self.lengths[slot] = 0;
            self.rows = self.rows.saturating_sub(1);
        }
        if any {
            for list in &mut self.postings {
                list.retain(|p| !dead[p.slot as usize]);
            }
            self.list_bounds.iter_mut().for_each(|bound| *bound = std::sync::OnceLock::new());
        }
    }
}

/// Every token of each row's fields, as (token, field), by the domain's pipeline.
pub fn tokenize(rows: &[Fields]) -> Vec<TokenizedRow> {
    rows.iter()
        .map(|f| {
            let mut tokens = Vec::new();
            bm25::each_field_token(&f.text, f.speaker.as_deref(), f.context.as_deref(), |token, field| {
                tokens.push((token, field));
            });
            TokenizedRow { id: f.id, fingerprint: f.fingerprint(), tokens }
        })
        .collect()
}

/// The tokens of a query's words, each word's token once per word (so two words with one stem
/// count twice, [`bm25::query_tokens`]); a word that yields no token is dropped.
pub fn query_tokens(words: &[String]) -> Vec<String> {
    words.iter().flat_map(|w| text::tokens(w)).collect()
}
