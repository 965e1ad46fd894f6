//! What the server's tests share: a space on SQLite with the hash embedder, and a client that
//! calls the router in process (tower's `oneshot`) as an HTTP client would.

#![allow(dead_code)]

use atlas_runtime::{Atlas, Config, Parts};
use atlas_server::{ServerOptions, router};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::HashEmbedder;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use std::sync::Arc;
use tower::ServiceExt;

pub async fn atlas(dir: &std::path::Path) -> Arc<Atlas> {
    let db = dir.join("server.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let embedder: Arc<dyn atlas_domain::ports::Embedder> = Arc::new(HashEmbedder::new(32));
    let parts = Parts::from_store(Arc::clone(&store), Some(embedder)).with_consolidator(store);
    Arc::new(Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap())
}

pub struct Api {
    pub app: axum::Router,
    pub token: Option<String>,
}

impl Api {
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value, axum::http::HeaderMap) {
        self.raw(method, path, body.map(|b| b.to_string()), self.token.as_deref(), &[]).await
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value, axum::http::HeaderMap) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        // What every HTTP client sends: the Host it called, and the type of a JSON body.
        let given = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
        if !given("host") {
            request = request.header("host", "127.0.0.1:7431");
        }
        if body.is_some() && !given("content-type") {
            request = request.header("content-type", "application/json");
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request.body(body.map_or_else(Body::empty, Body::from)).unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 24).await.unwrap();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value, headers)
    }
}

pub async fn start(dir: &std::path::Path, options: ServerOptions) -> Api {
    let token = options.token.clone();
    Api { app: router(atlas(dir).await, options), token }
}

/// Calls an MCP tool over `/mcp` as a client would: `initialize`, the `initialized` notice, then
/// `tools/call` in that session. Returns the call's JSON-RPC answer (read from the event stream).
pub async fn mcp_tool(api: &Api, token: Option<&str>, tool: &str, arguments: Value) -> Value {
    let accept = ("accept", "application/json, text/event-stream");
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}});
    let (status, body, headers) = api.raw("POST", "/mcp", Some(init.to_string()), token, &[accept]).await;
    assert_eq!(status, StatusCode::OK, "initialize: {body}");
    let session = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let in_session = [accept, ("mcp-session-id", session.as_str())];
    let notice = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, body, _) = api.raw("POST", "/mcp", Some(notice.to_string()), token, &in_session).await;
    assert_eq!(status, StatusCode::ACCEPTED, "initialized: {body}");
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let (status, body, _) = api.raw("POST", "/mcp", Some(call.to_string()), token, &in_session).await;
    assert_eq!(status, StatusCode::OK, "tools/call: {body}");
    event_stream_answer(&body, 2)
}

/// The JSON-RPC message with `id` among an event stream's `data:` lines (or the body itself
/// when the server answered in plain JSON).
fn event_stream_answer(body: &Value, id: i64) -> Value {
    let Some(text) = body.as_str() else { return body.clone() };
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message["id"] == id)
        .unwrap_or_else(|| panic!("no answer with id {id} in {text}"))
}
