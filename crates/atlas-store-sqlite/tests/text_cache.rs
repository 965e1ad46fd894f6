//! The in-memory BM25 cache ranks exactly as the domain's BM25 computed over every row: after
//! inserts, forgets (which rewrite the replies' context) and restores, and after a reopen that
//! loads it from the file.

use atlas_domain::policy::bm25;
use atlas_domain::ports::{MemoryStore, Replica, TextIndex};
use atlas_domain::{NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Inflections share stems, so stemming is exercised as well as plain matches.
const WORDS: &[&str] = &[
    "run", "running", "runs", "lake", "lakes", "pottery", "Paris", "café", "tram", "trams", "blue", "sketch", "the",
    "ÉCOLE", "ecole", "42", "naïve",
];

/// The domain's BM25 over every memory the database holds, computed without an index.
fn reference_scores(db: &Path, words: &[String]) -> BTreeMap<i64, f64> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT id, text, speaker, context FROM memories").unwrap();
    let (ids, docs): (Vec<i64>, Vec<bm25::Document>) = stmt
        .query_map([], |r| {
            let (text, speaker, context): (String, Option<String>, Option<String>) = (r.get(1)?, r.get(2)?, r.get(3)?);
            Ok((r.get::<_, i64>(0)?, bm25::Document::of(&text, speaker.as_deref(), context.as_deref())))
        })
        .unwrap()
        .map(Result::unwrap)
        .unzip();
    ids.into_iter().zip(bm25::score_all(&docs, words)).filter_map(|(id, score)| score.map(|s| (id, s))).collect()
}

async fn cache_scores(store: &SqliteStore, words: &[String]) -> BTreeMap<i64, f64> {
    let hits = store.search_text(words.to_vec(), RecallFilter::default(), 10_000).await.unwrap();
    hits.into_iter().map(|h| (h.id.0, h.score)).collect()
}

fn assert_same(cache: &BTreeMap<i64, f64>, reference: &BTreeMap<i64, f64>, when: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(cache.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "matches differ {}", when);
    for (id, score) in cache {
        let expected = reference[id];
        prop_assert!(
            (score - expected).abs() <= 1e-6 * expected.abs().max(1.0),
            "{when}: row {id}: {score} vs {expected}"
        );
    }
    Ok(())
}

fn arb_turns() -> impl Strategy<Value = Vec<(Vec<usize>, u8, bool)>> {
    proptest::collection::vec((proptest::collection::vec(0..WORDS.len(), 0..8), 0u8..3, any::<bool>()), 1..30)
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]
    #[test]
    fn cache_scores_equal_the_domains_bm25(
        turns in arb_turns(),
        queries in proptest::collection::vec(proptest::collection::vec(0..WORDS.len(), 1..4), 1..4),
        forgets in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        let queries: Vec<Vec<String>> =
            queries.iter().map(|q| q.iter().map(|&i| WORDS[i].to_lowercase()).collect()).collect();
        rt.block_on(async {
            // A first search loads the (empty) cache, so every later write updates it in place.
            store.search_text(vec!["warm".into()], RecallFilter::default(), 10).await.unwrap();
            let batch: Vec<NewMemory> = turns
                .iter()
                .enumerate()
                .map(|(i, (words, session, named))| {
                    let text = words.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ");
                    let scope = Scope { session: Some(format!("s{session}")), ..Scope::default() };
                    let speaker = named.then(|| ["Ann", "Bo Lake"][i % 2].to_owned());
                    NewMemory::episode(text, scope, speaker, Timestamp(i as i64), Timestamp(i as i64))
                })
                .collect();
            let ids = store.insert(batch, None).await.unwrap();
            for q in &queries {
                assert_same(&cache_scores(&store, q).await, &reference_scores(&db, q), "after inserts")?;
            }
            for f in &forgets {
                store.forget(ids[f.index(ids.len())]).await.unwrap();
            }
            // A restore rewrites a record in place (here: the first one still stored, with words
            // added), and one unchanged.
            let mut first = store.export_batch(None, 2).await.unwrap();
            if let Some(changed) = first.first_mut() {
                changed.memory.text.push_str(" lake trams Paris");
            }
            store.restore(first).await.unwrap();
            for q in &queries {
                assert_same(&cache_scores(&store, q).await, &reference_scores(&db, q), "after forgets and a restore")?;
            }
            drop(store);
            let reopened = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
            for q in &queries {
                assert_same(&cache_scores(&reopened, q).await, &reference_scores(&db, q), "loaded from the file")?;
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// A filter that admits only the worst-ranked matches: the cache's windows run out and every
/// match is ranked under the filter; the result is the filtered reference ranking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_filter_still_gets_its_best_matches() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    let batch: Vec<NewMemory> = (0..17_000)
        .map(|i| {
            let ann = i % 5_000 == 7;
            let user = if ann { "ann" } else { "bo" };
            // Longer texts rank lower: Ann's matches are at the bottom of the unfiltered list.
            let text = if ann { format!("lake {}", "filler words ".repeat(10 + i / 5_000)) } else { "lake".into() };
            let scope = Scope { user: Some(user.into()), ..Scope::default() };
            NewMemory::episode(text, scope, None, Timestamp(i as i64), Timestamp(i as i64))
        })
        .collect();
    let ids = store.insert(batch, None).await.unwrap();
    let only_ann = RecallFilter { scope: Scope { user: Some("ann".into()), ..Scope::default() }, ..Default::default() };
    let hits = store.search_text(vec!["lake".into()], only_ann, 10).await.unwrap();
    let reference = reference_scores(&db, &["lake".into()]);
    let anns: Vec<i64> = (0..17_000).filter(|i| i % 5_000 == 7).map(|i| ids[i].0).collect();
    let mut expected: Vec<(i64, f64)> = anns.iter().map(|id| (*id, reference[id])).collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    assert_eq!(expected.len(), 4);
    assert_eq!(hits.iter().map(|h| h.id.0).collect::<Vec<_>>(), expected.iter().map(|e| e.0).collect::<Vec<_>>());
    for (hit, (_, score)) in hits.iter().zip(&expected) {
        assert!((hit.score - score).abs() <= 1e-6 * score.abs(), "{} vs {score}", hit.score);
    }
}
