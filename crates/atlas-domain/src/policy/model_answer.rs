//! What a model hands back is untrusted input, checked here before anything is made of it: an
//! answer read as JSON and held to the JSON schema it was asked for, and a vector held to its
//! space (finite, of the space's dimension, of non-zero length, then scaled to unit length in
//! f64). Every model adapter and the sleep cycle go through these checks, so that a model's
//! output meets the same bounds as an import line: a constrained endpoint may ignore its schema,
//! a small model may run on until its tokens are spent, and a broken model file may give NaN.
//!
//! The schema checks are the subset of JSON Schema that ATLAS's own schemas use: `type` (one
//! or a list), `enum`, `required`, `properties`, `additionalProperties: false`, `items`,
//! `minItems`/`maxItems`, `minLength`/`maxLength` (in characters, as JSON Schema counts them),
//! `minimum`/`maximum`. `pattern` is left to the caller (the domain has no regex engine; the one
//! schema that has a pattern checks its answer's characters itself).

use serde_json::Value;

/// The most bytes of an answer that is read as JSON, whatever its schema allows.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// The answer `text` (fenced in a markdown code block or not) as JSON that meets `schema`;
/// otherwise the first departure, named by its path (`facts[3].subject: 300 characters, more
/// than the schema's 60`). A departure anywhere fails the whole answer, so that a
/// half-understood reply never becomes memory.
pub fn read_answer(text: &str, schema: &Value) -> Result<Value, String> {
    if text.len() > MAX_ANSWER_BYTES {
        return Err(format!("the answer is {} bytes, more than the {MAX_ANSWER_BYTES} read", text.len()));
    }
    let trimmed = text.trim().trim_start_matches("```json").trim_start_matches("```").trim_end_matches("```");
    let value: Value =
        serde_json::from_str(trimmed.trim()).map_err(|e| format!("the model's answer is not JSON ({e})"))?;
    conforms(&value, schema, "answer")?;
    Ok(value)
}

/// Whether `value` meets `schema` (the subset in the module's header); the error names the path
/// of the first departure. Iterative: an answer nested as deeply as serde_json reads (128
/// levels) never deepens the stack here.
pub fn conforms(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let mut pending: Vec<(&Value, &Value, String)> = vec![(value, schema, path.to_owned())];
    while let Some((value, schema, path)) = pending.pop() {
        check_one(value, schema, &path)?;
        match value {
            Value::Object(map) => {
                let properties = schema.get("properties").and_then(Value::as_object);
                for (key, item) in map {
                    if let Some(inner) = properties.and_then(|p| p.get(key)) {
                        pending.push((item, inner, format!("{path}.{key}")));
                    }
                }
            }
            Value::Array(items) => {
                if let Some(inner) = schema.get("items") {
                    for (i, item) in items.iter().enumerate().rev() {
                        pending.push((item, inner, format!("{path}[{i}]")));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    let actual = type_name(value);
    // An integer is a number. (A number written `2.0` is not taken as an integer: readers of an
    // answer take integers as integers.)
    actual == wanted || (wanted == "number" && actual == "integer")
}

fn bound(schema: &Value, key: &str) -> Option<u64> {
    schema.get(key).and_then(Value::as_u64)
}

/// The checks of one schema level on one value (its children are queued by [`conforms`]).
fn check_one(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    match schema.get("type") {
        Some(Value::String(wanted)) if !has_type(value, wanted) => {
            return Err(format!("{path}: {}, not {wanted}", type_name(value)));
        }
        Some(Value::Array(wanted)) if !wanted.iter().filter_map(Value::as_str).any(|w| has_type(value, w)) => {
            return Err(format!("{path}: {}, not one of the schema's types", type_name(value)));
        }
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!("{path}: {}, not one of {}", short(value), shown.join(", ")));
    }
    match value {
        Value::String(s) => {
            let chars = || s.chars().count();
            if let Some(max) = bound(schema, "maxLength")
                && s.len() as u64 > max
                && chars() as u64 > max
            {
                return Err(format!("{path}: {} characters, more than the schema's {max}", chars()));
            }
            if let Some(min) = bound(schema, "minLength")
                && (chars() as u64) < min
            {
                return Err(format!("{path}: {} characters, fewer than the schema's {min}", chars()));
            }
        }
        Value::Array(items) => {
            if let Some(max) = bound(schema, "maxItems")
                && items.len() as u64 > max
            {
                return Err(format!("{path}: {} items, more than the schema's {max}", items.len()));
            }
            if let Some(min) = bound(schema, "minItems")
                && (items.len() as u64) < min
            {
                return Err(format!("{path}: {} items, fewer than the schema's {min}", items.len()));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                return Err(format!("{path}: {n}, less than the schema's minimum {min}"));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                return Err(format!("{path}: {n}, more than the schema's maximum {max}"));
            }
        }
        Value::Object(map) => {
            for key in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
            {
                if !map.contains_key(key) {
                    return Err(format!("{path}.{key}: missing"));
                }
            }
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                let known = schema.get("properties").and_then(Value::as_object);
                if let Some(key) = map.keys().find(|k| !known.is_some_and(|p| p.contains_key(*k))) {
                    return Err(format!("{path}.{}: not a field of the schema", short(&Value::from(key.as_str()))));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A value as an error shows it: at most 60 characters.
fn short(value: &Value) -> String {
    let shown = value.to_string();
    match shown.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &shown[..at]),
        None => shown,
    }
}

/// The most bytes an answer that meets `schema` can take as JSON text (every character escaped
/// as `\uXXXX`, the widest form), `None` when the schema leaves some part unbounded (a string
/// without `maxLength`, an array without `maxItems`). An adapter reads no more of a model's
/// answer than this allows, with room for its wire's envelope.
pub fn answer_bytes(schema: &Value) -> Option<u64> {
    const NUMBER: u64 = 32;
    let allowed = schema.get("enum").and_then(Value::as_array);
    if let Some(allowed) = allowed {
        return Some(allowed.iter().map(|v| v.to_string().len() as u64).max().unwrap_or(4));
    }
    let kinds: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    let mut widest = 0u64;
    for kind in kinds {
        let bytes = match kind {
            "null" | "boolean" => 5,
            "integer" | "number" => NUMBER,
            "string" => bound(schema, "maxLength")?.saturating_mul(6).saturating_add(2),
            "array" => {
                let item = answer_bytes(schema.get("items")?)?;
                bound(schema, "maxItems")?.saturating_mul(item.saturating_add(1)).saturating_add(2)
            }
            "object" => {
                let properties = schema.get("properties").and_then(Value::as_object)?;
                let mut sum = 2u64;
                for (key, inner) in properties {
                    sum = sum.saturating_add(key.len() as u64 * 6 + 4).saturating_add(answer_bytes(inner)?);
                }
                sum
            }
            _ => return None,
        };
        widest = widest.max(bytes);
    }
    Some(widest)
}

/// A vector from any embedder, checked for its space: every component finite, `dimension`
/// components when the space has one, a direction (non-zero length); then scaled to unit length.
/// The length is computed in f64, so that components near f32's limits (1e30, 1e-30) are
/// measured rightly instead of overflowing or vanishing.
pub fn unit_vector(mut vector: Vec<f32>, dimension: Option<usize>) -> Result<Vec<f32>, String> {
    if let Some(d) = dimension
        && vector.len() != d
    {
        return Err(format!("a vector of {} numbers; the space's model has {d}", vector.len()));
    }
    if vector.is_empty() {
        return Err("an empty vector".into());
    }
    if let Some(i) = vector.iter().position(|x| !x.is_finite()) {
        return Err(format!("component {i} of the vector is {}, not a finite number", vector[i]));
    }
    let norm = vector.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return Err(format!("the vector has no direction (its length is {norm})"));
    }
    for x in &mut vector {
        *x = (f64::from(*x) / norm) as f32;
    }
    Ok(vector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn facts_schema() -> Value {
        json!({
            "type": "object", "required": ["facts"],
            "properties": {"facts": {"type": "array", "maxItems": 2, "items": {
                "type": "object", "required": ["turn", "subject"],
                "properties": {
                    "turn": {"type": "integer", "minimum": 1, "maximum": 4},
                    "subject": {"type": "string", "minLength": 1, "maxLength": 10},
                    "verdict": {"type": "string", "enum": ["same", "both"]}
                }
            }}}
        })
    }

    #[test]
    fn an_answer_within_its_schema_is_read_and_every_departure_is_named() {
        let schema = facts_schema();
        let ok = read_answer("```json\n{\"facts\": [{\"turn\": 2, \"subject\": \"Ann\"}]}\n```", &schema).unwrap();
        assert_eq!(ok["facts"][0]["subject"], "Ann");
        let refused = |text: &str| read_answer(text, &schema).unwrap_err();
        assert!(
            refused("{\"facts\": [{\"turn\": 2, \"subject\": \"an eleven c\"}]}")
                .starts_with("answer.facts[0].subject: 11 characters, more than the schema's 10")
        );
        let three = "{\"facts\": [{\"turn\": 1, \"subject\": \"a\"}, {\"turn\": 1, \"subject\": \"b\"}, {\"turn\": 1, \"subject\": \"c\"}]}";
        assert_eq!(refused(three), "answer.facts: 3 items, more than the schema's 2");
        assert_eq!(
            refused("{\"facts\": [{\"turn\": 5, \"subject\": \"a\"}]}"),
            "answer.facts[0].turn: 5, more than the schema's maximum 4"
        );
        assert_eq!(
            refused("{\"facts\": [{\"turn\": 1.5, \"subject\": \"a\"}]}"),
            "answer.facts[0].turn: number, not integer"
        );
        assert_eq!(refused("{\"facts\": [{\"subject\": \"a\"}]}"), "answer.facts[0].turn: missing");
        assert_eq!(
            refused("{\"facts\": [{\"turn\": 1, \"subject\": \"\"}]}"),
            "answer.facts[0].subject: 0 characters, fewer than the schema's 1"
        );
        assert!(
            refused("{\"facts\": [{\"turn\": 1, \"subject\": \"a\", \"verdict\": \"no\"}]}")
                .contains("not one of \"same\", \"both\"")
        );
        assert!(refused("{\"facts\": {}}").starts_with("answer.facts: object, not array"));
        assert!(refused("nothing").contains("not JSON"));
        // Characters, not bytes: ten two-byte letters are within ten.
        assert!(
            read_answer(&format!("{{\"facts\": [{{\"turn\": 1, \"subject\": \"{}\"}}]}}", "é".repeat(10)), &schema)
                .is_ok()
        );
    }

    #[test]
    fn unknown_fields_are_refused_only_where_the_schema_says_so() {
        let open = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert!(conforms(&json!({"a": 1, "b": 2}), &open, "x").is_ok());
        let closed = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false});
        assert_eq!(conforms(&json!({"a": 1, "b": 2}), &closed, "x").unwrap_err(), "x.\"b\": not a field of the schema");
    }

    #[test]
    fn a_bounded_schema_bounds_its_answer_and_an_unbounded_one_does_not() {
        let bytes = answer_bytes(&facts_schema()).unwrap();
        assert!(bytes < 4096, "{bytes}");
        assert_eq!(answer_bytes(&json!({"type": "string"})), None);
        assert_eq!(answer_bytes(&json!({"type": "array", "items": {"type": "integer"}})), None);
    }

    #[test]
    fn vectors_are_finite_of_the_dimension_with_a_direction_and_scaled_in_f64() {
        assert_eq!(unit_vector(vec![0.0, 3.0, 4.0], Some(3)).unwrap(), vec![0.0, 0.6, 0.8]);
        assert!(unit_vector(vec![1.0, 0.0], Some(3)).unwrap_err().contains("2 numbers"));
        assert!(unit_vector(vec![1.0, f32::NAN], None).unwrap_err().contains("component 1"));
        assert!(unit_vector(vec![f32::INFINITY, 0.0], None).unwrap_err().contains("component 0"));
        assert!(unit_vector(vec![0.0, 0.0], None).unwrap_err().contains("no direction"));
        assert!(unit_vector(Vec::new(), None).is_err());
        // Lengths f32 would overflow or lose: still a direction.
        for tiny_or_huge in [1e30f32, 1e-30] {
            let unit = unit_vector(vec![3.0 * tiny_or_huge, 4.0 * tiny_or_huge], None).unwrap();
            assert!((unit[0] - 0.6).abs() < 1e-6 && (unit[1] - 0.8).abs() < 1e-6, "{unit:?}");
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "\\PC{0,14}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("facts".to_owned()),
                        Just("turn".to_owned()),
                        Just("subject".to_owned()),
                        "[a-z]{1,3}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Whatever a model writes, what is read meets every bound of the schema, and an answer
        /// that meets the schema is never longer than the schema's bound on answers.
        #[test]
        fn what_passes_meets_every_bound(value in any_json()) {
            let schema = facts_schema();
            if let Ok(read) = read_answer(&value.to_string(), &schema) {
                let facts = read["facts"].as_array().unwrap();
                prop_assert!(facts.len() <= 2);
                for f in facts {
                    let turn = f["turn"].as_f64().unwrap();
                    prop_assert!((1.0..=4.0).contains(&turn));
                    let subject = f["subject"].as_str().unwrap().chars().count();
                    prop_assert!((1..=10).contains(&subject));
                }
            }
        }

        #[test]
        fn a_conforming_answer_fits_the_schemas_bound(subjects in proptest::collection::vec("\\PC{1,10}", 0..=2), turn in 1u64..=4) {
            let facts: Vec<Value> = subjects.iter().map(|s| json!({"turn": turn, "subject": s, "verdict": "same"})).collect();
            let answer = json!({"facts": facts});
            prop_assert!(conforms(&answer, &facts_schema(), "a").is_ok());
            prop_assert!(answer.to_string().len() as u64 <= answer_bytes(&facts_schema()).unwrap());
        }

        #[test]
        fn the_reader_never_panics(text in "\\PC{0,300}") {
            let _ = read_answer(&text, &facts_schema());
        }

        #[test]
        fn a_checked_vector_is_unit_length(v in proptest::collection::vec(-1e30f32..1e30, 1..64)) {
            if let Ok(u) = unit_vector(v, None) {
                let norm = u.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
                prop_assert!((norm - 1.0).abs() < 1e-5, "{}", norm);
            }
        }
    }
}
