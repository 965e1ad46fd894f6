//! The API's argument types, one per operation: they refuse unknown fields, their doc comments
//! become the descriptions of the OpenAPI document and of the MCP tools' input schemas
//! ([`schema_of`]), and the checks every operation shares (ids, times, caps, names) live beside.

use crate::Op;
use crate::error::ApiError;
use atlas_domain::policy::limits::{MAX_NAME_CHARS, check_name};
use atlas_domain::{MemoryId, Scope, Timestamp};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Most memories one `remember` request may carry, and most queries in one batch recall.
pub const MAX_BATCH: usize = 1_000;

/// Most hits one recall may ask for over the network (an answer of 10,000 memories, the
/// runtime's own cap for a local caller, is too large to send to any client that asks).
pub const MAX_K: usize = 1_000;

/// Who a memory belongs to; recall only looks inside the scope it is given.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ScopeArgs {
    /// The user the memory is about or from (one per person the agent serves).
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub user: Option<String>,
    /// The agent that keeps it (when several agents share one space).
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub agent: Option<String>,
    /// One conversation or task run.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub session: Option<String>,
}

impl From<ScopeArgs> for Scope {
    fn from(s: ScopeArgs) -> Scope {
        Scope { user: s.user, agent: s.agent, session: s.session }
    }
}

pub(crate) fn scope(s: Option<ScopeArgs>) -> Scope {
    s.map(Scope::from).unwrap_or_default()
}

/// One thing to remember: a conversation turn, an observation, a tool result, a note.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberArgs {
    /// What to remember, in the words it was said (at most 1 MiB). Store turns as they come;
    /// facts, summaries and the profile are consolidated from them in the background.
    pub text: String,
    /// Who said it: "user", "assistant", a name or a tool.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub speaker: Option<String>,
    /// The conversation it belongs to (the same as `scope.session`); turns of one session are
    /// linked in order.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub session: Option<String>,
    pub scope: Option<ScopeArgs>,
    /// When it happened (RFC 3339, e.g. "2026-11-23T17:00:00Z"); now when absent.
    pub time: Option<String>,
    /// Any JSON object kept with the memory and returned with it (at most 64 KiB of JSON; keys
    /// of at most 256 characters).
    #[serde(default)]
    pub meta: serde_json::Map<String, Value>,
}

/// What to recall and where to look.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// A question or a description of what is needed, in plain words.
    pub query: String,
    /// How many memories to return (10 by default, at most 1,000).
    #[serde(default = "default_k")]
    pub k: usize,
    /// Only memories of this user, agent or session.
    pub scope: Option<ScopeArgs>,
    /// Only these kinds: episode, fact, entity, core, summary, experience, concept, strategy
    /// (every kind but entities when absent).
    #[serde(default)]
    pub kind: Vec<String>,
    /// Only memories from this time on (RFC 3339).
    pub since: Option<String>,
    /// Only memories before this time (RFC 3339).
    pub until: Option<String>,
    /// Recall what was true at this time instead of now (RFC 3339): facts replaced since come
    /// back as they were.
    pub as_of: Option<String>,
    /// Add, for every hit, each signal's rank, raw score and share of the fused score.
    #[serde(default)]
    pub explain: bool,
}

fn default_k() -> usize {
    10
}

/// Many recalls in one request, answered in order.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallBatchArgs {
    pub queries: Vec<RecallArgs>,
}

/// Many memories in one request, stored in order.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberBatchArgs {
    pub memories: Vec<RememberArgs>,
}

/// A memory by its id.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdArgs {
    /// The memory's id, as remember and recall return it.
    pub id: i64,
}

/// A memory to forget.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetArgs {
    /// The memory's id.
    pub id: i64,
    /// Remove it from every table, index and archive for good. By default forgetting is soft:
    /// recall stops returning it and `atlas recover` brings it back.
    #[serde(default)]
    pub hard: bool,
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// The prompt context for a task.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextArgs {
    /// The task or message the agent is about to work on.
    pub task: String,
    /// Tokens the context may take (7,500 by default, every section's own budget; a token is about
    /// four characters).
    #[serde(default = "default_budget")]
    pub budget: usize,
    /// The session whose recent history ends the context.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub session: Option<String>,
    pub scope: Option<ScopeArgs>,
}

fn default_budget() -> usize {
    atlas_domain::policy::context::DEFAULT_BUDGET
}

/// One sleep cycle now.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsolidateArgs {
    /// Treat every open session as ended (summaries are written for ended sessions).
    #[serde(default)]
    pub end_sessions: bool,
}

/// A task to find past experience, strategies or concepts for.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// The task at hand, in plain words.
    pub task: String,
    /// How many to return (5 by default, at most 1,000).
    #[serde(default = "default_task_k")]
    pub k: usize,
    pub scope: Option<ScopeArgs>,
    /// Strategies only: rank by an upper confidence bound, so that strategies tried rarely get
    /// their chance.
    #[serde(default)]
    pub explore: bool,
}

fn default_task_k() -> usize {
    5
}

/// How using a strategy or a concept turned out.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeArgs {
    /// The strategy's or concept's id.
    pub id: i64,
    /// Whether the task succeeded with it.
    pub success: bool,
}

/// A finished task to learn from: stored as an experience (once per id), and with `learn`
/// also turned into a strategy.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryArgs {
    /// The trajectory, in the shape of `atlas experience store`'s lines: {"id", "task",
    /// "steps", "output", "feedback", "success", "time", "tags"}.
    pub trajectory: serde_json::Map<String, Value>,
    pub scope: Option<ScopeArgs>,
    /// Also write or update a strategy from it (a successful one only).
    #[serde(default)]
    pub learn: bool,
}

/// Most memories one page of a listing may hold.
pub const MAX_PAGE: usize = 500;

/// A page of memories newest first, for a person browsing the space.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only memories of this user, agent or session.
    pub scope: Option<ScopeArgs>,
    /// Only these kinds (every kind when absent).
    #[serde(default)]
    pub kind: Vec<String>,
    /// Only memories from this time on (RFC 3339).
    pub since: Option<String>,
    /// Only memories before this time (RFC 3339).
    pub until: Option<String>,
    /// Only memories that held at this time (RFC 3339): facts replaced since come back as
    /// they were, later ones are left out.
    pub as_of: Option<String>,
    /// Only memories forgotten softly (what `recover` brings back) instead of live ones.
    #[serde(default)]
    pub forgotten: bool,
    /// The `next` cursor of the previous page.
    pub before: Option<String>,
    /// How many memories a page holds (50 by default, at most 500).
    #[serde(default = "default_page")]
    pub limit: usize,
}

fn default_page() -> usize {
    50
}

/// Whether a recalled memory was useful.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackArgs {
    /// The memory's id.
    pub id: i64,
    /// Whether it helped: used memories are reinforced, useless ones fade faster.
    pub useful: bool,
}

/// An entity by name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityArgs {
    /// Its name as said ("Caroline", "the Lisbon office"); case and spacing do not matter.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub name: String,
    /// The user and agent whose memories speak of it.
    pub scope: Option<ScopeArgs>,
}

/// Sessions of a user or agent, newest first.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SessionsArgs {
    pub scope: Option<ScopeArgs>,
    /// The `next` cursor of the previous page.
    pub before: Option<String>,
    /// How many sessions a page holds (20 by default, at most 500).
    #[serde(default = "default_sessions")]
    pub limit: usize,
}

fn default_sessions() -> usize {
    20
}

/// One session's turns.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionArgs {
    /// The session's name.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub session: String,
    /// Its user and agent.
    pub scope: Option<ScopeArgs>,
    /// The `earlier` cursor of the previous page (the latest turns when absent).
    pub before: Option<String>,
    /// How many turns a page holds (100 by default, at most 500).
    #[serde(default = "default_turns")]
    pub limit: usize,
}

fn default_turns() -> usize {
    100
}

/// The JSON Schema of an operation's arguments (subschemas inlined, so that it stands alone in
/// an MCP tool and in an OpenAPI document).
pub fn schema_of(op: Op) -> Value {
    let generator =
        schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    let schema = match op {
        Op::Remember => generator.into_root_schema_for::<RememberArgs>(),
        Op::RememberMany => generator.into_root_schema_for::<RememberBatchArgs>(),
        Op::Recall => generator.into_root_schema_for::<RecallArgs>(),
        Op::RecallMany => generator.into_root_schema_for::<RecallBatchArgs>(),
        Op::Get | Op::Explain | Op::Recover => generator.into_root_schema_for::<IdArgs>(),
        Op::List => generator.into_root_schema_for::<ListArgs>(),
        Op::Feedback => generator.into_root_schema_for::<FeedbackArgs>(),
        Op::Entity => generator.into_root_schema_for::<EntityArgs>(),
        Op::Sessions => generator.into_root_schema_for::<SessionsArgs>(),
        Op::Session => generator.into_root_schema_for::<SessionArgs>(),
        Op::Forget => generator.into_root_schema_for::<ForgetArgs>(),
        Op::Context => generator.into_root_schema_for::<ContextArgs>(),
        Op::Consolidate => generator.into_root_schema_for::<ConsolidateArgs>(),
        Op::Experiences | Op::Strategies | Op::Concepts => generator.into_root_schema_for::<TaskArgs>(),
        Op::StrategyOutcome | Op::ConceptOutcome => generator.into_root_schema_for::<OutcomeArgs>(),
        Op::Learn => generator.into_root_schema_for::<TrajectoryArgs>(),
        Op::Stats | Op::Health | Op::Metrics | Op::OpenApi | Op::Import | Op::Export | Op::Cycles | Op::Archived => {
            generator.into_root_schema_for::<NoArgs>()
        }
    };
    let mut value = schema.to_value();
    if let Some(o) = value.as_object_mut() {
        o.remove("$schema");
    }
    value
}

pub(crate) fn args<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(args).map_err(|e| ApiError::from_serde(&e, ""))
}

pub(crate) fn time(field: &str, value: Option<String>) -> Result<Option<Timestamp>, ApiError> {
    value.map(|t| Timestamp::parse(&t).map_err(|m| ApiError::invalid(field, m))).transpose()
}

/// A memory id as a request gives it: positive.
pub fn memory_id(id: i64) -> Result<MemoryId, ApiError> {
    if id > 0 { Ok(MemoryId(id)) } else { Err(ApiError::invalid("id", format!("not a memory id: {id}"))) }
}

/// The kinds a request names, each checked (`kind[i]` names a bad one).
pub fn kinds(names: &[String]) -> Result<Vec<atlas_domain::MemoryKind>, ApiError> {
    names
        .iter()
        .enumerate()
        .map(|(i, k)| k.parse::<atlas_domain::MemoryKind>().map_err(|m| ApiError::invalid(&format!("kind[{i}]"), m)))
        .collect()
}

pub(crate) fn at_most(field: &str, value: usize, cap: usize) -> Result<(), ApiError> {
    if value > cap { Err(ApiError::invalid(field, format!("at most {cap}, got {value}"))) } else { Ok(()) }
}

/// A name given to look something up, within the cap every stored name has.
pub(crate) fn a_name(field: &str, value: &str) -> Result<(), ApiError> {
    check_name(value, field, field).map_err(ApiError::from)
}

pub(crate) fn not_blank(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() { Err(ApiError::invalid(field, format!("`{field}` is empty"))) } else { Ok(()) }
}
