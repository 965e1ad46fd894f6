//! The HTTP API of `atlas serve`: a driving adapter that turns JSON requests into runtime calls
//! and answers in the CLI's `--json` shapes (`atlas_runtime::wire`). No SQL, no model, no
//! policy here: one table ([`ROUTES`]) names every operation and its route.
//!
//! Around every route: a bearer token when one is configured, a body limit (413), a request
//! timeout (503), a bound on requests in flight that answers 503 with `Retry-After` instead of
//! queueing without bound, and errors as `{"error": {"code", "message", "field"}}` with the
//! status that fits (400 naming the field, 401, 404, 413, 503): bad input never gives a 500.

use atlas_domain::{AtlasError, MemoryId, MemoryKind, Scope, Timestamp};
use atlas_runtime::{Atlas, RecallRequest, Remember, wire};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Where `atlas serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7431";

/// Every operation the server offers: method, route, the runtime operation it calls.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("GET", "/healthz", "health"),
    ("GET", "/metrics", "metrics"),
    ("POST", "/v1/remember", "remember"),
    ("POST", "/v1/recall", "recall"),
    ("GET", "/v1/memories/{id}", "get"),
    ("DELETE", "/v1/memories/{id}", "forget"),
    ("GET", "/v1/stats", "stats"),
];

/// Most memories one `remember` request may carry.
pub const MAX_BATCH: usize = 1_000;

/// Most hits one recall may ask for.
pub const MAX_K: usize = 1_000;

/// How the server guards itself.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Every request must carry `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    pub max_body_bytes: usize,
    pub timeout: Duration,
    /// Requests in flight beyond this are answered 503 with `Retry-After`.
    pub max_in_flight: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions { token: None, max_body_bytes: 8 << 20, timeout: Duration::from_secs(30), max_in_flight: 256 }
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

/// An error as the API answers it.
pub struct ApiError {
    status: StatusCode,
    body: Value,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>, field: Option<&str>) -> Self {
        ApiError { status, body: json!({"error": {"code": code, "message": message.into(), "field": field}}) }
    }
}

impl From<AtlasError> for ApiError {
    fn from(e: AtlasError) -> Self {
        let status = match &e {
            AtlasError::InvalidInput { .. } => StatusCode::BAD_REQUEST,
            AtlasError::NotFound(_) => StatusCode::NOT_FOUND,
            AtlasError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError { status, body: wire::error_value(e.code(), &e.to_string(), Some(&e)) }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

type ApiResult = Result<Response, ApiError>;

/// A serde error as a 400 naming the field (serde names it between backticks: "unknown field
/// `x`", "missing field `text`"), under `prefix` for an item of a batch.
fn invalid_body(e: &serde_json::Error, prefix: &str) -> ApiError {
    let message = e.to_string();
    let field = message.split('`').nth(1).map(|f| format!("{prefix}{f}"));
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("request body: {message}"), field.as_deref())
}

/// Reads a JSON body into `T` (unknown fields refused): a bad body is a 400 naming the field.
fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| invalid_body(&e, ""))
}

fn time(field: &str, value: Option<String>) -> Result<Option<Timestamp>, ApiError> {
    value
        .map(|t| {
            Timestamp::parse(&t).map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", m, Some(field)))
        })
        .transpose()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ScopeBody {
    user: Option<String>,
    agent: Option<String>,
    session: Option<String>,
}

impl From<ScopeBody> for Scope {
    fn from(s: ScopeBody) -> Scope {
        Scope { user: s.user, agent: s.agent, session: s.session }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RememberBody {
    text: String,
    speaker: Option<String>,
    session: Option<String>,
    #[serde(default)]
    scope: Option<ScopeBody>,
    time: Option<String>,
    #[serde(default)]
    meta: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallBody {
    query: String,
    #[serde(default = "default_k")]
    k: usize,
    #[serde(default)]
    scope: Option<ScopeBody>,
    #[serde(default)]
    kind: Vec<String>,
    since: Option<String>,
    until: Option<String>,
    as_of: Option<String>,
    #[serde(default)]
    explain: bool,
}

fn default_k() -> usize {
    10
}

async fn health() -> ApiResult {
    Ok(axum::Json(json!({"status": "ok"})).into_response())
}

async fn remember(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    let key = headers.get("idempotency-key").map(|v| v.to_str().unwrap_or_default().to_owned());
    // One memory, or `{"memories": [...]}`.
    let (values, many) = match parse::<Value>(&body)? {
        Value::Object(mut o) if o.contains_key("memories") => {
            if let Some(other) = o.keys().find(|k| *k != "memories") {
                let message = format!("unknown field `{other}` beside `memories`");
                return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message, Some(other)));
            }
            match o.remove("memories") {
                Some(Value::Array(items)) => (items, true),
                _ => {
                    let message = "`memories` must be an array of memories";
                    return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message, Some("memories")));
                }
            }
        }
        one => (vec![one], false),
    };
    let items = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let prefix = if many { format!("memories[{i}].") } else { String::new() };
            serde_json::from_value::<RememberBody>(v).map_err(|e| invalid_body(&e, &prefix))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if items.is_empty() || items.len() > MAX_BATCH {
        let message = format!("give 1 to {MAX_BATCH} memories, got {}", items.len());
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message, Some("memories")));
    }
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let mut scope: Scope = item.scope.map(Scope::from).unwrap_or_default();
        if item.session.is_some() {
            scope.session = item.session;
        }
        let input = Remember {
            text: item.text,
            speaker: item.speaker,
            scope,
            time: time("time", item.time)?,
            meta: item.meta,
            // One key per request; each memory of a batch gets its own under it.
            key: key.as_ref().map(|k| if many { format!("{k}#{i}") } else { k.clone() }),
        };
        ids.push(state.atlas.remember(input).await?.0);
    }
    let body = if many { json!({"ids": ids}) } else { json!({"id": ids[0]}) };
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

async fn recall(State(state): State<Arc<AppState>>, body: Bytes) -> ApiResult {
    let request: RecallBody = parse(&body)?;
    if request.k > MAX_K {
        let message = format!("at most {MAX_K}, got {}", request.k);
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message, Some("k")));
    }
    let kinds = request
        .kind
        .iter()
        .map(|k| k.parse::<MemoryKind>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", m, Some("kind")))?;
    let recall = state
        .atlas
        .recall(RecallRequest {
            query: request.query,
            k: request.k,
            scope: request.scope.map(Scope::from).unwrap_or_default(),
            kinds,
            since: time("since", request.since)?,
            until: time("until", request.until)?,
            as_of: time("as_of", request.as_of)?,
        })
        .await?;
    Ok(axum::Json(wire::recall_value(&recall, request.explain)).into_response())
}

fn memory_id(raw: &str) -> Result<MemoryId, ApiError> {
    raw.parse::<i64>().ok().filter(|n| *n > 0).map(MemoryId).ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", format!("not a memory id: {raw:?}"), Some("id"))
    })
}

async fn get_memory(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let id = memory_id(&id)?;
    let detail = state.atlas.get(id).await?.ok_or(AtlasError::NotFound(id))?;
    Ok(axum::Json(wire::detail_value(&detail)).into_response())
}

async fn forget(State(state): State<Arc<AppState>>, Path(id): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = memory_id(&id)?;
    let hard = match query.as_deref() {
        None | Some("") | Some("hard=false") => false,
        Some("hard=true") => true,
        Some(other) => {
            let message = format!("unknown query {other:?} (only hard=true or hard=false)");
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message, Some("hard")));
        }
    };
    let found = if hard {
        let done = state.atlas.forget_hard(id).await?;
        done.from_store || done.archive_files > 0
    } else {
        state.atlas.forget(id).await?
    };
    if !found {
        return Err(AtlasError::NotFound(id).into());
    }
    Ok(axum::Json(json!({"forgotten": id.0, "hard": hard})).into_response())
}

async fn stats(State(state): State<Arc<AppState>>) -> ApiResult {
    let stats = state.atlas.stats().await?;
    Ok(axum::Json(wire::stats_value(&state.atlas.config().db, &stats)).into_response())
}

async fn metrics(State(state): State<Arc<AppState>>) -> ApiResult {
    let mut text =
        String::from("# HELP atlas_requests_total Requests answered, by route.\n# TYPE atlas_requests_total counter\n");
    let routes: Vec<(&'static str, Arc<RouteMetrics>)> =
        state.metrics.lock().expect("metrics lock").iter().map(|(k, v)| (*k, Arc::clone(v))).collect();
    for (route, m) in &routes {
        text.push_str(&format!("atlas_requests_total{{route=\"{route}\"}} {}\n", m.requests.load(Ordering::Relaxed)));
    }
    text.push_str("# HELP atlas_errors_total Requests answered with an error status, by route.\n# TYPE atlas_errors_total counter\n");
    for (route, m) in &routes {
        text.push_str(&format!("atlas_errors_total{{route=\"{route}\"}} {}\n", m.errors.load(Ordering::Relaxed)));
    }
    text.push_str(
        "# HELP atlas_request_seconds Time spent answering, by route.\n# TYPE atlas_request_seconds summary\n",
    );
    for (route, m) in &routes {
        let seconds = m.micros.load(Ordering::Relaxed) as f64 / 1e6;
        text.push_str(&format!("atlas_request_seconds_sum{{route=\"{route}\"}} {seconds}\n"));
        text.push_str(&format!(
            "atlas_request_seconds_count{{route=\"{route}\"}} {}\n",
            m.requests.load(Ordering::Relaxed)
        ));
    }
    let queued = state.atlas.pending_vectors().await?;
    text.push_str(&format!(
        "# HELP atlas_vector_queue Memories waiting for a vector.\n# TYPE atlas_vector_queue gauge\natlas_vector_queue {queued}\n"
    ));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// Token, in-flight bound, body limit, timeout and metrics around every route.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = ROUTES
        .iter()
        .find(|(method, path, _)| *method == request.method().as_str() && route_matches(path, request.uri().path()))
        .map_or("unknown", |(_, _, op)| *op);
    let response = guarded(&state, request, next).await;
    let entry = Arc::clone(state.metrics.lock().expect("metrics lock").entry(route).or_default());
    entry.requests.fetch_add(1, Ordering::Relaxed);
    entry.micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    if !response.status().is_success() {
        entry.errors.fetch_add(1, Ordering::Relaxed);
    }
    response
}

fn route_matches(pattern: &str, path: &str) -> bool {
    let (p, q): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == q.len() && p.iter().zip(&q).all(|(a, b)| a.starts_with('{') || a == b)
}

async fn guarded(state: &AppState, request: Request, next: Next) -> Response {
    if let Some(token) = &state.options.token {
        let expected = format!("Bearer {token}");
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) && request.uri().path() != "/healthz" {
            let message = if given.is_none() { "missing bearer token" } else { "wrong bearer token" };
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message, Some("authorization"))
                .into_response();
        }
    }
    let Ok(_permit) = state.in_flight.try_acquire() else {
        let message = format!("{} requests in flight already; retry shortly", state.options.max_in_flight);
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message, None).into_response();
    };
    // The body is read here, within the limit, so that every route sees a bounded body.
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, state.options.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let message = format!("request body over {} bytes", state.options.max_body_bytes);
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message, None).into_response();
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    match tokio::time::timeout(state.options.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("no answer within {} ms", state.options.timeout.as_millis());
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "timeout", message, None).into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route (see ROUTES in docs/SERVER.md)", None)
}

/// The API over `atlas`.
pub fn router(atlas: Arc<Atlas>, options: ServerOptions) -> Router {
    let state = Arc::new(AppState {
        atlas,
        in_flight: Semaphore::new(options.max_in_flight),
        options,
        metrics: Mutex::new(BTreeMap::new()),
    });
    // Methods of one path are one route.
    let mut paths: BTreeMap<&str, MethodRouter<Arc<AppState>>> = BTreeMap::new();
    for (method, path, operation) in ROUTES {
        let handler = match (*method, *operation) {
            ("GET", "health") => get(health),
            ("GET", "metrics") => get(metrics),
            ("POST", "remember") => post(remember),
            ("POST", "recall") => post(recall),
            ("GET", "get") => get(get_memory),
            ("DELETE", "forget") => axum::routing::delete(forget),
            ("GET", "stats") => get(stats),
            other => unreachable!("ROUTES names an operation without a handler: {other:?}"),
        };
        let merged = paths.remove(path).map_or(handler.clone(), |m| m.merge(handler));
        paths.insert(path, merged);
    }
    let mut router = Router::new();
    for (path, methods) in paths {
        router = router.route(path, methods);
    }
    router.fallback(not_found).layer(middleware::from_fn_with_state(Arc::clone(&state), guard)).with_state(state)
}

pub use axum::Router;

/// Serves `app` on `listener` until `shutdown` completes (in-flight requests finish first).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Whether `addr` only listens on this machine.
pub fn is_loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
}
