//! BM25 on Qdrant, ranked as FTS5's `bm25()` ranks on SQLite, so that one space recalls the same
//! on both stores.
//!
//! FTS5 scores a row for a query as Σ over query tokens of idf × f (k1 + 1) / (f + k1 (1 − b +
//! b · len / avglen)), where f is the token's frequency summed over the columns with their
//! weights, len the row's length in tokens over all columns, avglen the mean of len over every
//! row, and idf = ln((N − n + 0.5) / (n + 0.5)), floored at 1e-6, from N rows of which n hold the
//! token. Qdrant cannot compute that: its sparse vectors hold weights fixed at write time, and
//! its IDF modifier uses another formula (ln(1 + (N − n + 0.5) / (n + 0.5))). So a search runs in
//! two steps: Qdrant finds candidates by a sparse vector with this formula's document side at a
//! fixed average length, and the store rescores them exactly from each candidate's own text and
//! the corpus' statistics (N counted, n counted on the indexed `terms` payload, avglen from the
//! `text_len` payload).

use atlas_domain::policy::query::words;
use atlas_domain::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT, TEXT_WEIGHT};
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::BTreeMap;

/// BM25's term-frequency saturation (FTS5's).
const K1: f64 = 1.2;
/// BM25's length normalisation (FTS5's).
const B: f64 = 0.75;

/// A sparse vector: sorted, unique term indices and their weights.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sparse {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// A memory's indexed fields as FTS5 sees its three columns: per term, the frequency summed over
/// the columns with their weights, and the row's length in tokens.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Document {
    pub frequencies: BTreeMap<u32, f64>,
    pub length: u32,
}

/// Turns text into terms (SQLite `unicode61` word boundaries, lowercase, English stems) and
/// terms into stable indices.
pub struct Bm25 {
    stemmer: Stemmer,
    avg_len: f64,
}

impl Bm25 {
    /// `avg_len`: the length in tokens the candidate vectors assume for an average memory (the
    /// exact rescoring uses the real one).
    pub fn new(avg_len: f32) -> Self {
        Bm25 { stemmer: Stemmer::create(Algorithm::English), avg_len: f64::from(avg_len).max(1.0) }
    }

    fn term_ids(&self, text: &str) -> Vec<u32> {
        words(text).map(|w| term_index(&self.stemmer.stem(&w))).collect()
    }

    /// The text, speaker and context of a memory, each column's tokens at its weight.
    pub fn analyse(&self, text: &str, speaker: Option<&str>, context: Option<&str>) -> Document {
        let mut document = Document::default();
        for (field, weight) in [
            (text, TEXT_WEIGHT),
            (speaker.unwrap_or_default(), SPEAKER_WEIGHT),
            (context.unwrap_or_default(), CONTEXT_WEIGHT),
        ] {
            for term in self.term_ids(field) {
                *document.frequencies.entry(term).or_default() += weight;
                document.length += 1;
            }
        }
        document
    }

    /// The candidate vector of a document: FTS5's document side at the assumed average length
    /// (Qdrant's IDF modifier supplies an inverse document frequency at query time).
    pub fn document(&self, document: &Document) -> Sparse {
        let norm = K1 * (1.0 - B + B * f64::from(document.length) / self.avg_len);
        let (indices, values) =
            document.frequencies.iter().map(|(&term, &f)| (term, (f * (K1 + 1.0) / (f + norm)) as f32)).unzip();
        Sparse { indices, values }
    }

    /// A query's terms as FTS5 counts them: each word's stem once per word, so two words with
    /// one stem count twice. Returns (stem index, times).
    pub fn query_terms(&self, terms: &[String]) -> Vec<(u32, u32)> {
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for t in terms {
            for id in self.term_ids(t) {
                *counts.entry(id).or_default() += 1;
            }
        }
        counts.into_iter().collect()
    }

    /// The candidate query vector: each distinct stem, weight 1.
    pub fn query(&self, terms: &[String]) -> Sparse {
        let (indices, values) = self.query_terms(terms).into_iter().map(|(id, _)| (id, 1.0)).unzip();
        Sparse { indices, values }
    }
}

/// FTS5's inverse document frequency of a token `n` of `rows` rows hold.
pub fn idf(rows: u64, n: u64) -> f64 {
    let (rows, n) = (rows as f64, n as f64);
    let idf = ((rows - n + 0.5) / (n + 0.5)).ln();
    if idf <= 0.0 { 1e-6 } else { idf }
}

/// FTS5's `bm25()` of `document` (higher is better) for query terms given as (stem index,
/// times, idf), over rows of `avg_len` tokens on average.
pub fn score(document: &Document, terms: &[(u32, u32, f64)], avg_len: f64) -> f64 {
    let norm = K1 * (1.0 - B + B * f64::from(document.length) / avg_len.max(f64::MIN_POSITIVE));
    terms
        .iter()
        .filter_map(|&(term, times, idf)| {
            let f = *document.frequencies.get(&term)?;
            Some(f64::from(times) * idf * f * (K1 + 1.0) / (f + norm))
        })
        .sum()
}

/// FNV-1a: stable across processes, platforms and versions, unlike `std`'s hasher, because the
/// indices are stored.
fn term_index(term: &str) -> u32 {
    term.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dot(q: &Sparse, d: &Sparse) -> f32 {
        q.indices
            .iter()
            .zip(&q.values)
            .filter_map(|(i, w)| d.indices.binary_search(i).ok().map(|j| w * d.values[j]))
            .sum()
    }

    #[test]
    fn stems_match_across_inflections_and_case() {
        let bm = Bm25::new(20.0);
        let d = bm.document(&bm.analyse("She was Running marathons", None, None));
        assert!(dot(&bm.query(&["runs".into()]), &d) > 0.0);
        assert!(dot(&bm.query(&["marathon".into()]), &d) > 0.0);
        assert_eq!(dot(&bm.query(&["swimming".into()]), &d), 0.0);
    }

    /// FTS5's formula by hand: one row "a b a" among 4 rows of average length 3, "a" in 2 rows.
    #[test]
    fn the_score_is_fts5s_bm25() {
        let bm = Bm25::new(20.0);
        let document = bm.analyse("apple pear apple", None, None);
        let apple = bm.query_terms(&["apple".into()])[0].0;
        let idf = ((4.0 - 2.0 + 0.5) / (2.0 + 0.5f64)).ln();
        let want = idf * 2.0 * (1.2 + 1.0) / (2.0 + 1.2 * (1.0 - 0.75 + 0.75 * 3.0 / 3.0));
        let got = score(&document, &[(apple, 1, idf)], 3.0);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // A token in most rows is worth almost nothing, as in FTS5.
        assert_eq!(idf_of(4, 3), 1e-6);
    }

    fn idf_of(rows: u64, n: u64) -> f64 {
        idf(rows, n)
    }

    #[test]
    fn speaker_counts_half_and_context_a_fifth_in_one_saturation() {
        let bm = Bm25::new(20.0);
        let caroline = bm.query_terms(&["caroline".into()])[0].0;
        let in_text = bm.analyse("caroline said hello", None, None);
        let as_speaker = bm.analyse("said hello", Some("Caroline"), None);
        let in_context = bm.analyse("said hello", None, Some("caroline"));
        assert_eq!(in_text.frequencies[&caroline], TEXT_WEIGHT);
        assert_eq!(as_speaker.frequencies[&caroline], SPEAKER_WEIGHT);
        assert_eq!(in_context.frequencies[&caroline], CONTEXT_WEIGHT);
        // Every column counts towards the row's length, as FTS5 counts it.
        assert_eq!((in_text.length, as_speaker.length, in_context.length), (3, 3, 3));
    }

    #[test]
    fn two_words_with_one_stem_count_twice() {
        let bm = Bm25::new(20.0);
        let terms = bm.query_terms(&["run".into(), "running".into(), "fast".into()]);
        assert_eq!(terms.iter().map(|(_, n)| n).sum::<u32>(), 3);
        assert!(terms.iter().any(|(_, n)| *n == 2), "{terms:?}");
        assert_eq!(bm.query(&["run".into(), "running".into()]).indices.len(), 1);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// The candidate vector ranks one query term exactly as the exact score does when the
        /// assumed average is the real one: it is FTS5's document side.
        #[test]
        fn the_candidate_vector_is_the_exact_document_side(
            texts in proptest::collection::vec("[a-e ]{1,40}", 2..12),
            term in "[a-e]",
        ) {
            let docs: Vec<Document> = texts.iter().map(|t| Bm25::new(1.0).analyse(t, None, None)).collect();
            // The candidate vectors assume rows of at least one token on average (`Bm25::new`
            // floors it so that a space of blank rows never divides by zero): compare at that.
            let avg = (docs.iter().map(|d| f64::from(d.length)).sum::<f64>() / docs.len() as f64).max(1.0);
            let bm = Bm25::new(avg as f32);
            let q = bm.query(std::slice::from_ref(&term));
            prop_assume!(!q.indices.is_empty());
            let t = q.indices[0];
            for d in &docs {
                let exact = score(d, &[(t, 1, 1.0)], avg);
                let approx = f64::from(dot(&q, &bm.document(d)));
                prop_assert!((exact - approx).abs() < 1e-4 * (1.0 + exact), "{exact} vs {approx}");
            }
        }

        /// Scores never go negative and grow with the frequency of a term, all else equal.
        #[test]
        fn more_occurrences_score_higher(n in 1usize..6, filler in 0usize..10) {
            let bm = Bm25::new(20.0);
            let text = |k: usize| {
                let mut words = vec!["lighthouse"; k];
                words.extend(std::iter::repeat_n("keeper", filler + n - k));
                words.join(" ")
            };
            let t = bm.query_terms(&["lighthouse".into()])[0].0;
            let fewer = score(&bm.analyse(&text(n - 1), None, None), &[(t, 1, 1.0)], 10.0);
            let more = score(&bm.analyse(&text(n), None, None), &[(t, 1, 1.0)], 10.0);
            prop_assert!(fewer >= 0.0 && more > fewer);
        }
    }
}
