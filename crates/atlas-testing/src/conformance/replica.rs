//! The `Replica` port: export and restore with ids, vectors and edges, in pieces; reserved ids.

use super::*;

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
