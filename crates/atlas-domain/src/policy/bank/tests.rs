//! Property and unit tests of the bank: round trips, syncs with and without edits, errors.

use super::*;
use proptest::prelude::*;

fn t(ms: i64) -> Timestamp {
    Timestamp(1_700_000_000_000 + ms)
}

fn memory(id: i64, body: Body, text: &str, scope: Scope, from: i64, until: Option<i64>) -> Memory {
    let mut m = NewMemory {
        scope,
        text: text.to_owned(),
        event_time: t(from),
        recorded_at: t(from + 5),
        validity: Validity { valid_from: t(from), valid_until: until.map(t) },
        meta: Map::new(),
        body,
    }
    .with_id(MemoryId(id));
    if id % 3 == 0 {
        m.meta.insert("origin".into(), Value::from("tag:S"));
    }
    m
}

fn edge(src: i64, dst: i64, kind: EdgeKind, at: Timestamp) -> Edge {
    Edge { src: MemoryId(src), dst: MemoryId(dst), kind, weight: 1.0, validity: Validity::from(at), recorded_at: at }
}

/// A space: entities, facts about them (chains of versions) and about subjects without an
/// entity, episodes they came from, core entries and a strategy.
fn space(values: &[String], labels: &[String], user: Option<String>) -> Vec<StoredMemory> {
    let scope = Scope { user, agent: None, session: None };
    let mut out: Vec<StoredMemory> = Vec::new();
    fn add(out: &mut Vec<StoredMemory>, m: Memory, edges: Vec<Edge>) {
        out.push(StoredMemory { memory: m, vector: None, edges, consolidated_at: None })
    }
    add(&mut out, memory(1, Body::Episode { speaker: Some("Ann".into()) }, "hello", scope.clone(), 0, None), vec![]);
    add(
        &mut out,
        memory(
            2,
            Body::Entity { name: "Caroline".into(), entity_type: Some("person".into()) },
            "Caroline",
            scope.clone(),
            0,
            None,
        ),
        vec![],
    );
    let mut id = 10;
    for (i, value) in values.iter().enumerate() {
        let label = &labels[i % labels.len()];
        let on_entity = i % 2 == 0;
        let subject = if on_entity { "Caroline".to_owned() } else { format!("subject {}", i % 3) };
        // Every third value replaces the fact before it.
        let replaces = i % 3 == 2 && id > 10;
        let from = (i as i64) * 1000;
        let body =
            Body::Fact { subject: subject.clone(), predicate: label.clone(), object: value.clone(), confidence: 0.5 };
        let text = fact_text(&subject, label, value);
        let mut edges = vec![edge(id, 1, EdgeKind::DerivedFrom, t(from))];
        if on_entity {
            edges.push(edge(id, 2, EdgeKind::Entity, t(from)));
        }
        if replaces {
            let prev = out.iter_mut().rev().find(|s| s.memory.kind() == MemoryKind::Fact).expect("a fact before");
            prev.memory.validity.valid_until = Some(t(from));
            edges.push(edge(id, prev.memory.id.0, EdgeKind::Supersedes, t(from)));
        }
        add(&mut out, memory(id, body, &text, scope.clone(), from, None), edges);
        id += 1;
        if i % 4 == 1 {
            add(&mut out, memory(id, Body::Core { category: label.clone() }, value, scope.clone(), from, None), vec![]);
            id += 1;
        }
    }
    add(
        &mut out,
        memory(
            id,
            Body::Strategy {
                situation: "a flaky test".into(),
                suggestion: values.first().cloned().unwrap_or_default(),
                successes: 2,
                failures: 1,
            },
            "when a test is flaky, rerun it",
            scope,
            0,
            None,
        ),
        vec![],
    );
    out
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ,.]{1,20}",
        any::<String>().prop_filter("not blank", |s| !s.trim().is_empty()),
        Just("ends like an anchor ^12".to_owned()),
        Just("\"quoted\" start".to_owned()),
        Just("two\nlines".to_owned()),
        Just(" padded ".to_owned()),
    ]
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z_]{1,10}", Just("odd: label".to_owned()), Just("^caret".to_owned())]
}

fn current(items: &[StoredMemory]) -> Vec<Memory> {
    items.iter().map(|s| s.memory.clone()).filter(|m| m.validity.valid_until.is_none()).collect()
}

/// A sync of `bank` against the current memories of `items` (no replaced versions followed).
fn plan_sync(bank: &Bank, current: &[Memory], now: Timestamp) -> Result<SyncPlan> {
    let none = HashMap::new();
    let space =
        SyncSpace { current, replaced_by: &none, max_text_bytes: crate::policy::limits::DEFAULT_MAX_TEXT_BYTES };
    super::plan_sync(bank, space, now)
}

/// What the bank can carry of a space: its kept memories and the edges between them.
/// A memory with its edges as (src, dst, kind).
type Linked = (Memory, Vec<(MemoryId, MemoryId, &'static str)>);

fn kept(items: &[StoredMemory]) -> Vec<Linked> {
    let ids: HashSet<MemoryId> = items.iter().filter(|s| keeps(&s.memory)).map(|s| s.memory.id).collect();
    let mut out: Vec<_> = items
        .iter()
        .filter(|s| ids.contains(&s.memory.id))
        .map(|s| {
            let mut edges: Vec<_> = s
                .edges
                .iter()
                .filter(|e| ids.contains(&e.src) && ids.contains(&e.dst))
                .map(|e| (e.src, e.dst, e.kind.as_str()))
                .collect();
            edges.sort();
            (s.memory.clone(), edges)
        })
        .collect();
    out.sort_by_key(|(m, _)| m.id);
    out
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(256))]
    #[test]
    fn a_bank_reads_back_every_record_it_writes(
        values in proptest::collection::vec(value(), 1..12),
        labels in proptest::collection::vec(label(), 1..4),
        user in proptest::option::of("[a-z]{1,6}"),
    ) {
        let items = space(&values, &labels, user);
        let files = render(&items);
        let bank = parse(&files).unwrap();
        let read: Vec<StoredMemory> = bank.records.clone();
        prop_assert_eq!(kept(&read), kept(&items));
        // Written again from what it read, the bank is the same bytes.
        prop_assert_eq!(render(&read), files.clone());
        // The order of the input does not matter.
        let mut reversed = items.clone();
        reversed.reverse();
        prop_assert_eq!(render(&reversed), files);
    }

    #[test]
    fn a_bank_synced_unedited_changes_nothing(
        values in proptest::collection::vec(value(), 1..12),
        labels in proptest::collection::vec(label(), 1..4),
    ) {
        let items = space(&values, &labels, Some("ann".into()));
        let bank = parse(&render(&items)).unwrap();
        let plan = plan_sync(&bank, &current(&items), t(99_000)).unwrap();
        prop_assert!(plan.is_empty(), "{:?}", plan);
    }

    #[test]
    fn an_edit_synced_and_written_again_shows_the_edit(
        values in proptest::collection::vec(value(), 1..12),
        labels in proptest::collection::vec(label(), 1..4),
        edit in value(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut items = space(&values, &labels, None);
        let files = render(&items);
        let bank = parse(&files).unwrap();
        let target = &bank.stated[pick.index(bank.stated.len())];
        let id = target.id.unwrap();
        prop_assume!(target.value != edit && !edit.trim().is_empty());
        // The person's edit: the line's value replaced, its anchor kept.
        let old_line = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&target.value), id.0);
        let new_line = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&edit), id.0);
        let edited: Vec<BankFile> = files
            .iter()
            .map(|f| BankFile { path: f.path.clone(), text: f.text.replacen(&old_line, &new_line, 1) })
            .collect();
        let now = t(99_000);
        let plan = plan_sync(&parse(&edited).unwrap(), &current(&items), now).unwrap();
        prop_assert_eq!(plan.edited.len(), 1);
        prop_assert!(plan.removed.is_empty() && plan.added.is_empty());
        // Applied as the runtime applies it: the old version ends, the new one replaces it.
        let (old, new) = plan.edited[0].clone();
        let new_id = MemoryId(10_000);
        let entity = items.iter().find(|s| s.memory.id == old).unwrap().edges.iter().find(|e| e.kind == EdgeKind::Entity).map(|e| e.dst);
        for s in &mut items {
            if s.memory.id == old {
                s.memory.validity.valid_until = Some(now);
            }
        }
        let mut edges = vec![edge(new_id.0, old.0, EdgeKind::Supersedes, now)];
        if let Some(e) = entity {
            edges.push(edge(new_id.0, e.0, EdgeKind::Entity, now));
        }
        items.push(StoredMemory { memory: new.with_id(new_id), vector: None, edges, consolidated_at: None });
        let rewritten = render(&items);
        let wanted = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&edit), new_id.0);
        prop_assert!(rewritten.iter().any(|f| f.text.lines().any(|l| l == wanted)), "{wanted} not in {:?}", rewritten);
        let again = parse(&rewritten).unwrap();
        prop_assert!(plan_sync(&again, &current(&items), now).unwrap().is_empty());
    }

    #[test]
    fn slugs_never_share_a_file(a in any::<String>(), b in any::<String>()) {
        prop_assume!(a != b && a.len() < 40 && b.len() < 40);
        prop_assert_ne!(slug(&a), slug(&b));
    }

    #[test]
    fn label_and_value_read_back(l in label(), v in value()) {
        let line = format!("{}: {}", encode_label(&l), encode_value(&v));
        prop_assert_eq!(parse_label_value(&line).unwrap(), (l, v));
    }
}

#[test]
fn removed_and_added_lines_become_forgettings_and_facts() {
    let items = space(&["Vienna".into(), "hiking".into(), "tea".into()], &["lives_in".into()], None);
    let files = render(&items);
    let page = files.iter().find(|f| f.path == "everyone/entities/Caroline.md").expect("Caroline's page");
    let removed_line = page.text.lines().find(|l| l.starts_with("- lives_in: Vienna ^")).unwrap().to_owned();
    let text = page.text.replace(&format!("{removed_line}\n"), "").replace("## Now\n\n", "## Now\n\n- likes: jazz\n");
    let edited: Vec<BankFile> = files
        .iter()
        .map(|f| if f.path == page.path { BankFile { path: f.path.clone(), text: text.clone() } } else { f.clone() })
        .collect();
    let plan = plan_sync(&parse(&edited).unwrap(), &current(&items), t(50_000)).unwrap();
    assert_eq!(plan.removed, vec![MemoryId(10)]);
    assert_eq!(plan.added.len(), 1);
    let (added, entity) = &plan.added[0];
    assert_eq!(*entity, Some(MemoryId(2)));
    assert_eq!(added.text, "Caroline likes jazz");
    assert_eq!(added.meta.get("origin"), Some(&Value::from(EDITED_ORIGIN)));
}

#[test]
fn an_added_line_with_a_new_value_of_a_one_value_relation_supersedes_the_current_fact() {
    let items = space(&["Vienna".into()], &["lives_in".into()], None);
    let files = render(&items);
    let page = files.iter().find(|f| f.path == "everyone/entities/Caroline.md").expect("Caroline's page");
    let edit = |line: &str| -> Vec<BankFile> {
        let text = page.text.replace("## Now\n\n", &format!("## Now\n\n{line}\n"));
        files
            .iter()
            .map(|f| BankFile {
                path: f.path.clone(),
                text: if f.path == page.path { text.clone() } else { f.text.clone() },
            })
            .collect()
    };
    // "lives_in: Oslo" beside "lives_in: Vienna ^10": Oslo is the new version of fact 10.
    let plan = plan_sync(&parse(&edit("- lives_in: Oslo")).unwrap(), &current(&items), t(50_000)).unwrap();
    assert!(plan.added.is_empty() && plan.removed.is_empty(), "{plan:?}");
    let (old, new) = &plan.edited[0];
    assert_eq!(*old, MemoryId(10));
    assert!(matches!(&new.body, Body::Fact { predicate, object, .. } if predicate == "lives_in" && object == "Oslo"));
    // A statement in words on the page is read by the same rule.
    let plan =
        plan_sync(&parse(&edit("- fact: Caroline moved to Lisbon")).unwrap(), &current(&items), t(50_000)).unwrap();
    assert_eq!(plan.edited.len(), 1, "{plan:?}");
    assert_eq!(plan.edited[0].1.text, "Caroline moved to Lisbon");
    // A value that adds up is added beside the others.
    let plan = plan_sync(&parse(&edit("- likes: jazz")).unwrap(), &current(&items), t(50_000)).unwrap();
    assert!(plan.edited.is_empty() && plan.added.len() == 1, "{plan:?}");
}

#[test]
fn a_fact_learned_after_the_bank_was_written_is_left_alone() {
    let mut items = space(&["Vienna".into()], &["lives_in".into()], None);
    let files = render(&items);
    let later = memory(
        500,
        Body::Fact { subject: "Caroline".into(), predicate: "likes".into(), object: "jazz".into(), confidence: 1.0 },
        "Caroline likes jazz",
        Scope::default(),
        9_000,
        None,
    );
    items.push(StoredMemory { memory: later, vector: None, edges: vec![], consolidated_at: None });
    assert!(plan_sync(&parse(&files).unwrap(), &current(&items), t(50_000)).unwrap().is_empty());
}

#[test]
fn malformed_pages_name_file_line_and_what_is_wrong() {
    let items = space(&["Vienna".into()], &["lives_in".into()], None);
    let files = render(&items);
    let page = files.iter().find(|f| f.path == "everyone/entities/Caroline.md").unwrap();
    let cases = [
        (page.text.replace("## Now\n\n", "## Now\n\nno dash here\n"), ":14", "under Now"),
        (page.text.replace("## Now\n\n", "## Now\n\n- no colon ^10\n"), ":14", "label: value"),
        (page.text.replace("  - confidence: 0.5", "  - confidence: lots"), "", "confidence"),
        (page.text.replace("## History", "## Elsewhere"), "", "unknown section"),
        (page.text.replace("→ now", "until whenever"), "", "valid"),
        (page.text.replace("- lives_in: Vienna ^10", "- lives_in: Vienna ^77"), ":14", "not in this bank's History"),
    ];
    for (text, line, words) in cases {
        let broken: Vec<BankFile> =
            files
                .iter()
                .map(|f| {
                    if f.path == page.path { BankFile { path: f.path.clone(), text: text.clone() } } else { f.clone() }
                })
                .collect();
        let err =
            parse(&broken).and_then(|b| plan_sync(&b, &current(&items), t(1)).map(|_| b)).unwrap_err().to_string();
        assert!(err.contains(&format!("everyone/entities/Caroline.md{line}")), "{err}");
        assert!(err.contains(words), "{err} should say {words}");
    }
}

#[test]
fn a_line_of_a_replaced_fact_asks_for_a_write_first() {
    let mut items = space(&["Vienna".into()], &["lives_in".into()], None);
    let files = render(&items);
    items[2].memory.validity.valid_until = Some(t(10));
    let err = plan_sync(&parse(&files).unwrap(), &current(&items), t(20)).unwrap_err().to_string();
    assert!(err.contains("bank write"), "{err}");
}
