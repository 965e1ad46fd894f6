//! The HTTP adapters against a stub server on 127.0.0.1: the wire format of both providers,
//! schema-constrained output, retries on 429 and 5xx (honouring Retry-After), timeouts, and
//! fallback within a tier.

use atlas_domain::ports::{Llm, LlmRequest};
use atlas_llm::{Endpoint, Fallback, HttpLlm, Provider};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the stub answers, in order; `None` never answers (a hung server).
type Reply = Option<(u16, &'static str, String)>;

struct Seen {
    head: String,
    body: Value,
}

/// Serves `replies` in order, one per connection, and records each request.
async fn stub(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        for reply in replies {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 8192];
            let (head, body) = loop {
                let n = socket.read(&mut chunk).await.unwrap();
                buffer.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buffer).to_string();
                if let Some(split) = text.find("\r\n\r\n") {
                    let head = text[..split].to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if buffer.len() >= split + 4 + length {
                        break (head, String::from_utf8_lossy(&buffer[split + 4..split + 4 + length]).to_string());
                    }
                }
                if n == 0 {
                    break (text, String::new());
                }
            };
            log.lock().unwrap().push(Seen { head, body: serde_json::from_str(&body).unwrap_or(Value::Null) });
            match reply {
                Some((status, extra, body)) => {
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                        body.len()
                    );
                    socket.write_all(response.as_bytes()).await.unwrap();
                }
                None => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
    });
    (url, seen)
}

fn request() -> LlmRequest {
    LlmRequest {
        system: "extract facts".into(),
        prompt: "1. Ann: I prefer Rust".into(),
        json_schema: Some(json!({"type": "object", "required": ["facts"]})),
    }
}

fn openai_ok(content: &str) -> String {
    json!({"choices": [{"message": {"role": "assistant", "content": content}}], "usage": {"prompt_tokens": 31, "completion_tokens": 9}}).to_string()
}

fn endpoint(url: &str, provider: Provider) -> Endpoint {
    let mut e = Endpoint::new("stub", provider, url, "tiny-model");
    e.backoff = Duration::from_millis(10);
    e.timeout = Duration::from_millis(800);
    e
}

#[tokio::test]
async fn openai_compatible_wire_with_a_schema_tokens_and_cost() {
    let (url, seen) = stub(vec![Some((200, "", openai_ok("{\"facts\": []}")))]).await;
    let mut e = endpoint(&format!("{url}/v1"), Provider::OpenAi);
    e.api_key = Some("sk-test".into());
    (e.input_price, e.output_price) = (1.0, 2.0);
    let answer = HttpLlm::new(e).unwrap().complete(request()).await.unwrap();
    assert_eq!((answer.text.as_str(), answer.input_tokens, answer.output_tokens), ("{\"facts\": []}", 31, 9));
    assert!((answer.cost - (31.0 + 18.0) / 1e6).abs() < 1e-12);
    let seen = seen.lock().unwrap();
    assert!(seen[0].head.starts_with("POST /v1/chat/completions HTTP/1.1"), "{}", seen[0].head);
    assert!(seen[0].head.to_lowercase().contains("authorization: bearer sk-test"));
    let body = &seen[0].body;
    assert_eq!(body["model"], "tiny-model");
    assert_eq!(body["messages"][0], json!({"role": "system", "content": "extract facts"}));
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["schema"]["required"][0], "facts");
}

#[tokio::test]
async fn anthropic_wire_forces_a_tool_whose_input_is_the_answer() {
    let reply = json!({"content": [{"type": "tool_use", "name": "answer", "input": {"facts": [1]}}], "usage": {"input_tokens": 40, "output_tokens": 7}});
    let (url, seen) = stub(vec![Some((200, "", reply.to_string()))]).await;
    let mut e = endpoint(&url, Provider::Anthropic);
    e.api_key = Some("ak-test".into());
    let answer = HttpLlm::new(e).unwrap().complete(request()).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&answer.text).unwrap(), json!({"facts": [1]}));
    assert_eq!((answer.input_tokens, answer.output_tokens), (40, 7));
    let seen = seen.lock().unwrap();
    let head = seen[0].head.to_lowercase();
    assert!(head.starts_with("post /v1/messages http/1.1") && head.contains("x-api-key: ak-test"), "{head}");
    assert!(head.contains("anthropic-version: 2023-06-01"));
    assert_eq!(seen[0].body["system"], "extract facts");
    assert_eq!(seen[0].body["tool_choice"], json!({"type": "tool", "name": "answer"}));
    assert_eq!(seen[0].body["tools"][0]["input_schema"]["required"][0], "facts");
}

#[tokio::test]
async fn busy_and_failing_servers_are_retried_with_backoff() {
    let (url, seen) = stub(vec![
        Some((429, "retry-after: 0\r\n", "{\"error\": \"slow down\"}".into())),
        Some((503, "", "{}".into())),
        Some((200, "", openai_ok("{\"facts\": []}"))),
    ])
    .await;
    let answer = HttpLlm::new(endpoint(&url, Provider::OpenAi)).unwrap().complete(request()).await.unwrap();
    assert_eq!(answer.text, "{\"facts\": []}");
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_client_error_is_not_retried_and_persistent_failure_names_the_endpoint() {
    let (url, seen) = stub(vec![Some((400, "", "{\"error\": \"bad schema\"}".into()))]).await;
    let err =
        HttpLlm::new(endpoint(&url, Provider::OpenAi)).unwrap().complete(request()).await.unwrap_err().to_string();
    assert!(err.contains("HTTP 400") && err.contains("bad schema") && err.contains("after 1 attempt"), "{err}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    let (url, _) = stub(vec![Some((500, "", "{}".into())); 4]).await;
    let err =
        HttpLlm::new(endpoint(&url, Provider::OpenAi)).unwrap().complete(request()).await.unwrap_err().to_string();
    assert!(
        err.contains("stub")
            && err.contains("tiny-model")
            && err.contains("HTTP 500")
            && err.contains("after 4 attempts"),
        "{err}"
    );
}

#[tokio::test]
async fn a_hung_server_times_out() {
    let (url, _) = stub(vec![None, None]).await;
    let mut e = endpoint(&url, Provider::OpenAi);
    e.max_retries = 1;
    e.timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = HttpLlm::new(e).unwrap().complete(request()).await.unwrap_err().to_string();
    assert!(err.contains("no answer within 300 ms") && err.contains("after 2 attempts"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_tier_falls_back_to_its_next_endpoint() {
    // Nothing listens on the first: connection refused.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let (url, _) = stub(vec![Some((200, "", openai_ok("{\"facts\": []}")))]).await;
    let mut first = endpoint(&dead_url, Provider::OpenAi);
    first.max_retries = 0;
    let tier = Fallback::new(vec![
        Arc::new(HttpLlm::new(first).unwrap()),
        Arc::new(HttpLlm::new(endpoint(&url, Provider::OpenAi)).unwrap()),
    ])
    .unwrap();
    assert_eq!(tier.complete(request()).await.unwrap().text, "{\"facts\": []}");
}
