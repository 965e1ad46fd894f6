//! BM25, the one full-text score: every store ranks by it (the SQLite text cache over its
//! postings, Qdrant rescoring its candidates, the in-memory fake over everything), over the
//! tokens of [`crate::policy::text`].
//!
//! A row is a memory's three indexed fields, each token counted at its field's weight
//! ([`crate::policy::text_fields`]). A row scores for a query as Σ over query tokens of
//! times × idf × f (k1 + 1) / (f + k1 (1 − b + b · len / avglen)), where f is the token's
//! weighted frequency in the row, len the row's length in tokens over all fields, avglen the
//! mean of len over every row, and idf = ln((N − n + 0.5) / (n + 0.5)), floored at 1e-6, from N
//! rows of which n hold the token: SQLite FTS5's `bm25()`, which ATLAS ranked by first, so
//! that scores and their fusion weights kept their meaning when the stores moved to one
//! pipeline. A query token given twice (two words with one stem) counts twice.

use crate::policy::text::{each_token, token, words};
use crate::policy::text_fields::{CONTEXT_WEIGHT, SPEAKER_WEIGHT, TEXT_WEIGHT};
use std::collections::BTreeMap;

/// Term-frequency saturation.
pub const K1: f64 = 1.2;
/// Length normalisation.
pub const B: f64 = 0.75;

/// Each indexed field's weight, by field index: text, speaker, context.
pub const FIELD_WEIGHTS: [f64; 3] = [TEXT_WEIGHT, SPEAKER_WEIGHT, CONTEXT_WEIGHT];

/// Calls `visit` with every token of a memory's indexed fields and the field's index into
/// [`FIELD_WEIGHTS`], field by field, in order.
pub fn each_field_token(
    text: &str,
    speaker: Option<&str>,
    context: Option<&str>,
    mut visit: impl FnMut(String, usize),
) {
    for (field, value) in [text, speaker.unwrap_or_default(), context.unwrap_or_default()].into_iter().enumerate() {
        each_token(value, |token| visit(token.to_owned(), field));
    }
}

/// A row as BM25 sees it: per token, its frequency summed over the fields at their weights;
/// and the row's length in tokens.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Document {
    pub frequencies: BTreeMap<String, f64>,
    pub length: u32,
}

impl Document {
    /// The row of a memory's text, speaker and context.
    pub fn of(text: &str, speaker: Option<&str>, context: Option<&str>) -> Self {
        let mut document = Document::default();
        each_field_token(text, speaker, context, |token, field| {
            *document.frequencies.entry(token).or_default() += FIELD_WEIGHTS[field];
            document.length += 1;
        });
        document
    }
}

/// A query's tokens with how many of its words became each: (token, times), in token order.
/// Words with no token are dropped.
pub fn query_tokens(terms: &[String]) -> Vec<(String, u32)> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for term in terms {
        for word in words(term) {
            *counts.entry(token(&word)).or_default() += 1;
        }
    }
    counts.into_iter().collect()
}

/// The inverse document frequency of a token `n` of `rows` rows hold.
pub fn idf(rows: u64, n: u64) -> f64 {
    let (rows, n) = (rows as f64, n as f64);
    let idf = ((rows - n + 0.5) / (n + 0.5)).ln();
    if idf <= 0.0 { 1e-6 } else { idf }
}

/// The length part of a row's score: k1 (1 − b + b · len / avglen).
pub fn length_norm(length: f64, avg_len: f64) -> f64 {
    K1 * (1.0 - B + B * length / avg_len.max(f64::MIN_POSITIVE))
}

/// What one query token adds to a row: `times` × idf × f (k1 + 1) / (f + norm), `norm` from
/// [`length_norm`].
pub fn term_score(times: f64, idf: f64, frequency: f64, norm: f64) -> f64 {
    times * (idf * (frequency * (K1 + 1.0)) / (frequency + norm))
}

/// The score of `document` for query tokens given as (token, times, idf), over rows of
/// `avg_len` tokens on average; `None` when no token occurs in it.
pub fn score<T: AsRef<str>>(document: &Document, terms: &[(T, u32, f64)], avg_len: f64) -> Option<f64> {
    let norm = length_norm(f64::from(document.length), avg_len);
    let mut matched = None;
    for (term, times, idf) in terms {
        if let Some(&f) = document.frequencies.get(term.as_ref()) {
            *matched.get_or_insert(0.0) += term_score(f64::from(*times), *idf, f, norm);
        }
    }
    matched
}

/// Every document's score for the query `terms` (their words through the one pipeline), worked
/// out without an index: idf and the mean length over all of `documents`; `None` where no
/// query token occurs. What a corpus small enough to scan is ranked by (the in-memory fake, the
/// benchmarks' floor), and the reference every index is checked against.
pub fn score_all(documents: &[Document], terms: &[String]) -> Vec<Option<f64>> {
    let rows = documents.len() as u64;
    let avg_len = documents.iter().map(|d| f64::from(d.length)).sum::<f64>() / (rows as f64).max(1.0);
    let weighted: Vec<(String, u32, f64)> = query_tokens(terms)
        .into_iter()
        .map(|(token, times)| {
            let n = documents.iter().filter(|d| d.frequencies.contains_key(&token)).count() as u64;
            let idf = idf(rows, n);
            (token, times, idf)
        })
        .collect();
    documents.iter().map(|d| score(d, &weighted, avg_len)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_rare_word_outranks_a_common_one_and_length_counts_against() {
        let docs = ["the cat sat on the mat", "a zebra", "the dog and the cat and the bird and the zebra"]
            .map(|t| Document::of(t, None, None));
        let rows = docs.len() as u64;
        let avg = docs.iter().map(|d| f64::from(d.length)).sum::<f64>() / rows as f64;
        let df = |t: &str| docs.iter().filter(|d| d.frequencies.contains_key(t)).count() as u64;
        let query: Vec<(String, u32, f64)> =
            query_tokens(&["zebra".into()]).into_iter().map(|(t, n)| (t.clone(), n, idf(rows, df(&t)))).collect();
        let scores: Vec<Option<f64>> = docs.iter().map(|d| score(d, &query, avg)).collect();
        assert_eq!(scores[0], None);
        assert!(scores[1] > scores[2], "{scores:?}");
    }

    /// The formula by hand: one row "apple pear apple" among 10 rows of average length 3,
    /// "apple" in 2 rows; a token in most rows is worth almost nothing.
    #[test]
    fn the_score_is_the_formula() {
        let document = Document::of("apple pear apple", None, None);
        let idf_apple = ((10.0 - 2.0 + 0.5) / (2.0 + 0.5f64)).ln();
        let want = idf_apple * 2.0 * (1.2 + 1.0) / (2.0 + 1.2 * (1.0 - 0.75 + 0.75 * 3.0 / 3.0));
        let got = score(&document, &[("appl", 1, idf(10, 2))], 3.0).unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        assert_eq!(score(&document, &[("appl", 2, idf(10, 2))], 3.0).unwrap(), 2.0 * got);
        assert_eq!(idf(4, 3), 1e-6);
    }

    #[test]
    fn fields_count_at_their_weights_and_stems_are_shared() {
        let d = Document::of("Running runs", Some("Runner"), Some("a run"));
        assert_eq!(d.length, 5);
        assert_eq!(d.frequencies["run"], 2.0 * TEXT_WEIGHT + CONTEXT_WEIGHT);
        assert_eq!(d.frequencies["runner"], SPEAKER_WEIGHT);
        assert_eq!(
            query_tokens(&["runs".into(), "running".into(), "lake".into()]),
            [("lake".to_owned(), 1), ("run".to_owned(), 2)]
        );
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// A score grows with a token's frequency and falls with the row's length, and the idf
        /// is positive and falls as more rows hold the token.
        #[test]
        fn monotone_in_frequency_length_and_rarity(
            f in 0.1f64..20.0, more in 0.1f64..5.0, len in 1.0f64..200.0, longer in 1.0f64..50.0,
            avg in 1.0f64..100.0, rows in 1u64..10_000, n in 0u64..10_000,
        ) {
            let norm = length_norm(len, avg);
            prop_assert!(term_score(1.0, 1.0, f + more, norm) > term_score(1.0, 1.0, f, norm));
            prop_assert!(term_score(1.0, 1.0, f, length_norm(len + longer, avg)) < term_score(1.0, 1.0, f, norm));
            let n = n.min(rows);
            prop_assert!(idf(rows, n) > 0.0);
            if n < rows {
                prop_assert!(idf(rows, n + 1) <= idf(rows, n));
            }
        }
    }
}
