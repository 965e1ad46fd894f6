//! The conformance suite of the storage ports. Every adapter runs all of it through
//! [`store_conformance!`](crate::store_conformance), which expands to one `#[test]` per case.
//! [`RecallFilter::admits`] and the port docs are the specification; the fake is checked too.

use crate::strategies::arb_new_memory;
use crate::{HashEmbedder, Subject, runtime};
use atlas_domain::access::{AccessKey, Role};
use atlas_domain::ports::{
    EmbeddingModel, KeyStore, MemoryStore, Pieces, Replica, StoredMemory, StoredPieces, TextIndex, Update, VectorIndex,
};
use atlas_domain::{
    AtlasError, Body, EdgeKind, Lifecycle, Memory, MemoryId, MemoryKind, NewMemory, RecallFilter, Scope, Timestamp,
    Validity,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::HashSet;
use std::sync::Arc;

/// What a storage adapter implements.
pub trait Store: MemoryStore + TextIndex + VectorIndex + Replica + KeyStore + 'static {}
impl<T: MemoryStore + TextIndex + VectorIndex + Replica + KeyStore + 'static> Store for T {}

pub type Make<'a, S> = &'a dyn Fn() -> Subject<S>;

/// Expands to a module of `#[test]`s running every conformance case against the store that
/// `$make` (an expression of type `fn() -> Subject<S>`) builds fresh for each case.
#[macro_export]
macro_rules! store_conformance {
    ($name:ident, $make:expr) => {
        $crate::store_conformance!($name, $make, #[test]);
    };
    // `$attr`: the attributes of every case, e.g. `#[test] #[ignore = "needs a server"]`.
    ($name:ident, $make:expr, $(#[$attr:meta])+) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::store_conformance!(@cases $make; [$(#[$attr])+];
                round_trip_of_any_record, ids_increase_and_are_never_reused, episodes_link_temporally_per_session,
                episodes_carry_the_turn_they_answer,
                forget_removes_everywhere, text_search_matches_words_best_first, text_search_takes_words_literally,
                scope_isolation_in_every_search, filters_on_kind_time_and_validity, vector_queue_and_nearest_first,
                vector_search_is_exact_under_selective_filters, model_binding_is_recorded_and_checked,
                stats_count_what_is_stored, concurrent_inserts_all_land, empty_and_zero_limits,
                rebinding_requeues_everything_for_the_new_model, replica_copies_ids_vectors_and_edges_idempotently,
                restore_refuses_vectors_of_another_dimension, keyed_writes_happen_once, reserved_ids_are_never_taken,
                own_claims_on_queued_vectors_are_renewed, soft_deletion_hides_from_search_and_recovers,
                updates_change_lifecycle_and_body_only, latest_is_newest_first_under_the_filter, rankings_are_the_fakes,
                access_keys_are_kept_and_revoked, the_mean_vector_follows_what_is_stored,
                a_long_turn_is_linked_but_not_carried_as_context, pieces_are_one_write,
                restored_pieces_are_one_restore);
        }
    };
    (@cases $make:expr; $attrs:tt; $($case:ident),* $(,)?) => {
        $(
            $crate::store_conformance!(@case $make; $attrs; $case);
        )*
    };
    (@case $make:expr; [$(#[$attr:meta])+]; $case:ident) => {
        $(#[$attr])+
        fn $case() {
            $crate::conformance::$case(&$make);
        }
    };
}

fn episode(text: &str, session: Option<&str>, t: i64) -> NewMemory {
    let scope = Scope { session: session.map(String::from), ..Scope::default() };
    NewMemory::episode(text, scope, Some("Tester".into()), Timestamp(t), Timestamp(t))
}

fn ids_of(hits: &[atlas_domain::ports::ScoredId]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.id).collect()
}

const DIM: usize = 16;

async fn bind_test_model<S: Store>(store: &S) {
    store.bind_model(EmbeddingModel { name: format!("atlas-test-hash-{DIM}"), dimension: DIM }).await.unwrap();
}

async fn embed_pending<S: Store>(store: &S) {
    let embedder = HashEmbedder::new(DIM);
    loop {
        let pending = store.pending_vectors(100).await.unwrap();
        if pending.is_empty() {
            break;
        }
        let vectors = pending.into_iter().map(|m| (m.id, embedder.embed_one(&m.text))).collect();
        store.put_vectors(vectors).await.unwrap();
    }
}

pub fn round_trip_of_any_record<S: Store>(make: Make<S>) {
    let rt = runtime();
    let mut runner = TestRunner::new(Config { cases: 24, ..Config::default() });
    runner
        .run(&proptest::collection::vec(arb_new_memory(), 1..20), |batch| {
            let subject = make();
            let store = &subject.store;
            rt.block_on(async {
                let ids = store.insert(batch.clone(), None).await.unwrap();
                prop_assert_eq!(ids.len(), batch.len());
                let expected: Vec<Memory> = batch.iter().cloned().zip(&ids).map(|(m, id)| m.with_id(*id)).collect();
                // The context is derived by the store (its own case checks it); the rest is the record.
                let without_context = |m: Memory| Memory { context: None, ..m };
                for m in &expected {
                    let got = store.get(m.id).await.unwrap();
                    if let Some(got) = &got {
                        prop_assert!(
                            got.context.is_none() || (got.kind() == MemoryKind::Episode && got.scope.session.is_some())
                        );
                    }
                    prop_assert_eq!(got.map(without_context), Some(m.clone()));
                }
                let reversed: Vec<MemoryId> = ids.iter().rev().copied().collect();
                let many = store.get_many(reversed.clone()).await.unwrap();
                prop_assert_eq!(many.iter().map(|m| m.id).collect::<Vec<_>>(), reversed);
                let mut scanned = Vec::new();
                let mut after = None;
                loop {
                    let page = store.scan(after, 7).await.unwrap();
                    let Some(last) = page.last() else { break };
                    after = Some(last.id);
                    scanned.extend(page.into_iter().map(without_context));
                }
                prop_assert_eq!(scanned, expected);
                Ok(())
            })
        })
        .unwrap();
}

pub fn ids_increase_and_are_never_reused<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let first = store.insert(vec![episode("one", None, 1), episode("two", None, 2)], None).await.unwrap();
        assert!(first[0] < first[1]);
        assert!(store.forget(first[1]).await.unwrap());
        let next = store.insert(vec![episode("three", None, 3)], None).await.unwrap();
        assert!(next[0] > first[1], "id {} reused after forgetting {}", next[0], first[1]);
        assert_eq!(store.get(MemoryId(i64::MAX)).await.unwrap(), None);
    });
}

pub fn episodes_link_temporally_per_session<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let a = store
            .insert(
                vec![episode("a1", Some("a"), 10), episode("b1", Some("b"), 11), episode("a2", Some("a"), 20)],
                None,
            )
            .await
            .unwrap();
        // Inserted later but said earlier than a2: links from a1, its predecessor in time.
        let late = store.insert(vec![episode("a0.5", Some("a"), 15), episode("none", None, 30)], None).await.unwrap();
        let temporal = |edges: Vec<atlas_domain::Edge>| -> Vec<(MemoryId, MemoryId)> {
            edges.into_iter().filter(|e| e.kind == EdgeKind::Temporal).map(|e| (e.src, e.dst)).collect()
        };
        assert_eq!(temporal(store.edges_of(a[2]).await.unwrap()), vec![(a[0], a[2])]);
        assert_eq!(temporal(store.edges_of(a[1]).await.unwrap()), vec![]);
        assert_eq!(temporal(store.edges_of(late[0]).await.unwrap()), vec![(a[0], late[0])]);
        assert_eq!(temporal(store.edges_of(late[1]).await.unwrap()), vec![]);
        let mut from_a0 = temporal(store.edges_of(a[0]).await.unwrap());
        from_a0.sort();
        assert_eq!(from_a0, vec![(a[0], a[2]), (a[0], late[0])]);
        assert_eq!(store.stats().await.unwrap().edges, 2);
        // Many at once: each id's edges, as one at a time finds them.
        let all: Vec<MemoryId> = a.iter().chain(&late).copied().collect();
        let many = store.edges_of_many(all.clone()).await.unwrap();
        assert_eq!(many.len(), all.len());
        for id in all {
            let key = |e: &atlas_domain::Edge| (e.src, e.dst, e.kind);
            let (mut one, mut batched) = (store.edges_of(id).await.unwrap(), many[&id].clone());
            one.sort_by_key(key);
            batched.sort_by_key(key);
            assert_eq!(batched, one, "edges of {id}");
        }
    });
}

pub fn episodes_carry_the_turn_they_answer<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let in_s = Scope { session: Some("s".into()), ..Scope::default() };
        let asked = NewMemory::episode("Been to Lisbon?", in_s, Some("Bo".into()), Timestamp(1), Timestamp(1));
        let ids = store
            .insert(vec![asked, episode("Yes, twice", Some("s"), 2), episode("unrelated", Some("t"), 3)], None)
            .await
            .unwrap();
        // Later and in another batch: the predecessor is read from the store.
        let later = store.insert(vec![episode("The trams!", Some("s"), 4)], None).await.unwrap();
        let context = |id| async move { store.get(id).await.unwrap().unwrap().context };
        assert_eq!(context(ids[0]).await, None, "the first turn of a session answers nothing");
        assert_eq!(context(ids[1]).await.as_deref(), Some("Bo: Been to Lisbon?"));
        assert_eq!(context(ids[2]).await, None, "another session's turn is not context");
        assert_eq!(context(later[0]).await.as_deref(), Some("Tester: Yes, twice"));
        // The reply is found by the question's words, below the question itself.
        let hits = store.search_text(vec!["lisbon".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&hits), vec![ids[0], ids[1]]);
        assert!(hits[0].score > hits[1].score);
        // The embedder is handed the context with the memory.
        let pending = store.pending_vectors(10).await.unwrap();
        let reply = pending.iter().find(|m| m.id == ids[1]).expect("the reply awaits its vector");
        assert_eq!(reply.context.as_deref(), Some("Bo: Been to Lisbon?"));
    });
}

pub fn forget_removes_everywhere<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        bind_test_model(store.as_ref()).await;
        let ids = store
            .insert(
                vec![episode("pelican migration notes", Some("s"), 1), episode("pelican beaks", Some("s"), 2)],
                None,
            )
            .await
            .unwrap();
        embed_pending(store.as_ref()).await;
        assert!(store.forget(ids[0]).await.unwrap());
        assert!(!store.forget(ids[0]).await.unwrap());
        assert_eq!(store.get(ids[0]).await.unwrap(), None);
        assert!(store.edges_of(ids[1]).await.unwrap().is_empty());
        let text = store.search_text(vec!["pelican".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&text), vec![ids[1]]);
        // The turn after it carried its text as context, and a vector embedded with it: both go,
        // and the turn waits for a vector of its own.
        assert_eq!(store.get(ids[1]).await.unwrap().unwrap().context, None);
        let gone = store.search_text(vec!["migration".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&gone), vec![], "no trace of the forgotten text is searchable");
        let pending = store.pending_vectors(10).await.unwrap();
        assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[1]]);
        assert_eq!(store.stats().await.unwrap().vectors, 0);
        embed_pending(store.as_ref()).await;
        let query = HashEmbedder::new(DIM).embed_one("pelican migration notes");
        let near = store.search_vector(query, RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&near), vec![ids[1]]);
        let stats = store.stats().await.unwrap();
        assert_eq!((stats.memories(), stats.vectors, stats.edges), (1, 1, 0));
    });
}

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
    let mut runner = TestRunner::new(Config { cases: 16, ..Config::default() });
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

pub fn vector_queue_and_nearest_first<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let ids = store
            .insert(
                vec![episode("red apples", None, 1), episode("green pears", None, 2), episode("blue whales", None, 3)],
                None,
            )
            .await
            .unwrap();
        let pending = store.pending_vectors(10).await.unwrap();
        assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
        assert_eq!(pending[0].text, "red apples");
        assert!(store.put_vectors(vec![(ids[0], vec![1.0; DIM])]).await.is_err(), "no model bound yet");
        bind_test_model(store.as_ref()).await;
        let e = HashEmbedder::new(DIM);
        store
            .put_vectors(vec![(ids[0], e.embed_one("red apples")), (ids[2], e.embed_one("blue whales"))])
            .await
            .unwrap();
        let pending = store.pending_vectors(10).await.unwrap();
        assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[1]]);
        let err = store.put_vectors(vec![(ids[1], vec![0.5; DIM + 1])]).await.unwrap_err();
        assert!(err.to_string().contains("dimensions"), "{err}");
        let hits = store.search_vector(e.embed_one("blue whales"), RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&hits), vec![ids[2], ids[0]]);
        assert!((hits[0].score - 1.0).abs() < 1e-4, "cosine similarity of identical text is 1, got {}", hits[0].score);
        assert!(hits[0].score > hits[1].score);
        store.put_vectors(vec![(MemoryId(9_999), e.embed_one("ghost"))]).await.unwrap();
        assert_eq!(store.stats().await.unwrap().vectors, 2, "vectors of unknown memories are dropped");
        assert!(store.search_vector(vec![1.0; DIM - 1], RecallFilter::default(), 10).await.is_err());
    });
}

pub fn the_mean_vector_follows_what_is_stored<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        assert_eq!(store.mean_vector().await.unwrap(), None, "no model bound");
        let ids = store
            .insert(
                vec![episode("red apples", None, 1), episode("green pears", None, 2), episode("blue whales", None, 3)],
                None,
            )
            .await
            .unwrap();
        bind_test_model(store.as_ref()).await;
        assert_eq!(store.mean_vector().await.unwrap(), None, "no vector stored yet");
        let e = HashEmbedder::new(DIM);
        let texts = ["red apples", "green pears", "blue whales"];
        store.put_vectors(ids.iter().zip(texts).map(|(id, t)| (*id, e.embed_one(t))).collect()).await.unwrap();
        let mean_of = |texts: &[&str]| -> Vec<f32> {
            let vectors: Vec<Vec<f32>> = texts.iter().map(|t| e.embed_one(t)).collect();
            (0..DIM).map(|d| vectors.iter().map(|v| v[d]).sum::<f32>() / vectors.len() as f32).collect()
        };
        // Within int8 codes' error, for stores that keep vectors as codes.
        let close = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.02);
        let mean = store.mean_vector().await.unwrap().expect("vectors are stored");
        assert!(close(&mean, &mean_of(&texts)), "{mean:?}");
        // A replaced vector and a forgotten memory move it.
        store.put_vectors(vec![(ids[0], e.embed_one("yellow bananas"))]).await.unwrap();
        let mean = store.mean_vector().await.unwrap().unwrap();
        assert!(close(&mean, &mean_of(&["yellow bananas", "green pears", "blue whales"])), "{mean:?}");
        assert!(store.forget(ids[2]).await.unwrap());
        let mean = store.mean_vector().await.unwrap().unwrap();
        assert!(close(&mean, &mean_of(&["yellow bananas", "green pears"])), "{mean:?}");
    });
}

pub fn a_long_turn_is_linked_but_not_carried_as_context<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let long = vec!["word"; atlas_domain::policy::embedding::CONTEXT_MAX_WORDS + 1].join(" ");
        let ids = store
            .insert(vec![episode(&long, Some("s"), 1), episode("Always answer in French.", Some("s"), 2)], None)
            .await
            .unwrap();
        let later = store.insert(vec![episode("Merci!", Some("s"), 3)], None).await.unwrap();
        let reply = store.get(ids[1]).await.unwrap().unwrap();
        assert_eq!(reply.context, None, "a long turn is a memory of its own, not context");
        let linked = store.edges_of(ids[1]).await.unwrap();
        assert!(
            linked.iter().any(|e| e.kind == EdgeKind::Temporal && e.src == ids[0] && e.dst == ids[1]),
            "the turns stay linked in time: {linked:?}"
        );
        let thanks = store.get(later[0]).await.unwrap().unwrap();
        assert_eq!(thanks.context.as_deref(), Some("Tester: Always answer in French."));
        // Full text finds the reply by its own words only.
        let hits = store.search_text(vec!["word".into()], RecallFilter::default(), 10).await.unwrap();
        assert_eq!(ids_of(&hits), vec![ids[0]]);
    });
}

pub fn vector_search_is_exact_under_selective_filters<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        bind_test_model(store.as_ref()).await;
        let mut batch: Vec<NewMemory> =
            (0..300).map(|i| episode(&format!("common filler text {i}"), None, i)).collect();
        for i in 0..3 {
            let mut rare = episode(&format!("rare user note {i}"), None, 1000 + i);
            rare.scope.user = Some("dana".into());
            batch.push(rare);
        }
        let ids = store.insert(batch, None).await.unwrap();
        embed_pending(store.as_ref()).await;
        let filter =
            RecallFilter { scope: Scope { user: Some("dana".into()), ..Scope::default() }, ..RecallFilter::default() };
        let query = HashEmbedder::new(DIM).embed_one("common filler text 7");
        let hits = store.search_vector(query, filter, 5).await.unwrap();
        let mut got = ids_of(&hits);
        got.sort();
        assert_eq!(got, ids[300..].to_vec(), "all three of dana's memories, though far from the query");
    });
}

pub fn model_binding_is_recorded_and_checked<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let a = EmbeddingModel { name: "model-a".into(), dimension: 8 };
        store.bind_model(a.clone()).await.unwrap();
        store.bind_model(a.clone()).await.unwrap();
        for other in [
            EmbeddingModel { name: "model-b".into(), dimension: 8 },
            EmbeddingModel { name: "model-a".into(), dimension: 4 },
        ] {
            match store.bind_model(other.clone()).await {
                Err(AtlasError::ModelMismatch { stored_model, configured_model, .. }) => {
                    assert_eq!((stored_model.as_str(), configured_model.as_str()), ("model-a", other.name.as_str()));
                }
                other => panic!("expected a model mismatch, got {other:?}"),
            }
        }
        assert_eq!(store.stats().await.unwrap().embedding_model, Some(a));
    });
}

pub fn stats_count_what_is_stored<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        let empty = store.stats().await.unwrap();
        assert_eq!((empty.memories(), empty.edges, empty.vectors, empty.pending_vectors), (0, 0, 0, 0));
        let mut fact = episode("x is y", None, 5);
        fact.body = atlas_domain::Body::Core { category: "user_profile".into() };
        store.insert(vec![episode("a", Some("s"), 1), episode("b", Some("s"), 2), fact], None).await.unwrap();
        let stats = store.stats().await.unwrap();
        assert_eq!(stats.memories_by_kind.get(&MemoryKind::Episode), Some(&2));
        assert_eq!(stats.memories_by_kind.get(&MemoryKind::Core), Some(&1));
        assert_eq!((stats.memories(), stats.edges, stats.pending_vectors), (3, 1, 3));
    });
}

pub fn concurrent_inserts_all_land<S: Store>(make: Make<S>) {
    let subject = make();
    let store = Arc::clone(&subject.store);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.insert(vec![episode(&format!("turn {i}"), Some("s"), i)], None).await })
            })
            .collect();
        let mut ids = HashSet::new();
        for t in tasks {
            ids.extend(t.await.unwrap().unwrap());
        }
        assert_eq!(ids.len(), 64);
        assert_eq!(store.stats().await.unwrap().memories(), 64);
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

pub fn rebinding_requeues_everything_for_the_new_model<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    runtime().block_on(async {
        bind_test_model(store.as_ref()).await;
        let ids =
            store.insert(vec![episode("alpha beta", None, 1), episode("gamma delta", None, 2)], None).await.unwrap();
        embed_pending(store.as_ref()).await;
        assert_eq!(store.stats().await.unwrap().vectors, 2);
        let wide = EmbeddingModel { name: "wider-model".into(), dimension: DIM * 2 };
        assert!(matches!(store.bind_model(wide.clone()).await, Err(AtlasError::ModelMismatch { .. })));
        assert_eq!(store.rebind_model(wide.clone()).await.unwrap(), 2);
        let stats = store.stats().await.unwrap();
        assert_eq!((stats.vectors, stats.pending_vectors), (0, 2));
        assert_eq!(stats.embedding_model, Some(wide.clone()));
        store.bind_model(wide).await.unwrap();
        let embedder = HashEmbedder::new(DIM * 2);
        store.put_vectors(vec![(ids[0], embedder.embed_one("alpha beta"))]).await.unwrap();
        let hits = store.search_vector(embedder.embed_one("alpha beta"), RecallFilter::default(), 5).await.unwrap();
        assert_eq!(ids_of(&hits), vec![ids[0]]);
        assert_eq!(store.pending_vectors(10).await.unwrap().len(), 1, "the rest still waits: a re-embed resumes");
    });
}

async fn export_all<S: Store>(store: &S, batch: usize) -> Vec<StoredMemory> {
    let mut all: Vec<StoredMemory> = Vec::new();
    loop {
        let after = all.last().map(|m| m.memory.id);
        let next = store.export_batch(after, batch).await.unwrap();
        if next.is_empty() {
            return all;
        }
        assert!(next.len() <= batch);
        all.extend(next);
    }
}

fn sorted_edges(mut items: Vec<StoredMemory>) -> Vec<StoredMemory> {
    for item in &mut items {
        item.edges.sort_by_key(|e| (e.src, e.dst, e.kind));
    }
    items
}

pub fn replica_copies_ids_vectors_and_edges_idempotently<S: Store>(make: Make<S>) {
    let (source, target) = (make(), make());
    runtime().block_on(async {
        let (a, b) = (source.store.as_ref(), target.store.as_ref());
        bind_test_model(a).await;
        let mut batch: Vec<NewMemory> = (0..12)
            .map(|i| episode(&format!("turn {i} about harbour lights"), Some(["s1", "s2"][i % 2]), i as i64))
            .collect();
        let mut fact = episode("the harbour closes at nine", None, 50);
        fact.body = atlas_domain::Body::Fact {
            subject: "harbour".into(),
            predicate: "closes_at".into(),
            object: "nine".into(),
            confidence: 0.8,
        };
        fact.validity.valid_until = Some(Timestamp(90));
        batch.push(fact);
        let ids = a.insert(batch, None).await.unwrap();
        a.forget(ids[3]).await.unwrap();
        embed_pending(a).await;
        let late =
            a.insert(vec![episode("late turn still waiting for a vector", Some("s1"), 100)], None).await.unwrap();

        let exported = sorted_edges(export_all(a, 4).await);
        assert_eq!(exported.len(), 13, "every memory but the forgotten one");
        assert!(exported.iter().all(|m| m.memory.id != ids[3]));
        assert!(exported.iter().all(|m| m.vector.is_some() == (m.memory.id != late[0])));
        assert!(exported.iter().all(|m| m.edges.iter().all(|e| StoredMemory::carries(m.memory.id, e))));
        let edges: usize = exported.iter().map(|m| m.edges.len()).sum();
        assert_eq!(edges as u64, a.stats().await.unwrap().edges, "each edge travels exactly once");

        bind_test_model(b).await;
        for chunk in exported.chunks(5) {
            b.restore(chunk.to_vec()).await.unwrap();
        }
        assert_eq!(sorted_edges(export_all(b, 3).await), exported);
        // A re-run (say, after an interruption) updates rather than duplicates.
        b.restore(exported[4..].to_vec()).await.unwrap();
        assert_eq!(sorted_edges(export_all(b, 100).await), exported);
        let (sa, sb) = (a.stats().await.unwrap(), b.stats().await.unwrap());
        assert_eq!(
            (sb.memories_by_kind, sb.edges, sb.vectors, sb.pending_vectors),
            (sa.memories_by_kind, sa.edges, sa.vectors, sa.pending_vectors)
        );
        assert_eq!(
            b.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect::<Vec<_>>(),
            late,
            "what waited for a vector still waits"
        );
        let words = vec!["harbour".to_string()];
        assert_eq!(
            ids_of(&b.search_text(words.clone(), RecallFilter::default(), 20).await.unwrap()).len(),
            ids_of(&a.search_text(words, RecallFilter::default(), 20).await.unwrap()).len()
        );
        let query = HashEmbedder::new(DIM).embed_one("turn 5 about harbour lights");
        // The same ranking: the same scores rank by rank, and every memory the copy ranks has
        // the score the original gives it (memories of equal score may come in any order).
        let copy = b.search_vector(query.clone(), RecallFilter::default(), 5).await.unwrap();
        let original = a.search_vector(query, RecallFilter::default(), 20).await.unwrap();
        for (rank, hit) in copy.iter().enumerate() {
            assert!((hit.score - original[rank].score).abs() < 1e-5, "rank {rank}: {copy:?} vs {original:?}");
            let same = original.iter().find(|o| o.id == hit.id).expect("a memory of the original");
            assert!((hit.score - same.score).abs() < 1e-5, "{} scores differ", hit.id);
        }
        assert_eq!(copy.len(), original.len().min(5));
        let new = b.insert(vec![episode("after the copy", Some("s1"), 200)], None).await.unwrap();
        assert!(new[0] > late[0], "ids after a restore never collide with restored ones");
    });
}

pub fn restore_refuses_vectors_of_another_dimension<S: Store>(make: Make<S>) {
    let subject = make();
    let store = subject.store.as_ref();
    runtime().block_on(async {
        bind_test_model(store).await;
        let ids = store.insert(vec![episode("kept as it was", None, 1)], None).await.unwrap();
        let before = export_all(store, 10).await;
        let mut changed = before[0].clone();
        changed.memory.text = "overwritten".into();
        let wrong = StoredMemory { vector: Some(vec![0.5; DIM + 1]), ..changed };
        assert!(store.restore(vec![wrong]).await.is_err());
        assert_eq!(export_all(store, 10).await, before, "a refused batch changes nothing");
        assert_eq!(store.get(ids[0]).await.unwrap().unwrap().text, "kept as it was");
    });
}

pub fn keyed_writes_happen_once<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let batch = vec![episode("first of two", Some("s"), 1), episode("second of two", Some("s"), 2)];
        let first = store.insert_once("import:abc".into(), batch.clone(), None).await.unwrap();
        assert!(!first.replayed);
        assert_eq!(first.ids.len(), 2);
        let again = store.insert_once("import:abc".into(), batch.clone(), None).await.unwrap();
        assert!(again.replayed, "the same key stores nothing again");
        assert_eq!((again.ids.clone(), again.recorded_at), (first.ids.clone(), first.recorded_at));
        assert_eq!(store.stats().await.unwrap().memories(), 2);
        let other = store.insert_once("import:def".into(), batch, None).await.unwrap();
        assert!(!other.replayed);
        assert!(other.ids.iter().all(|id| !first.ids.contains(id)));
        assert_eq!(store.stats().await.unwrap().memories(), 4);

        // Restores too: the receipt is written with them, a re-run is a no-op that says so.
        let mut copy = store.get(first.ids[0]).await.unwrap().unwrap();
        let start = store.reserve_ids(1).await.unwrap();
        copy.id = start;
        let item = StoredMemory { memory: copy, vector: None, edges: Vec::new(), consolidated_at: None };
        let restored = store.restore_once("restore:1".into(), vec![item.clone()]).await.unwrap();
        assert_eq!((restored.ids.clone(), restored.replayed), (vec![start], false));
        let replay = store.restore_once("restore:1".into(), vec![item]).await.unwrap();
        assert!(replay.replayed);
        assert_eq!(replay.ids, vec![start]);
        assert_eq!(store.stats().await.unwrap().memories(), 5);
    });
}

/// An import's pieces are one write: ids and temporal links as one batch would get them, all
/// or nothing, and under a key once (a replay pulls no piece).
pub fn pieces_are_one_write<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let pieces = |pieces: Vec<atlas_domain::Result<Vec<NewMemory>>>| -> Pieces { Box::new(pieces.into_iter()) };
        let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let progress: atlas_domain::ports::ProgressFn = {
            let counted = Arc::clone(&counted);
            Arc::new(move |n| counted.store(n, std::sync::atomic::Ordering::SeqCst))
        };
        let write = pieces(vec![
            Ok(vec![episode("one", Some("s"), 1), episode("two", Some("s"), 2)]),
            Ok(vec![episode("three", Some("s"), 3)]),
            Ok(Vec::new()),
            Ok(vec![episode("four", Some("t"), 4)]),
        ]);
        let first = store.insert_pieces(Some("import:pieces".into()), write, Some(progress)).await.unwrap();
        assert!(!first.replayed);
        assert_eq!(first.ids.len(), 4);
        assert!(first.ids.windows(2).all(|w| w[0] < w[1]), "ids in input order: {:?}", first.ids);
        assert_eq!(counted.load(std::sync::atomic::Ordering::SeqCst), 4, "progress counts over all pieces");
        let texts: Vec<String> = store.get_many(first.ids.clone()).await.unwrap().into_iter().map(|m| m.text).collect();
        assert_eq!(texts, ["one", "two", "three", "four"]);
        let third = first.ids[2];
        let into_third: Vec<(MemoryId, MemoryId)> = store
            .edges_of(third)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == EdgeKind::Temporal && e.dst == third)
            .map(|e| (e.src, e.dst))
            .collect();
        assert_eq!(into_third, vec![(first.ids[1], third)], "linked across pieces");
        assert_eq!(store.get(first.ids[2]).await.unwrap().unwrap().context.as_deref(), Some("Tester: two"));

        let untouched: Pieces = Box::new(std::iter::from_fn(|| panic!("a replay pulls no piece")));
        let again = store.insert_pieces(Some("import:pieces".into()), untouched, None).await.unwrap();
        assert!(again.replayed);
        assert_eq!((again.ids.clone(), again.recorded_at), (first.ids.clone(), first.recorded_at));

        let failing = pieces(vec![
            Ok(vec![episode("five", Some("s"), 5)]),
            Err(AtlasError::invalid("in.jsonl:2", "field \"text\": missing")),
        ]);
        let err = store.insert_pieces(Some("import:failing".into()), failing, None).await.unwrap_err();
        assert!(err.to_string().contains("in.jsonl:2"), "{err}");
        assert_eq!(store.stats().await.unwrap().memories(), 4, "a failed piece stores nothing of the write");
        let retried = pieces(vec![Ok(vec![episode("five", Some("s"), 5)])]);
        let retried = store.insert_pieces(Some("import:failing".into()), retried, None).await.unwrap();
        assert!(!retried.replayed, "a failed write leaves its key unused");
        let unkeyed = store.insert_pieces(None, pieces(vec![Ok(vec![episode("six", None, 6)])]), None).await.unwrap();
        assert!(!unkeyed.replayed);
        assert_eq!(store.stats().await.unwrap().memories(), 6);
    });
}

/// A restore's pieces are one restore: the copy equals the source, a failing piece restores
/// nothing, and under a key it happens once (a replay pulls no piece).
pub fn restored_pieces_are_one_restore<S: Store>(make: Make<S>) {
    let (source, copy) = (make(), make());
    runtime().block_on(async {
        let batch: Vec<NewMemory> = (0..7).map(|i| episode(&format!("turn {i}"), Some("s"), i)).collect();
        source.store.insert(batch, None).await.unwrap();
        let all = sorted_edges(export_all(source.store.as_ref(), 10).await);
        let pieces = |items: &[StoredMemory], failing: bool| -> StoredPieces {
            let mut pieces: Vec<atlas_domain::Result<Vec<StoredMemory>>> =
                items.chunks(3).map(|c| Ok(c.to_vec())).collect();
            if failing {
                pieces.push(Err(AtlasError::invalid("backup.jsonl:9", "field \"text\": missing")));
            }
            Box::new(pieces.into_iter())
        };
        let store = copy.store.as_ref();
        assert!(store.restore_pieces(Some("restore:p".into()), pieces(&all, true)).await.is_err());
        assert_eq!(store.stats().await.unwrap().memories(), 0, "a failed piece restores nothing");
        let receipt = store.restore_pieces(Some("restore:p".into()), pieces(&all, false)).await.unwrap();
        assert!(!receipt.replayed);
        assert_eq!(receipt.ids, all.iter().map(|s| s.memory.id).collect::<Vec<_>>());
        assert_eq!(sorted_edges(export_all(store, 10).await), all, "the copy is the source");
        let untouched: StoredPieces = Box::new(std::iter::from_fn(|| panic!("a replay pulls no piece")));
        let again = store.restore_pieces(Some("restore:p".into()), untouched).await.unwrap();
        assert!(again.replayed);
        assert_eq!(again.ids, receipt.ids);
    });
}

pub fn reserved_ids_are_never_taken<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let before = store.insert(vec![episode("before", None, 1)], None).await.unwrap()[0];
        let first = store.reserve_ids(10).await.unwrap();
        assert!(first > before);
        let after = store.insert(vec![episode("after", None, 2)], None).await.unwrap()[0];
        assert!(after.0 >= first.0 + 10, "an insert after a reservation of {first}..+10 took {after}");
        // The reserved ids are the caller's to restore under.
        let mut memory = store.get(before).await.unwrap().unwrap();
        memory.id = MemoryId(first.0 + 3);
        store
            .restore(vec![StoredMemory { memory, vector: None, edges: Vec::new(), consolidated_at: None }])
            .await
            .unwrap();
        assert_eq!(store.get(MemoryId(first.0 + 3)).await.unwrap().unwrap().text, "before");
        assert_eq!(store.get(after).await.unwrap().unwrap().text, "after");
        let next = store.reserve_ids(1).await.unwrap();
        assert!(next > after, "a reservation starts after every id in use");
    });
}

pub fn own_claims_on_queued_vectors_are_renewed<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        bind_test_model(store).await;
        let ids = store.insert((0..5).map(|i| episode(&format!("queued {i}"), None, i)).collect(), None).await.unwrap();
        let claimed: Vec<MemoryId> = store.pending_vectors(3).await.unwrap().iter().map(|m| m.id).collect();
        assert_eq!(claimed, ids[..3]);
        // One instance's claims never hide work from itself: asking again renews them.
        let again: Vec<MemoryId> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
        assert_eq!(again, ids);
        assert_eq!(store.queued_vectors().await.unwrap(), 5, "claimed memories still count as queued");
        embed_pending(store).await;
        assert!(store.pending_vectors(10).await.unwrap().is_empty());
        assert_eq!(store.stats().await.unwrap().pending_vectors, 0);
        assert_eq!(store.queued_vectors().await.unwrap(), 0);
    });
}

pub fn soft_deletion_hides_from_search_and_recovers<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        bind_test_model(store).await;
        let ids = store
            .insert(vec![episode("lisbon trip planned", None, 1), episode("lisbon flights booked", None, 2)], None)
            .await
            .unwrap();
        embed_pending(store).await;
        let query = HashEmbedder::new(DIM).embed_one("lisbon trip planned");
        async fn text<S: Store>(store: &S) -> Vec<MemoryId> {
            ids_of(&store.search_text(vec!["lisbon".into()], RecallFilter::default(), 10).await.unwrap())
        }
        async fn vector<S: Store>(store: &S, query: &[f32]) -> Vec<MemoryId> {
            ids_of(&store.search_vector(query.to_vec(), RecallFilter::default(), 10).await.unwrap())
        }
        assert_eq!(text(store).await.len(), 2);

        let deleted = Lifecycle { deleted_at: Some(Timestamp(50)), ..Lifecycle::default() };
        let n = store
            .update(vec![
                Update { id: ids[0], lifecycle: deleted, body: None },
                Update { id: MemoryId(i64::MAX), lifecycle: deleted, body: None },
            ])
            .await
            .unwrap();
        assert_eq!(n, 1, "unknown ids are skipped, not errors");
        assert_eq!(text(store).await, vec![ids[1]], "full text skips a soft-deleted memory");
        assert_eq!(vector(store, &query).await, vec![ids[1]], "vector search skips a soft-deleted memory");
        let kept = store.get(ids[0]).await.unwrap().expect("a soft-deleted memory is still stored");
        assert_eq!(kept.lifecycle.deleted_at, Some(Timestamp(50)));
        assert_eq!(kept.text, "lisbon trip planned");
        let stats = store.stats().await.unwrap();
        assert_eq!((stats.memories(), stats.soft_deleted), (2, 1));
        // A copy carries the deletion.
        let exported = export_all(store, 10).await;
        assert_eq!(exported[0].memory.lifecycle.deleted_at, Some(Timestamp(50)));
        // Restored (as a re-run copy writes it again), it stays soft-deleted and hidden.
        store.restore(exported.clone()).await.unwrap();
        assert_eq!(text(store).await, vec![ids[1]], "a restored soft-deleted memory stays hidden");
        assert_eq!(vector(store, &query).await, vec![ids[1]]);
        assert_eq!(store.stats().await.unwrap().soft_deleted, 1);

        store.update(vec![Update { id: ids[0], lifecycle: Lifecycle::default(), body: None }]).await.unwrap();
        assert_eq!(text(store).await.len(), 2, "recovered, it is found again");
        assert_eq!(vector(store, &query).await.len(), 2);
        assert_eq!(store.stats().await.unwrap().soft_deleted, 0);
    });
}

pub fn updates_change_lifecycle_and_body_only<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let strategy = NewMemory {
            body: Body::Strategy {
                situation: "symmetric grid".into(),
                suggestion: "reflect then duplicate".into(),
                successes: 0,
                failures: 0,
            },
            ..episode("symmetric grid: reflect then duplicate", None, 3)
        };
        let ids = store.insert(vec![episode("said once", None, 1), strategy], None).await.unwrap();
        let before = store.get(ids[1]).await.unwrap().unwrap();
        let used = Lifecycle {
            last_used: Some(Timestamp(99)),
            uses: 3,
            review: Some(atlas_domain::policy::decay::Review { interval_days: 6.0, easiness: 2.36, repetitions: 2 }),
            deleted_at: None,
        };
        let stats = Body::Strategy {
            situation: "symmetric grid".into(),
            suggestion: "reflect then duplicate".into(),
            successes: 2,
            failures: 1,
        };
        store.update(vec![Update { id: ids[1], lifecycle: used, body: Some(stats.clone()) }]).await.unwrap();
        let after = store.get(ids[1]).await.unwrap().unwrap();
        assert_eq!(after, Memory { lifecycle: used, body: stats, ..before }, "only lifecycle and body change");

        // A body of another kind, or an episode's, is refused and nothing of the batch applies.
        let refused = store
            .update(vec![
                Update { id: ids[1], lifecycle: Lifecycle::default(), body: None },
                Update { id: ids[0], lifecycle: Lifecycle::default(), body: Some(Body::episode(Some("Eve".into()))) },
            ])
            .await;
        assert!(matches!(refused, Err(AtlasError::InvalidInput { .. })), "{refused:?}");
        assert_eq!(store.get(ids[1]).await.unwrap().unwrap().lifecycle, used, "a refused batch changes nothing");
        let wrong_kind =
            store.update(vec![Update { id: ids[1], lifecycle: used, body: Some(Body::episode(None)) }]).await;
        assert!(wrong_kind.is_err());
    });
}

pub fn latest_is_newest_first_under_the_filter<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let ids = store
            .insert(
                vec![
                    episode("first", Some("s1"), 10),
                    episode("third", Some("s1"), 30),
                    episode("other session", Some("s2"), 40),
                    episode("second", Some("s1"), 20),
                    episode("same time, later id", Some("s1"), 30),
                ],
                None,
            )
            .await
            .unwrap();
        let s1 =
            RecallFilter { scope: Scope { session: Some("s1".into()), ..Scope::default() }, ..RecallFilter::default() };
        let latest = store.latest(s1.clone(), 3).await.unwrap();
        assert_eq!(latest.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[4], ids[1], ids[3]]);
        assert_eq!(store.latest(RecallFilter::default(), 1).await.unwrap()[0].id, ids[2]);
        assert!(store.latest(s1.clone(), 0).await.unwrap().is_empty());
        let deleted = Lifecycle { deleted_at: Some(Timestamp(99)), ..Lifecycle::default() };
        store.update(vec![Update { id: ids[4], lifecycle: deleted, body: None }]).await.unwrap();
        assert_eq!(store.latest(s1, 1).await.unwrap()[0].id, ids[1], "never a forgotten memory");
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

/// The same memories rank the same in every store: full text by FTS5's BM25 (the fake computes
/// it without an index), vectors by exact cosine, ties to the smaller id, scores equal.
pub fn rankings_are_the_fakes<S: Store>(make: Make<S>) {
    let subject = make();
    let store = &subject.store;
    let reference = crate::FakeStore::new();
    runtime().block_on(async {
        let (memories, queries) = plain_corpus();
        let ids = store.insert(memories.clone(), None).await.unwrap();
        let fake_ids = reference.insert(memories, None).await.unwrap();
        let position = |hits: &[atlas_domain::ports::ScoredId], ids: &[MemoryId]| -> Vec<(usize, f64)> {
            hits.iter().map(|h| (ids.iter().position(|id| *id == h.id).unwrap(), h.score)).collect()
        };
        for query in &queries {
            let got = store.search_text(query.clone(), RecallFilter::default(), 15).await.unwrap();
            let want = reference.search_text(query.clone(), RecallFilter::default(), 15).await.unwrap();
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

pub fn access_keys_are_kept_and_revoked<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        assert!(store.keys().await.unwrap().is_empty());
        let key = |id: &str, user: Option<&str>, agent: Option<&str>, role, at| AccessKey {
            id: id.into(),
            token_sha256: format!("{id}{}", "0".repeat(64 - id.len())),
            tenant: Scope { user: user.map(Into::into), agent: agent.map(Into::into), session: None },
            role,
            created_at: Timestamp(at),
            revoked_at: None,
        };
        let ann = key("aaaaaaaaaaaa", Some("ann"), None, Role::Write, 10);
        let bot = key("bbbbbbbbbbbb", Some("bob"), Some("helper"), Role::Read, 20);
        let admin = key("cccccccccccc", None, None, Role::Admin, 30);
        for k in [&bot, &ann, &admin] {
            store.add_key(k.clone()).await.unwrap();
        }
        assert_eq!(store.keys().await.unwrap(), vec![ann.clone(), bot.clone(), admin.clone()], "oldest first, whole");
        assert!(matches!(store.add_key(ann.clone()).await, Err(AtlasError::InvalidInput { .. })), "one id once");
        assert!(store.revoke_key(bot.id.clone(), Timestamp(40)).await.unwrap());
        assert!(!store.revoke_key(bot.id.clone(), Timestamp(50)).await.unwrap(), "revoked once");
        assert!(!store.revoke_key("nonexistent".into(), Timestamp(50)).await.unwrap());
        let keys = store.keys().await.unwrap();
        assert_eq!(keys[1].revoked_at, Some(Timestamp(40)), "the first revocation's time is kept");
        assert!(keys[0].is_live() && keys[2].is_live());
        assert_eq!(store.stats().await.unwrap().memories(), 0, "keys are not memories");
    });
}
