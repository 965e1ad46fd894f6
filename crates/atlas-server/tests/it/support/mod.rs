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
