//! Against a real OpenAI-compatible server: `ATLAS_LLM_URL`, else llama.cpp's `llama-server` on
//! the smallest model the project fetches. It tests the wire and the schema mode, not quality.

use atlas_domain::ports::{Llm, LlmRequest};
use atlas_llm::{Endpoint, HttpLlm, Provider};
use atlas_testing::servers::{skipped, smallest_llm_server};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_answers_within_the_schema() {
    let server = match smallest_llm_server() {
        Ok(server) => server,
        Err(why) => return skipped("atlas-llm a_real_server_answers_within_the_schema", &why),
    };
    let mut endpoint = Endpoint::new("real", Provider::OpenAi, &server.url, &server.model);
    endpoint.max_tokens = 600;
    let schema = json!({
        "type": "object", "required": ["facts"],
        "properties": {"facts": {"type": "array", "maxItems": 3, "items": {
            "type": "object", "required": ["subject", "predicate", "object"],
            "properties": {
                "subject": {"type": "string", "maxLength": 40},
                "predicate": {"type": "string", "maxLength": 30},
                "object": {"type": "string", "maxLength": 60}
            }
        }}}
    });
    let request = LlmRequest {
        system: "Extract facts as subject, predicate, object.".into(),
        prompt: "Ann: I used to prefer Python, but I write Rust at work now.".into(),
        json_schema: Some(schema),
    };
    let answer = HttpLlm::new(endpoint).unwrap().complete(request).await.unwrap();
    let value: Value = serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{e}: {}", answer.text));
    let facts = value["facts"].as_array().unwrap_or_else(|| panic!("no facts array: {value}"));
    assert!(facts.len() <= 3);
    for f in facts {
        assert!(f["subject"].is_string() && f["predicate"].is_string() && f["object"].is_string(), "{f}");
    }
    assert!(answer.input_tokens > 0 && answer.output_tokens > 0, "usage is reported");
}
