//! BM25 as sparse vectors: the document side (saturated, length-normalised term frequencies)
//! is computed here, the inverse document frequency by Qdrant (`Modifier::Idf`) at query time.
//!
//! Score of a document for a query = Σ over shared terms of idf(t) × w(t, d), which is BM25
//! with a fixed average document length (Qdrant does not track one per collection).

use atlas_domain::policy::query::words;
use atlas_domain::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT};
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::BTreeMap;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// A sparse vector: sorted, unique term indices and their weights.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sparse {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// Turns text into terms (SQLite `unicode61` word boundaries, lowercase, English stems) and
/// terms into stable indices.
pub struct Bm25 {
    stemmer: Stemmer,
    avg_len: f32,
}

impl Bm25 {
    /// `avg_len`: the typical length of a memory in words (turns of a conversation: about 20).
    pub fn new(avg_len: f32) -> Self {
        Bm25 { stemmer: Stemmer::create(Algorithm::English), avg_len: avg_len.max(1.0) }
    }

    fn term_ids(&self, text: &str) -> Vec<u32> {
        words(text).map(|w| term_index(&self.stemmer.stem(&w))).collect()
    }

    /// The document vector of a memory's text, speaker and context, each field weighted as in
    /// [`atlas_domain::policy::text_fields`] and length-normalised on its own (as FTS5's columns).
    pub fn document(&self, text: &str, speaker: Option<&str>, context: Option<&str>) -> Sparse {
        let mut weights: BTreeMap<u32, f32> = BTreeMap::new();
        self.add_field(&mut weights, text, 1.0, true);
        // A name of a word or two: no length normalisation.
        self.add_field(&mut weights, speaker.unwrap_or_default(), SPEAKER_WEIGHT as f32, false);
        self.add_field(&mut weights, context.unwrap_or_default(), CONTEXT_WEIGHT as f32, true);
        Sparse { indices: weights.keys().copied().collect(), values: weights.values().copied().collect() }
    }

    fn add_field(&self, weights: &mut BTreeMap<u32, f32>, text: &str, weight: f32, normalise: bool) {
        let terms = self.term_ids(text);
        let norm = if normalise { 1.0 - B + B * terms.len() as f32 / self.avg_len } else { 1.0 };
        for (term, tf) in counts(&terms) {
            *weights.entry(term).or_default() += weight * tf * (K1 + 1.0) / (tf + K1 * norm);
        }
    }

    /// The query vector of already-normalised terms: each distinct stem once, weight 1.
    pub fn query(&self, terms: &[String]) -> Sparse {
        let mut indices: Vec<u32> = terms.iter().flat_map(|t| self.term_ids(t)).collect();
        indices.sort_unstable();
        indices.dedup();
        let values = vec![1.0; indices.len()];
        Sparse { indices, values }
    }
}

fn counts(terms: &[u32]) -> BTreeMap<u32, f32> {
    let mut counts = BTreeMap::new();
    for t in terms {
        *counts.entry(*t).or_insert(0.0) += 1.0;
    }
    counts
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

    fn score(q: &Sparse, d: &Sparse) -> f32 {
        q.indices
            .iter()
            .zip(&q.values)
            .filter_map(|(i, w)| d.indices.binary_search(i).ok().map(|j| w * d.values[j]))
            .sum()
    }

    #[test]
    fn stems_match_across_inflections_and_case() {
        let bm = Bm25::new(20.0);
        let d = bm.document("She was Running marathons", None, None);
        assert!(score(&bm.query(&["runs".into()]), &d) > 0.0);
        assert!(score(&bm.query(&["marathon".into()]), &d) > 0.0);
        assert_eq!(score(&bm.query(&["swimming".into()]), &d), 0.0);
    }

    #[test]
    fn speaker_counts_half() {
        let bm = Bm25::new(20.0);
        let in_text = bm.document("caroline said hello", None, None);
        let as_speaker = bm.document("said hello", Some("Caroline"), None);
        let q = bm.query(&["caroline".into()]);
        assert!(score(&q, &as_speaker) > 0.0 && score(&q, &as_speaker) < score(&q, &in_text));
    }

    #[test]
    fn the_answered_turn_counts_less_than_the_text_and_more_than_nothing() {
        let bm = Bm25::new(20.0);
        let q = bm.query(&["paris".into()]);
        let in_text = score(&q, &bm.document("we went to Paris twice", None, None));
        let in_context = score(&q, &bm.document("yes, twice", Some("Ann"), Some("Bo: been to Paris?")));
        assert!(0.0 < in_context && in_context < in_text, "{in_context} vs {in_text}");
    }

    #[test]
    fn indices_are_stable() {
        // Stored in collections: changing the hash would silently break every existing index.
        assert_eq!(term_index("harbour"), 0xe81e_bb08); // FNV-1a 32, checked against an independent implementation
    }

    proptest! {
        #[test]
        fn vectors_are_sorted_unique_and_positive(
            text in "[a-zA-Z ,.!?éü0-9]{0,200}",
            speaker in proptest::option::of("[A-Z][a-z]{0,8}"),
            context in proptest::option::of("[a-z ]{0,60}"),
        ) {
            let d = Bm25::new(20.0).document(&text, speaker.as_deref(), context.as_deref());
            prop_assert_eq!(d.indices.len(), d.values.len());
            prop_assert!(d.indices.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(d.values.iter().all(|v| v.is_finite() && *v > 0.0));
        }

        /// More occurrences never lower a term's weight, and it saturates below k1 + 1.
        #[test]
        fn term_frequency_is_monotone_and_saturates(n in 1usize..30, filler in 0usize..40) {
            let bm = Bm25::new(20.0);
            let text = |k: usize| format!("{} {}", vec!["harbour"; k].join(" "), vec!["x"; filler].join(" "));
            let q = bm.query(&["harbour".into()]);
            let (a, b) = (score(&q, &bm.document(&text(n), None, None)), score(&q, &bm.document(&text(n + 1), None, None)));
            prop_assert!(b >= a * 0.95, "{} then {}", a, b);
            prop_assert!(b < K1 + 1.0 + 1e-4);
        }

        /// Longer documents weigh the same occurrence less.
        #[test]
        fn longer_documents_weigh_less(extra in 1usize..60) {
            let bm = Bm25::new(20.0);
            let q = bm.query(&["harbour".into()]);
            let short = score(&q, &bm.document("harbour lights", None, None));
            let long = score(&q, &bm.document(&format!("harbour lights {}", vec!["y"; extra].join(" ")), None, None));
            prop_assert!(long < short);
        }
    }
}
