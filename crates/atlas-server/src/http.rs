//! The HTTP side of `atlas serve`: one axum route per entry of [`crate::ROUTES`], the MCP
//! server nested at `/mcp`, and one guard around everything, in this order: the `Host` (against
//! DNS rebinding) and `Origin` (against pages of other sites) checks, the caller (the bearer
//! token or a tenant's key, [`crate::auth`]), JSON bodies only (against cross-site form posts),
//! the body read within the timeout and the limit (413) before a slot is taken (the inspector's
//! page, which holds no data, is answered after the Host and Origin checks, without a key), a bound on
//! requests in flight that answers 503 with `Retry-After` instead of queueing, and the
//! timeout of reads (a write that has begun finishes: a 503 means nothing was stored).
//! `/healthz` and `/metrics` never wait for a slot. Errors are `{"error": {"code", "message",
//! "field"}}` with the status that fits: bad input never gives a 500.

use crate::auth::{Keys, authenticate};
use crate::body::{Received, SpooledBody, read_body};
use crate::edge::{MAX_HEADERS, host_allowed, json_body, origin_allowed, parse_authority};
use crate::ops::{self, ApiError};
use crate::options::ServerOptions;
use crate::{Op, ROUTES, Route, batch_field, op_name};
use atlas_domain::access::Caller;
use atlas_runtime::{Atlas, ImportOptions};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{RawPathParams, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Semaphore;

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
    /// One import reads its body at a time: a second waits for nothing and is told to retry.
    importing: Semaphore,
    keys: Keys,
    metrics: Mutex<BTreeMap<&'static str, Arc<RouteMetrics>>>,
}

/// The query's boolean parameter of `op` (`?hard=true`), the only one it takes: any other is
/// refused, naming it, so that a query never overrides the path or the body.
fn query_flag(op: Op, query: Option<&str>) -> Result<bool, ApiError> {
    let mut flag = false;
    let mut given = false;
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (name, raw) = pair.split_once('=').unwrap_or((pair, "true"));
        match crate::query_parameter(op) {
            // `?hard=true&hard=false` has no one meaning: refused, never the last one taken.
            Some((known, _)) if known == name && given => {
                return Err(ApiError::invalid(name, format!("`{name}` is given twice in the query")));
            }
            Some((known, _)) if known == name => {
                given = true;
                flag = match raw {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    other => return Err(ApiError::invalid(name, format!("`{name}` is true or false, not {other:?}"))),
                };
            }
            Some((known, _)) => {
                return Err(ApiError::invalid(name, format!("unknown query parameter `{name}` (only `{known}`)")));
            }
            None => {
                return Err(ApiError::invalid(
                    name,
                    format!("unknown query parameter `{name}` (this route takes none)"),
                ));
            }
        }
    }
    Ok(flag)
}

/// The arguments of a JSON operation: the body's object, with the path's `{id}` (the only id)
/// and the query's flag folded in, so that `DELETE /v1/memories/7?hard=true` calls `forget`
/// with `{"id": 7, "hard": true}`.
fn arguments(op: Op, path: &RawPathParams, query: Option<&str>, body: &Bytes) -> Result<Value, ApiError> {
    let mut args = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match atlas_domain::strict_json::from_slice(body) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(ApiError::invalid("body", "the body must be a JSON object")),
            Err(e) => {
                return Err(ApiError::invalid(e.field.as_deref().unwrap_or("body"), format!("request body: {e}")));
            }
        }
    };
    for (name, value) in path.iter() {
        // Canonical decimal only: `+5` and `05` are not another spelling of 5.
        let canonical = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) && !value.starts_with('0');
        let id = canonical
            .then(|| value.parse::<i64>().ok())
            .flatten()
            .filter(|n| *n > 0)
            .ok_or_else(|| ApiError::invalid(name, format!("not a memory id: {value:?}")))?;
        if args.insert(name.to_owned(), Value::from(id)).is_some() {
            return Err(ApiError::invalid(name, format!("`{name}` comes from the path, not the body")));
        }
    }
    if let Some((name, _)) = crate::query_parameter(op) {
        if args.contains_key(name) {
            return Err(ApiError::invalid(name, format!("`{name}` comes from the query (?{name}=true), not the body")));
        }
        if query_flag(op, query)? {
            args.insert(name.to_owned(), Value::Bool(true));
        }
    } else {
        query_flag(op, query)?;
    }
    Ok(Value::Object(args))
}

async fn json_operation(
    state: Arc<AppState>,
    route: &'static Route,
    path: RawPathParams,
    query: Option<String>,
    headers: HeaderMap,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let args = arguments(route.op, &path, query.as_deref(), &body)?;
    let op = match route.batch {
        Some(batch) if args.as_object().is_some_and(|o| o.contains_key(batch_field(batch))) => batch,
        _ => route.op,
    };
    let key = idempotency_key(&headers)?;
    let value = ops::call(&state.atlas, op, args, key, &caller).await?;
    let status = if matches!(op, Op::Remember | Op::RememberMany) { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(value)).into_response())
}

/// The `Idempotency-Key` header, which must be visible text when given.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => match v.to_str() {
            Ok(k) if !k.trim().is_empty() => Ok(Some(k.to_owned())),
            _ => Err(ApiError::invalid("Idempotency-Key", "the header must be non-empty visible ASCII text")),
        },
    }
}

/// `POST /v1/import`: the body was read by the guard into a temporary file (within the import
/// limit, each piece within the timeout), then it is imported in one transaction, a piece at a
/// time (a bad line refuses the whole body, naming its line and field). A tenant's lines are its
/// own ([`ImportOptions::caller`]).
async fn import(
    state: Arc<AppState>,
    query: Option<String>,
    headers: HeaderMap,
    caller: Caller,
    spooled: Option<SpooledBody>,
) -> Result<Response, ApiError> {
    let again = query_flag(Op::Import, query.as_deref())?;
    caller.may(atlas_domain::access::Role::Write).map_err(|d| ApiError::forbidden("authorization", &d.to_string()))?;
    let spooled = spooled.ok_or_else(|| ApiError::new(500, "internal", "the import body was not received", None))?;
    idempotency_key(&headers)?;
    let options = ImportOptions { again, caller };
    // A body's lines are named `line:N` in errors, as the API documents.
    let imported = state.atlas.import_file_named(spooled.file.path(), "line", options, None).await?;
    let status = if imported.replayed { StatusCode::OK } else { StatusCode::CREATED };
    let value = atlas_runtime::wire::imported_value(&imported);
    Ok((status, axum::Json(value)).into_response())
}

/// `GET /v1/export`: a full export streamed as JSON Lines while it is read from the store (a
/// tenant's: its memories only). A failure midway cuts the stream before the trailer line, so
/// that an import refuses it.
async fn export(state: Arc<AppState>, query: Option<String>, caller: Caller) -> Result<Response, ApiError> {
    let vectors = query_flag(Op::Export, query.as_deref())?;
    let (mut writer, reader) = tokio::io::duplex(1 << 16);
    let atlas = Arc::clone(&state.atlas);
    tokio::spawn(async move {
        if let Err(e) = atlas.export_for(&mut writer, vectors, &caller).await {
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
    if let Some(u) = state.atlas.embedder().map(|e| e.usage()) {
        for (name, help, value) in [
            ("atlas_embedder_calls_total", "Requests the embedder sent, retries included.", u.calls),
            ("atlas_embedder_retries_total", "Requests the embedder retried.", u.retries),
            ("atlas_embedder_failures_total", "Requests of the embedder that failed.", u.failures),
            ("atlas_embedder_texts_total", "Texts the embedder embedded.", u.texts),
            ("atlas_embedder_tokens_total", "Tokens the embedding endpoint counted.", u.tokens),
        ] {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"));
        }
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// The guard around every route (see the module's doc), and the metrics.
async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let route = ROUTES.iter().find(|r| r.method == method.as_str() && route_matches(r.path, &path));
    let name = if path == "/mcp" || path.starts_with("/mcp/") {
        Some("mcp")
    } else if method == Method::GET && crate::inspector::serves(&path) {
        Some("inspector")
    } else {
        route.map(|r| r.tool.as_ref().map_or(op_name(r.op), |t| t.name))
    };
    let mut response = guarded(&state, request, next, route, started).await;
    if response.status() == StatusCode::METHOD_NOT_ALLOWED && route.is_none() && name.is_none() {
        // axum's own 405 has an empty body: the same, in JSON, with the methods of the path.
        let allowed: Vec<&str> = ROUTES.iter().filter(|r| route_matches(r.path, &path)).map(|r| r.method).collect();
        let allow = allowed.join(", ");
        response = ApiError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed here; allowed: {allow}"),
            Some("method"),
        )
        .into_response();
        if let Ok(value) = HeaderValue::from_str(&allow) {
            response.headers_mut().insert(header::ALLOW, value);
        }
    }
    let entry = Arc::clone(state.metrics.lock().expect("metrics lock").entry(name.unwrap_or("unknown")).or_default());
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

async fn guarded(
    state: &AppState,
    request: Request,
    next: Next,
    route: Option<&'static Route>,
    started: Instant,
) -> Response {
    let options = &state.options;
    if request.headers().len() > MAX_HEADERS {
        let message = format!("{} header lines; at most {MAX_HEADERS}", request.headers().len());
        return ApiError::new(431, "headers_too_large", message, Some("headers")).into_response();
    }
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return ApiError::new(400, "bad_request", "two Host headers: send one", Some("host")).into_response();
    }
    let target = request.uri().authority().map(|a| a.to_string());
    let host = first.and_then(|h| h.to_str().ok()).map(str::to_owned).or_else(|| target.clone());
    if options.check_host && host.as_deref().is_some_and(|h| parse_authority(h).is_none()) {
        let message =
            format!("Host {:?} is not a host with an optional port (1 to 65535)", host.as_deref().unwrap_or(""));
        return ApiError::new(400, "bad_request", message, Some("host")).into_response();
    }
    // An absolute-form target (`GET http://x/v1/stats`) must name the Host it came with.
    if let (Some(target), Some(host)) = (&target, &host)
        && !target.eq_ignore_ascii_case(host)
    {
        let message = format!("the request's target names {target:?}, its Host {host:?}: send the path alone");
        return ApiError::new(400, "bad_request", message, Some("host")).into_response();
    }
    if options.check_host && !host.as_deref().is_some_and(|h| host_allowed(options, h)) {
        let message = format!(
            "Host {:?} is not one this server answers to (loopback names; more with --allowed-host)",
            host.as_deref().unwrap_or("")
        );
        return ApiError::forbidden("host", &message).into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        if !origin_allowed(options, origin, host.as_deref()) {
            let message = format!("pages of {origin:?} may not call this server (add one with --allowed-origin)");
            return ApiError::forbidden("origin", &message).into_response();
        }
    }
    let op = route.map(|r| r.op);
    if op == Some(Op::Health) {
        return next.run(request).await;
    }
    if request.method() == Method::GET && route.is_none() && crate::inspector::serves(request.uri().path()) {
        // The page holds no data: it asks for the key and sends it with each call.
        return crate::inspector::answer(request.uri().path());
    }
    let caller = match authenticate(
        &state.keys,
        &state.atlas,
        options.token.as_deref(),
        options.require_token,
        request.headers(),
    )
    .await
    {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(caller);
    let is_mcp = parts.uri.path() == "/mcp" || parts.uri.path().starts_with("/mcp/");
    // Bodies are read here, before a slot is taken, so that a slow client holds none.
    let has_body = parts.method == Method::POST || parts.method == Method::PUT || parts.method == Method::PATCH;
    let import = op == Some(Op::Import);
    let _import_slot = if import {
        match state.importing.try_acquire() {
            Ok(slot) => Some(slot),
            Err(_) => {
                return ApiError::new(503, "busy", "another import is being read; retry shortly", None).into_response();
            }
        }
    } else {
        None
    };
    let limit = if import { options.max_import_bytes } else { options.max_body_bytes };
    let received = match read_body(body, limit, options.timeout, import).await {
        Ok(received) => received,
        Err(e) => return e.into_response(),
    };
    // An unknown route or method is answered 404 / 405 below, whatever its body.
    if (route.is_some() || is_mcp) && (has_body || !received.is_blank()) {
        let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let ok = match content_type {
            Some(t) => json_body(t, import),
            None => received.is_blank(),
        };
        if !ok {
            let expected = if import { "application/x-ndjson (JSON Lines)" } else { "application/json" };
            let message = format!("the body must be {expected}, not {:?}", content_type.unwrap_or("(none)"));
            return ApiError::new(415, "unsupported_media_type", message, Some("content-type")).into_response();
        }
    }
    if is_mcp
        && parts.method == Method::POST
        && let Received::Memory(bytes) = &received
        && let Some(answer) = crate::mcp::refuse_message(bytes)
    {
        return answer;
    }
    let body = match received {
        Received::Memory(bytes) => Body::from(bytes),
        Received::Spooled(spooled) => {
            parts.extensions.insert(spooled);
            Body::empty()
        }
    };
    let request = Request::from_parts(parts, body);
    if op == Some(Op::Metrics) {
        return next.run(request).await;
    }
    let Ok(_permit) = state.in_flight.try_acquire() else {
        let message = format!("{} requests in flight already; retry shortly", options.max_in_flight);
        return ApiError::new(503, "busy", message, None).into_response();
    };
    let deadline = started + options.timeout;
    if op.is_some_and(crate::writes) {
        // A write that has begun runs to its end (the store bounds its wait for the lock and
        // answers busy having stored nothing); it does not begin past the deadline.
        if Instant::now() >= deadline {
            let message =
                format!("no time left of {} ms to begin the write; nothing was stored", options.timeout.as_millis());
            return ApiError::new(503, "timeout", message, None).into_response();
        }
        return next.run(request).await;
    }
    match tokio::time::timeout_at(deadline.into(), next.run(request)).await {
        Ok(response) if is_mcp => crate::mcp::json_transport_error(response).await,
        Ok(response) => response,
        Err(_) => {
            let message = format!("no answer within {} ms", options.timeout.as_millis());
            ApiError::new(503, "timeout", message, None).into_response()
        }
    }
}

/// A path whose parameter does not decode (`/v1/memories/%ff`), named by the route's parameter.
fn bad_path(route: &Route, e: &RawPathParamsRejection) -> ApiError {
    let name = route.path.split_once('{').and_then(|(_, rest)| rest.split_once('}')).map_or("path", |(n, _)| n);
    ApiError::invalid(name, format!("not a memory id: {e}"))
}

async fn not_found() -> ApiError {
    ApiError::new(404, "not_found", "no such route (see GET /openapi.json)", None)
}

fn handler(route: &'static Route) -> MethodRouter<Arc<AppState>> {
    let method = MethodFilter::try_from(Method::from_bytes(route.method.as_bytes()).expect("a method"))
        .expect("a routable method");
    let handle = move |State(state): State<Arc<AppState>>,
                       path: Result<RawPathParams, RawPathParamsRejection>,
                       RawQuery(query): RawQuery,
                       headers: HeaderMap,
                       request: Request| async move {
        let caller = request.extensions().get::<Caller>().cloned().unwrap_or_default();
        let result = match route.op {
            Op::Health => Ok(axum::Json(json!({"status": "ok"})).into_response()),
            Op::Metrics => match caller {
                Caller::All => metrics(state).await,
                Caller::Tenant { .. } => Err(ApiError::forbidden(
                    "authorization",
                    "metrics cover every tenant: an unconfined admin key or the server's token",
                )),
            },
            Op::OpenApi => Ok(axum::Json(crate::openapi::document()).into_response()),
            Op::Import => {
                let spooled = request.extensions().get::<SpooledBody>().cloned();
                import(state, query, headers, caller, spooled).await
            }
            Op::Export => match caller.may(atlas_domain::access::Role::Read) {
                Ok(()) => export(state, query, caller).await,
                Err(d) => Err(ApiError::forbidden("authorization", &d.to_string())),
            },
            _ => match (path, axum::body::to_bytes(request.into_body(), usize::MAX).await) {
                (Ok(path), Ok(body)) => json_operation(state, route, path, query, headers, caller, body).await,
                (Err(e), _) => Err(bad_path(route, &e)),
                (_, Err(e)) => Err(ApiError::new(400, "invalid_input", format!("request body: {e}"), Some("body"))),
            },
        };
        result.unwrap_or_else(IntoResponse::into_response)
    };
    on(method, handle)
}

/// The API over `atlas`, with the MCP server at `/mcp`.
pub fn router(atlas: Arc<Atlas>, options: ServerOptions) -> Router {
    // The guard checks `Host` for every route, `/mcp` included, and answers in JSON.
    let mcp = crate::mcp::http_service(Arc::clone(&atlas), options.shutdown.clone());
    let state = Arc::new(AppState {
        atlas,
        in_flight: Semaphore::new(options.max_in_flight),
        importing: Semaphore::new(1),
        keys: Keys::default(),
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
