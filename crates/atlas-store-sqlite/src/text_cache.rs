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

use crate::error::storage;
use atlas_domain::policy::bm25::{self, FIELD_WEIGHTS};
use atlas_domain::policy::text;
use atlas_domain::ports::ScoredId;
use atlas_domain::{MemoryId, Result};
use rusqlite::Connection;
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

/// One search's working memory: the score of every slot (all zero between searches), the
/// slots it touched, those rows with their scores, and the scores the pruning selects from.
#[derive(Default)]
struct SearchBuffers {
    scores: Vec<f64>,
    touched: Vec<u32>,
    ranked: Vec<ScoredId>,
    best: Vec<f64>,
    /// A bit per slot: touched (a 64th of the score array, so checking it stays in the CPU's
    /// cache).
    seen: Vec<u64>,
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

    /// The `limit` best rows for the query tokens (one per query word, repeats counting twice,
    /// [`bm25::query_tokens`]), scored by [`bm25`] with the field weights. Ties go to the
    /// smaller id.
    ///
    /// Pruned term at a time (the "quit and continue" of Moffat and Zobel with exact bounds):
    /// the rarest terms are scored first; once what the remaining terms can add at most is below
    /// the `limit`-th best score so far, no row they alone match can make the cut, so the rest
    /// of their long lists is not read: only the rows still in reach are looked up in them.
    /// The result is the exhaustive one, score for score (a property test checks it).
    pub fn search(&self, query_tokens: &[String], limit: usize) -> Vec<ScoredId> {
        self.search_pruned(query_tokens, limit, true).0
    }

    /// The search, pruned or not; and whether it left part of some list unread.
    fn search_pruned(&self, query_tokens: &[String], limit: usize, prune: bool) -> (Vec<ScoredId>, bool) {
        if limit == 0 || self.rows == 0 {
            return (Vec::new(), false);
        }
        let avgdl = self.total_tokens as f64 / self.rows as f64;
        let mut terms: Vec<QueryTerm<'_>> = Vec::new();
        for term in query_tokens {
            let Some(&token) = self.token_ids.get(term) else { continue };
            let list = &self.postings[token as usize];
            if list.is_empty() {
                continue;
            }
            if let Some(seen) = terms.iter_mut().find(|t| t.token == token) {
                seen.count += 1.0;
                continue;
            }
            let idf = bm25::idf(self.rows, list.len() as u64);
            terms.push(QueryTerm { token, list, count: 1.0, idf });
        }
        // Rarest first: both the pruned and the exhaustive search add a row's terms in this
        // order, so their sums are the same to the last bit.
        terms.sort_unstable_by_key(|t| (t.list.len(), t.token));
        // What the terms from `i` on can add to a row's score at most.
        let mut reach = vec![0.0; terms.len() + 1];
        if prune {
            for i in (0..terms.len()).rev() {
                reach[i] = reach[i + 1] + self.list_bound(terms[i].token).most(&terms[i], avgdl);
            }
        }
        let mut buffers = self.score_buffers.lock().expect("score buffers lock").pop().unwrap_or_default();
        let SearchBuffers { scores, touched, ranked, best, seen } = &mut buffers;
        scores.resize(self.ids.len(), 0.0);
        seen.resize(self.ids.len().div_ceil(64), 0);
        let mut scanned = 0;
        let mut threshold = None;
        while scanned < terms.len() {
            let term = &terms[scanned];
            let mut kth = None;
            // The k-th best score costs a pass over every row seen so far: worth it only before
            // a list at least half as long (a shorter one is read in about the same time).
            if prune && touched.len() >= limit && term.list.len() * 2 >= touched.len() {
                best.clear();
                best.extend(touched.iter().map(|&slot| scores[slot as usize]));
                let found = *best.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a)).1;
                if !may_reach(reach[scanned], found) {
                    threshold = Some(found);
                    break;
                }
                kth = Some(found);
            }
            // `only_seen`: a row new to the search is left out.
            let mut score = |p: &Posting, only_seen: bool| {
                if !bit(seen, p.slot) {
                    if only_seen {
                        return;
                    }
                    set_bit(seen, p.slot);
                    touched.push(p.slot);
                }
                scores[p.slot as usize] += term.posting_score(p, &self.lengths, avgdl);
            };
            match kth {
                None => term.list.iter().for_each(|p| score(p, false)),
                Some(kth) => {
                    // Block by block: where no row new to the search can reach the k-th best
                    // score even with all the terms left, only the rows already seen count.
                    let blocks = &self.list_bound(term.token).blocks;
                    for (block, bound) in term.list.chunks(BLOCK).zip(blocks) {
                        let most = term.contribution(bound.0, bound.1, avgdl) + reach[scanned + 1];
                        let only_seen = !may_reach(most, kth);
                        block.iter().for_each(|p| score(p, only_seen));
                    }
                }
            }
            scanned += 1;
        }
        if let Some(threshold) = threshold {
            // Only rows the remaining terms can still lift to the threshold stay; they are
            // looked up in the remaining lists in slot order.
            touched.retain(|&slot| {
                let keep = may_reach(scores[slot as usize] + reach[scanned], threshold);
                if !keep {
                    scores[slot as usize] = 0.0;
                }
                keep
            });
            touched.sort_unstable();
            seen.fill(0);
            touched.iter().for_each(|&slot| set_bit(seen, slot));
            for term in &terms[scanned..] {
                if term.list.len() <= touched.len() * LOOKUPS_PER_SCAN {
                    // Many rows left for the list's length: one pass over it, checking each
                    // posting's bit, beats a search per row.
                    for p in term.list.iter().filter(|p| bit(seen, p.slot)) {
                        scores[p.slot as usize] += term.posting_score(p, &self.lengths, avgdl);
                    }
                    continue;
                }
                let bound = self.list_bound(term.token);
                let mut at = 0;
                for &slot in touched.iter() {
                    at = bound.seek(term.list, at, slot);
                    let Some(p) = term.list.get(at) else { break };
                    if p.slot == slot {
                        scores[slot as usize] += term.posting_score(p, &self.lengths, avgdl);
                    }
                }
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
        seen.fill(0);
        let order = |a: &ScoredId, b: &ScoredId| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id));
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, order);
        }
        let mut hits = ranked[..ranked.len().min(limit)].to_vec();
        hits.sort_unstable_by(order);
        let mut kept = self.score_buffers.lock().expect("score buffers lock");
        if kept.len() < crate::SEARCH_BUFFERS_KEPT {
            kept.push(buffers);
        }
        (hits, threshold.is_some())
    }

    /// The bounds of a token's list, worked out on the list's first use in a search, kept up
    /// to date by [`TextCache::add`] and dropped when a removal moves postings.
    fn list_bound(&self, token: u32) -> &ListBound {
        self.list_bounds[token as usize].get_or_init(|| {
            let list = &self.postings[token as usize];
            // Buckets of slots holding about eight postings each.
            let width = (self.ids.len() * 8 / list.len().max(1)).max(1);
            let mut bound = ListBound { shift: width.ilog2(), made_for: list.len(), ..ListBound::default() };
            for (at, p) in list.iter().enumerate() {
                bound.include(at, p, self.lengths[p.slot as usize]);
            }
            bound
        })
    }
}

/// Rows still in reach are looked up in a long list by its buckets ([`ListBound::seek`]); when
/// the list holds fewer than this many postings per row, reading it through, with a bit test
/// per posting, is cheaper.
const LOOKUPS_PER_SCAN: usize = 32;

/// Postings a block of a list holds, for the blocks' score bounds.
const BLOCK: usize = 64;

/// What a search knows of one posting list beyond its postings: bounds of its scores (the
/// largest weight and the shortest row of the whole list, and of each block of [`BLOCK`]
/// postings), and where each bucket of slots starts in it, so that a row is found in a long
/// list with a read or two instead of a search.
#[derive(Debug, Clone)]
struct ListBound {
    max_weight: f32,
    min_length: u32,
    blocks: Vec<(f32, u32)>,
    /// Slots `j << shift ..` start at posting `starts[j]`.
    shift: u32,
    starts: Vec<u32>,
    /// The list's length when the buckets were sized.
    made_for: usize,
}

impl Default for ListBound {
    fn default() -> Self {
        ListBound {
            max_weight: 0.0,
            min_length: u32::MAX,
            blocks: Vec::new(),
            shift: 0,
            starts: Vec::new(),
            made_for: 0,
        }
    }
}

impl ListBound {
    /// Takes in the posting at index `at` of the list, of a row of `length` tokens (postings
    /// come in list order).
    fn include(&mut self, at: usize, p: &Posting, length: u32) {
        self.max_weight = self.max_weight.max(p.weight);
        self.min_length = self.min_length.min(length);
        if at / BLOCK == self.blocks.len() {
            self.blocks.push((p.weight, length));
        }
        let block = &mut self.blocks[at / BLOCK];
        *block = (block.0.max(p.weight), block.1.min(length));
        let bucket = (p.slot >> self.shift) as usize;
        if self.starts.len() <= bucket {
            self.starts.resize(bucket + 1, at as u32);
        }
    }

    /// The index of the first posting of `list` from `from` on whose slot is not below `slot`.
    fn seek(&self, list: &[Posting], from: usize, slot: u32) -> usize {
        let Some(&start) = self.starts.get((slot >> self.shift) as usize) else {
            return list.len();
        };
        let mut at = from.max(start as usize);
        while at < list.len() && list[at].slot < slot {
            at += 1;
        }
        at
    }

    /// The most `term` adds to any row of the list.
    fn most(&self, term: &QueryTerm<'_>, avgdl: f64) -> f64 {
        term.contribution(self.max_weight, self.min_length, avgdl)
    }
}

/// One distinct token of a query.
struct QueryTerm<'a> {
    token: u32,
    list: &'a [Posting],
    /// How many query phrases name it.
    count: f64,
    idf: f64,
}

impl QueryTerm<'_> {
    /// [`QueryTerm::contribution`] of a posting of its list (`lengths`: every row's).
    fn posting_score(&self, p: &Posting, lengths: &[u32], avgdl: f64) -> f64 {
        self.contribution(p.weight, lengths[p.slot as usize], avgdl)
    }

    /// What the term adds to the score of a row of `length` tokens that holds it with `weight`
    /// ([`bm25::term_score`], rising with the weight, falling with the length).
    fn contribution(&self, weight: f32, length: u32, avgdl: f64) -> f64 {
        let norm = bm25::length_norm(f64::from(length), avgdl);
        bm25::term_score(self.count, self.idf, f64::from(weight), norm)
    }
}

/// Whether `slot`'s bit is set in a bit per slot.
fn bit(bits: &[u64], slot: u32) -> bool {
    bits[slot as usize / 64] & (1 << (slot % 64)) != 0
}

fn set_bit(bits: &mut [u64], slot: u32) {
    bits[slot as usize / 64] |= 1 << (slot % 64);
}

/// Whether a row whose score can reach `upper` may still rank with a row scoring `threshold`
/// (an exact tie counts, and a relative 1e-9 allows for the rounding of the bounds' sums).
fn may_reach(upper: f64, threshold: f64) -> bool {
    upper * (1.0 + 1e-9) >= threshold
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Skewed like real text: a few words in most rows, stems shared, a long tail.
    const WORDS: &[&str] = &[
        "the", "the", "the", "the", "lake", "lake", "run", "running", "runs", "Paris", "tram", "blue", "sketch",
        "pottery", "café", "ÉCOLE", "42", "naïve", "gull", "ferry",
    ];

    fn words(picks: &[usize]) -> String {
        picks.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ")
    }

    /// The domain's BM25 over every row, without an index: (id, score) of the best `limit`,
    /// best first, ties to the smaller id.
    fn reference_best(rows: &[Fields], query: &[String], limit: usize) -> Vec<(i64, f64)> {
        let docs: Vec<(i64, bm25::Document)> = rows
            .iter()
            .map(|f| (f.id, bm25::Document::of(&f.text, f.speaker.as_deref(), f.context.as_deref())))
            .collect();
        let avg = docs.iter().map(|(_, d)| f64::from(d.length)).sum::<f64>() / docs.len().max(1) as f64;
        let weighted: Vec<(String, u32, f64)> = bm25::query_tokens(query)
            .into_iter()
            .map(|(t, times)| {
                let n = docs.iter().filter(|(_, d)| d.frequencies.contains_key(&t)).count() as u64;
                let idf = bm25::idf(docs.len() as u64, n);
                (t, times, idf)
            })
            .collect();
        let mut best: Vec<(i64, f64)> =
            docs.iter().filter_map(|(id, d)| bm25::score(d, &weighted, avg).map(|s| (*id, s))).collect();
        best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        best.truncate(limit);
        best
    }

    fn arb_rows() -> impl Strategy<Value = Vec<(Vec<usize>, bool, Vec<usize>)>> {
        let picks = || proptest::collection::vec(0..WORDS.len(), 0..7);
        proptest::collection::vec((picks(), any::<bool>(), picks()), 1..400)
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(48))]
        /// The pruned top k is the exhaustive top k, score for score, and the domain's BM25
        /// computed over every row.
        #[test]
        fn pruned_top_k_equals_exhaustive_and_the_reference(
            rows in arb_rows(),
            removed in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
            queries in proptest::collection::vec((proptest::collection::vec(0..WORDS.len(), 1..6), 1usize..12), 1..6),
        ) {
            let fields: Vec<Fields> = rows
                .iter()
                .enumerate()
                .map(|(i, (text, named, context))| Fields {
                    id: i as i64 + 1,
                    text: words(text),
                    speaker: named.then(|| "Lake Runner".to_owned()),
                    context: (!context.is_empty()).then(|| words(context)),
                })
                .collect();
            let tokenized = tokenize(&fields);
            let check = |cache: &TextCache, live: &[Fields]| -> Result<(), TestCaseError> {
                for (query, limit) in &queries {
                    let query: Vec<String> = query.iter().map(|&w| WORDS[w].to_lowercase()).collect();
                    let tokens = query_tokens(&query);
                    let (pruned, _) = cache.search_pruned(&tokens, *limit, true);
                    let (all, cut) = cache.search_pruned(&tokens, usize::MAX, false);
                    prop_assert!(!cut);
                    prop_assert_eq!(&pruned[..], &all[..all.len().min(*limit)], "query {:?}, limit {}", query, limit);
                    let expected = reference_best(live, &query, *limit);
                    prop_assert_eq!(pruned.len(), expected.len());
                    for (hit, (id, score)) in pruned.iter().zip(&expected) {
                        // Rows whose scores differ only in the last bits may swap places.
                        prop_assert!((hit.score - score).abs() <= 1e-6 * score.abs().max(1.0),
                            "query {:?}: {} scores {} where the reference ranks {} at {}", query, hit.id.0, hit.score, id, score);
                    }
                }
                Ok(())
            };
            // Half the rows, a search (the lists' bounds are worked out), the other half (the
            // bounds follow the additions), removals (they are worked out again).
            let mut cache = TextCache::default();
            let half = tokenized.len() / 2;
            cache.add(tokenize(&fields[..half]));
            check(&cache, &fields[..half])?;
            cache.add(tokenize(&fields[half..]));
            check(&cache, &fields)?;
            let mut live = fields.clone();
            for r in &removed {
                let row = &tokenized[r.index(tokenized.len())];
                cache.remove(row);
                live.retain(|f| f.id != row.id);
            }
            check(&cache, &live)?;
        }
    }

    /// A rare word's rows fill the top k, so the common word's long list is left unread; the
    /// result is the exhaustive one all the same.
    #[test]
    fn a_common_words_list_is_cut_once_rare_matches_fill_the_top() {
        let fields: Vec<Fields> = (0..2_000)
            .map(|i| Fields {
                id: i + 1,
                text: if i % 100 == 0 { "the gull on the ferry".into() } else { format!("the day {i}") },
                speaker: None,
                context: None,
            })
            .collect();
        let mut cache = TextCache::default();
        cache.add(tokenize(&fields));
        let tokens = query_tokens(&["gull".into(), "the".into()]);
        let (pruned, cut) = cache.search_pruned(&tokens, 5, true);
        assert!(cut, "the list of 'the' should be cut");
        assert_eq!(pruned, cache.search_pruned(&tokens, 5, false).0);
        assert_eq!(pruned.iter().map(|h| h.id.0).collect::<Vec<_>>(), [1, 101, 201, 301, 401]);
    }
}
