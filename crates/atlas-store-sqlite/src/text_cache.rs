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

#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    /// Column-weighted frequency of the token in the row.
    weight: f32,
}

#[derive(Default)]
pub struct TextCache {
    token_ids: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    /// Per token: the largest weight and the smallest row length among its postings, which
    /// bound what the token can add to any row's score (MaxScore pruning in [`TextCache::search`]).
    /// A removal leaves them as they were: still bounds, only looser.
    bounds: Vec<(f32, u32)>,
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
}

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
        for (token, list) in cache.postings.iter().enumerate() {
            for p in list {
                let bound = &mut cache.bounds[token];
                *bound = (bound.0.max(p.weight), bound.1.min(cache.lengths[p.slot as usize]));
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
        self.bounds.push((0.0, u32::MAX));
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
                let bound = &mut self.bounds[token as usize];
                *bound = (bound.0.max(weight as f32), bound.1.min(length));
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

    /// [`TextCache::search`] by scoring every posting of every query token: the reference the
    /// pruned search is tested against.
    pub fn search_exhaustive(&self, query_tokens: &[String], limit: usize) -> Vec<ScoredId> {
        if limit == 0 || self.rows == 0 {
            return Vec::new();
        }
        let n = self.rows as f64;
        let avgdl = self.total_tokens as f64 / n;
        let mut scores = vec![0.0f64; self.ids.len()];
        let mut touched: Vec<u32> = Vec::new();
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
                *score += term_score(idf, freq, norm);
            }
        }
        let mut hits: Vec<ScoredId> = touched
            .into_iter()
            .map(|slot| ScoredId { id: MemoryId(self.ids[slot as usize]), score: scores[slot as usize] })
            .collect();
        let order = |a: &ScoredId, b: &ScoredId| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id));
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_unstable_by(order);
        hits
    }

    /// The `limit` best rows for the query tokens (one per query phrase, repeats counting
    /// twice, as in FTS5), scored as FTS5's `bm25()` with the column weights, negated so that
    /// higher is better. Ties go to the smaller id.
    ///
    /// MaxScore: each token's most it can add to a row's score is known from its list's bounds.
    /// Once `limit` rows are held, the tokens whose bounds together cannot lift a row to the
    /// weakest of them are no longer walked: a row is only scored when a token outside that set
    /// holds it, and its other tokens are looked up (by binary search) only while they can still
    /// lift it. The result is the exhaustive one (a test compares them).
    pub fn search(&self, query_tokens: &[String], limit: usize) -> Vec<ScoredId> {
        self.search_counting(query_tokens, limit).0
    }

    /// [`TextCache::search`], and how many rows it scored whole.
    fn search_counting(&self, query_tokens: &[String], limit: usize) -> (Vec<ScoredId>, usize) {
        if limit == 0 || self.rows == 0 {
            return (Vec::new(), 0);
        }
        let n = self.rows as f64;
        let avgdl = self.total_tokens as f64 / n;
        let mut scored = 0;
        // One entry per distinct token; `occurrences` lists the query's tokens in order, so that
        // a row's score is summed in the same order as the exhaustive search sums it (equal
        // scores then tie the same way).
        let mut terms: Vec<(u32, f64)> = Vec::new();
        let mut occurrences: Vec<usize> = Vec::new();
        for term in query_tokens {
            let Some(&token) = self.token_ids.get(term) else { continue };
            let list = &self.postings[token as usize];
            if list.is_empty() {
                continue;
            }
            let hits = list.len() as f64;
            let idf = ((n - hits + 0.5) / (hits + 0.5)).ln();
            let idf = if idf <= 0.0 { 1e-6 } else { idf };
            let index = terms.iter().position(|(t, _)| *t == token).unwrap_or_else(|| {
                terms.push((token, idf));
                terms.len() - 1
            });
            occurrences.push(index);
        }
        let norm_of = |length: f64| K1 * (1.0 - B + B * length / avgdl);
        // (list, term, times in the query, bound), weakest bound first; `reach[i]`: the bounds
        // of 0..=i summed.
        let mut lists: Vec<(&[Posting], usize, f64, f64)> = terms
            .iter()
            .enumerate()
            .map(|(index, &(token, idf))| {
                let times = occurrences.iter().filter(|&&o| o == index).count() as f64;
                let (max_weight, min_length) = self.bounds[token as usize];
                // A hair above the bound, so that rounding never prunes a row that belongs.
                let bound =
                    times * term_score(idf, f64::from(max_weight), norm_of(f64::from(min_length))) * (1.0 + 1e-9);
                (self.postings[token as usize].as_slice(), index, times, bound)
            })
            .collect();
        lists.sort_by(|a, b| a.3.total_cmp(&b.3));
        let reach: Vec<f64> = lists
            .iter()
            .scan(0.0, |sum, l| {
                *sum += l.3;
                Some(*sum)
            })
            .collect();
        let mut cursors = vec![0usize; lists.len()];
        let mut found: Vec<Option<f64>> = vec![None; terms.len()];
        // The best rows so far, the weakest on top (lowest score, then largest id).
        let mut best: std::collections::BinaryHeap<Held> = std::collections::BinaryHeap::new();
        let mut threshold = f64::NEG_INFINITY;
        let mut first_walked = 0;
        loop {
            let next = (first_walked..lists.len()).filter_map(|i| lists[i].0.get(cursors[i]).map(|p| p.slot)).min();
            let Some(slot) = next else { break };
            let norm = norm_of(f64::from(self.lengths[slot as usize]));
            found.iter_mut().for_each(|f| *f = None);
            let mut partial = 0.0;
            for i in first_walked..lists.len() {
                let (list, term, times, _) = lists[i];
                if let Some(p) = list.get(cursors[i])
                    && p.slot == slot
                {
                    found[term] = Some(f64::from(p.weight));
                    partial += times * term_score(terms[term].1, f64::from(p.weight), norm);
                    cursors[i] += 1;
                }
            }
            let mut hopeless = false;
            for i in (0..first_walked).rev() {
                if partial + reach[i] < threshold {
                    hopeless = true;
                    break;
                }
                let (list, term, times, _) = lists[i];
                cursors[i] += list[cursors[i]..].partition_point(|p| p.slot < slot);
                if let Some(p) = list.get(cursors[i])
                    && p.slot == slot
                {
                    found[term] = Some(f64::from(p.weight));
                    partial += times * term_score(terms[term].1, f64::from(p.weight), norm);
                }
            }
            if hopeless {
                continue;
            }
            scored += 1;
            let score: f64 = occurrences
                .iter()
                .filter_map(|&o| found[o].map(|freq| term_score(terms[o].1, freq, norm)))
                .fold(0.0, |sum, x| sum + x);
            let candidate = Held { score, id: self.ids[slot as usize] };
            if best.len() < limit {
                best.push(candidate);
            } else if best.peek().is_some_and(|weakest| candidate < *weakest) {
                best.pop();
                best.push(candidate);
            } else {
                continue;
            }
            if best.len() == limit {
                threshold = best.peek().map_or(f64::NEG_INFINITY, |w| w.score);
                while first_walked < lists.len() && reach[first_walked] < threshold {
                    first_walked += 1;
                }
            }
        }
        let mut hits: Vec<ScoredId> =
            best.into_iter().map(|h| ScoredId { id: MemoryId(h.id), score: h.score }).collect();
        hits.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        (hits, scored)
    }
}

/// What one query token adds to a row's score (FTS5's `bm25()` term), `norm` being
/// k1 · (1 − b + b · length / average length).
fn term_score(idf: f64, freq: f64, norm: f64) -> f64 {
    idf * (freq * (K1 + 1.0)) / (freq + norm)
}

/// A row held among the best: ordered so that the heap's top is the weakest (lowest score,
/// then largest id); `a < b` means `a` ranks better than `b`.
#[derive(Debug, Clone, Copy)]
struct Held {
    score: f64,
    id: i64,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.score.total_cmp(&self.score).then(self.id.cmp(&other.id))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rows of tokens over a small vocabulary with a skewed distribution (common and rare
    /// tokens), in the three columns.
    fn arb_rows() -> impl Strategy<Value = Vec<Vec<(u8, u8)>>> {
        let token = (0u8..40).prop_map(|t| t % 8 * (t / 20 + 1));
        proptest::collection::vec(proptest::collection::vec((token, 0u8..3), 0..25), 1..120)
    }

    fn cache_of(rows: &[Vec<(u8, u8)>], removed: &[usize]) -> TextCache {
        let tokenized: Vec<TokenizedRow> = rows
            .iter()
            .enumerate()
            .map(|(i, tokens)| TokenizedRow {
                // Some ids out of order, as a restore appends them.
                id: if i % 17 == 16 { 1_000 - i as i64 } else { i as i64 + 1 },
                fingerprint: i as u64,
                tokens: tokens.iter().map(|(t, c)| (format!("w{t}"), usize::from(*c))).collect(),
            })
            .collect();
        let mut cache = TextCache::default();
        for row in &tokenized {
            cache.add(vec![TokenizedRow { id: row.id, fingerprint: row.fingerprint, tokens: row.tokens.clone() }]);
        }
        for &r in removed {
            if let Some(row) = tokenized.get(r % tokenized.len()) {
                cache.remove(row);
            }
        }
        cache
    }

    /// A rare token and a common one, one best row wanted: most rows holding only the common
    /// token are never scored whole.
    #[test]
    fn pruning_skips_rows_that_cannot_reach_the_top() {
        let mut rows: Vec<Vec<(u8, u8)>> = (0..500).map(|i| vec![(1, 0), (2 + (i % 5) as u8, 0)]).collect();
        rows[250].push((9, 0));
        let cache = cache_of(&rows, &[]);
        let query = vec!["w9".to_owned(), "w1".to_owned()];
        let (hits, scored) = cache.search_counting(&query, 1);
        assert_eq!(hits, cache.search_exhaustive(&query, 1));
        assert_eq!(hits[0].id, MemoryId(251));
        assert!(scored < 300, "scored {scored} of 500 rows");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// MaxScore's top k is the exhaustive top k: the same rows in the same order (ties to
        /// the smaller id), the same scores.
        #[test]
        fn pruned_top_k_is_the_exhaustive_top_k(
            rows in arb_rows(),
            removed in proptest::collection::vec(any::<usize>(), 0..6),
            query in proptest::collection::vec(0u8..20, 1..6),
            k in 1usize..25,
        ) {
            let cache = cache_of(&rows, &removed);
            let query: Vec<String> = query.iter().map(|t| format!("w{t}")).collect();
            let pruned = cache.search(&query, k);
            let exhaustive = cache.search_exhaustive(&query, k);
            prop_assert_eq!(
                pruned.iter().map(|h| h.id).collect::<Vec<_>>(),
                exhaustive.iter().map(|h| h.id).collect::<Vec<_>>()
            );
            for (a, b) in pruned.iter().zip(&exhaustive) {
                prop_assert!((a.score - b.score).abs() <= 1e-12 * b.score.abs().max(1.0), "{} vs {}", a.score, b.score);
            }
        }
    }
}
