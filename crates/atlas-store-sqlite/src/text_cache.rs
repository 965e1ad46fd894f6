//! An in-memory inverted index over FTS5's own tokens, scoring exactly as FTS5's `bm25()`.
//!
//! FTS5 finds the matches of a query in a few milliseconds but spends most of a search in
//! `bm25()`, which walks every matching row's position lists through its extension API (tens of
//! milliseconds at 100k memories when common words match most of them). This cache holds, per
//! token, the rows containing it with their column-weighted frequency, and per row its length
//! in tokens; summing over a query's postings gives the same score as FTS5 (checked against it
//! by a property test). SQLite stays the truth: the cache is loaded from the `fts5vocab` table
//! `memories_fts_instances` on the first text search and kept in step by this process's own
//! writes, tokenised by the same FTS5 tokenizer on a private in-memory table. Writes by another
//! process reach it when the store is next opened.

use crate::error::storage;
use atlas_domain::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT, TEXT_WEIGHT};
use atlas_domain::ports::ScoredId;
use atlas_domain::{MemoryId, Result};
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::Mutex;

/// The tokenizer of `memories_fts` (migrations/0003_context.sql); the private tokenizer must
/// split and stem exactly as it does. A test compares the two.
pub const TOKENIZE: &str = "porter unicode61 remove_diacritics 2";

/// FTS5's `bm25()` constants.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Weight of each FTS5 column, by column index (text, speaker, context).
const COLUMN_WEIGHTS: [f64; 3] = [TEXT_WEIGHT, SPEAKER_WEIGHT, CONTEXT_WEIGHT];

/// The indexed fields of one memory, as the FTS5 columns hold them.
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

/// A row's tokens: (token, column) for every token instance.
pub type Tokens = Vec<(String, usize)>;

/// A row as tokenised by [`Tokenizer::tokenize`]: its id, fields' fingerprint and tokens.
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
    /// Rows of the FTS5 table (memories with no token count too) and their total token count.
    rows: u64,
    total_tokens: u64,
    /// Working memory of past searches, kept for reuse ([`crate::SEARCH_BUFFERS_KEPT`]).
    score_buffers: std::sync::Mutex<Vec<SearchBuffers>>,
}

/// One search's working memory: the score of every slot (all zero between searches), the
/// slots it touched, and those rows with their scores.
type SearchBuffers = (Vec<f64>, Vec<u32>, Vec<ScoredId>);

impl crate::cache_file::Plain for Posting {}

impl TextCache {
    /// Reads every token instance of `memories_fts` (ordered by token, then row) in one pass.
    pub fn load(conn: &Connection) -> Result<Self> {
        let mut cache = TextCache::default();
        // Slots in id order, so that every posting list, read in row order, is sorted by slot.
        let mut stmt = conn.prepare("SELECT id, text, speaker, context FROM memories ORDER BY id").map_err(storage)?;
        let rows = stmt
            .query_map([], |r| Ok(Fields { id: r.get(0)?, text: r.get(1)?, speaker: r.get(2)?, context: r.get(3)? }))
            .map_err(storage)?;
        for row in rows {
            let row = row.map_err(storage)?;
            cache.push_slot(row.id);
            cache.fingerprints.push(row.fingerprint());
        }
        let n = cache.ids.len();
        cache.rows = n as u64;
        cache.lengths = vec![0; n];
        let mut stmt = conn.prepare("SELECT term, doc, col FROM memories_fts_instances").map_err(storage)?;
        let mut rows = stmt.query([]).map_err(storage)?;
        // Rows come grouped by token: each token's list is built in `scratch` and stored at its
        // exact size, so no list carries growth slack (hundreds of megabytes at a million rows).
        let (mut last_term, mut token) = (String::new(), u32::MAX);
        let mut scratch: Vec<Posting> = Vec::new();
        while let Some(row) = rows.next().map_err(storage)? {
            let term = row.get_ref(0).map_err(storage)?.as_str().map_err(|e| storage(e.into()))?;
            if token == u32::MAX || term != last_term {
                if token != u32::MAX {
                    cache.postings[token as usize] = scratch.as_slice().to_vec();
                    scratch.clear();
                }
                term.clone_into(&mut last_term);
                token = cache.token_id(term);
            }
            let Some(slot) = cache.slot(row.get::<_, i64>(1).map_err(storage)?) else { continue };
            let weight = COLUMN_WEIGHTS[column_index(row.get_ref(2).map_err(storage)?.as_str().unwrap_or(""))];
            cache.lengths[slot as usize] += 1;
            match scratch.last_mut() {
                Some(p) if p.slot == slot => p.weight += weight as f32,
                _ => scratch.push(Posting { slot, weight: weight as f32 }),
            }
        }
        if token != u32::MAX {
            cache.postings[token as usize] = scratch.as_slice().to_vec();
        }
        cache.total_tokens = cache.lengths.iter().map(|l| u64::from(*l)).sum();
        Ok(cache)
    }

    /// What a cache file of this cache depends on: the tokenizer, the column weights and the
    /// fingerprint function (a file from a build that fingerprints differently is rebuilt).
    pub fn file_key() -> String {
        let probe = Fields { id: 1, text: "probe".into(), speaker: Some("s".into()), context: None };
        format!("text tokenize={TOKENIZE} weights={COLUMN_WEIGHTS:?} fingerprint={:016x}", probe.fingerprint())
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
                *weights.entry(token).or_default() += COLUMN_WEIGHTS[column];
            }
            let slot = self.ids.len() as u32;
            for (token, weight) in weights {
                // Slots only grow, so every posting list stays sorted by slot.
                self.postings[token as usize].push(Posting { slot, weight: weight as f32 });
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
        }
    }

    /// The `limit` best rows for the query tokens (one per query phrase, repeats counting
    /// twice, as in FTS5), scored as FTS5's `bm25()` with the column weights, negated so that
    /// higher is better. Ties go to the smaller id.
    pub fn search(&self, query_tokens: &[String], limit: usize) -> Vec<ScoredId> {
        if limit == 0 || self.rows == 0 {
            return Vec::new();
        }
        let n = self.rows as f64;
        let avgdl = self.total_tokens as f64 / n;
        let (mut scores, mut touched, mut ranked) =
            self.score_buffers.lock().expect("score buffers lock").pop().unwrap_or_default();
        scores.resize(self.ids.len(), 0.0);
        for term in query_tokens {
            let Some(&token) = self.token_ids.get(term) else { continue };
            let list = &self.postings[token as usize];
            if list.is_empty() {
                continue;
            }
            let hits = list.len() as f64;
            let idf = ((n - hits + 0.5) / (hits + 0.5)).ln();
            let idf = if idf <= 0.0 { 1e-6 } else { idf };
            for p in list {
                let length = f64::from(self.lengths[p.slot as usize]);
                let freq = f64::from(p.weight);
                let norm = K1 * (1.0 - B + B * length / avgdl);
                let score = &mut scores[p.slot as usize];
                if *score == 0.0 {
                    touched.push(p.slot);
                }
                *score += idf * (freq * (K1 + 1.0)) / (freq + norm);
            }
        }
        // Every touched row with its score, in a reused buffer (selection over plain pairs is
        // far quicker than over slots that point into the score array).
        ranked.clear();
        ranked.extend(touched.iter().map(|&slot| {
            let score = std::mem::take(&mut scores[slot as usize]);
            ScoredId { id: MemoryId(self.ids[slot as usize]), score }
        }));
        touched.clear();
        let order = |a: &ScoredId, b: &ScoredId| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id));
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, order);
        }
        let mut hits = ranked[..ranked.len().min(limit)].to_vec();
        hits.sort_unstable_by(order);
        let mut kept = self.score_buffers.lock().expect("score buffers lock");
        if kept.len() < crate::SEARCH_BUFFERS_KEPT {
            kept.push((scores, touched, ranked));
        }
        hits
    }
}

fn column_index(name: &str) -> usize {
    match name {
        "text" => 0,
        "speaker" => 1,
        _ => 2,
    }
}

/// FTS5's tokenizer, run on a private in-memory table with the same columns and tokenizer as
/// `memories_fts`, so the cache sees exactly the tokens FTS5 indexes.
pub struct Tokenizer {
    conn: Mutex<Connection>,
}

impl Tokenizer {
    pub fn new() -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(storage)?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5 (text, speaker, context, tokenize = '{TOKENIZE}');
             CREATE VIRTUAL TABLE t_instances USING fts5vocab (t, 'instance');"
        ))
        .map_err(storage)?;
        Ok(Tokenizer { conn: Mutex::new(conn) })
    }

    /// Every token instance of each row's fields, as (token, column).
    pub fn tokenize(&self, rows: &[Fields]) -> Result<Vec<TokenizedRow>> {
        let conn = self.conn.lock().expect("tokenizer lock");
        let tx = conn.unchecked_transaction().map_err(storage)?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO t (rowid, text, speaker, context) VALUES (?, ?, ?, ?)")
                .map_err(storage)?;
            for (i, f) in rows.iter().enumerate() {
                insert.execute(rusqlite::params![i as i64 + 1, f.text, f.speaker, f.context]).map_err(storage)?;
            }
        }
        let mut out: Vec<TokenizedRow> =
            rows.iter().map(|f| TokenizedRow { id: f.id, fingerprint: f.fingerprint(), tokens: Vec::new() }).collect();
        {
            let mut stmt = tx.prepare_cached("SELECT term, doc, col FROM t_instances").map_err(storage)?;
            let mut found = stmt.query([]).map_err(storage)?;
            while let Some(row) = found.next().map_err(storage)? {
                let doc: i64 = row.get(1).map_err(storage)?;
                let column = column_index(&row.get::<_, String>(2).map_err(storage)?);
                out[(doc - 1) as usize].tokens.push((row.get(0).map_err(storage)?, column));
            }
        }
        tx.execute("DELETE FROM t", []).map_err(storage)?;
        tx.commit().map_err(storage)?;
        Ok(out)
    }

    /// The token each query word becomes (stemmed and folded as FTS5 does); a word that yields
    /// no token is dropped.
    pub fn query_tokens(&self, words: &[String]) -> Result<Vec<String>> {
        let rows: Vec<Fields> = words
            .iter()
            .enumerate()
            .map(|(i, w)| Fields { id: i as i64, text: w.clone(), speaker: None, context: None })
            .collect();
        Ok(self.tokenize(&rows)?.into_iter().flat_map(|row| row.tokens.into_iter().map(|(t, _)| t)).collect())
    }
}
