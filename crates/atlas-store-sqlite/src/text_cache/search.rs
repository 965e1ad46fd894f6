//! The text cache's search: term at a time, the rarest first, with exact score bounds per
//! list and per block so that a common term's list is read only where a row can still make the
//! cut; the result is the exhaustive top k.

use super::{Posting, TextCache};
use atlas_domain::MemoryId;
use atlas_domain::policy::bm25;
use atlas_domain::ports::ScoredId;

/// One search's working memory: the score of every slot (all zero between searches), the
/// slots it touched, those rows with their scores, and the scores the pruning selects from.
#[derive(Default)]
pub(super) struct SearchBuffers {
    scores: Vec<f64>,
    touched: Vec<u32>,
    ranked: Vec<ScoredId>,
    best: Vec<f64>,
    /// A bit per slot: touched (a 64th of the score array, so checking it stays in the CPU's
    /// cache).
    seen: Vec<u64>,
}

impl TextCache {
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
    pub(super) fn search_pruned(&self, query_tokens: &[String], limit: usize, prune: bool) -> (Vec<ScoredId>, bool) {
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
pub(super) struct ListBound {
    max_weight: f32,
    min_length: u32,
    blocks: Vec<(f32, u32)>,
    /// Slots `j << shift ..` start at posting `starts[j]`.
    shift: u32,
    starts: Vec<u32>,
    /// The list's length when the buckets were sized.
    pub(super) made_for: usize,
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
    pub(super) fn include(&mut self, at: usize, p: &Posting, length: u32) {
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
