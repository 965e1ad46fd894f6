//! The `VectorIndex` port: the queue of memories awaiting a vector and its claims, nearest first,
//! exact under selective filters, the mean vector, model binding and rebinding.

use super::*;

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

/// A memory set aside (its text refused, its vector unusable) is not handed out again until its
/// backoff passes, keeps why, and is counted; the others are handed out as before; its vector
/// stored, or a re-embed, takes it back.
pub fn a_set_aside_memory_waits_and_others_go_on<S: Store>(make: Make<S>) {
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
        bind_test_model(store.as_ref()).await;
        assert_eq!(store.set_aside_vectors(10).await.unwrap(), (0, Vec::new()));
        let later = Timestamp(now_ms() + 3_600_000);
        store.set_aside(vec![(ids[0], "refused: content policy".into())], later).await.unwrap();
        let pending: Vec<MemoryId> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
        assert_eq!(pending, vec![ids[1], ids[2]], "the set-aside memory is not handed out");
        assert_eq!(store.queued_vectors().await.unwrap(), 3, "it is still queued");
        assert_eq!(store.set_aside_vectors(10).await.unwrap(), (1, vec![(ids[0], "refused: content policy".into())]));
        // One whose backoff has passed is handed out again (and still says why it failed).
        store.set_aside(vec![(ids[1], "a vector of NaN".into())], Timestamp(now_ms() - 1)).await.unwrap();
        let pending: Vec<MemoryId> = store.pending_vectors(10).await.unwrap().iter().map(|m| m.id).collect();
        assert!(pending.contains(&ids[1]) && !pending.contains(&ids[0]), "{pending:?}");
        assert_eq!(store.set_aside_vectors(1).await.unwrap().0, 2);
        let e = HashEmbedder::new(DIM);
        store.put_vectors(vec![(ids[1], e.embed_one("green pears"))]).await.unwrap();
        assert_eq!(store.set_aside_vectors(10).await.unwrap().0, 1, "a stored vector ends the failure");
        store.rebind_model(EmbeddingModel { name: "another".into(), dimension: DIM }).await.unwrap();
        assert_eq!(store.set_aside_vectors(10).await.unwrap(), (0, Vec::new()), "a re-embed tries it again");
        let pending = store.pending_vectors(10).await.unwrap();
        assert_eq!(pending.len(), 3, "every memory is handed out after a re-embed");
    });
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
