//! The conformance suite of the storage ports. Every adapter runs all of it through
//! [`store_conformance!`](crate::store_conformance), which expands to one `#[test]` per case.
//! [`RecallFilter::admits`] and the port docs are the specification; the fake is checked too.
//! The cases live in a file per port (`memories`, `text`, `vectors`, `replica`, `keys`); this file
//! holds the macro and what the cases share.

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
use proptest::test_runner::TestRunner;
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
                restored_pieces_are_one_restore, a_set_aside_memory_waits_and_others_go_on);
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

mod keys;
mod memories;
mod replica;
mod text;
mod vectors;

pub use keys::*;
pub use memories::*;
pub use replica::*;
pub use text::*;
pub use vectors::*;

pub(crate) fn episode(text: &str, session: Option<&str>, t: i64) -> NewMemory {
    let scope = Scope { session: session.map(String::from), ..Scope::default() };
    NewMemory::episode(text, scope, Some("Tester".into()), Timestamp(t), Timestamp(t))
}

pub(crate) fn ids_of(hits: &[atlas_domain::ports::ScoredId]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.id).collect()
}

pub(crate) const DIM: usize = 16;

pub(crate) async fn bind_test_model<S: Store>(store: &S) {
    store.bind_model(EmbeddingModel { name: format!("atlas-test-hash-{DIM}"), dimension: DIM }).await.unwrap();
}

pub(crate) async fn embed_pending<S: Store>(store: &S) {
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

pub(crate) async fn export_all<S: Store>(store: &S, batch: usize) -> Vec<StoredMemory> {
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
