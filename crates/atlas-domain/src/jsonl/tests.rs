//! The JSON Lines format's tests: every line reads back to what was written, and every bad
//! line names its field.

use super::*;
use crate::MemoryId;
use proptest::prelude::*;

const NOW: Timestamp = Timestamp(1_700_000_000_000);

#[test]
fn reads_the_locomo_harness_line() {
    let m = parse_line(
        r#"{"session": "conv-26/session_1", "speaker": "Caroline", "text": "Hey Mel!", "time": "2023-05-08T13:56:00Z", "meta": {"dia_id": "D1:1"}}"#,
        NOW,
    )
    .unwrap();
    assert_eq!(m.scope.session.as_deref(), Some("conv-26/session_1"));
    assert_eq!(m.body.speaker(), Some("Caroline"));
    assert_eq!(m.event_time, Timestamp::parse("2023-05-08T13:56:00Z").unwrap());
    assert_eq!(m.recorded_at, NOW);
    assert_eq!(m.meta["dia_id"], "D1:1");
}

#[test]
fn header_round_trips_and_plain_lines_are_not_headers() {
    let header = ExportHeader { embedding_model: Some(EmbeddingModel { name: "m".into(), dimension: 384 }) };
    assert_eq!(parse_header(&header_line(&header).to_string()).unwrap(), Some(header));
    assert_eq!(parse_header(r#"{"text": "hello"}"#).unwrap(), None);
    assert_eq!(parse_trailer(&trailer_line(3).to_string()).unwrap(), Some(3));
    assert_eq!(parse_trailer(r#"{"text": "hello"}"#).unwrap(), None);
    let cycle =
        crate::ports::CycleRecord { at: Timestamp(1_700_000_000_123), report: serde_json::json!({"facts_added": 2}) };
    assert_eq!(parse_cycle(&cycle_line(&cycle).to_string()).unwrap(), Some(cycle));
    assert_eq!(parse_cycle(r#"{"text": "hello"}"#).unwrap(), None);
    assert_eq!(parse_cycle(r#"{"atlas_cycle": {"report": {}}}"#).unwrap_err().field.as_deref(), Some("atlas_cycle.at"));
    let newer = parse_header(r#"{"atlas_export": {"format": 2}}"#).unwrap_err();
    assert_eq!(newer.field.as_deref(), Some("atlas_export.format"));
}

#[test]
fn export_only_fields_are_named_in_a_plain_file() {
    let err = parse_line(r#"{"text": "x", "edges": []}"#, NOW).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("edges"));
    assert!(err.message.contains("header"), "{err}");
    let edge = parse_stored_line(r#"{"id": 2, "text": "x", "edges": [{"src": 2, "dst": 1, "kind": "likes"}]}"#, NOW)
        .unwrap_err();
    assert_eq!(edge.field.as_deref(), Some("edges[0].kind"));
    let id = parse_stored_line(r#"{"text": "x"}"#, NOW).unwrap_err();
    assert_eq!(id.field.as_deref(), Some("id"));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (r#"{"text": 5}"#, Some("text")),
        (r#"{"speaker": "x"}"#, Some("text")),
        (r#"{"text": "x", "time": "yesterday"}"#, Some("time")),
        (r#"{"text": "x", "scope": {"team": "a"}}"#, Some("scope.team")),
        (r#"{"text": "x", "txt": "typo"}"#, Some("txt")),
        (r#"{"text": "x", "kind": "fact"}"#, Some("body")),
        (r#"{"text": "x", "kind": "fact", "body": {"subject": "a"}}"#, Some("body")),
        (r#"{"text": "x", "meta": [1]}"#, Some("meta")),
        (r#"{"text": "x""#, Some("line")),
        (r#"[1, 2]"#, Some("line")),
        (r#"{"text": "x", "text": "y"}"#, Some("text")),
        (r#"{"text": "x", "meta": {"a": 1, "a": 2}}"#, Some("meta.a")),
    ];
    for (line, field) in cases {
        let err = parse_line(line, NOW).unwrap_err();
        assert_eq!(err.field.as_deref(), field, "{line}: {err}");
    }
    let unknown_scope = parse_line(r#"{"text": "x", "scope": {"team": "a"}}"#, NOW).unwrap_err();
    assert!(unknown_scope.to_string().contains("unknown scope \"team\""), "{unknown_scope}");
}

fn arb_text() -> impl Strategy<Value = String> {
    "\\PC{1,40}"
}

fn arb_body() -> impl Strategy<Value = Body> {
    prop_oneof![
        proptest::option::of("[a-zA-Z ]{1,10}").prop_map(|speaker| Body::Episode { speaker }),
        (arb_text(), arb_text(), arb_text(), 0u8..=100).prop_map(|(subject, predicate, object, c)| Body::Fact {
            subject,
            predicate,
            object,
            confidence: f32::from(c) / 100.0
        }),
        (arb_text(), 0u32..50, 0u32..50).prop_map(|(situation, successes, failures)| {
            Body::Strategy { suggestion: situation.to_uppercase(), situation, successes, failures }
        }),
        (arb_text(), proptest::collection::vec(1i64..100, 0..3)).prop_map(|(name, ids)| {
            Body::Concept {
                code: format!("fn {name}() {{}}"),
                name,
                composed_of: ids.into_iter().map(MemoryId).collect(),
                detail: Default::default(),
            }
        }),
    ]
}

prop_compose! {
    fn arb_memory()(
        text in arb_text(),
        user in proptest::option::of("[a-z]{1,8}"),
        session in proptest::option::of("[a-z0-9/_-]{1,12}"),
        t in 0i64..4_000_000_000_000,
        span in proptest::option::of(1i64..1_000_000),
        dia in proptest::option::of("D[0-9]{1,2}:[0-9]{1,3}"),
        body in arb_body(),
        id in 1i64..1_000_000,
        deleted in proptest::option::of(0i64..4_000_000_000_000),
        used in proptest::option::of((0i64..4_000_000_000_000, 1u32..1000)),
        review in proptest::option::of((1.0f64..400.0, 1.3f64..3.0, 0u32..20)),
    ) -> Memory {
        let mut meta = Map::new();
        if let Some(d) = dia { meta.insert("dia_id".into(), Value::from(d)); }
        Memory {
            id: MemoryId(id),
            scope: Scope { user, agent: None, session },
            text,
            event_time: Timestamp(t),
            recorded_at: Timestamp(t + 5),
            validity: Validity { valid_from: Timestamp(t), valid_until: span.map(|s| Timestamp(t + s)) },
            meta,
            body,
            context: None,
            lifecycle: crate::Lifecycle {
                deleted_at: deleted.map(Timestamp),
                last_used: used.map(|(t, _)| Timestamp(t)),
                uses: used.map_or(0, |(_, n)| n),
                review: review.map(|(interval_days, easiness, repetitions)| crate::policy::decay::Review { interval_days, easiness, repetitions }),
            },
        }
    }
}

#[test]
fn trajectory_lines_name_what_is_wrong() {
    let good = r#"{"id": 7, "task": "mirror the grid", "steps": ["flip(g)", "stack(g, g)"], "success": true, "tags": ["grid"]}"#;
    let t = parse_trajectory_line(good, NOW).unwrap();
    assert_eq!((t.id.as_str(), t.steps.len(), t.success, t.time), ("7", 2, true, NOW));
    for (line, field) in [
        (r#"{"task": "x", "steps": [], "success": true}"#, "id"),
        (r#"{"id": "a", "task": " ", "steps": [], "success": true}"#, "task"),
        (r#"{"id": "a", "task": "x", "steps": ["ok", 3], "success": true}"#, "steps[1]"),
        (r#"{"id": "a", "task": "x", "steps": [], "success": "yes"}"#, "success"),
        (r#"{"id": "a", "task": "x", "steps": [], "success": true, "score": 1}"#, "score"),
        (r#"{"id": "a", "task": "x", "steps": [], "success": true, "time": "noon"}"#, "time"),
    ] {
        assert_eq!(parse_trajectory_line(line, NOW).unwrap_err().field.as_deref(), Some(field), "{line}");
    }
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(256))]
    #[test]
    fn export_then_import_is_identity(m in arb_memory()) {
        let line = to_line(&m).to_string();
        prop_assert_eq!(parse_line(&line, NOW).unwrap(), m.to_new());
    }

    #[test]
    fn parse_never_panics(line in ".{0,200}") {
        let _ = parse_trajectory_line(&line, NOW);
        let _ = parse_line(&line, NOW);
        let _ = parse_stored_line(&line, NOW);
        let _ = parse_header(&line);
    }

    #[test]
    fn full_export_line_round_trips(
        m in arb_memory(),
        context in proptest::option::of(arb_text()),
        vector in proptest::option::of(proptest::collection::vec(-1.0f32..1.0, 1..8)),
        others in proptest::collection::vec((1i64..1_000_000, 0usize..5, 0i64..1_000_000, proptest::option::of(1i64..9_999), 0u8..=100), 0..4),
        consolidated_at in proptest::option::of(0i64..4_000_000_000_000),
    ) {
        let edges = others.into_iter().map(|(other, kind, t, span, w)| Edge {
            src: m.id,
            dst: MemoryId(other.min(m.id.0)),
            kind: EdgeKind::ALL[kind],
            weight: f32::from(w) / 100.0,
            validity: Validity { valid_from: Timestamp(t), valid_until: span.map(|s| Timestamp(t + s)) },
            recorded_at: Timestamp(t + 1),
        }).collect();
        let consolidated_at = consolidated_at.map(Timestamp);
        let item = StoredMemory { memory: Memory { context, ..m }, vector, edges, consolidated_at };
        let line = stored_to_line(&item, true).to_string();
        prop_assert_eq!(parse_stored_line(&line, NOW).unwrap(), item.clone());
        let without = StoredMemory { vector: None, ..item.clone() };
        prop_assert_eq!(parse_stored_line(&stored_to_line(&item, false).to_string(), NOW).unwrap(), without);
    }
}
