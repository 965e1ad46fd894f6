//! The HTTP API in process (tower's `oneshot`) and over a real socket: every route, every bad
//! input with its documented status and message, the token, the limits.

use atlas_server::{ROUTES, ServerOptions, router};
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

use crate::support;

use support::{atlas, start};

#[tokio::test]
async fn every_route_answers_in_the_clis_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let (status, body, _) = api
        .call("POST", "/v1/remember", Some(json!({"text": "I moved to Lisbon in May", "speaker": "Ann", "session": "s1", "scope": {"user": "ann"}})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_i64().unwrap();
    let (status, body, _) = api
        .call(
            "POST",
            "/v1/remember",
            Some(json!({"memories": [
                {"text": "The cat is called Miso", "speaker": "Ann", "session": "s1", "scope": {"user": "ann"}},
                {"text": "Miso is three years old", "speaker": "Ann", "session": "s1", "scope": {"user": "ann"}}
            ]})),
        )
        .await;
    assert_eq!((status, body["ids"].as_array().map(Vec::len)), (StatusCode::CREATED, Some(2)), "{body}");

    let (status, body, _) = api
        .call(
            "POST",
            "/v1/recall",
            Some(json!({"query": "Ann moved to Lisbon", "k": 2, "scope": {"user": "ann"}, "explain": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hits"][0]["id"].as_i64(), Some(id), "{body}");
    assert!(body["hits"][0]["score"].is_f64() && body["hits"][0]["explain"].is_object() && body["took_ms"].is_f64());
    assert_eq!(body["hits"][0]["meta"], Value::Null, "the CLI's record shape: no empty meta");

    let (status, body, _) = api.call("GET", &format!("/v1/memories/{id}"), None).await;
    assert_eq!((status, body["text"].as_str()), (StatusCode::OK, Some("I moved to Lisbon in May")));
    assert!(body["edges"].is_array());
    let (status, body, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!((status, body["memories"].as_u64()), (StatusCode::OK, Some(3)), "{body}");

    let (status, body, _) = api.call("DELETE", &format!("/v1/memories/{id}"), None).await;
    assert_eq!((status, body["hard"].as_bool()), (StatusCode::OK, Some(false)));
    let (_, body, _) = api.call("GET", &format!("/v1/memories/{id}"), None).await;
    assert!(body["lifecycle"]["deleted_at"].is_string(), "soft: still there, marked: {body}");
    let (status, _, _) = api.call("DELETE", &format!("/v1/memories/{id}?hard=true"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body, _) = api.call("GET", &format!("/v1/memories/{id}"), None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));

    let (status, body, _) = api.call("GET", "/healthz", None).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (status, body, _) = api.call("GET", "/metrics", None).await;
    let text = body.as_str().unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains("atlas_requests_total{route=\"remember\"} 2") && text.contains("atlas_vector_queue "),
        "{text}"
    );

    // Every route of the table is routed (none falls through to "no such route").
    for route in ROUTES {
        let path = route.path.replace("{id}", "1");
        let (status, body, _) = api.call(route.method, &path, Some(json!({}))).await;
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED
                && body["error"]["message"] != "no such route (see GET /openapi.json)",
            "{} {path}: {status} {body}",
            route.method
        );
    }
}

#[tokio::test]
async fn retries_with_an_idempotency_key_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let send = || {
        api.raw(
            "POST",
            "/v1/remember",
            Some(json!({"text": "once only"}).to_string()),
            None,
            &[("idempotency-key", "k-1")],
        )
    };
    let (_, first, _) = send().await;
    let (status, again, _) = send().await;
    assert_eq!((status, &again["id"]), (StatusCode::CREATED, &first["id"]));
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 1);
}

#[tokio::test]
async fn bad_input_gets_the_documented_status_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions { max_body_bytes: 4096, ..ServerOptions::default() };
    let api = start(dir.path(), options).await;
    // method, route, body, the status it must get, the field its error must name.
    type Case<'a> = (&'a str, &'a str, Option<String>, StatusCode, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("POST", "/v1/remember", Some("{not json".into()), StatusCode::BAD_REQUEST, None),
        (
            "POST",
            "/v1/remember",
            Some(json!({"text": "x", "colour": "red"}).to_string()),
            StatusCode::BAD_REQUEST,
            Some("colour"),
        ),
        ("POST", "/v1/remember", Some(json!({"speaker": "Ann"}).to_string()), StatusCode::BAD_REQUEST, Some("text")),
        ("POST", "/v1/remember", Some(json!({"text": 7}).to_string()), StatusCode::BAD_REQUEST, None),
        ("POST", "/v1/remember", Some(json!({"text": "   "}).to_string()), StatusCode::BAD_REQUEST, Some("text")),
        (
            "POST",
            "/v1/remember",
            Some(json!({"text": "x", "time": "yesterday"}).to_string()),
            StatusCode::BAD_REQUEST,
            Some("time"),
        ),
        (
            "POST",
            "/v1/remember",
            Some(json!({"text": "x".repeat(5000)}).to_string()),
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
        ),
        (
            "POST",
            "/v1/recall",
            Some(json!({"query": "x", "k": 100000}).to_string()),
            StatusCode::BAD_REQUEST,
            Some("k"),
        ),
        (
            "POST",
            "/v1/recall",
            Some(json!({"query": "x", "kind": ["gossip"]}).to_string()),
            StatusCode::BAD_REQUEST,
            Some("kind[0]"),
        ),
        ("GET", "/v1/memories/abc", None, StatusCode::BAD_REQUEST, Some("id")),
        ("GET", "/v1/memories/99", None, StatusCode::NOT_FOUND, None),
        ("DELETE", "/v1/memories/99", None, StatusCode::NOT_FOUND, None),
        ("GET", "/v2/nothing", None, StatusCode::NOT_FOUND, None),
    ];
    for (method, path, body, status, field) in cases {
        let shown = body.clone().unwrap_or_default();
        let (got, answer, _) = api.raw(method, path, body, None, &[]).await;
        assert_eq!(got, status, "{method} {path} {shown:.80}: {answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{answer}");
        if let Some(field) = field {
            assert_eq!(answer["error"]["field"].as_str(), Some(field), "{method} {path}: {answer}");
        }
    }
}

#[tokio::test]
async fn a_token_guards_everything_but_health_and_a_full_server_says_retry() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions { token: Some("s3cret".into()), ..ServerOptions::default() };
    let api = start(dir.path(), options).await;
    let (status, body, _) = api.raw("GET", "/v1/stats", None, None, &[]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::UNAUTHORIZED, Some("authorization")));
    let (status, _, _) = api.raw("GET", "/v1/stats", None, Some("wrong"), &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.raw("GET", "/v1/stats", None, Some("s3cret"), &[]).await.0, StatusCode::OK);
    assert_eq!(api.raw("GET", "/healthz", None, None, &[]).await.0, StatusCode::OK);

    let dir = tempfile::tempdir().unwrap();
    let full = start(dir.path(), ServerOptions { max_in_flight: 0, ..ServerOptions::default() }).await;
    let (status, body, headers) = full.call("GET", "/v1/stats", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("busy")));
    assert_eq!(headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
}

/// The same API over a real loopback socket, with a plain HTTP/1.1 client.
#[tokio::test]
async fn over_a_real_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let app = router(atlas(dir.path()).await, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let options = ServerOptions::default();
    tokio::spawn(async move { atlas_server::serve(listener, app, &options, std::future::pending()).await.unwrap() });
    let send = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
        answer
    };
    let body = json!({"text": "over the wire"}).to_string();
    let answer = send(format!(
        "POST /v1/remember HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    assert!(answer.starts_with("HTTP/1.1 201") && answer.contains("\"id\":1"), "{answer}");
    let answer = send("GET /v1/memories/1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".into()).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("over the wire"), "{answer}");
}

/// The OpenAPI document names exactly the routes of the table, each of which is routed, and
/// every field its schemas document is one the server accepts (and an undocumented one is not).
#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let (status, doc, _) = api.call("GET", "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, methods)| methods.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())))
        .collect();
    let mut table: Vec<(String, String)> = ROUTES.iter().map(|r| (r.method.to_owned(), r.path.to_owned())).collect();
    documented.sort();
    table.sort();
    assert_eq!(documented, table);
    let mut checked = 0;
    for (method, path) in &documented {
        let operation = &doc["paths"][path][method.to_lowercase()];
        let concrete = path.replace("{id}", "1");
        let Some(schema) = operation["requestBody"]["content"]["application/json"]["schema"].as_object() else {
            continue;
        };
        let schemas: Vec<&Value> = match schema.get("oneOf") {
            Some(Value::Array(forms)) => forms.iter().collect(),
            _ => vec![&operation["requestBody"]["content"]["application/json"]["schema"]],
        };
        for schema in schemas {
            for field in schema["properties"].as_object().unwrap().keys() {
                // A value of a wrong type on purpose: the server must not call the field unknown.
                let (_, body, _) = api.call(method, &concrete, Some(json!({ field: true }))).await;
                let message = body["error"]["message"].as_str().unwrap_or_default();
                assert!(!message.contains("unknown field"), "{method} {path}: documented `{field}` refused: {body}");
                checked += 1;
            }
        }
        let (status, body, _) = api.call(method, &concrete, Some(json!({"undocumented_field": 1}))).await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("undocumented_field")),
            "{method} {path}"
        );
    }
    assert!(checked > 30, "only {checked} documented fields checked");
}

#[tokio::test]
async fn import_export_batch_recall_and_the_agent_routes() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let lines = "{\"text\": \"Ann adopted a cat called Miso\", \"session\": \"s1\", \"speaker\": \"Ann\"}\n\
                 {\"text\": \"Ann moved to Lisbon in May\", \"session\": \"s1\", \"speaker\": \"Ann\"}\n";
    let headers = [("content-type", "application/x-ndjson")];
    let (status, body, _) = api.raw("POST", "/v1/import", Some(lines.into()), None, &headers).await;
    assert_eq!((status, body["imported"].as_u64()), (StatusCode::CREATED, Some(2)), "{body}");
    let (status, body, _) = api.raw("POST", "/v1/import", Some(lines.into()), None, &headers).await;
    assert_eq!((status, body["replayed"].as_bool()), (StatusCode::OK, Some(true)), "the same body again: {body}");
    // A bad line refuses the whole body and names its line and field.
    let bad = format!("{lines}{{\"text\": \"fine\"}}\n{{\"text\": \"x\", \"time\": \"soon\"}}\n");
    let (status, body, _) = api.raw("POST", "/v1/import", Some(bad), None, &headers).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(":4"), "names line 4: {body}");
    let (_, stats, _) = api.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["memories"], 2, "nothing of the bad body was stored");

    // Export streams what import restores.
    let (status, export, _) = api.call("GET", "/v1/export", None).await;
    assert_eq!(status, StatusCode::OK);
    let export = export.as_str().unwrap().to_owned();
    assert_eq!(export.lines().count(), 4, "header, two memories, trailer: {export}");
    let other = tempfile::tempdir().unwrap();
    let copy = start(other.path(), ServerOptions::default()).await;
    let (status, body, _) = copy.raw("POST", "/v1/import", Some(export), None, &headers).await;
    assert_eq!((status, body["restored"].as_bool()), (StatusCode::CREATED, Some(true)), "{body}");

    let (status, body, _) = api
        .call("POST", "/v1/recall", Some(json!({"queries": [{"query": "Lisbon", "k": 1}, {"query": "cat", "k": 1}]})))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"][0]["hits"][0]["text"], "Ann moved to Lisbon in May");
    assert_eq!(body["results"][1]["hits"][0]["text"], "Ann adopted a cat called Miso");
    // In a batch every error names its item, the first one too.
    let (status, body, _) = api
        .call("POST", "/v1/remember", Some(json!({"memories": [{"text": "a", "time": "soon"}, {"text": "b"}]})))
        .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("memories[0].time")),
        "{body}"
    );
    let (status, body, _) =
        api.call("POST", "/v1/recall", Some(json!({"queries": [{"query": "x"}, {"query": "y", "k": 5000}]}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("queries[1].k")), "{body}");

    let (status, body, _) =
        api.call("POST", "/v1/context", Some(json!({"task": "plan Ann's move", "budget": 300}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["text"].as_str().unwrap().contains("Lisbon") && body["tokens"].as_u64().unwrap() <= 300, "{body}");
    let (status, body, _) = api.call("POST", "/v1/consolidate", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body, _) = api.call("GET", "/v1/memories/2/explain", None).await;
    assert_eq!((status, body["memory"]["id"].as_i64()), (StatusCode::OK, Some(2)), "{body}");

    let trajectory = json!({"id": "t1", "task": "parse the CSV export of orders", "steps": ["open file", "csv.reader"],
                            "output": "done", "feedback": "fast", "success": true});
    let (status, body, _) =
        api.call("POST", "/v1/experiences", Some(json!({"trajectory": trajectory, "learn": true}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["experience"]["replayed"], false, "{body}");
    let (_, again, _) = api.call("POST", "/v1/experiences", Some(json!({"trajectory": trajectory}))).await;
    assert_eq!(again["experience"]["replayed"], true, "once per trajectory id: {again}");
    let (status, body, _) = api.call("POST", "/v1/experiences/search", Some(json!({"task": "parse a CSV file"}))).await;
    assert_eq!((status, body["hits"][0]["id"].as_str()), (StatusCode::OK, Some("t1")), "{body}");
    let (status, body, _) = api.call("POST", "/v1/strategies/search", Some(json!({"task": "parse a CSV file"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    if let Some(id) = body["hits"][0]["id"].as_i64() {
        let (status, body, _) =
            api.call("POST", &format!("/v1/strategies/{id}/outcome"), Some(json!({"success": false}))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["usage_count"].as_u64().unwrap() >= 1, "{body}");
    }
    let (status, body, _) = api.call("POST", "/v1/trajectories", Some(json!({"trajectory": {"task": "no id"}}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body, _) = api.call("POST", "/v1/experiences", Some(json!({"trajectory": {"task": "no id"}}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("trajectory.id")), "{body}");
}

#[tokio::test]
async fn the_inspector_page_needs_no_key_but_its_data_does() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions { token: Some("secret".into()), ..ServerOptions::default() };
    let api = start(dir.path(), options).await;
    for path in ["/", "/search?q=x", "/memory/3", "/entity/Ann%20Lee", "/session/a%2Fb", "/health", "/assets/app.js"] {
        let (status, body, headers) = api.raw("GET", path, None, None, &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        let text = body.as_str().unwrap();
        assert!(!text.contains("secret"), "the page holds no key");
        if path == "/assets/app.js" {
            assert!(headers["content-type"].to_str().unwrap().starts_with("text/javascript"));
            assert!(!text.contains("innerHTML"), "memory texts enter the page as text only");
        } else {
            assert!(text.starts_with("<!doctype html>") && !text.contains("<script>"), "no inline script");
        }
    }
    let (status, _, _) = api.raw("GET", "/", None, None, &[("host", "attacker.example")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a page under a foreign Host (DNS rebinding) is refused");
    let (status, _, _) = api.raw("POST", "/v1/memories/list", Some("{}".into()), None, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the data behind it needs the key");
    let (status, body, _) = api.raw("GET", "/assets/missing.js", None, None, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "nothing else is served without a key: {body}");
}

#[tokio::test]
async fn the_inspectors_routes_page_list_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let api = start(dir.path(), ServerOptions::default()).await;
    let memories: Vec<Value> = (0..7)
        .map(|i| json!({"text": format!("turn {i}"), "session": "s1", "scope": {"user": "ann"}, "time": "2024-01-01T00:00:00Z"}))
        .collect();
    let (_, body, _) = api.call("POST", "/v1/remember", Some(json!({"memories": memories}))).await;
    let ids: Vec<i64> = body["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let (mut seen, mut before) = (Vec::new(), Value::Null);
    loop {
        let (status, page, _) = api
            .call("POST", "/v1/memories/list", Some(json!({"limit": 3, "before": before, "scope": {"user": "ann"}})))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page_ids: Vec<i64> =
            page["memories"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
        assert!(page["memories"][0]["decay"]["strength"].is_f64(), "{page}");
        seen.extend(page_ids);
        before = page["next"].clone();
        if before.is_null() {
            break;
        }
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first, "seven memories of one time, three a page, none twice or missing");

    let (status, body, _) = api.call("POST", "/v1/memories/list", Some(json!({"before": "soon"}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("before")), "{body}");
    let (status, body, _) = api.call("POST", "/v1/memories/list", Some(json!({"limit": 501}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("limit")), "{body}");

    api.call("DELETE", &format!("/v1/memories/{}", ids[2]), None).await;
    let (_, body, _) = api.call("POST", "/v1/memories/list", Some(json!({"forgotten": true}))).await;
    assert_eq!(body["memories"][0]["id"].as_i64(), Some(ids[2]), "{body}");
    let (status, body, _) = api.call("POST", &format!("/v1/memories/{}/recover", ids[2]), None).await;
    assert_eq!((status, body["how"].as_str()), (StatusCode::OK, Some("undeleted")), "{body}");
    let (_, body, _) = api.call("POST", "/v1/memories/list", Some(json!({"forgotten": true}))).await;
    assert_eq!(body["memories"].as_array().map(Vec::len), Some(0), "{body}");
    let (status, body, _) =
        api.call("POST", &format!("/v1/memories/{}/feedback", ids[0]), Some(json!({"useful": true}))).await;
    assert_eq!((status, body["lifecycle"]["uses"].as_u64()), (StatusCode::OK, Some(1)), "{body}");
    let (status, body, _) = api.call("POST", &format!("/v1/memories/{}/feedback", ids[0]), Some(json!({}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("useful")), "{body}");

    let (status, body, _) =
        api.call("POST", "/v1/sessions/turns", Some(json!({"session": "s1", "scope": {"user": "ann"}}))).await;
    assert_eq!((status, body["turns"].as_array().map(Vec::len)), (StatusCode::OK, Some(7)), "{body}");
    let (status, body, _) = api.call("POST", "/v1/sessions", Some(json!({"scope": {"user": "ann"}}))).await;
    assert_eq!((status, body["open"][0]["session"].as_str()), (StatusCode::OK, Some("s1")), "{body}");
    let (status, body, _) = api.call("POST", "/v1/entity", Some(json!({"name": "  "}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::BAD_REQUEST, Some("name")), "{body}");
    let (status, body, _) = api.call("GET", "/v1/cycles", None).await;
    assert_eq!((status, body["cycles"].is_array()), (StatusCode::OK, true), "{body}");
    let (status, body, _) = api.call("GET", "/v1/archive", None).await;
    assert_eq!((status, body["memories"].is_array()), (StatusCode::OK, true), "{body}");
}
