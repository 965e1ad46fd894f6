//! A memory as a Qdrant point payload and back: flat, indexable fields plus the typed body.

use atlas_domain::{AtlasError, Body, Lifecycle, Memory, MemoryId, Result, Scope, Timestamp, Validity};
use serde_json::{Map, Value};

/// Payload fields; the ones filters use carry payload indexes (see `crate::schema::MEMORY_INDEXES`).
pub mod field {
    pub const ID: &str = "id";
    pub const KIND: &str = "kind";
    pub const TEXT: &str = "text";
    pub const SPEAKER: &str = "speaker";
    pub const USER: &str = "user";
    pub const AGENT: &str = "agent";
    pub const SESSION: &str = "session";
    pub const EVENT_TIME: &str = "event_time";
    pub const RECORDED_AT: &str = "recorded_at";
    pub const VALID_FROM: &str = "valid_from";
    pub const VALID_UNTIL: &str = "valid_until";
    pub const META: &str = "meta";
    pub const BODY: &str = "body";
    pub const CONTEXT: &str = "context";
    /// Only on soft-deleted memories: searches exclude every point that has it.
    pub const DELETED_AT: &str = "deleted_at";
    /// Use and review schedule, only once something happened ([`atlas_domain::Lifecycle`]).
    pub const LIFECYCLE: &str = "lifecycle";
    /// The distinct tokens of the text, speaker and context, by stable index (indexed):
    /// counting the points that hold a token gives its document frequency for the exact BM25
    /// rescoring (`sparse.rs`). Named after the text pipeline's generation: `terms` held the
    /// stems of the Qdrant store's own pipeline, which did not fold diacritics; a collection
    /// without this field's index is upgraded at open (every point written again).
    pub const TERMS: &str = "tokens";
    /// The length in tokens of the text, speaker and context: the rescoring's document length.
    pub const TEXT_LEN: &str = "text_len";
}

/// `valid_until` of a memory still valid: a number, so that one range condition filters validity.
pub const OPEN_END: i64 = i64::MAX;

/// Point ids are memory ids: deterministic, so a re-run of a migration overwrites, never duplicates.
pub fn point_id(id: MemoryId) -> Result<u64> {
    u64::try_from(id.0).map_err(|_| AtlasError::Storage(format!("memory id {id} cannot be a Qdrant point id")))
}

pub fn to_payload(m: &Memory) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert(field::ID.into(), Value::from(m.id.0));
    p.insert(field::KIND.into(), Value::from(m.kind().as_str()));
    p.insert(field::TEXT.into(), Value::from(m.text.clone()));
    if let Some(speaker) = m.body.speaker() {
        p.insert(field::SPEAKER.into(), Value::from(speaker));
    }
    for (key, value) in
        [(field::USER, &m.scope.user), (field::AGENT, &m.scope.agent), (field::SESSION, &m.scope.session)]
    {
        if let Some(v) = value {
            p.insert(key.into(), Value::from(v.clone()));
        }
    }
    p.insert(field::EVENT_TIME.into(), Value::from(m.event_time.millis()));
    p.insert(field::RECORDED_AT.into(), Value::from(m.recorded_at.millis()));
    p.insert(field::VALID_FROM.into(), Value::from(m.validity.valid_from.millis()));
    p.insert(field::VALID_UNTIL.into(), Value::from(m.validity.valid_until.map_or(OPEN_END, Timestamp::millis)));
    p.insert(field::META.into(), Value::Object(m.meta.clone()));
    p.insert(field::BODY.into(), serde_json::to_value(&m.body).expect("a body always serialises"));
    if let Some(context) = &m.context {
        p.insert(field::CONTEXT.into(), Value::from(context.clone()));
    }
    if let Some(at) = m.lifecycle.deleted_at {
        p.insert(field::DELETED_AT.into(), Value::from(at.millis()));
    }
    let rest = Lifecycle { deleted_at: None, ..m.lifecycle };
    if !rest.is_fresh() {
        p.insert(field::LIFECYCLE.into(), serde_json::to_value(rest).expect("a lifecycle serialises"));
    }
    p
}

/// Reads back what [`to_payload`] wrote; a point written by something else is an error naming
/// the point and the field.
pub fn from_payload(point: u64, mut p: Map<String, Value>) -> Result<Memory> {
    let bad = |f: &str, what: &str| AtlasError::Storage(format!("Qdrant point {point}: payload field {f:?} {what}"));
    let int =
        |p: &Map<String, Value>, f: &str| p.get(f).and_then(Value::as_i64).ok_or_else(|| bad(f, "is not an integer"));
    let text = |p: &mut Map<String, Value>, f: &str| match p.remove(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(f, "is not a string")),
    };
    let id = MemoryId(int(&p, field::ID)?);
    let until = int(&p, field::VALID_UNTIL)?;
    let memory_text = text(&mut p, field::TEXT)?.ok_or_else(|| bad(field::TEXT, "is missing"))?;
    let scope = Scope {
        user: text(&mut p, field::USER)?,
        agent: text(&mut p, field::AGENT)?,
        session: text(&mut p, field::SESSION)?,
    };
    let meta = match p.remove(field::META) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(bad(field::META, "is not an object")),
    };
    let body: Body = serde_json::from_value(p.remove(field::BODY).ok_or_else(|| bad(field::BODY, "is missing"))?)
        .map_err(|e| bad(field::BODY, &format!("is not a memory body: {e}")))?;
    let mut lifecycle: Lifecycle = match p.remove(field::LIFECYCLE) {
        None | Some(Value::Null) => Lifecycle::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| bad(field::LIFECYCLE, &format!("is not a lifecycle: {e}")))?,
    };
    lifecycle.deleted_at = match p.get(field::DELETED_AT) {
        None | Some(Value::Null) => None,
        Some(_) => Some(Timestamp(int(&p, field::DELETED_AT)?)),
    };
    Ok(Memory {
        id,
        scope,
        text: memory_text,
        event_time: Timestamp(int(&p, field::EVENT_TIME)?),
        recorded_at: Timestamp(int(&p, field::RECORDED_AT)?),
        validity: Validity {
            valid_from: Timestamp(int(&p, field::VALID_FROM)?),
            valid_until: (until != OPEN_END).then_some(Timestamp(until)),
        },
        meta,
        body,
        context: text(&mut p, field::CONTEXT)?,
        lifecycle,
    })
}

/// A meta point's id named by `key`: a UUID made of the first 16 bytes of its SHA-256.
pub fn point_id_of(key: &str) -> qdrant_client::qdrant::PointId {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    qdrant_client::qdrant::PointId::from(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_testing::strategies::arb_new_memory;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn every_memory_survives_the_payload(m in arb_new_memory(), id in 1i64..i64::MAX) {
            let memory = m.with_id(MemoryId(id));
            let back = from_payload(id as u64, to_payload(&memory)).unwrap();
            prop_assert_eq!(back, memory);
        }

        /// What crosses the wire is JSON: the round trip must hold through its text too.
        #[test]
        fn payload_survives_json_text(m in arb_new_memory()) {
            let memory = m.with_id(MemoryId(7));
            let text = serde_json::to_string(&to_payload(&memory)).unwrap();
            let back = from_payload(7, serde_json::from_str(&text).unwrap()).unwrap();
            prop_assert_eq!(back, memory);
        }
    }

    #[test]
    fn open_validity_is_a_number_filters_can_compare() {
        let m = atlas_domain::NewMemory::episode("x", Scope::default(), None, Timestamp(5), Timestamp(5))
            .with_id(MemoryId(1));
        assert_eq!(to_payload(&m)[field::VALID_UNTIL], Value::from(OPEN_END));
    }

    #[test]
    fn foreign_points_name_point_and_field() {
        let mut p = to_payload(
            &atlas_domain::NewMemory::episode("x", Scope::default(), None, Timestamp(5), Timestamp(5))
                .with_id(MemoryId(3)),
        );
        p.insert(field::EVENT_TIME.into(), Value::from("yesterday"));
        let err = from_payload(3, p).unwrap_err().to_string();
        assert!(err.contains("point 3") && err.contains("event_time"), "{err}");
        assert!(point_id(MemoryId(-1)).is_err());
    }
}
