//! The `MemoryStore` port: records, ids, temporal links, forgetting, updates, listings, one write
//! in pieces, keyed writes, stats.

use super::*;

pub fn round_trip_of_any_record<S: Store>(make: Make<S>) {
    let rt = runtime();
    let mut runner = TestRunner::new(crate::proptest_config(24));
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
        assert_eq!(store.latest(s1.clone(), 1).await.unwrap()[0].id, ids[1], "never a forgotten memory");
        let forgotten = RecallFilter { forgotten: true, ..s1.clone() };
        let listed = store.latest(forgotten.clone(), 10).await.unwrap();
        assert_eq!(listed.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[4]], "only what was forgotten");
        assert!(listed[0].lifecycle.is_deleted());
        let elsewhere = RecallFilter { scope: Scope { session: Some("s2".into()), ..Scope::default() }, ..forgotten };
        assert!(store.latest(elsewhere, 10).await.unwrap().is_empty(), "the rest of the filter still holds");
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
