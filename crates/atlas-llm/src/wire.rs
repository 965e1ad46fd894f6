//! The two wire formats: requests built from an [`LlmRequest`], answers read into text and
//! token counts. Pure, so the tests can check them byte for byte.

use crate::Endpoint;
use atlas_domain::ports::LlmRequest;
use serde_json::{Value, json};

/// Chat completions; with a schema, `response_format` asks the server to constrain its output
/// to it (OpenAI's structured outputs, llama.cpp's grammar, vLLM's guided decoding).
pub fn openai_request(e: &Endpoint, r: &LlmRequest) -> Value {
    let mut body = json!({
        "model": e.model,
        "messages": [{"role": "system", "content": r.system}, {"role": "user", "content": r.prompt}],
        "temperature": 0,
        "max_tokens": e.max_tokens,
    });
    if let Some(schema) = &r.json_schema {
        body["response_format"] =
            json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": schema}});
    }
    body
}

/// Messages; with a schema, a single tool whose input is the schema, and the model is made to
/// call it: its input is the answer.
pub fn anthropic_request(e: &Endpoint, r: &LlmRequest) -> Value {
    let mut body = json!({
        "model": e.model,
        "system": r.system,
        "messages": [{"role": "user", "content": r.prompt}],
        "max_tokens": e.max_tokens,
        "temperature": 0,
    });
    if let Some(schema) = &r.json_schema {
        body["tools"] = json!([{"name": "answer", "description": "Record the answer.", "input_schema": schema}]);
        body["tool_choice"] = json!({"type": "tool", "name": "answer"});
    }
    body
}

fn tokens(usage: Option<&Value>, input: &str, output: &str) -> (u64, u64) {
    let get = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    (get(input), get(output))
}

pub fn openai_answer(text: &str) -> Result<(String, u64, u64), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let content = v
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or("the answer has no choices[0].message.content")?;
    let (input, output) = tokens(v.get("usage"), "prompt_tokens", "completion_tokens");
    Ok((content.to_owned(), input, output))
}

pub fn anthropic_answer(text: &str) -> Result<(String, u64, u64), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let blocks = v.get("content").and_then(Value::as_array).ok_or("the answer has no content")?;
    let answer = blocks
        .iter()
        .find_map(|b| match b.get("type").and_then(Value::as_str) {
            Some("tool_use") => b.get("input").map(Value::to_string),
            _ => None,
        })
        .or_else(|| {
            let texts: Vec<&str> = blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect();
            (!texts.is_empty()).then(|| texts.concat())
        })
        .ok_or("the answer has neither a tool call nor text")?;
    let (input, output) = tokens(v.get("usage"), "input_tokens", "output_tokens");
    Ok((answer, input, output))
}
