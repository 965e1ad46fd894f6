//! BM25 on Qdrant, ranked as the domain's [`bm25`] ranks on every store, so that one space
//! recalls the same on SQLite and on Qdrant.
//!
//! Qdrant cannot compute that score: its sparse vectors hold weights fixed at write time, and
//! its IDF modifier uses another formula (ln(1 + (N − n + 0.5) / (n + 0.5))). So a search runs in
//! two steps: Qdrant finds candidates by a sparse vector with the score's document side at a
//! fixed average length, and the store rescores them exactly with [`bm25::score`] from each
//! candidate's own text and the corpus' statistics (N counted, n counted on the indexed `terms`
//! payload, avglen from the `text_len` payload). Tokens are the domain's
//! ([`atlas_domain::policy::text`]); a token is stored as a stable index.

use atlas_domain::policy::bm25::{self, Document};
use std::collections::BTreeMap;

/// A sparse vector: sorted, unique term indices and their weights.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sparse {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// Turns a memory's BM25 row and a query's tokens into sparse vectors.
pub struct Bm25 {
    avg_len: f64,
}

impl Bm25 {
    /// `avg_len`: the length in tokens the candidate vectors assume for an average memory (the
    /// exact rescoring uses the real one).
    pub fn new(avg_len: f32) -> Self {
        Bm25 { avg_len: f64::from(avg_len).max(1.0) }
    }

    /// The candidate vector of a row: its document side at the assumed average length (Qdrant's
    /// IDF modifier supplies an inverse document frequency at query time). Two tokens with one
    /// index (a hash collision) share it; the exact rescoring tells them apart.
    pub fn document(&self, document: &Document) -> Sparse {
        let norm = bm25::length_norm(f64::from(document.length), self.avg_len);
        let mut by_index: BTreeMap<u32, f32> = BTreeMap::new();
        for (token, &f) in &document.frequencies {
            *by_index.entry(term_index(token)).or_default() += bm25::term_score(1.0, 1.0, f, norm) as f32;
        }
        let (indices, values) = by_index.into_iter().unzip();
        Sparse { indices, values }
    }

    /// The candidate query vector: each distinct token, weight 1.
    pub fn query(&self, terms: &[String]) -> Sparse {
        let indices: std::collections::BTreeSet<u32> =
            bm25::query_tokens(terms).iter().map(|(token, _)| term_index(token)).collect();
        let values = vec![1.0; indices.len()];
        Sparse { indices: indices.into_iter().collect(), values }
    }
}

/// The stored index of a token: FNV-1a, stable across processes, platforms and versions,
/// unlike `std`'s hasher, because the indices are stored.
pub fn term_index(token: &str) -> u32 {
    token.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_domain::policy::text_fields::TEXT_WEIGHT;
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
        let d = bm.document(&Document::of("She was Running marathons", None, None));
        assert!(dot(&bm.query(&["runs".into()]), &d) > 0.0);
        assert!(dot(&bm.query(&["marathon".into()]), &d) > 0.0);
        assert_eq!(dot(&bm.query(&["swimming".into()]), &d), 0.0);
        assert_eq!(bm.query(&["run".into(), "running".into()]).indices.len(), 1);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// The candidate vector ranks one query term exactly as the exact score does when the
        /// assumed average is the real one: it is the score's document side.
        #[test]
        fn the_candidate_vector_is_the_exact_document_side(
            texts in proptest::collection::vec("[a-e ]{1,40}", 2..12),
            term in "[a-e]",
        ) {
            let docs: Vec<Document> = texts.iter().map(|t| Document::of(t, None, None)).collect();
            // The candidate vectors assume rows of at least one token on average (`Bm25::new`
            // floors it so that a space of blank rows never divides by zero): compare at that.
            let avg = (docs.iter().map(|d| f64::from(d.length)).sum::<f64>() / docs.len() as f64).max(1.0);
            let bm = Bm25::new(avg as f32);
            let q = bm.query(std::slice::from_ref(&term));
            prop_assume!(!q.indices.is_empty());
            let token = bm25::query_tokens(std::slice::from_ref(&term)).remove(0).0;
            for d in &docs {
                let exact = bm25::score(d, &[(token.as_str(), 1, 1.0)], avg).unwrap_or(0.0);
                let approx = f64::from(dot(&q, &bm.document(d)));
                prop_assert!((exact - approx).abs() < 1e-4 * (1.0 + exact), "{exact} vs {approx}");
            }
        }
    }

    #[test]
    fn a_token_is_weighted_by_its_field() {
        let bm = Bm25::new(3.0);
        let d = bm.document(&Document::of("apple pear", None, None));
        let apple = term_index("appl");
        let at = d.indices.binary_search(&apple).expect("apple indexed");
        let norm = bm25::length_norm(2.0, 3.0);
        assert_eq!(d.values[at], bm25::term_score(1.0, 1.0, TEXT_WEIGHT, norm) as f32);
    }
}
