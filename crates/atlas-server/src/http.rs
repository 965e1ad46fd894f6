//! The HTTP side of `atlas serve`: one axum route per entry of [`crate::ROUTES`], the MCP
//! server nested at `/mcp`, and one guard around everything: a bearer token when one is
//! configured, a body limit (413), a request timeout (503), a bound on requests in flight that
//! answers 503 with `Retry-After` instead of queueing without bound, per-route metrics. Errors
//! are `{"error": {"code", "message", "field"}}` with the status that fits: bad input never
//! gives a 500.

use crate::ops::{self, ApiError};
use crate::{Op, ROUTES, Route};
use atlas_runtime::{Atlas, ImportOptions};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawPathParams, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How the server guards itself.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Every request must carry `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// The largest body `POST /v1/import` reads (it streams; the import is one transaction).
    pub max_import_bytes: usize,
    pub timeout: Duration,
    /// Requests in flight beyond this are answered 503 with `Retry-After`.
    pub max_in_flight: usize,
    /// Check the `Host` of MCP requests against loopback names (against DNS rebinding); off
    /// when listening beyond loopback, where the token guards instead.
    pub mcp_loopback_hosts_only: bool,
    /// Cancelled at shutdown: ends the MCP sessions' open event streams, which a graceful
    /// shutdown would otherwise wait for.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: None,
            max_body_bytes: 8 << 20,
            max_import_bytes: 1 << 30,
            timeout: Duration::from_secs(30),
            max_in_flight: 256,
            mcp_loopback_hosts_only: true,
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}

#[derive(Default)]
struct RouteMetrics {
    requests: AtomicU64,
    errors: AtomicU64,
    micros: AtomicU64,
}

struct AppState {
    atlas: Arc<Atlas>,
    options: ServerOptions,
    in_flight: Semaphore,
    metrics: Mutex<BTreeMap<&'static str, Arc<RouteMetrics>>>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The arguments of a JSON operation: the body's object, the path's `{id}` and the query's
/// pairs folded in (`true` / `false` and numbers as such), so that `DELETE
/// /v1/memories/7?hard=true` calls `forget` with `{"id": 7, "hard": true}`.
fn arguments(path: &RawPathParams, query: Option<&str>, body: &Bytes) -> Result<Value, ApiError> {
    let mut args = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(ApiError::invalid("body", "the body must be a JSON object")),
            Err(e) => return Err(ApiError::new(400, "invalid_input", format!("request body: {e}"), None)),
        }
    };
    for (name, value) in path.iter() {
        let id = value
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ApiError::invalid(name, format!("not a memory id: {value:?}")))?;
        if args.insert(name.to_owned(), Value::from(id)).is_some() {
            return Err(ApiError::invalid(name, format!("`{name}` comes from the path, not the body")));
        }
    }
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (name, raw) = pair.split_once('=').unwrap_or((pair, "true"));
        let value = match raw {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => raw.parse::<i64>().map_or_else(|_| Value::from(raw), Value::from),
        };
        args.insert(name.to_owned(), value);
    }
    Ok(Value::Object(args))
}

async fn json_operation(
    state: Arc<AppState>,
    route: &'static Route,
    path: RawPathParams,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let args = arguments(&path, query.as_deref(), &body)?;
    let op = match route.batch {
        Some(batch) if args.as_object().is_some_and(|o| o.contains_key(batch_field(batch))) => batch,
        _ => route.op,
    };
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let value = ops::call(&state.atlas, op, args, key).await?;
    let status = if matches!(op, Op::Remember | Op::RememberMany) { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(value)).into_response())
}

/// The field that holds a batch form's items.
pub fn batch_field(op: Op) -> &'static str {
    match op {
        Op::RememberMany => "memories",
        Op::RecallMany => "queries",
        other => unreachable!("{other:?} has no batch form"),
    }
}

/// `POST /v1/import`: the body is read as it streams in, up to `max_import_bytes`, then
/// imported in one transaction (a bad line refuses the whole body, naming its line and field).
async fn import(
    state: Arc<AppState>,
    query: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let again = match query.as_deref() {
        None | Some("") | Some("again=false") => false,
        Some("again=true") | Some("again") => true,
        Some(other) => return Err(ApiError::invalid("again", format!("unknown query {other:?} (only again=true)"))),
    };
    let limit = state.options.max_import_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::new(413, "too_large", format!("import body over {limit} bytes"), None))?;
    let origin = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "body".to_owned(), |k| format!("body ({k})"));
    let imported = state.atlas.import_bytes(&bytes, &origin, ImportOptions { again }, None).await?;
    let status = if imported.replayed { StatusCode::OK } else { StatusCode::CREATED };
    let value = json!({"imported": imported.ids.len(), "ids": imported.ids, "replayed": imported.replayed,
                       "restored": imported.restored, "renumbered": imported.renumbered,
                       "vectors": imported.vectors, "recorded_at": imported.recorded_at.to_rfc3339()});
    Ok((status, axum::Json(value)).into_response())
}

/// `GET /v1/export`: a full export streamed as JSON Lines while it is read from the store. A
/// failure midway cuts the stream before the trailer line, so that an import refuses it.
async fn export(state: Arc<AppState>, query: Option<String>) -> Result<Response, ApiError> {
    let vectors = match query.as_deref() {
        None | Some("") | Some("vectors=false") => false,
        Some("vectors=true") | Some("vectors") => true,
        Some(other) => {
            return Err(ApiError::invalid("vectors", format!("unknown query {other:?} (only vectors=true)")));
        }
    };
    let (mut writer, reader) = tokio::io::duplex(1 << 16);
    let atlas = Arc::clone(&state.atlas);
    tokio::spawn(async move {
        if let Err(e) = atlas.export_to(&mut writer, vectors).await {
            tracing::warn!("export stream cut: {e}");
        }
    });
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(reader));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

async fn metrics(state: Arc<AppState>) -> Result<Response, ApiError> {
    let routes: Vec<(&'static str, Arc<RouteMetrics>)> =
        state.metrics.lock().expect("metrics lock").iter().map(|(k, v)| (*k, Arc::clone(v))).collect();
    let mut text = String::new();
    let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&RouteMetrics) -> String| {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (route, m) in &routes {
            text.push_str(&format!("{name}{{route=\"{route}\"}} {}\n", value(m)));
        }
    };
    family("atlas_requests_total", "counter", "Requests answered, by route.", &|m| {
        m.requests.load(Ordering::Relaxed).to_string()
    });
    family("atlas_errors_total", "counter", "Requests answered with an error status, by route.", &|m| {
        m.errors.load(Ordering::Relaxed).to_string()
    });
    family("atlas_request_seconds_sum", "counter", "Time spent answering, by route.", &|m| {
        (m.micros.load(Ordering::Relaxed) as f64 / 1e6).to_string()
    });
    let queued = state.atlas.pending_vectors().await?;
    text.push_str(&format!(
        "# HELP atlas_vector_queue Memories waiting for a vector.\n# TYPE atlas_vector_queue gauge\natlas_vector_queue {queued}\n"
    ));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// Token, in-flight bound, body limit, timeout and metrics around every route.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = request.uri().path();
    let route = if path == "/mcp" || path.starts_with("/mcp/") {
        Some("mcp")
    } else {
        ROUTES
            .iter()
            .find(|r| r.method == request.method().as_str() && route_matches(r.path, path))
            .map(|r| r.tool.as_ref().map_or(op_name(r.op), |t| t.name))
    };
    let response = guarded(&state, request, next, route).await;
    let entry = Arc::clone(state.metrics.lock().expect("metrics lock").entry(route.unwrap_or("unknown")).or_default());
    entry.requests.fetch_add(1, Ordering::Relaxed);
    entry.micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    if !response.status().is_success() {
        entry.errors.fetch_add(1, Ordering::Relaxed);
    }
    response
}

/// The operation's name in metrics and the OpenAPI document (its tool's name when it has one).
pub fn op_name(op: Op) -> &'static str {
    match op {
        Op::Health => "health",
        Op::Metrics => "metrics",
        Op::OpenApi => "openapi",
        Op::Import => "import",
        Op::Export => "export",
        Op::RememberMany => "remember_many",
        Op::RecallMany => "recall_many",
        _ => ROUTES.iter().find(|r| r.op == op).and_then(|r| r.tool.as_ref()).map_or("unknown", |t| t.name),
    }
}

fn route_matches(pattern: &str, path: &str) -> bool {
    let (p, q): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == q.len() && p.iter().zip(&q).all(|(a, b)| a.starts_with('{') || a == b)
}

async fn guarded(state: &AppState, request: Request, next: Next, route: Option<&str>) -> Response {
    if let Some(token) = &state.options.token {
        let expected = format!("Bearer {token}");
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) && request.uri().path() != "/healthz" {
            let message = if given.is_none() { "missing bearer token" } else { "wrong bearer token" };
            return ApiError::new(401, "unauthorized", message, Some("authorization")).into_response();
        }
    }
    let Ok(_permit) = state.in_flight.try_acquire() else {
        let message = format!("{} requests in flight already; retry shortly", state.options.max_in_flight);
        return ApiError::new(503, "busy", message, None).into_response();
    };
    // Bodies are read here, within the limit, so that every route sees a bounded body; an
    // import streams its own under its own limit.
    let request = if route == Some("import") {
        request
    } else {
        let (parts, body) = request.into_parts();
        match axum::body::to_bytes(body, state.options.max_body_bytes).await {
            Ok(bytes) => Request::from_parts(parts, Body::from(bytes)),
            Err(_) => {
                let message = format!("request body over {} bytes", state.options.max_body_bytes);
                return ApiError::new(413, "too_large", message, None).into_response();
            }
        }
    };
    match tokio::time::timeout(state.options.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("no answer within {} ms", state.options.timeout.as_millis());
            ApiError::new(503, "timeout", message, None).into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::new(404, "not_found", "no such route (see GET /openapi.json)", None)
}

fn handler(route: &'static Route) -> MethodRouter<Arc<AppState>> {
    let method = MethodFilter::try_from(Method::from_bytes(route.method.as_bytes()).expect("a method"))
        .expect("a routable method");
    let handle = move |State(state): State<Arc<AppState>>,
                       path: RawPathParams,
                       RawQuery(query): RawQuery,
                       headers: HeaderMap,
                       request: Request| async move {
        let result = match route.op {
            Op::Health => Ok(axum::Json(json!({"status": "ok"})).into_response()),
            Op::Metrics => metrics(state).await,
            Op::OpenApi => Ok(axum::Json(crate::openapi::document()).into_response()),
            Op::Import => import(state, query, headers, request.into_body()).await,
            Op::Export => export(state, query).await,
            _ => match axum::body::to_bytes(request.into_body(), usize::MAX).await {
                Ok(body) => json_operation(state, route, path, query, headers, body).await,
                Err(e) => Err(ApiError::new(400, "invalid_input", format!("request body: {e}"), None)),
            },
        };
        result.unwrap_or_else(IntoResponse::into_response)
    };
    on(method, handle)
}

/// The API over `atlas`, with the MCP server at `/mcp`.
pub fn router(atlas: Arc<Atlas>, options: ServerOptions) -> Router {
    let mcp = crate::mcp::http_service(Arc::clone(&atlas), options.mcp_loopback_hosts_only, options.shutdown.clone());
    let state = Arc::new(AppState {
        atlas,
        in_flight: Semaphore::new(options.max_in_flight),
        options,
        metrics: Mutex::new(BTreeMap::new()),
    });
    // Methods of one path are one route.
    let mut paths: BTreeMap<&str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for route in ROUTES {
        let methods = match paths.remove(route.path) {
            Some(existing) => existing.merge(handler(route)),
            None => handler(route),
        };
        paths.insert(route.path, methods);
    }
    let mut router = Router::new();
    for (path, methods) in paths {
        router = router.route(path, methods);
    }
    router
        .nest_service("/mcp", mcp)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .with_state(state)
}

/// Serves `app` on `listener` until `shutdown` completes: then it stops accepting, ends the
/// MCP event streams (`options.shutdown`) and lets requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    options: &ServerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let token = options.shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            token.cancel();
        })
        .await
}
