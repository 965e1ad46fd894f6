//! The `TextIndex` port, and the filter every search applies: words best first, scopes, kinds,
//! times, validity, limits, the fake's rankings.

use super::*;

pub fn text_search_matches_words_best_first<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let ids = store
            .insert(
                vec![
                    episode("the cat sat on the mat", None, 1),
                    episode("the dog barked at the mailman", None, 2),
                    episode("a zebra crossing near the cat cafe", None, 3),
                    episode("nothing relevant here", None, 4),
                ],
                None,
            )
            .await
            .unwrap();
        let zebra = store.search_text(vec!["zebra".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&zebra), vec![ids[2]]);
        let both = store.search_text(vec!["zebra".into(), "cat".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&both)[0], ids[2], "the memory with both words ranks first");
        assert_eq!(ids_of(&both).into_iter().collect::<HashSet<_>>(), HashSet::from([ids[0], ids[2]]));
        assert!(both.windows(2).all(|w| w[0].score >= w[1].score));
        let speaker = store.search_text(vec!["tester".into()], RecallFilter::default(), 2).await.unwrap();
        assert_eq!(speaker.len(), 2, "the speaker's name is searchable and limit applies");
        let none = store.search_text(vec!["unicorn".into()], RecallFilter::default(), 10).await.unwrap();
        assert!(none.is_empty());
    });
}

pub fn text_search_takes_words_literally<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let ids = store.insert(vec![episode("near the OR gate and the AND gate", None, 1)], None).await.unwrap();
        for term in ["near", "or", "and", "not"] {
            let hits = store.search_text(vec![term.into()], RecallFilter::default(), 10).await.unwrap();
            let expected = if term == "not" { vec![] } else { vec![ids[0]] };
            assert_eq!(ids_of(&hits), expected, "term {term:?}");
        }
        for raw in ["\"", "a\"b", "x*", "-y", "col:z", "(", ")", "NEAR(a b)"] {
            store.search_text(vec![raw.into()], RecallFilter::default(), 10).await.unwrap();
        }
    });
}

pub fn scope_isolation_in_every_search<S: Store>(make: Make<S>) {
    let rt = runtime();
    let mut runner = TestRunner::new(crate::proptest_config(16));
    let filters = (crate::strategies::arb_scope(), proptest::option::of(0usize..3));
    runner
        .run(&(proptest::collection::vec(arb_new_memory(), 1..30), filters), |(batch, (scope, kind))| {
            let subject = make();
            let store = &subject.store;
            rt.block_on(async {
                bind_test_model(store.as_ref()).await;
                let ids = store.insert(batch.clone(), None).await.unwrap();
                embed_pending(store.as_ref()).await;
                let kinds = kind.map(|k| vec![[MemoryKind::Episode, MemoryKind::Fact, MemoryKind::Strategy][k]]);
                let filter = RecallFilter { scope, kinds: kinds.unwrap_or_default(), ..RecallFilter::default() };
                let all: Vec<Memory> = batch.into_iter().zip(ids).map(|(m, id)| m.with_id(id)).collect();
                let admitted: HashSet<MemoryId> = all.iter().filter(|m| filter.admits(m)).map(|m| m.id).collect();
                let words: Vec<String> =
                    all.iter().flat_map(|m| atlas_domain::policy::query::terms(&m.text)).take(40).collect();
                let text = store.search_text(words, filter.clone(), 1000).await.unwrap();
                for hit in &text {
                    prop_assert!(admitted.contains(&hit.id), "text search returned {} outside {:?}", hit.id, filter);
                }
                let query = HashEmbedder::new(DIM).embed_one(&all[0].text);
                let near = store.search_vector(query, filter.clone(), 1000).await.unwrap();
                let found: HashSet<MemoryId> = near.iter().map(|h| h.id).collect();
                prop_assert_eq!(found, admitted, "vector search must return exactly the admitted memories");
                Ok(())
            })
        })
        .unwrap();
}

pub fn filters_on_kind_time_and_validity<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let mut expired = episode("apple pie recipe old", None, 100);
        expired.validity = Validity { valid_from: Timestamp(100), valid_until: Some(Timestamp(200)) };
        let mut fact = episode("apple orchard fact", None, 150);
        fact.body = atlas_domain::Body::Fact {
            subject: "orchard".into(),
            predicate: "grows".into(),
            object: "apple".into(),
            confidence: 0.9,
        };
        let current = episode("apple pie recipe new", None, 300);
        let ids = store.insert(vec![expired, fact, current], None).await.unwrap();
        let search = |filter: RecallFilter| {
            let store = Arc::clone(store);
            async move {
                let mut got = ids_of(&store.search_text(vec!["apple".into()], filter, 10).await.unwrap());
                got.sort();
                got
            }
        };
        assert_eq!(search(RecallFilter::default()).await, ids);
        let now = RecallFilter { valid_at: Some(Timestamp(1000)), ..RecallFilter::default() };
        assert_eq!(search(now).await, vec![ids[1], ids[2]]);
        let then = RecallFilter { valid_at: Some(Timestamp(160)), ..RecallFilter::default() };
        assert_eq!(search(then).await, vec![ids[0], ids[1]]);
        let before_all = RecallFilter { valid_at: Some(Timestamp(50)), ..RecallFilter::default() };
        assert_eq!(search(before_all).await, vec![]);
        let facts = RecallFilter { kinds: vec![MemoryKind::Fact], ..RecallFilter::default() };
        assert_eq!(search(facts).await, vec![ids[1]]);
        let window =
            RecallFilter { since: Some(Timestamp(150)), until: Some(Timestamp(300)), ..RecallFilter::default() };
        assert_eq!(search(window).await, vec![ids[1]]);
    });
}

pub fn empty_and_zero_limits<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        assert!(store.insert(vec![], None).await.unwrap().is_empty());
        store.insert(vec![episode("solo entry", None, 1)], None).await.unwrap();
        assert!(store.search_text(vec!["solo".into()], RecallFilter::default(), 0).await.unwrap().is_empty());
        assert!(store.search_text(vec![], RecallFilter::default(), 10).await.unwrap().is_empty());
        assert!(store.scan(None, 0).await.unwrap().is_empty());
        assert!(store.get_many(vec![]).await.unwrap().is_empty());
    });
}

/// Words no stemmer changes and no two of which share a stem: every store tokenises them as the
/// fake does, so that their rankings can be compared with the fake's exactly.
const PLAIN_WORDS: [&str; 12] =
    ["amber", "basalt", "cobalt", "delta", "ember", "fjord", "granit", "harbor", "indigo", "jasper", "kelp", "lagoon"];

/// A corpus of memories of varied lengths and repetitions over [`PLAIN_WORDS`], and queries.
fn plain_corpus() -> (Vec<NewMemory>, Vec<Vec<String>>) {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n) as usize
    };
    let memories = (0..40)
        .map(|i| {
            let len = 2 + next(14);
            // A skewed draw, so that some words are common and some rare.
            let text: Vec<&str> = (0..len).map(|_| PLAIN_WORDS[next(12).min(next(12))]).collect();
            episode(&text.join(" "), None, i)
        })
        .collect();
    let queries = (0..12).map(|_| (0..1 + next(3)).map(|_| PLAIN_WORDS[next(12)].to_owned()).collect()).collect();
    (memories, queries)
}

/// Words whose tokens only the one text pipeline makes equal: inflections share a stem, letters
/// with and without diacritics fold together, case is ignored.
const INFLECTED_WORDS: [&str; 12] =
    ["run", "running", "runs", "Runner", "lake", "lakes", "café", "CAFE", "Zoë", "zoe", "harbors", "harboring"];

/// Memories over [`INFLECTED_WORDS`], some spoken by "Zoë Lake" (the speaker is indexed at its
/// weight), and queries in other inflections than the memories use.
fn inflected_corpus() -> (Vec<NewMemory>, Vec<Vec<String>>) {
    let memories = (0..24)
        .map(|i: usize| {
            let text: Vec<&str> = (0..2 + i % 5).map(|j| INFLECTED_WORDS[(i * 7 + j * 5) % 12]).collect();
            let speaker = i.is_multiple_of(3).then(|| "Zoë Lake".to_owned());
            NewMemory::episode(
                text.join(" "),
                Scope::default(),
                speaker,
                Timestamp(100 + i as i64),
                Timestamp(100 + i as i64),
            )
        })
        .collect();
    let queries = [&["ran", "Lake"][..], &["cafés"], &["ZOE"], &["harbor", "runs"], &["running", "running", "cafe"]]
        .iter()
        .map(|q| q.iter().map(|w| (*w).to_owned()).collect())
        .collect();
    (memories, queries)
}

/// The same memories rank the same in every store: full text by the domain's one pipeline and
/// BM25 (the fake computes it without an index), on plain words and on inflected, accented and
/// spoken ones; vectors by exact cosine; ties to the smaller id, scores equal.
pub fn rankings_are_the_fakes<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    let reference = crate::FakeStore::new();
    runtime().block_on(async {
        let (mut memories, mut queries) = plain_corpus();
        let (inflected, inflected_queries) = inflected_corpus();
        memories.extend(inflected);
        let inflected_from = queries.len();
        queries.extend(inflected_queries);
        let ids = store.insert(memories.clone(), None).await.unwrap();
        let fake_ids = reference.insert(memories, None).await.unwrap();
        let position = |hits: &[atlas_domain::ports::ScoredId], ids: &[MemoryId]| -> Vec<(usize, f64)> {
            hits.iter().map(|h| (ids.iter().position(|id| *id == h.id).unwrap(), h.score)).collect()
        };
        for (i, query) in queries.iter().enumerate() {
            let got = store.search_text(query.clone(), RecallFilter::default(), 15).await.unwrap();
            let want = reference.search_text(query.clone(), RecallFilter::default(), 15).await.unwrap();
            // Every inflected query matches only through a stem, a fold or case.
            assert!(i < inflected_from || !want.is_empty(), "{query:?} found nothing");
            let (got, want) = (position(&got, &ids), position(&want, &fake_ids));
            assert_eq!(
                got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                want.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                "text ranking for {query:?}: {got:?} vs the fake's {want:?}"
            );
            for ((_, a), (_, b)) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "score for {query:?}: {a} vs the fake's {b}");
            }
        }
        bind_test_model(store.as_ref()).await;
        bind_test_model(&reference).await;
        embed_pending(store.as_ref()).await;
        embed_pending(&reference).await;
        let embedder = HashEmbedder::new(DIM);
        for query in &queries {
            let vector = embedder.embed_one(&query.join(" "));
            let got = store.search_vector(vector.clone(), RecallFilter::default(), 10).await.unwrap();
            // One more of the reference, to see a tie at the cut.
            let want = reference.search_vector(vector, RecallFilter::default(), 11).await.unwrap();
            // Rank by rank the same similarity: the same order up to ties, and up to the error
            // of a store that keeps its vectors quantised (int8: about 0.01).
            assert_eq!(got.len(), want.len().min(10));
            for (rank, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a.score - b.score).abs() <= 0.01,
                    "vector rank {rank} for {query:?}: {} vs the fake's {}",
                    a.score,
                    b.score
                );
            }
            // Where the reference's similarity stands apart from its neighbours', the memory is
            // the same; among near-equal similarities any order is right.
            let (got, want) = (position(&got, &ids), position(&want, &fake_ids));
            for i in 0..got.len() {
                let apart =
                    |j: Option<usize>| j.and_then(|j| want.get(j)).is_none_or(|(_, s)| (s - want[i].1).abs() > 0.01);
                if apart(i.checked_sub(1)) && apart(Some(i + 1)) {
                    assert_eq!(got[i].0, want[i].0, "vector rank {i} for {query:?}: {got:?} vs the fake's {want:?}");
                }
            }
        }
    });
}
