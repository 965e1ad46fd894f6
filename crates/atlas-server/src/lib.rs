//! The HTTP API and the MCP server of ATLAS: a driving adapter that turns requests into runtime
//! calls and answers in the CLI's `--json` shapes (`atlas_runtime::wire`). No SQL, no model, no
//! policy here. One table ([`ROUTES`]) names every operation, its route and, for those an agent
//! calls, its MCP tool: an operation that lands later gets both in one place.
//!
//! - [`ops`]: the operations, transport-free (JSON arguments in, JSON out); `args` holds their
//!   argument types (from which the OpenAPI document and the tools' input schemas are
//!   generated) and shared checks, `access` who may do what, `error` the one error shape.
//! - [`http`]: axum routes from the table, and the guard around all of them (Host, Origin,
//!   caller, JSON bodies, limits, timeouts, metrics); import and export stream JSON Lines.
//!   `edge` holds the request-edge checks, `body` reads bodies, `serve` accepts connections,
//!   `options` is how the server guards itself.
//! - [`auth`]: who is calling: the server's token, a tenant's key, or nobody on an open
//!   loopback server.
//! - [`mcp`]: the same operations as MCP tools (rmcp), over stdio (`atlas mcp`) and at `/mcp`.
//! - [`openapi`]: `/openapi.json`, generated from the table and the argument types.
//! - [`inspector`]: the memory inspector, a page at `/` over the same API.

mod access;
pub mod args;
pub mod auth;
mod body;
mod edge;
mod error;
pub mod http;
pub mod inspector;
pub mod mcp;
pub mod openapi;
pub mod ops;
mod options;
mod serve;

pub use axum::Router;
pub use edge::{LOOPBACK_HOSTS, MAX_HEADERS};
pub use http::router;
pub use ops::{MAX_BATCH, MAX_K};
pub use options::ServerOptions;
pub use serve::serve;

/// Where `atlas serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7431";

/// An operation of the runtime that the server offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Health,
    Metrics,
    OpenApi,
    Remember,
    /// `remember` with `{"memories": [...]}`: the batch form of the same route.
    RememberMany,
    Import,
    Export,
    Recall,
    /// `recall` with `{"queries": [...]}`: the batch form of the same route.
    RecallMany,
    Get,
    Explain,
    Forget,
    Stats,
    Context,
    Consolidate,
    Experiences,
    Learn,
    Strategies,
    StrategyOutcome,
    Concepts,
    ConceptOutcome,
    /// A page of memories newest first under a filter (what a person browses).
    List,
    Recover,
    Feedback,
    /// Every fact about an entity, current and past.
    Entity,
    Sessions,
    /// One session's turns with the facts found in them.
    Session,
    Cycles,
    Archived,
}

/// One operation: its route, and its MCP tool when an agent calls it.
#[derive(Debug)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub op: Op,
    /// The batch form answered at the same route when the body holds the batch's field.
    pub batch: Option<Op>,
    pub summary: &'static str,
    pub tool: Option<Tool>,
}

/// An MCP tool: its name and what a model needs to use it well.
#[derive(Debug)]
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
}

const fn route(method: &'static str, path: &'static str, op: Op, summary: &'static str) -> Route {
    Route { method, path, op, batch: None, summary, tool: None }
}

const fn tool(
    method: &'static str,
    path: &'static str,
    op: Op,
    summary: &'static str,
    name: &'static str,
    description: &'static str,
) -> Route {
    Route { method, path, op, batch: None, summary, tool: Some(Tool { name, description }) }
}

/// Every operation the server offers: its HTTP route, and its MCP tool for those an agent calls.
pub const ROUTES: &[Route] = &[
    route("GET", "/healthz", Op::Health, "Whether the server answers (no token needed)."),
    route("GET", "/metrics", Op::Metrics, "Prometheus text: requests, errors and time per route, vector queue depth."),
    route("GET", "/openapi.json", Op::OpenApi, "This document."),
    Route {
        batch: Some(Op::RememberMany),
        ..tool(
            "POST",
            "/v1/remember",
            Op::Remember,
            "Remember one memory, or many with {\"memories\": [...]} (201).",
            "remember",
            mcp::REMEMBER,
        )
    },
    route(
        "POST",
        "/v1/import",
        Op::Import,
        "Import a JSON Lines body (memories, or a full export) in one transaction: all or nothing.",
    ),
    route("GET", "/v1/export", Op::Export, "Stream a full export as JSON Lines (?vectors=true adds the vectors)."),
    Route {
        batch: Some(Op::RecallMany),
        ..tool(
            "POST",
            "/v1/recall",
            Op::Recall,
            "Recall: hybrid full text, vectors, graph and time; or many with {\"queries\": [...]}.",
            "recall",
            mcp::RECALL,
        )
    },
    tool("GET", "/v1/memories/{id}", Op::Get, "A memory with its edges and lifecycle.", "get", mcp::GET),
    tool(
        "GET",
        "/v1/memories/{id}/explain",
        Op::Explain,
        "Where a memory came from and what became of it.",
        "explain",
        mcp::EXPLAIN,
    ),
    tool(
        "DELETE",
        "/v1/memories/{id}",
        Op::Forget,
        "Forget a memory: soft (recoverable), or ?hard=true for good.",
        "forget",
        mcp::FORGET,
    ),
    route(
        "POST",
        "/v1/memories/list",
        Op::List,
        "A page of memories newest first under a filter (scope, kinds, times, as of, forgotten), with the next page's cursor.",
    ),
    tool(
        "POST",
        "/v1/memories/{id}/recover",
        Op::Recover,
        "Bring back a memory forgotten softly or archived.",
        "recover",
        mcp::RECOVER,
    ),
    tool(
        "POST",
        "/v1/memories/{id}/feedback",
        Op::Feedback,
        "Say whether a recalled memory was useful: used memories fade slower, useless ones faster.",
        "feedback",
        mcp::FEEDBACK,
    ),
    route(
        "POST",
        "/v1/entity",
        Op::Entity,
        "Every fact about an entity, current and past, with its validity, and its entity memories.",
    ),
    route(
        "POST",
        "/v1/sessions",
        Op::Sessions,
        "Sessions newest first: summarised ones by page, and recent ones with no summary yet.",
    ),
    route(
        "POST",
        "/v1/sessions/turns",
        Op::Session,
        "A session's turns in spoken order, the facts found in them and its summary.",
    ),
    route("GET", "/v1/cycles", Op::Cycles, "The reports of the last sleep cycles, newest first."),
    route("GET", "/v1/archive", Op::Archived, "What the archive holds: archived memories and the files."),
    tool("GET", "/v1/stats", Op::Stats, "Counts and sizes of the memory space.", "stats", mcp::STATS),
    tool(
        "POST",
        "/v1/context",
        Op::Context,
        "The prompt context for a task within a token budget.",
        "context",
        mcp::CONTEXT,
    ),
    tool(
        "POST",
        "/v1/consolidate",
        Op::Consolidate,
        "Run one sleep cycle now: facts, history, summaries.",
        "consolidate",
        mcp::CONSOLIDATE,
    ),
    tool(
        "POST",
        "/v1/experiences",
        Op::Learn,
        "Store a finished task's trajectory as an experience (and a strategy with learn).",
        "learn",
        mcp::LEARN,
    ),
    tool(
        "POST",
        "/v1/experiences/search",
        Op::Experiences,
        "Past experiences of tasks like this one, what worked first.",
        "search_experiences",
        mcp::EXPERIENCES,
    ),
    tool(
        "POST",
        "/v1/strategies/search",
        Op::Strategies,
        "Strategies for a task, ranked by relevance and success rate.",
        "read_strategies",
        mcp::STRATEGIES,
    ),
    tool(
        "POST",
        "/v1/strategies/{id}/outcome",
        Op::StrategyOutcome,
        "Record whether a strategy worked.",
        "strategy_outcome",
        mcp::STRATEGY_OUTCOME,
    ),
    tool(
        "POST",
        "/v1/concepts/search",
        Op::Concepts,
        "Reusable code concepts for a task.",
        "search_concepts",
        mcp::CONCEPTS,
    ),
    tool(
        "POST",
        "/v1/concepts/{id}/outcome",
        Op::ConceptOutcome,
        "Record whether using a concept worked.",
        "concept_outcome",
        mcp::CONCEPT_OUTCOME,
    ),
];

/// The one query parameter an operation takes (a boolean), with its description; every other
/// query parameter is refused.
pub fn query_parameter(op: Op) -> Option<(&'static str, &'static str)> {
    match op {
        Op::Forget => Some(("hard", "Remove it for good (soft by default).")),
        Op::Import => Some(("again", "Import content already imported once again (else it is a replay).")),
        Op::Export => Some(("vectors", "Include each memory's vector.")),
        _ => None,
    }
}

/// Whether `op` writes: a write that has begun is never cut by the request timeout (it
/// finishes and says how), so that a 503 always means nothing was stored.
pub fn writes(op: Op) -> bool {
    matches!(
        op,
        Op::Remember
            | Op::RememberMany
            | Op::Import
            | Op::Forget
            | Op::Consolidate
            | Op::Learn
            | Op::StrategyOutcome
            | Op::ConceptOutcome
            | Op::Recover
            | Op::Feedback
    )
}

/// Whether `addr` only listens on this machine.
pub fn is_loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().is_loopback()
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
        Op::List => "list_memories",
        Op::Entity => "entity",
        Op::Sessions => "sessions",
        Op::Session => "session",
        Op::Cycles => "cycles",
        Op::Archived => "archive",
        _ => ROUTES.iter().find(|r| r.op == op).and_then(|r| r.tool.as_ref()).map_or("unknown", |t| t.name),
    }
}

/// The operation named `name` ([`op_name`]) whose answer is one JSON value: what an in-process
/// binding calls through [`ops::call`]. Streams (import, export) and the server's own routes
/// (health, metrics, this document) are not among them.
pub fn json_op(name: &str) -> Option<Op> {
    ROUTES
        .iter()
        .flat_map(|r| [Some(r.op), r.batch])
        .flatten()
        .filter(|op| !matches!(op, Op::Health | Op::Metrics | Op::OpenApi | Op::Import | Op::Export))
        .find(|op| op_name(*op) == name)
}

/// The field that holds a batch form's items.
pub fn batch_field(op: Op) -> &'static str {
    match op {
        Op::RememberMany => "memories",
        Op::RecallMany => "queries",
        other => unreachable!("{other:?} has no batch form"),
    }
}
