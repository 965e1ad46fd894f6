//! The MCP server (rmcp): every operation of [`crate::ROUTES`] that has a tool, with its
//! description written for a model and its input schema generated from the argument type.
//! Served over stdio by `atlas mcp` and over streamable HTTP at `/mcp` by `atlas serve`. A
//! tool's failure is a tool result with `isError` and the API's error object, so that the
//! model reads what was wrong and which field.

use crate::ops::{self, ApiError, schema_of};
use crate::{Op, ROUTES};
use atlas_domain::access::Caller;
use atlas_runtime::Atlas;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;

/// What the server tells a model when it connects.
pub const INSTRUCTIONS: &str = "ATLAS is your long-term memory: it keeps what was said and done across sessions. \
Call `remember` for every user turn and every result worth keeping, with the same `scope.user` for one person \
and a `session` per conversation; facts, their history and summaries are consolidated from these in the \
background. Call `recall` before answering anything that may depend on the past (preferences, earlier \
decisions, names, dates), or `context` to get a ready prompt section within a token budget. For tasks: \
`search_experiences` and `read_strategies` before starting, `learn` after finishing, `strategy_outcome` when \
a strategy was used.";

pub const REMEMBER: &str = "Store one memory: a conversation turn, an observation, a tool result or a note, in \
the words it was said. Store every user turn as it comes rather than your own summary of it; ATLAS consolidates \
facts (with their history: a later \"I write Rust now\" replaces an earlier \"I prefer Python\") and session \
summaries in the background. Scope it: `scope.user` for the person it concerns, `session` for the \
conversation. Returns the new memory's id.";

pub const RECALL: &str = "Find the memories most relevant to a query: full text, meaning (vectors), links \
between memories and time, fused into one ranking. Ask in plain words (\"where does Ann live?\"); pass the \
same `scope` the memories were stored with. Filter by `kind` (episode: what was said; fact: what is \
currently true; summary; core: the profile), by time (`since`, `until`) or ask what was true at a time \
(`as_of`). Each hit has its text, `score` (relative within this answer) and `similarity` (absolute, 0..1: \
below about 0.3 the hit is probably unrelated). With `explain: true` each hit also says which signals found \
it (rank, raw score, share of the fused score): text alone means a word match, vector alone a match in \
meaning, `instruction` a standing instruction of the user (\"Always ... when I ask about ...\") lifted to second \
place, since it seldom shares words with the requests it governs, `numbers` a memory holding the numbers \
the query names, `speaker` (a negative share) a turn of the agent's for a question about the user.";

pub const GET: &str = "Read one memory by id: its text, kind, time, scope, the edges that link it to other \
memories (next turn, mentions, replaces) and its lifecycle (uses, soft deletion).";

pub const EXPLAIN: &str = "Explain one memory: for a fact, the episodes it was consolidated from, the earlier \
versions it replaced and what replaced it, the entities it names, and how strongly it is remembered (decay).";

pub const FORGET: &str = "Forget one memory by id. By default softly: recall stops returning it, and it can be \
recovered. Use `hard: true` only when the user asks for the data to be erased: it is removed from every \
table, index and archive and cannot come back.";

pub const RECOVER: &str = "Bring back a memory that was forgotten softly (or archived since): recall returns it \
again. Use it when the user says something forgotten still matters.";

pub const FEEDBACK: &str = "Say whether a memory you recalled was useful (`useful: true`) or not. Useful memories \
are reinforced and fade slower; a fact's review schedule follows the answers.";

pub const STATS: &str = "Counts and sizes of the memory space: memories by kind, edges, vectors still being \
computed, bytes on disk, the embedding model.";

pub const CONTEXT: &str = "Build the memory part of a prompt for a task within a token budget: persona, core \
profile, the goal, the memories most relevant to the task and the session's recent history, each section \
within its share of the budget. Returns the sections and a ready `text`.";

pub const CONSOLIDATE: &str = "Run one consolidation (sleep) cycle now instead of waiting for the background: \
new episodes become facts and entities, conflicting facts get a history, ended sessions get summaries. \
`end_sessions: true` treats every open session as ended. Returns what the cycle did.";

pub const LEARN: &str = "After finishing a task, store its trajectory as an experience so that later tasks \
can learn from it: `trajectory` is {\"id\", \"task\", \"steps\": [...], \"output\", \"feedback\", \"success\": \
true|false}. Stored once per id. With `learn: true` a successful trajectory also writes or strengthens a \
strategy (situation → suggestion).";

pub const EXPERIENCES: &str = "Before starting a task, find past experiences of similar tasks: what was done, \
whether it worked and the feedback. Successes come first, then failures that teach something.";

pub const STRATEGIES: &str = "Before starting a task, read strategies (situation → suggestion) that worked for \
similar tasks, ranked by relevance and success rate. `explore: true` gives rarely tried strategies their \
chance. Report how it went with `strategy_outcome`.";

pub const STRATEGY_OUTCOME: &str = "Record whether following a strategy worked (`success`), so that its success \
rate and ranking follow what actually happens.";

pub const CONCEPTS: &str = "Find reusable code concepts (functions compressed out of past trajectories, with \
their parameters, examples and success statistics) for a task.";

pub const CONCEPT_OUTCOME: &str = "Record whether using a concept worked (`success`).";

/// ATLAS as an MCP server.
#[derive(Clone)]
pub struct AtlasMcp {
    atlas: Arc<Atlas>,
}

impl AtlasMcp {
    pub fn new(atlas: Arc<Atlas>) -> Self {
        AtlasMcp { atlas }
    }
}

/// The tools of [`ROUTES`], with their input schemas and hints.
pub fn tools() -> Vec<rmcp::model::Tool> {
    ROUTES
        .iter()
        .filter_map(|r| r.tool.as_ref().map(|t| (r, t)))
        .map(|(route, tool)| {
            let schema = match schema_of(route.op) {
                Value::Object(o) => o,
                other => unreachable!("an argument schema is an object: {other}"),
            };
            let read_only = route.method == "GET"
                || matches!(route.op, Op::Recall | Op::Context | Op::Experiences | Op::Strategies | Op::Concepts);
            let annotations = ToolAnnotations::new().read_only(read_only).destructive(route.op == Op::Forget);
            rmcp::model::Tool::new(tool.name, tool.description, Arc::new(schema))
                .with_title(route.summary)
                .with_annotations(annotations)
        })
        .collect()
}

impl ServerHandler for AtlasMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("atlas", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Over HTTP the guard put the caller in the request; over stdio the user owns the space.
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>().cloned())
            .unwrap_or_default();
        let Some(route) = ROUTES.iter().find(|r| r.tool.as_ref().is_some_and(|t| t.name == request.name)) else {
            return Err(ErrorData::invalid_params(format!("no tool named {:?}", request.name), None));
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match ops::call(&self.atlas, route.op, arguments, None, &caller).await {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(e.body.to_string())]);
                result.structured_content = Some(e.body);
                result
            }
        };
        Ok(result.into())
    }
}

/// Serves MCP over this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(atlas: Arc<Atlas>) -> std::io::Result<()> {
    let running = AtlasMcp::new(atlas)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP handshake: {e}")))?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// An MCP message refused before rmcp reads it, in the forms a client can act on: a body that
/// is not JSON is the API's 400 naming `body` (rmcp would answer 415 in plain text), and a
/// `tools/call` whose `arguments` is not an object is JSON-RPC's invalid params (-32602, with
/// the request's id; rmcp would say "method not found").
pub(crate) fn refuse_message(body: &[u8]) -> Option<Response> {
    let message = match atlas_domain::strict_json::from_slice(body) {
        Ok(message) => message,
        Err(e) => {
            // A tool's argument given twice is named as the tool's field.
            let field = e.field.as_deref().map(|f| f.strip_prefix("params.arguments.").unwrap_or(f));
            return Some(ApiError::invalid(field.unwrap_or("body"), format!("request body: {e}")).into_response());
        }
    };
    let arguments = message.get("params")?.get("arguments")?;
    if message.get("method")? != "tools/call" || arguments.is_object() || arguments.is_null() {
        return None;
    }
    let error = serde_json::json!({"jsonrpc": "2.0", "id": message.get("id").cloned().unwrap_or(Value::Null),
                       "error": {"code": -32602, "message": "invalid params: tools/call `arguments` must be an object"}});
    Some(axum::Json(error).into_response())
}

/// rmcp's transport errors (a missing `Accept`, an unknown session, a message that is JSON but
/// no JSON-RPC) come as plain text: they become the API's JSON error with their status and a
/// code, except 415, which past the guard's own content-type check can only mean a malformed
/// message (400). JSON answers, event streams and successes pass unchanged.
pub(crate) async fn json_transport_error(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    // rmcp's messages are one short sentence; more is not read.
    let text = match axum::body::to_bytes(response.into_body(), 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let (status, code, field) = match status.as_u16() {
        406 => (406, "not_acceptable", Some("accept")),
        400 if text.contains("Session ID") => (400, "bad_request", Some("mcp-session-id")),
        400 if text.contains("MCP-Protocol-Version") => (400, "bad_request", Some("mcp-protocol-version")),
        415 | 400 => (400, "invalid_input", Some("body")),
        404 => (404, "not_found", Some("mcp-session-id")),
        405 => (405, "method_not_allowed", None),
        413 => (413, "too_large", Some("body")),
        other if other < 500 => (other, "bad_request", None),
        other => (other, "internal", None),
    };
    let message = if text.is_empty() { status_text(status) } else { text };
    ApiError::new(status, code, message, field).into_response()
}

fn status_text(status: u16) -> String {
    StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("error").to_owned()
}

/// The streamable HTTP transport, for `atlas serve` to nest at `/mcp`.
pub fn http_service(
    atlas: Arc<Atlas>,
    shutdown: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<AtlasMcp, LocalSessionManager> {
    // The HTTP guard checks `Host` for every route, `/mcp` included, and answers in JSON.
    let config = StreamableHttpServerConfig::default().with_cancellation_token(shutdown).disable_allowed_hosts();
    StreamableHttpService::new(move || Ok(AtlasMcp::new(Arc::clone(&atlas))), Arc::default(), config)
}
