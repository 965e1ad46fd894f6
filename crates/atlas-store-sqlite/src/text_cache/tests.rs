//! The text cache's tests: every search equals the domain's BM25 over every row, pruned or
//! not, through adds, removals and a file read back.

use super::*;
use proptest::prelude::*;

/// Skewed like real text: a few words in most rows, stems shared, a long tail.
const WORDS: &[&str] = &[
    "the", "the", "the", "the", "lake", "lake", "run", "running", "runs", "Paris", "tram", "blue", "sketch", "pottery",
    "café", "ÉCOLE", "42", "naïve", "gull", "ferry",
];

fn words(picks: &[usize]) -> String {
    picks.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ")
}

/// The domain's BM25 over every row, without an index: (id, score) of the best `limit`,
/// best first, ties to the smaller id.
fn reference_best(rows: &[Fields], query: &[String], limit: usize) -> Vec<(i64, f64)> {
    let docs: Vec<bm25::Document> =
        rows.iter().map(|f| bm25::Document::of(&f.text, f.speaker.as_deref(), f.context.as_deref())).collect();
    let mut best: Vec<(i64, f64)> =
        rows.iter().zip(bm25::score_all(&docs, query)).filter_map(|(f, score)| score.map(|s| (f.id, s))).collect();
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
