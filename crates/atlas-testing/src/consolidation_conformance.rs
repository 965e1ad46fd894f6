//! The conformance suite of the sleep cycle's port, [`Consolidator`], run through
//! [`consolidator_conformance!`](crate::consolidator_conformance) against every store that
//! implements it (SQLite, Qdrant and the fake).

use crate::conformance::Store;
use crate::{Subject, runtime};
use atlas_domain::ports::{Consolidation, Consolidator, MemoryRef, NewEdge, Revision};
use atlas_domain::{Body, EdgeKind, MemoryId, NewMemory, RecallFilter, Scope, Timestamp, Validity};

pub trait ConsolidatingStore: Store + Consolidator {}
impl<T: Store + Consolidator> ConsolidatingStore for T {}

type Make<'a, S> = &'a dyn Fn() -> Subject<S>;

#[macro_export]
macro_rules! consolidator_conformance {
    ($name:ident, $make:expr) => {
        $crate::consolidator_conformance!($name, $make, #[test]);
    };
    // `$attr`: the attributes of every case, e.g. `#[test] #[ignore = "needs a server"]`.
    ($name:ident, $make:expr, $(#[$attr:meta])+) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::consolidator_conformance!(@cases $make; [$(#[$attr])+];
                a_batch_applies_all_or_nothing, failed_episodes_back_off_then_give_up,
                a_revision_ends_validity_and_keeps_the_memory, known_finds_facts_and_entities_within_scope,
                a_revised_turn_carries_nothing_of_the_version_it_replaces,
                a_late_statement_moves_a_fact_back_and_its_source_away,
                a_restore_carries_what_the_cycle_consumed_and_its_ledger,
                closed_sessions_are_those_quiet_and_not_yet_summarised, links_stop_at_the_bound);
        }
    };
    (@cases $make:expr; $attrs:tt; $($case:ident),* $(,)?) => {
        $(
            $crate::consolidator_conformance!(@case $make; $attrs; $case);
        )*
    };
    (@case $make:expr; [$(#[$attr:meta])+]; $case:ident) => {
        $(#[$attr])+
        fn $case() {
            $crate::consolidation_conformance::$case(&$make);
        }
    };
}

fn scope(user: &str) -> Scope {
    Scope { user: Some(user.into()), agent: None, session: Some("s".into()) }
}

fn turn(text: &str, user: &str, t: i64) -> NewMemory {
    NewMemory::episode(text, scope(user), Some("Ann".into()), Timestamp(t), Timestamp(t))
}

fn fact(subject: &str, predicate: &str, object: &str, user: &str, t: i64) -> NewMemory {
    NewMemory {
        scope: Scope { session: None, ..scope(user) },
        body: Body::Fact {
            subject: subject.into(),
            predicate: predicate.into(),
            object: object.into(),
            confidence: 0.9,
        },
        ..NewMemory::episode(
            format!("{subject} {predicate} {object}"),
            Scope::default(),
            None,
            Timestamp(t),
            Timestamp(t),
        )
    }
}

fn batch(at: i64) -> Consolidation {
    Consolidation { report: serde_json::json!({"at": at}), ..Consolidation::empty(Timestamp(at)) }
}

fn edge(src: MemoryRef, dst: MemoryRef, kind: EdgeKind, t: i64) -> NewEdge {
    NewEdge { src, dst, kind, weight: 1.0, validity: Validity::from(Timestamp(t)), recorded_at: Timestamp(t) }
}

pub fn a_batch_applies_all_or_nothing<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let turns = store.insert(vec![turn("I prefer Python", "ann", 10), turn("ok", "ann", 20)], None).await.unwrap();
        let pending = |n| async move { store.unprocessed(n, 5, 1_000, Timestamp(100)).await.unwrap() };
        assert_eq!(pending(10).await.iter().map(|m| m.id).collect::<Vec<_>>(), turns);

        let mut good = batch(30);
        good.memories.push(fact("ann", "prefers", "Python", "ann", 10));
        good.edges.push(edge(MemoryRef::New(0), MemoryRef::Stored(turns[0]), EdgeKind::DerivedFrom, 30));
        good.processed = turns.clone();
        let ids = store.apply(good).await.unwrap();
        assert_eq!(ids.len(), 1);
        assert!(pending(10).await.is_empty(), "both episodes processed");
        let edges = store.edges_of(ids[0]).await.unwrap();
        assert!(edges.iter().any(|e| e.kind == EdgeKind::DerivedFrom && e.dst == turns[0] && e.src == ids[0]));
        assert_eq!(store.cycles(5).await.unwrap(), vec![serde_json::json!({"at": 30})]);

        // A batch with one bad part changes nothing at all.
        let later = store.insert(vec![turn("I write Rust now", "ann", 40)], None).await.unwrap();
        let before = store.stats().await.unwrap();
        let mut bad = batch(50);
        bad.memories.push(fact("ann", "prefers", "Rust", "ann", 40));
        bad.revisions.push(Revision {
            id: MemoryId(999_999),
            valid_from: None,
            valid_until: Some(Timestamp(40)),
            confidence: None,
        });
        bad.processed = later.clone();
        // A revision of a memory that is not there (deleted meanwhile, by another process) is
        // NotFound naming it, which a caller can act on, not a storage failure.
        let refused = store.apply(bad).await.unwrap_err();
        assert!(matches!(refused, atlas_domain::AtlasError::NotFound(MemoryId(999_999))), "{refused:?}");
        let after = store.stats().await.unwrap();
        assert_eq!((after.memories_by_kind, after.edges), (before.memories_by_kind, before.edges));
        assert_eq!(pending(10).await.iter().map(|m| m.id).collect::<Vec<_>>(), later, "still to do");
        assert_eq!(store.cycles(5).await.unwrap().len(), 1, "no ledger row for what did not happen");
    });
}

pub fn failed_episodes_back_off_then_give_up<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let id = store.insert(vec![turn("something hard to read", "ann", 1)], None).await.unwrap()[0];
        let ask = |now| async move { store.unprocessed(10, 3, 1_000, Timestamp(now)).await.unwrap().len() };
        for attempt in 1..=3i64 {
            let at = attempt * 10_000;
            let mut failed = batch(at);
            failed.failed.push((id, format!("attempt {attempt}: the model answered no JSON")));
            store.apply(failed).await.unwrap();
            assert_eq!(ask(at + 1).await, 0, "not retried right away after attempt {attempt}");
            if attempt < 3 {
                assert_eq!(ask(at + 1_000 * attempt).await, 1, "retried after backoff, attempt {attempt}");
            }
        }
        assert_eq!(ask(1_000_000_000).await, 0, "given up after the maximum of attempts");
        assert_eq!(store.unprocessed(10, 4, 1_000, Timestamp(1_000_000_000)).await.unwrap().len(), 1);
    });
}

pub fn a_revision_ends_validity_and_keeps_the_memory<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let old = store.insert(vec![fact("ann", "prefers", "python", "ann", 10)], None).await.unwrap()[0];
        let mut change = batch(40);
        change.memories.push(fact("ann", "prefers", "rust", "ann", 40));
        change.edges.push(edge(MemoryRef::New(0), MemoryRef::Stored(old), EdgeKind::Supersedes, 40));
        change.revisions.push(Revision { id: old, valid_from: None, valid_until: Some(Timestamp(40)), confidence: Some(0.45) });
        let new = store.apply(change).await.unwrap()[0];
        let memory = store.get(old).await.unwrap().unwrap();
        assert_eq!(memory.validity.valid_until, Some(Timestamp(40)));
        assert!(matches!(memory.body, Body::Fact { confidence, ref object, .. } if (confidence - 0.45).abs() < 1e-6 && object == "python"));
        let now = RecallFilter { valid_at: Some(Timestamp(50)), ..RecallFilter::default() };
        let then = RecallFilter { valid_at: Some(Timestamp(20)), ..RecallFilter::default() };
        let words = vec!["prefers".to_string()];
        let ids = |hits: Vec<atlas_domain::ports::ScoredId>| hits.into_iter().map(|h| h.id).collect::<Vec<_>>();
        assert_eq!(ids(store.search_text(words.clone(), now, 10).await.unwrap()), vec![new]);
        assert_eq!(ids(store.search_text(words, then, 10).await.unwrap()), vec![old]);
    });
}

/// A turn's new version (a store key's new value, an edited message) follows the latest turn
/// still current at its own time, never the version it replaces: its context and its full text
/// hold none of the replaced words, and a later turn follows the current version.
pub fn a_revised_turn_carries_nothing_of_the_version_it_replaces<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let old = store.insert(vec![turn("zany zebra Xerxes", "ann", 10)], None).await.unwrap()[0];
        let mut change = batch(40);
        change.memories.push(turn("new text about dogs", "ann", 40));
        change.edges.push(edge(MemoryRef::New(0), MemoryRef::Stored(old), EdgeKind::Supersedes, 40));
        change.revisions.push(Revision {
            id: old,
            valid_from: None,
            valid_until: Some(Timestamp(40)),
            confidence: None,
        });
        let new = store.apply(change).await.unwrap()[0];
        assert_eq!(store.get(new).await.unwrap().unwrap().context, None, "the old version is not its context");
        let now = RecallFilter { valid_at: Some(Timestamp(50)), ..RecallFilter::default() };
        let found = store.search_text(vec!["xerxes".to_string()], now, 10).await.unwrap();
        assert!(found.is_empty(), "the replaced words find nothing current: {found:?}");
        let next = store.insert(vec![turn("and cats", "ann", 60)], None).await.unwrap()[0];
        let context = store.get(next).await.unwrap().unwrap().context;
        assert_eq!(context.as_deref(), Some("Ann: new text about dogs"), "a later turn follows the current version");
    });
}

/// What a statement consolidated late does to the stored timeline (policy/timeline.rs): a fact
/// starts earlier, and a source moves from one fact to another, in the batch's transaction.
pub fn a_late_statement_moves_a_fact_back_and_its_source_away<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let turns = store
            .insert(vec![turn("Berlin", "ann", 20), turn("Berlin again", "ann", 30), turn("Vienna", "ann", 25)], None)
            .await
            .unwrap();
        let old = store.insert(vec![fact("ann", "lives_in", "Berlin", "ann", 20)], None).await.unwrap()[0];
        let mut first = batch(40);
        for t in &turns[..2] {
            first.edges.push(edge(MemoryRef::Stored(old), MemoryRef::Stored(*t), EdgeKind::DerivedFrom, 20));
        }
        store.apply(first).await.unwrap();

        // Vienna, said at 25, splits Berlin: Berlin until 25, Vienna 25-30, Berlin again from 30,
        // which takes the turn said at 30 from the first fact. And Berlin was said at 15 too.
        let mut late = batch(50);
        late.memories.push(fact("ann", "lives_in", "Vienna", "ann", 25));
        late.memories.push(fact("ann", "lives_in", "Berlin", "ann", 30));
        late.revisions.push(Revision {
            id: old,
            valid_from: Some(Timestamp(15)),
            valid_until: Some(Timestamp(25)),
            confidence: Some(0.5),
        });
        late.unlinked.push((old, turns[1], EdgeKind::DerivedFrom));
        late.unlinked.push((old, MemoryId(999_999), EdgeKind::Supersedes));
        late.edges.push(edge(MemoryRef::New(1), MemoryRef::Stored(turns[1]), EdgeKind::DerivedFrom, 30));
        late.edges.push(edge(MemoryRef::New(0), MemoryRef::Stored(old), EdgeKind::Supersedes, 25));
        let new = store.apply(late).await.unwrap();
        let berlin = store.get(old).await.unwrap().unwrap();
        assert_eq!(
            (berlin.validity.valid_from, berlin.validity.valid_until, berlin.event_time),
            (Timestamp(15), Some(Timestamp(25)), Timestamp(15))
        );
        let sources = |edges: Vec<atlas_domain::Edge>, of: MemoryId| {
            let mut s: Vec<MemoryId> =
                edges.into_iter().filter(|e| e.kind == EdgeKind::DerivedFrom && e.src == of).map(|e| e.dst).collect();
            s.sort();
            s
        };
        assert_eq!(sources(store.edges_of(old).await.unwrap(), old), vec![turns[0]], "the late turn moved away");
        assert_eq!(sources(store.edges_of(new[1]).await.unwrap(), new[1]), vec![turns[1]]);
        assert!(
            store.edges_of(new[0]).await.unwrap().iter().any(|e| e.kind == EdgeKind::Supersedes && e.dst == old),
            "the edges a batch adds are kept"
        );
        let filter = RecallFilter { valid_at: Some(Timestamp(16)), ..RecallFilter::default() };
        let found = store.search_text(vec!["berlin".to_string()], filter, 10).await.unwrap();
        assert_eq!(found.iter().map(|h| h.id).collect::<Vec<_>>(), vec![old], "valid from its new start");
    });
}

/// Backups and migrations carry the sleep cycle's state: which episodes it consumed (and when)
/// and its ledger, so that a restored space does not consolidate them again.
pub fn a_restore_carries_what_the_cycle_consumed_and_its_ledger<S: ConsolidatingStore>(make: Make<S>) {
    let (source, target) = (make(), make());
    runtime().block_on(async {
        let store = source.store.as_ref();
        let turns = store.insert(vec![turn("done", "ann", 10), turn("still to do", "ann", 20)], None).await.unwrap();
        let mut cycle = batch(30);
        cycle.processed = vec![turns[0]];
        store.apply(cycle).await.unwrap();
        let exported = store.export_batch(None, 10).await.unwrap();
        let consumed: Vec<_> = exported.iter().map(|s| (s.memory.id, s.consolidated_at)).collect();
        assert_eq!(consumed, vec![(turns[0], Some(Timestamp(30))), (turns[1], None)]);
        let ledger = store.export_cycles().await.unwrap();
        assert_eq!(
            ledger,
            vec![atlas_domain::ports::CycleRecord { at: Timestamp(30), report: serde_json::json!({"at": 30}) }]
        );

        let copy = target.store.as_ref();
        copy.restore(exported).await.unwrap();
        copy.restore_cycles(ledger.clone()).await.unwrap();
        copy.restore_cycles(ledger.clone()).await.unwrap();
        let pending = copy.unprocessed(10, 5, 0, Timestamp(100)).await.unwrap();
        assert_eq!(pending.iter().map(|m| m.id).collect::<Vec<_>>(), vec![turns[1]], "only what no cycle consumed");
        assert_eq!(copy.export_cycles().await.unwrap(), ledger, "each row once");
        assert_eq!(copy.cycles(5).await.unwrap(), vec![serde_json::json!({"at": 30})]);
        // A store's own rows and restored ones make one ledger, in time order.
        let mut later = batch(40);
        later.processed = vec![turns[1]];
        copy.apply(later).await.unwrap();
        copy.restore_cycles(vec![atlas_domain::ports::CycleRecord {
            at: Timestamp(35),
            report: serde_json::json!({"n": 1}),
        }])
        .await
        .unwrap();
        let at: Vec<i64> = copy.export_cycles().await.unwrap().iter().map(|c| c.at.millis()).collect();
        assert_eq!(at, vec![30, 35, 40]);
    });
}

pub fn known_finds_facts_and_entities_within_scope<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let entity = |name: &str, user: &str| NewMemory {
            body: Body::Entity { name: name.into(), entity_type: None },
            ..fact("x", "y", "z", user, 1)
        };
        let ids = store
            .insert(
                vec![
                    fact("ann", "prefers", "python", "ann", 1),
                    fact("bob", "prefers", "go", "ann", 1),
                    fact("ann", "prefers", "c", "bob", 1),
                    entity("New  York", "ann"),
                    entity("Lisbon", "ann"),
                    entity("New York", "bob"),
                ],
                None,
            )
            .await
            .unwrap();
        let found = store
            .known(vec!["ann".into()], vec!["new york".into()], Scope { user: Some("ann".into()), ..Scope::default() })
            .await
            .unwrap();
        let mut found: Vec<MemoryId> = found.into_iter().map(|m| m.id).collect();
        found.sort();
        assert_eq!(found, vec![ids[0], ids[3]]);
    });
}

pub fn closed_sessions_are_those_quiet_and_not_yet_summarised<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let in_session = |text: &str, user: &str, session: &str, t: i64| NewMemory {
            scope: Scope { session: Some(session.into()), ..scope(user) },
            ..turn(text, user, t)
        };
        let ids = store
            .insert(
                vec![
                    in_session("first of a", "ann", "a", 10),
                    in_session("second of a", "ann", "a", 20),
                    in_session("only one of b", "ann", "b", 30),
                    in_session("bo's a", "bo", "a", 5),
                    in_session("late in c", "ann", "c", 500),
                    NewMemory { scope: Scope { session: None, ..scope("ann") }, ..turn("no session", "ann", 1) },
                ],
                None,
            )
            .await
            .unwrap();
        let sessions = |cut: i64| {
            let store = store as &S;
            async move {
                store
                    .closed_sessions(Timestamp(cut), 10)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|c| {
                        (
                            c.scope.user.unwrap(),
                            c.scope.session.unwrap(),
                            c.turns.iter().map(|t| t.id).collect::<Vec<_>>(),
                            c.previous,
                        )
                    })
                    .collect::<Vec<_>>()
            }
        };
        let closed = sessions(100).await;
        assert_eq!(
            closed,
            vec![
                ("bo".into(), "a".into(), vec![ids[3]], None),
                ("ann".into(), "a".into(), vec![ids[0], ids[1]], None),
                ("ann".into(), "b".into(), vec![ids[2]], None),
            ],
            "quiet since the cut-off, per user, agent and session, oldest first; turns in order"
        );
        assert_eq!(store.closed_sessions(Timestamp(100), 1).await.unwrap().len(), 1, "at most limit");

        // A summary covering both turns of ann's "a" closes it; one covering fewer does not.
        let summary = |turns: u32| NewMemory {
            body: Body::Summary { session: "a".into(), turns },
            ..in_session("summary of a", "ann", "a", 20)
        };
        let batch = Consolidation {
            memories: vec![summary(1)],
            edges: Vec::new(),
            revisions: Vec::new(),
            unlinked: Vec::new(),
            processed: Vec::new(),
            failed: Vec::new(),
            report: serde_json::json!({}),
            at: Timestamp(200),
        };
        let partial = store.apply(batch.clone()).await.unwrap()[0];
        let closed = sessions(100).await;
        assert_eq!(closed[1].3, Some(partial), "a summary of fewer turns is the one a new summary replaces");
        store.apply(Consolidation { memories: vec![summary(2)], ..batch }).await.unwrap();
        let closed = sessions(100).await;
        assert_eq!(
            closed.iter().map(|c| (c.0.as_str(), c.1.as_str())).collect::<Vec<_>>(),
            vec![("bo", "a"), ("ann", "b")]
        );
        // A summary is not a turn.
        assert!(sessions(1000).await.iter().all(|c| !c.2.iter().any(|id| *id > ids[5])));
        // A forgotten turn counts for neither side: a third turn of ann's "a" reopens it, and
        // forgetting that turn closes it again; a session whose every turn is forgotten is gone.
        let third = store.insert(vec![in_session("third of a", "ann", "a", 25)], None).await.unwrap()[0];
        let listed = |closed: Vec<(String, String, Vec<MemoryId>, Option<MemoryId>)>| {
            closed.into_iter().map(|c| (c.0, c.1)).collect::<Vec<_>>()
        };
        let pair = |u: &str, s: &str| (u.to_owned(), s.to_owned());
        assert_eq!(listed(sessions(100).await), vec![pair("bo", "a"), pair("ann", "a"), pair("ann", "b")]);
        assert!(store.forget(third).await.unwrap());
        assert!(store.forget(ids[2]).await.unwrap());
        assert_eq!(listed(sessions(100).await), vec![pair("bo", "a")]);
        let _ = RecallFilter::default();
    });
}

pub fn links_stop_at_the_bound<S: ConsolidatingStore>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        let turns: Vec<NewMemory> = (0..6).map(|i| turn(&format!("turn {i}"), "ann", 10 + i)).collect();
        let turns = store.insert(turns, None).await.unwrap();
        // A hub named by five turns, and a memory linked to two.
        let mut cycle = batch(30);
        cycle.memories.push(fact("ann", "likes", "tea", "ann", 20));
        cycle.memories.push(fact("ann", "likes", "jazz", "ann", 20));
        for t in &turns[..5] {
            cycle.edges.push(edge(MemoryRef::Stored(*t), MemoryRef::New(0), EdgeKind::Entity, 30));
        }
        for t in &turns[4..] {
            cycle.edges.push(edge(MemoryRef::New(1), MemoryRef::Stored(*t), EdgeKind::DerivedFrom, 30));
        }
        let new = store.apply(cycle).await.unwrap();
        let (hub, pair) = (new[0], new[1]);
        let links_of = |id| async move {
            let mut links: Vec<_> =
                store.edges_of(id).await.unwrap().into_iter().filter(|e| e.kind != EdgeKind::Temporal).collect();
            links.sort_by_key(|e| (e.src, e.dst, e.kind));
            links
        };
        let ids = vec![hub, pair, turns[4], turns[5]];
        let bounded = store.links_of_many(ids.clone(), 3).await.unwrap();
        assert_eq!(bounded.len(), ids.len());
        assert_eq!(bounded[&hub].len(), 3, "{:?}", bounded[&hub]);
        let all_of_hub = links_of(hub).await;
        assert_eq!(all_of_hub.len(), 5);
        assert!(bounded[&hub].iter().all(|e| all_of_hub.contains(e)), "a bounded read holds only the hub's links");
        // At most the bound: all of them, and no temporal edge (turn 4 follows turn 3 and is
        // followed by turn 5 in its session).
        for id in [pair, turns[4], turns[5]] {
            let mut got = bounded[&id].clone();
            got.sort_by_key(|e| (e.src, e.dst, e.kind));
            assert_eq!(got, links_of(id).await, "links of {id}");
            assert!(got.iter().all(|e| e.kind != EdgeKind::Temporal));
        }
        assert_eq!(bounded[&turns[4]].len(), 2, "one entity link, one provenance link");
        let unbounded = store.links_of_many(ids.clone(), 1_000).await.unwrap();
        let mut hub_links = unbounded[&hub].clone();
        hub_links.sort_by_key(|e| (e.src, e.dst, e.kind));
        assert_eq!(hub_links, all_of_hub);
        assert!(store.links_of_many(vec![MemoryId(999_999)], 3).await.unwrap()[&MemoryId(999_999)].is_empty());
    });
}
