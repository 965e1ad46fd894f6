//! OpenAI's embeddings wire, which Ollama, llama.cpp's server, vLLM, Hugging Face TEI, LM Studio
//! and OpenAI all serve: the request for a batch of inputs, and the answer read into one unit
//! vector per input, in input order, every count and dimension checked. Pure, so the tests can
//! check it byte for byte.

use atlas_domain::policy::model_answer::unit_vector;
use serde_json::{Value, json};

/// `POST …/embeddings` with `input` as an array (one request per batch), floats asked for.
pub fn request(model: &str, inputs: &[String]) -> Value {
    json!({"model": model, "input": inputs, "encoding_format": "float"})
}

/// The vectors of an answer to a request of `inputs` inputs, ordered by their `index` and
/// scaled to unit length, and the tokens the endpoint counted (0 when it says nothing).
/// `dimension` is the space's: any other length is an error that names both.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: u64,
}

/// Why an answer cannot be used: `Malformed` when it is not JSON or breaks the wire inside
/// (cut or garbled on the way: another try may mend it), `Shape` when it is whole JSON of
/// another API (the same request would get the same again), `Mismatch` when it is the wire's
/// shape but not this space's vectors.
#[derive(Debug, Clone, PartialEq)]
pub enum Unusable {
    Malformed(String),
    Shape(Shape),
    Mismatch(String),
}

/// Whole JSON that is not OpenAI's embeddings answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A list of `{index, embedding}`: llama.cpp's server on its own `/embeddings` route (its
    /// OpenAI route is `/v1/embeddings`).
    LlamaCppNative,
    /// Anything else, described.
    Other(String),
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::LlamaCppNative => f.write_str(
                "the answer is a list of {index, embedding}, not OpenAI's {data: [...]}: \
                 this looks like llama.cpp's native route",
            ),
            Shape::Other(what) => write!(f, "the answer has no data array ({what}): not OpenAI's embeddings wire"),
        }
    }
}

/// What a JSON answer without a `data` array is, for the message.
fn shape_of(v: &Value) -> Shape {
    match v {
        Value::Array(items) if items.first().is_some_and(|i| i.get("embedding").is_some()) => Shape::LlamaCppNative,
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).take(6).collect();
            Shape::Other(format!("an object with {}", if keys.is_empty() { "no keys".into() } else { keys.join(", ") }))
        }
        Value::Array(_) => Shape::Other("a list".into()),
        other => Shape::Other(format!("a JSON {}", json_kind(other))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

pub fn answer(text: &str, inputs: usize, dimension: Option<usize>) -> Result<Answer, Unusable> {
    let malformed = |m: String| Unusable::Malformed(m);
    let v: Value = serde_json::from_str(text).map_err(|e| malformed(format!("the answer is not JSON ({e})")))?;
    let data = v.get("data").and_then(Value::as_array).ok_or_else(|| Unusable::Shape(shape_of(&v)))?;
    if data.len() != inputs {
        return Err(Unusable::Mismatch(format!("the endpoint answered {} vectors for {inputs} inputs", data.len())));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (position, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            None => position,
            Some(i) => i
                .as_u64()
                .map(|i| i as usize)
                .filter(|i| *i < inputs)
                .ok_or_else(|| malformed(format!("data[{position}].index is not an input's index: {i}")))?,
        };
        let numbers = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed(format!("data[{position}].embedding is not an array of numbers")))?;
        let mut vector = Vec::with_capacity(numbers.len());
        for n in numbers {
            let x =
                n.as_f64().ok_or_else(|| malformed(format!("data[{position}].embedding holds {n}, not a number")))?;
            vector.push(x as f32);
        }
        // The one check every embedder's vectors pass (finite, the dimension, a direction).
        let vector = unit_vector(vector, dimension).map_err(|why| {
            Unusable::Mismatch(format!("the endpoint answered an unusable vector (data[{position}]): {why}"))
        })?;
        if slots[index].replace(vector).is_some() {
            return Err(malformed(format!("two vectors for input {index}")));
        }
    }
    let vectors =
        slots.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| malformed("an input got no vector".into()))?;
    let usage = v.get("usage");
    let tokens = ["prompt_tokens", "total_tokens"]
        .iter()
        .find_map(|k| usage.and_then(|u| u.get(*k)).and_then(Value::as_u64))
        .unwrap_or(0);
    Ok(Answer { vectors, tokens })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_openais_with_input_as_an_array() {
        let body = request("nomic-embed-text", &["search_document: a".into(), "b".into()]);
        assert_eq!(
            body.to_string(),
            r#"{"encoding_format":"float","input":["search_document: a","b"],"model":"nomic-embed-text"}"#
        );
    }

    #[test]
    fn vectors_come_back_in_input_order_at_unit_length_with_their_tokens() {
        let text = r#"{"object":"list","data":[{"object":"embedding","index":1,"embedding":[0,3,4]},
                       {"object":"embedding","index":0,"embedding":[2,0,0]}],"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}}"#;
        let a = answer(text, 2, Some(3)).unwrap();
        assert_eq!(a.vectors, vec![vec![1.0, 0.0, 0.0], vec![0.0, 0.6, 0.8]]);
        assert_eq!(a.tokens, 7);
    }

    #[test]
    fn wrong_counts_dimensions_and_shapes_are_named() {
        let one = r#"{"data":[{"index":0,"embedding":[1,0]}]}"#;
        assert!(matches!(answer(one, 2, None), Err(Unusable::Mismatch(m)) if m.contains("1 vectors for 2 inputs")));
        assert!(
            matches!(answer(one, 1, Some(3)), Err(Unusable::Mismatch(m)) if m.contains("2 numbers") && m.contains("has 3"))
        );
        assert!(
            matches!(answer(r#"{"data":[{"index":0,"embedding":[1,0"#, 1, None), Err(Unusable::Malformed(m)) if m.contains("not JSON"))
        );
        assert!(
            matches!(answer(r#"{"error":"x"}"#, 1, None), Err(Unusable::Shape(Shape::Other(m))) if m.contains("error"))
        );
        let native = r#"[{"index":0,"embedding":[[0.1,0.2]]}]"#;
        let Err(Unusable::Shape(shape)) = answer(native, 1, None) else { panic!("llama.cpp's native answer") };
        assert!(shape == Shape::LlamaCppNative && shape.to_string().contains("llama.cpp's native route"));
        let zero = r#"{"data":[{"index":0,"embedding":[0,0]}]}"#;
        assert!(matches!(answer(zero, 1, None), Err(Unusable::Mismatch(m)) if m.contains("no direction")));
        let twice = r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#;
        assert!(matches!(answer(twice, 2, None), Err(Unusable::Malformed(m)) if m.contains("two vectors")));
    }
}
