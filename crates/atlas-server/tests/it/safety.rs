//! The server's defences, each a defect once reproduced against it (issue 25): batches all or
//! nothing, a 503 that stored nothing, Host and Origin checks and JSON-only bodies, the path id
//! the only id, idempotency keys that cannot be reused for another payload, slow clients that
//! hold no slot, errors that name the JSON path of the field.

use crate::support;

use atlas_server::{ServerOptions, router};
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use support::{atlas, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_failing_batch_stores_nothing_and_names_its_item() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let (status, body, _) = api
        .call(
            "POST",
            "/v1/remember",
            Some(json!({"memories": [{"text": "first"}, {"text": "second"}, {"text": "  "}]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!((body["error"]["field"].as_str(), body["error"]["index"].as_u64()), (Some("memories[2].text"), Some(2)));
    let mut big: Vec<Value> = (0..1000).map(|i| json!({"text": format!("turn {i}")})).collect();
    big[700] = json!({"text": ""});
    let (status, body, _) = api.call("POST", "/v1/remember", Some(json!({"memories": big}))).await;
    assert_eq!((status, body["error"]["index"].as_u64()), (StatusCode::BAD_REQUEST, Some(700)), "{body}");
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 0, "nothing of either batch was stored: {stats}");
    // A scope outside... no tenant here; a bad time in the middle is refused whole too.
    let (status, body, _) = api
        .call("POST", "/v1/remember", Some(json!({"memories": [{"text": "a"}, {"text": "b", "time": "later"}]})))
        .await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("memories[1].time")));
    let (status, body, _) =
        api.call("POST", "/v1/remember", Some(json!({"memories": [{"text": "a"}, {"text": "b"}]}))).await;
    assert_eq!((status, body["ids"].as_array().map(Vec::len)), (StatusCode::CREATED, Some(2)), "{body}");
}

#[tokio::test]
async fn host_origin_and_content_type_guard_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    api.call("POST", "/v1/remember", Some(json!({"text": "my PIN is 4242"}))).await;
    // DNS rebinding: a page of evil.example that resolves to 127.0.0.1 calls with its own Host.
    for path in ["/v1/export", "/v1/stats", "/mcp", "/openapi.json"] {
        let (status, body, _) = api.raw("GET", path, None, None, &[("host", "evil.example:7431")]).await;
        assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::FORBIDDEN, Some("host")), "{path}: {body}");
    }
    for host in ["localhost:7431", "127.0.0.1", "[::1]:7431"] {
        assert_eq!(api.raw("GET", "/v1/stats", None, None, &[("host", host)]).await.0, StatusCode::OK, "{host}");
    }
    // A cross-site simple request: text/plain from another origin.
    let text_plain = [("content-type", "text/plain"), ("origin", "http://evil.example")];
    let (status, body, _) =
        api.raw("POST", "/v1/remember", Some(json!({"text": "planted"}).to_string()), None, &text_plain).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::FORBIDDEN, Some("origin")), "{body}");
    // Without an Origin (curl), a body that is not JSON is still refused: no form can post.
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let (status, body, _) = api
            .raw(
                "POST",
                "/v1/remember",
                Some(json!({"text": "x"}).to_string()),
                None,
                &[("content-type", content_type)],
            )
            .await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some("content-type")),
            "{content_type}"
        );
    }
    // The server's own page (same origin) and a configured origin may call.
    let own = [("origin", "http://127.0.0.1:7431")];
    assert_eq!(api.raw("GET", "/v1/stats", None, None, &own).await.0, StatusCode::OK);
    assert_eq!(api.raw("GET", "/v1/stats", None, None, &[("origin", "null")]).await.0, StatusCode::FORBIDDEN);
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 1, "nothing planted: {stats}");

    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        allowed_hosts: vec!["atlas.internal".into()],
        allowed_origins: vec!["https://app.example".into()],
        ..ServerOptions::default()
    };
    let api = start(dir.path(), options).await;
    let headers = [("host", "atlas.internal:7431"), ("origin", "https://app.example")];
    assert_eq!(api.raw("GET", "/v1/stats", None, None, &headers).await.0, StatusCode::OK);
    let (status, _, _) = api.raw("GET", "/v1/stats", None, None, &[("host", "atlas.internal.evil.example")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_host_is_parsed_as_an_authority_and_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    for host in [
        "[::1]evil.example",
        "127.0.0.1:17431@evil",
        "localhost:abc",
        "127.0.0.1:99999",
        "127.0.0.1:0",
        "localhost:",
        "127.0.0.1:+80",
        "",
    ] {
        let (status, body, _) = api.raw("GET", "/v1/stats", None, None, &[("host", host)]).await;
        assert!(status == StatusCode::BAD_REQUEST || status == StatusCode::FORBIDDEN, "{host:?}: {status} {body}");
        assert_eq!(body["error"]["field"].as_str(), Some("host"), "{host:?}: {body}");
    }
    // Two Host headers: the first no longer wins.
    let two = [("host", "127.0.0.1:7431"), ("host", "evil.example")];
    let (status, body, _) = api.raw("GET", "/v1/stats", None, None, &two).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("host")), "{body}");
    // An absolute-form target names another authority than its good Host.
    let (status, body, _) = api.raw("GET", "http://evil.example/v1/stats", None, None, &[]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("host")), "{body}");
    // Good ones still pass, with or without a port, and an absolute target naming the Host.
    for host in ["localhost", "127.0.0.1:65535", "[::1]", "LOCALHOST:1"] {
        assert_eq!(api.raw("GET", "/v1/stats", None, None, &[("host", host)]).await.0, StatusCode::OK, "{host}");
    }
    let (status, _, _) = api.raw("GET", "http://127.0.0.1:7431/v1/stats", None, None, &[]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_path_id_is_the_only_id_and_unknown_query_parameters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    for text in ["one", "two", "three", "four"] {
        api.call("POST", "/v1/remember", Some(json!({"text": text}))).await;
    }
    let (status, body, _) = api.call("DELETE", "/v1/memories/2?id=3", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")), "{body}");
    let (status, body, _) = api.call("GET", "/v1/memories/1?id=4", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")), "{body}");
    let (status, body, _) = api.call("POST", "/v1/remember?text=hello%20world", Some(json!({"text": "x"}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("text")), "{body}");
    let (status, body, _) = api.call("DELETE", "/v1/memories/2?hard=maybe", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("hard")), "{body}");
    let (status, body, _) = api.call("GET", "/v1/export?vectors=true&all=1", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("all")), "{body}");
    for id in 1..=4 {
        let (_, body, _) = api.call("GET", &format!("/v1/memories/{id}"), None).await;
        assert!(body["lifecycle"]["deleted_at"].is_null(), "memory {id} untouched: {body}");
    }
    // Ids in canonical decimal only; a query parameter given twice has no one meaning.
    for path in ["/v1/memories/+2", "/v1/memories/02", "/v1/memories/2.0", "/v1/memories/0"] {
        let (status, body, _) = api.call("GET", path, None).await;
        assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")), "{path}: {body}");
    }
    let (status, body, _) = api.call("DELETE", "/v1/memories/2?hard=true&hard=false", None).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("hard")), "{body}");
    let (_, body, _) = api.call("GET", "/v1/memories/2", None).await;
    assert!(body["lifecycle"]["deleted_at"].is_null(), "memory 2 untouched: {body}");
    let (status, _, _) = api.call("DELETE", "/v1/memories/3?hard=true", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_idempotency_key_is_one_payload_and_batch_keys_never_meet_single_ones() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let api = &api;
    let send = |key: &'static str, body: Value| async move {
        api.raw("POST", "/v1/remember", Some(body.to_string()), None, &[("idempotency-key", key)]).await
    };
    let (status, first, _) = send("same", json!({"text": "first text"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, again, _) = send("same", json!({"text": "first text"})).await;
    assert_eq!((status, &again["id"]), (StatusCode::CREATED, &first["id"]), "a retry answers the first id");
    let (status, body, _) = send("same", json!({"text": "another text"})).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::CONFLICT, Some("Idempotency-Key")), "{body}");
    // `same#0` was item 0 of a batch keyed `same` once; now the two never meet.
    let (status, batch, _) = send("same", json!({"memories": [{"text": "b0"}, {"text": "b1"}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{batch}");
    let (status, single, _) = send("same#0", json!({"text": "not b0"})).await;
    assert_eq!(status, StatusCode::CREATED, "{single}");
    assert!(!batch["ids"].as_array().unwrap().contains(&single["id"]), "{batch} {single}");
    let (status, replay, _) = send("same", json!({"memories": [{"text": "b0"}, {"text": "b1"}]})).await;
    assert_eq!((status, &replay["ids"]), (StatusCode::CREATED, &batch["ids"]));
    let (status, _, _) = send("same", json!({"memories": [{"text": "b0"}, {"text": "changed"}]})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 4, "first text, b0, b1, not b0: {stats}");
}

#[tokio::test]
async fn errors_name_the_json_path_of_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        ("POST", "/v1/remember", json!({"text": 5}), "text"),
        ("POST", "/v1/remember", json!({"text": "x", "meta": []}), "meta"),
        ("POST", "/v1/remember", json!({"text": "x", "scope": "ann"}), "scope"),
        ("POST", "/v1/remember", json!({"text": "x", "scope": {"user": 3}}), "scope.user"),
        ("POST", "/v1/recall", json!({"query": "x", "k": -1}), "k"),
        ("POST", "/v1/recall", json!({"query": "x", "k": 1e23}), "k"),
        ("POST", "/v1/recall", json!({"query": "x", "k": 1.5}), "k"),
        ("POST", "/v1/recall", json!({"query": "x", "k": "5"}), "k"),
        ("POST", "/v1/recall", json!({"query": "x", "explain": "yes"}), "explain"),
        ("POST", "/v1/recall", json!({"query": ""}), "query"),
        ("POST", "/v1/recall", json!({"query": "x", "kind": ["fact", "gossip"]}), "kind[1]"),
        ("POST", "/v1/recall", json!({"queries": [{"query": "a"}, {"qury": "b"}]}), "queries[1].qury"),
        ("POST", "/v1/recall", json!({"queries": [{"query": "a"}, {"query": "b", "k": "x"}]}), "queries[1].k"),
        (
            "POST",
            "/v1/remember",
            json!({"memories": [{"text": "a"}, {"text": "b", "scope": {"usr": "x"}}]}),
            "memories[1].scope.usr",
        ),
        ("POST", "/v1/context", json!({"task": ""}), "task"),
        ("POST", "/v1/context", json!({"task": "x", "budget": "big"}), "budget"),
        ("POST", "/v1/experiences/search", json!({"task": " "}), "task"),
    ];
    for (method, path, body, field) in cases {
        let (status, answer, _) = api.call(method, path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["field"].as_str(), Some(field), "{body}: {answer}");
    }
    // An episode is not a strategy: the error names the id.
    let (_, remembered, _) = api.call("POST", "/v1/remember", Some(json!({"text": "an episode"}))).await;
    let id = remembered["id"].as_i64().unwrap();
    let (status, answer, _) =
        api.call("POST", &format!("/v1/strategies/{id}/outcome"), Some(json!({"success": true}))).await;
    assert!(status.is_client_error(), "{answer}");
    assert_eq!(answer["error"]["field"].as_str(), Some("id"), "{answer}");
}

#[tokio::test]
async fn every_error_is_json_with_its_headers() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions { token: Some("s3cret".into()), ..ServerOptions::default() }).await;
    let (status, body, headers) = api.raw("GET", "/v1/stats", None, None, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.get("www-authenticate").is_some_and(|v| v.to_str().unwrap().starts_with("Bearer")), "{headers:?}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, body, headers) = api.raw("PUT", "/v1/recall", None, Some("s3cret"), &[]).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")));
    assert_eq!(headers.get("allow").and_then(|v| v.to_str().ok()), Some("POST"));
    let (status, body, _) = api.raw("GET", "/mcp", None, None, &[("host", "evil.example")]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::FORBIDDEN, Some("host")), "JSON: {body}");
}

#[tokio::test]
async fn health_and_metrics_never_wait_for_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions { max_in_flight: 0, ..ServerOptions::default() }).await;
    assert_eq!(api.call("GET", "/v1/stats", None).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(api.call("GET", "/healthz", None).await.0, StatusCode::OK);
    assert_eq!(api.call("GET", "/metrics", None).await.0, StatusCode::OK);
}

/// Two clients that send headers and part of a body, then nothing, over real sockets: they are
/// cut off at the timeout, and meanwhile every other request is answered.
#[tokio::test]
async fn slow_clients_hold_no_slot() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions { max_in_flight: 2, timeout: Duration::from_millis(800), ..ServerOptions::default() };
    let app = router(atlas(dir.path()).await, options.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { atlas_server::serve(listener, app, &options, std::future::pending()).await.unwrap() });
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = "POST /v1/remember HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":";
        stream.write_all(head.as_bytes()).await.unwrap();
        slow.push(stream);
    }
    // One that never finishes its headers.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    silent.write_all(b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let get = |path: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
        answer
    };
    for path in ["/healthz", "/v1/stats", "/v1/stats", "/metrics"] {
        let answer = get(path).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{path} while two bodies stall: {answer}");
    }
    for mut stream in slow {
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
        assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("stalled"), "{answer}");
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "a client that never finishes its headers is closed by the header timeout");
}

/// A write that waits for another process's lock answers either 201 (stored) or 503 having
/// stored nothing: never a 503 for a write that then commits.
#[tokio::test]
async fn a_503_means_nothing_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions { timeout: Duration::from_millis(300), ..ServerOptions::default() };
    let api = start(dir.path(), options).await;
    api.call("POST", "/v1/remember", Some(json!({"text": "before"}))).await;
    // Another process holds the write lock for a while.
    let db = dir.path().join("server.db");
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        conn.execute_batch("COMMIT").unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, body, _) = api.call("POST", "/v1/remember", Some(json!({"text": "during the lock"}))).await;
    holder.join().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    match status {
        StatusCode::CREATED => assert_eq!(stats["memories"], 2, "{body}"),
        StatusCode::SERVICE_UNAVAILABLE => assert_eq!(stats["memories"], 1, "a 503 stored nothing: {body}"),
        other => panic!("{other}: {body}"),
    }
    assert_eq!(status, StatusCode::CREATED, "the write waits for the lock past the read timeout: {body}");
}

/// MCP over HTTP: a `tools/call` whose arguments are not an object is invalid params (-32602)
/// with the request's id, not "method not found".
#[tokio::test]
async fn mcp_tool_calls_with_non_object_arguments_are_invalid_params() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    for arguments in [json!(5), json!("recall"), json!([1, 2])] {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "recall", "arguments": arguments}});
        let headers = [("accept", "application/json, text/event-stream")];
        let (status, body, _) = api.raw("POST", "/mcp", Some(call.to_string()), None, &headers).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!((body["id"].as_i64(), body["error"]["code"].as_i64()), (Some(7), Some(-32602)), "{body}");
    }
}

/// A refused import names where (`line:N`) and what (`field`), whatever was wrong with the
/// line: not JSON, not UTF-8, an export cut short, another user's scope (403). Nothing is stored.
#[tokio::test]
async fn import_errors_name_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = support::atlas(dir.path()).await;
    let api = support::Api { app: router(std::sync::Arc::clone(&atlas), ServerOptions::default()), token: None };
    let ann = atlas
        .add_key(
            atlas_domain::Scope { user: Some("ann".into()), ..Default::default() },
            atlas_domain::access::Role::Write,
        )
        .await
        .unwrap()
        .token;
    let admin = atlas.add_key(atlas_domain::Scope::default(), atlas_domain::access::Role::Admin).await.unwrap().token;
    let fine = "{\"text\": \"fine\"}\n";
    let mut export =
        atlas_domain::jsonl::header_line(&atlas_domain::jsonl::ExportHeader { embedding_model: None }).to_string();
    export.push('\n');
    // The body, the key it is sent with, then the status, location and field it must answer.
    type Case<'a> = (Vec<u8>, Option<&'a str>, u16, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (format!("{fine}{{\"text\": \"x\",}}\n").into_bytes(), None, 400, "line:2", "line"),
        ([fine.as_bytes(), b"{\"text\": \"caf\xe9\"}\n"].concat(), None, 400, "line:2", "line"),
        (export.clone().into_bytes(), None, 400, "line:2", "atlas_export_end"),
        (
            format!("{fine}{{\"text\": \"x\", \"scope\": {{\"user\": \"bob\"}}}}\n").into_bytes(),
            Some(ann.as_str()),
            403,
            "line:2",
            "scope.user",
        ),
        (format!("{fine}{{\"text\": \"x\", \"time\": \"soon\"}}\n").into_bytes(), None, 400, "line:2", "time"),
    ];
    for (body, token, status, location, field) in cases {
        let request = axum::http::Request::builder()
            .method("POST")
            .uri("/v1/import")
            .header("host", "127.0.0.1:7431")
            .header("content-type", "application/x-ndjson");
        let request = request.header("authorization", format!("Bearer {}", token.unwrap_or(&admin)));
        let response = tower::ServiceExt::oneshot(api.app.clone(), request.body(axum::body::Body::from(body)).unwrap())
            .await
            .unwrap();
        let got = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(got, status, "{answer}");
        assert_eq!(answer["error"]["location"], location, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    assert!(
        atlas.stats().await.unwrap().store.memories_by_kind.values().all(|n| *n == 0),
        "nothing of a refused body is stored"
    );
}

/// Every error is the documented JSON error, where axum or the MCP library would have answered
/// in plain text or with an empty body: an undecodable path, the MCP transport's refusals, a
/// malformed MCP message (400, not 415), and too many headers (431, over a real socket).
#[tokio::test]
async fn errors_outside_the_routes_are_json_too() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let (status, body, _) = api.raw("GET", "/v1/memories/%ff", None, None, &[]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("id")), "{body}");

    let accept = ("accept", "application/json, text/event-stream");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "stats", "arguments": {}}});
    let unknown_session = [accept, ("mcp-session-id", "no-such-session")];
    // The message (empty: the tool call), its headers, then the status and field answered.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], StatusCode, &'a str);
    let cases: [Case; 5] = [
        ("{\"jsonrpc\": ", &[accept], StatusCode::BAD_REQUEST, "body"),
        ("{\"hello\": 1}", &[accept], StatusCode::BAD_REQUEST, "body"),
        ("", &[], StatusCode::NOT_ACCEPTABLE, "accept"),
        ("", &unknown_session, StatusCode::NOT_FOUND, "mcp-session-id"),
        ("", &[accept], StatusCode::BAD_REQUEST, "mcp-session-id"),
    ];
    for (message, headers, expected, field) in cases {
        let message = if message.is_empty() { call.to_string() } else { message.to_owned() };
        let (status, body, headers) = api.raw("POST", "/mcp", Some(message.clone()), None, headers).await;
        assert_eq!(status, expected, "{message}: {body}");
        assert_eq!(headers["content-type"], "application/json", "{message}: {body}");
        assert_eq!(body["error"]["field"].as_str(), Some(field), "{message}: {body}");
        assert!(body["error"]["code"].is_string() && body["error"]["message"].is_string(), "{body}");
    }

    let options = ServerOptions::default();
    let app = router(atlas(dir.path()).await, options.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { atlas_server::serve(listener, app, &options, std::future::pending()).await.unwrap() });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let many: String = (0..150).map(|i| format!("X-Probe-{i}: {i}\r\n")).collect();
    let request = format!("GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("\"code\":\"headers_too_large\""), "a JSON body: {answer}");
}

/// Every string a write carries is bounded, the bounds are in the OpenAPI document, and a key
/// given twice is refused naming it (serde_json alone would keep the last): nothing is stored.
#[tokio::test]
async fn strings_are_bounded_and_keys_are_given_once() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let long = "n".repeat(atlas_domain::policy::limits::MAX_NAME_CHARS + 1);
    let refused = [
        (json!({"text": "hi", "speaker": long}), "speaker"),
        (json!({"text": "hi", "session": long}), "scope.session"),
        (json!({"text": "hi", "session": " "}), "scope.session"),
        (json!({"text": "hi", "scope": {"user": long}}), "scope.user"),
        (json!({"text": "hi", "meta": {long.as_str(): 1}}), "meta"),
        (json!({"text": "hi", "meta": {"big": "m".repeat(70 * 1024)}}), "meta"),
    ];
    for (body, field) in refused {
        let (status, answer, _) = api.call("POST", "/v1/remember", Some(body)).await;
        assert_eq!((status, answer["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{answer}");
    }
    let (status, answer, _) = api.call("POST", "/v1/entity", Some(json!({"name": long}))).await;
    assert_eq!((status, answer["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("name")), "{answer}");
    let twice = r#"{"text": "a", "text": "b"}"#;
    let (status, answer, _) = api.raw("POST", "/v1/remember", Some(twice.into()), None, &[]).await;
    assert_eq!((status, answer["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("text")), "{answer}");
    let call = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember", "arguments": {"text": "a", "text": "b"}}}"#;
    let accept = ("accept", "application/json, text/event-stream");
    let (status, answer, _) = api.raw("POST", "/mcp", Some(call.into()), None, &[accept]).await;
    assert_eq!((status, answer["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("text")), "{answer}");
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 0, "nothing refused was stored: {stats}");

    let (_, document, _) = api.call("GET", "/openapi.json", None).await;
    let text = document.to_string();
    assert!(text.contains("\"maxLength\":256"), "the name caps are in the OpenAPI document");
    assert!(text.contains("64 KiB"), "the meta cap is in the OpenAPI document");
}
