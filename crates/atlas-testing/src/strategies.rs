//! proptest strategies for domain records.

use atlas_domain::{Body, NewMemory, Scope, Timestamp, Validity};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Users drawn from a small set so that filters select real subsets.
pub fn arb_scope() -> impl Strategy<Value = Scope> {
    let part = || proptest::option::of(prop_oneof![Just("alice"), Just("bob"), Just("carol")].prop_map(String::from));
    (part(), part(), proptest::option::of("s[0-3]")).prop_map(|(user, agent, session)| Scope { user, agent, session })
}

pub fn arb_body() -> impl Strategy<Value = Body> {
    let word = "[a-z]{1,8}";
    prop_oneof![
        4 => proptest::option::of("[A-Z][a-z]{1,8}").prop_map(|speaker| Body::Episode { speaker }),
        1 => (word, word, word, 0u8..=100).prop_map(|(subject, predicate, object, c)| Body::Fact {
            subject, predicate, object, confidence: f32::from(c) / 100.0
        }),
        1 => (word, proptest::option::of(word)).prop_map(|(name, entity_type)| Body::Entity { name, entity_type }),
        1 => word.prop_map(|category| Body::Core { category }),
        1 => (word, 0u32..10, 0u32..10).prop_map(|(situation, successes, failures)| Body::Strategy {
            suggestion: format!("try {situation}"), situation, successes, failures
        }),
        1 => (word, 1u32..500).prop_map(|(session, turns)| Body::Summary { session, turns }),
    ]
}

prop_compose! {
    /// A valid new memory: non-blank text of words (with some unicode), sane times.
    pub fn arb_new_memory()(
        words in proptest::collection::vec("[a-z]{2,9}|[àéîøü]{1,4}|[0-9]{1,4}", 1..12),
        scope in arb_scope(),
        t in 1_600_000_000_000i64..1_800_000_000_000,
        recorded_delay in 0i64..10_000,
        until in proptest::option::of(1i64..1_000_000_000),
        dia in proptest::option::of("D[0-9]{1,2}:[0-9]{1,3}"),
        body in arb_body(),
    ) -> NewMemory {
        let mut meta = Map::new();
        if let Some(d) = dia { meta.insert("dia_id".into(), Value::from(d)); }
        NewMemory {
            scope,
            text: words.join(" "),
            event_time: Timestamp(t),
            recorded_at: Timestamp(t + recorded_delay),
            validity: Validity { valid_from: Timestamp(t), valid_until: until.map(|u| Timestamp(t + u)) },
            meta,
            body,
        }
    }
}
