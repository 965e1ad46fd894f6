//! Checks a new memory against the configured limits before anything is written: every door
//! (HTTP, MCP, the CLI, Python, imports, the bank) stores through [`validate`], so that one set
//! of caps bounds every string a memory carries.

use crate::{AtlasError, Body, NewMemory, Result};

/// The default cap on one memory's text: 1 MiB.
pub const DEFAULT_MAX_TEXT_BYTES: usize = 1 << 20;

/// The cap on a name, in characters: scope ids (user, agent, session), a speaker, an entity's
/// name and type, a fact's subject and predicate, a core category, a concept's name, a tag,
/// and each key of `meta`.
pub const MAX_NAME_CHARS: usize = 256;

/// The cap on a synced document's path, in characters.
pub const MAX_PATH_CHARS: usize = 4096;

/// The cap on a memory's `meta` object, in bytes of its JSON.
pub const MAX_META_BYTES: usize = 64 * 1024;

/// The cap on how deeply `meta` nests objects and arrays (the object itself is level 1): deep
/// enough for any record a person or a framework keeps, and inside what every reader of the
/// stores takes, so that what is stored can always be read back: serde_json stops at 128
/// levels, and Qdrant's payloads travel as protobuf, whose decoder stops at 100 message levels,
/// three to a JSON level (about 33). A value stored deeper once made every later read of its
/// space fail.
pub const MAX_META_DEPTH: usize = 32;

/// How deeply `value` nests objects and arrays (a scalar is 0), counted without recursion and
/// no further than `cap + 1`: a hostile value cannot exhaust the stack or the time.
pub fn json_depth(value: &serde_json::Value, cap: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Object(m) => Box::new(m.values()),
            serde_json::Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        deepest = deepest.max(level);
        if level > cap {
            return deepest;
        }
        stack.extend(children.map(|c| (c, level + 1)));
    }
    deepest
}

/// A name (see [`MAX_NAME_CHARS`]) within its cap; `field` names it in the error.
pub fn check_name(value: &str, field: &str, location: &str) -> Result<()> {
    check_chars(value, MAX_NAME_CHARS, field, location)
}

/// A scope id that is given (user, agent, session), stored or looked up: never blank (a stored
/// one would be a scope no query can name, a filter on one matches nothing by mistake), and a
/// name within its cap. `field` names it in the error.
pub fn check_scope_id(value: &str, field: &str, location: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(AtlasError::invalid(location, format!("field \"{field}\": empty")));
    }
    check_name(value, field, location)
}

fn check_chars(value: &str, cap: usize, field: &str, location: &str) -> Result<()> {
    // Bytes bound characters from above: only a long value is counted.
    if value.len() > cap && value.chars().count() > cap {
        return Err(AtlasError::invalid(
            location,
            format!("field \"{field}\": {} characters exceeds the limit of {cap}", value.chars().count()),
        ));
    }
    Ok(())
}

fn check_bytes(value: &str, cap: usize, field: &str, location: &str) -> Result<()> {
    if value.len() > cap {
        return Err(AtlasError::invalid(
            location,
            format!("field \"{field}\": {} bytes exceeds the limit of {cap} bytes (max_text_bytes)", value.len()),
        ));
    }
    Ok(())
}

/// Every string of a memory besides its text within its cap: names, `meta`, and the body's
/// longer fields (at most `max_text_bytes` each, like the text).
fn check_strings(memory: &NewMemory, max_text_bytes: usize, location: &str) -> Result<()> {
    let scope = &memory.scope;
    for (field, value) in
        [("scope.user", &scope.user), ("scope.agent", &scope.agent), ("scope.session", &scope.session)]
    {
        if let Some(value) = value {
            check_scope_id(value, field, location)?;
        }
    }
    for key in memory.meta.keys() {
        check_name(key, "meta", location)?;
    }
    if !memory.meta.is_empty() {
        // Depth first: a value nested deeply enough must not reach the serializer's recursion.
        let depth = 1 + memory.meta.values().map(|v| json_depth(v, MAX_META_DEPTH)).max().unwrap_or(0);
        if depth > MAX_META_DEPTH {
            return Err(AtlasError::invalid(
                location,
                format!(
                    "field \"meta\": nested more than {MAX_META_DEPTH} levels deep (objects and arrays inside one another)"
                ),
            ));
        }
        let bytes = serde_json::to_vec(&memory.meta).map_or(0, |v| v.len());
        if bytes > MAX_META_BYTES {
            return Err(AtlasError::invalid(
                location,
                format!("field \"meta\": {bytes} bytes of JSON exceeds the limit of {MAX_META_BYTES}"),
            ));
        }
    }
    let name = |value: &str, field: &str| check_name(value, field, location);
    let long = |value: &str, field: &str| check_bytes(value, max_text_bytes, field, location);
    match &memory.body {
        Body::Episode { speaker } => speaker.as_deref().map_or(Ok(()), |s| name(s, "speaker")),
        Body::Fact { subject, predicate, object, .. } => {
            name(subject, "body.subject")?;
            name(predicate, "body.predicate")?;
            long(object, "body.object")
        }
        Body::Entity { name: entity, entity_type } => {
            name(entity, "body.name")?;
            entity_type.as_deref().map_or(Ok(()), |t| name(t, "body.entity_type"))
        }
        Body::Core { category } => name(category, "body.category"),
        Body::Experience { task, feedback, trajectory, steps, output, tags, merged, .. } => {
            long(task, "body.task")?;
            long(output, "body.output")?;
            for (field, value) in [("body.feedback", feedback), ("body.trajectory", trajectory)] {
                value.as_deref().map_or(Ok(()), |v| long(v, field))?;
            }
            steps.iter().try_for_each(|s| long(s, "body.steps"))?;
            merged.iter().try_for_each(|s| long(s, "body.merged"))?;
            tags.iter().try_for_each(|t| name(t, "body.tags"))
        }
        Body::Concept { name: concept, code, detail, .. } => {
            name(concept, "body.name")?;
            long(code, "body.code")?;
            long(&detail.description, "body.detail.description")?;
            detail.params.iter().chain(&detail.examples).try_for_each(|s| long(s, "body.detail"))
        }
        Body::Strategy { situation, suggestion, .. } => {
            long(situation, "body.situation")?;
            long(suggestion, "body.suggestion")
        }
        Body::Summary { session, .. } => name(session, "body.session"),
        Body::Doc { path, heading, .. } => {
            check_chars(path, MAX_PATH_CHARS, "body.path", location)?;
            long(heading, "body.heading")
        }
    }
}

/// Validates what every store needs to hold: non-blank text within `max_text_bytes`, a valid
/// interval, and a body consistent with its kind. `location` prefixes the error (e.g.
/// `episodes.jsonl:12`).
pub fn validate(memory: &NewMemory, max_text_bytes: usize, location: &str) -> Result<()> {
    if memory.text.trim().is_empty() {
        return Err(AtlasError::invalid(location, "field \"text\": must not be empty"));
    }
    if memory.text.len() > max_text_bytes {
        return Err(AtlasError::invalid(
            location,
            format!(
                "field \"text\": {} bytes exceeds the limit of {} bytes (max_text_bytes)",
                memory.text.len(),
                max_text_bytes
            ),
        ));
    }
    if memory.text.contains('\0') {
        return Err(AtlasError::invalid(location, "field \"text\": contains a NUL character"));
    }
    check_strings(memory, max_text_bytes, location)?;
    if let Some(until) = memory.validity.valid_until
        && until <= memory.validity.valid_from
    {
        return Err(AtlasError::invalid(
            location,
            format!("field \"valid_until\": {until} is not after valid_from {}", memory.validity.valid_from),
        ));
    }
    if let crate::Body::Fact { confidence, .. } = memory.body
        && !(0.0..=1.0).contains(&confidence)
    {
        return Err(AtlasError::invalid(
            location,
            format!("field \"body.confidence\": {confidence} is outside [0, 1]"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Scope, Timestamp};

    fn episode(text: &str) -> NewMemory {
        NewMemory::episode(text, Scope::default(), None, Timestamp(0), Timestamp(0))
    }

    #[test]
    fn rejects_blank_oversized_and_nul_text() {
        assert!(validate(&episode("hi"), 10, "x").is_ok());
        let blank = validate(&episode("  \n"), 10, "f.jsonl:3").unwrap_err().to_string();
        assert!(blank.starts_with("f.jsonl:3: field \"text\""), "{blank}");
        let big = validate(&episode(&"x".repeat(11)), 10, "x").unwrap_err().to_string();
        assert!(big.contains("11 bytes exceeds the limit of 10"), "{big}");
        assert!(validate(&episode("a\0b"), 10, "x").is_err());
    }

    /// `meta` may nest up to its cap and no deeper; the error names the field, and a value far
    /// past any reader's recursion is judged without recursing.
    #[test]
    fn caps_how_deeply_meta_nests() {
        let nested = |levels: usize| {
            // Built by moving, not by `json!` (which would serialize the inner value again).
            let mut v = serde_json::Value::from("leaf");
            for i in 0..levels {
                v = if i % 2 == 0 {
                    serde_json::Value::Object(serde_json::Map::from_iter([("x".to_owned(), v)]))
                } else {
                    serde_json::Value::Array(vec![v])
                };
            }
            v
        };
        let with = |value: serde_json::Value| {
            let mut m = episode("hi");
            m.meta.insert("deep".into(), value);
            validate(&m, 1 << 20, "remember")
        };
        assert!(with(nested(MAX_META_DEPTH - 1)).is_ok());
        let refused = with(nested(MAX_META_DEPTH)).unwrap_err().to_string();
        assert!(refused.starts_with("remember: field \"meta\": nested more than 32"), "{refused}");
        let mut deep = nested(100_000);
        assert_eq!(json_depth(&deep, 10), 11);
        // Dropped level by level: a value this deep would overflow the stack of a recursive drop.
        while let Some(inner) = match &mut deep {
            serde_json::Value::Object(m) => m.remove("x"),
            serde_json::Value::Array(a) => a.pop(),
            _ => None,
        } {
            deep = inner;
        }
    }

    proptest::proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn a_name_passes_exactly_when_within_its_cap(name in "\\PC{0,300}") {
            let passes = check_name(&name, "speaker", "x").is_ok();
            proptest::prop_assert_eq!(passes, name.chars().count() <= MAX_NAME_CHARS);
        }
    }

    /// Every name is capped in characters (a long name of multi-byte letters within the cap
    /// passes), `meta` in bytes of JSON, and the error names the field.
    #[test]
    fn caps_every_name_and_meta() {
        let named = |field: &str, e: AtlasError| {
            let shown = e.to_string();
            assert!(shown.starts_with(&format!("remember: field \"{field}\"")), "{shown}");
        };
        let long = "x".repeat(MAX_NAME_CHARS + 1);
        let mut m = episode("hi");
        m.body = Body::episode(Some(long.clone()));
        named("speaker", validate(&m, 1 << 20, "remember").unwrap_err());
        m.body = Body::episode(Some("é".repeat(MAX_NAME_CHARS)));
        assert!(validate(&m, 1 << 20, "remember").is_ok(), "256 characters of two bytes each");
        let mut m = episode("hi");
        m.scope.session = Some(long.clone());
        named("scope.session", validate(&m, 1 << 20, "remember").unwrap_err());
        let mut m = episode("hi");
        m.meta.insert(long.clone(), serde_json::Value::Null);
        named("meta", validate(&m, 1 << 20, "remember").unwrap_err());
        let mut m = episode("hi");
        m.meta.insert("k".into(), serde_json::Value::from("v".repeat(MAX_META_BYTES)));
        named("meta", validate(&m, 1 << 20, "remember").unwrap_err());
        let mut m = episode("hi");
        m.body = Body::Entity { name: long, entity_type: None };
        named("body.name", validate(&m, 1 << 20, "remember").unwrap_err());
    }
}
