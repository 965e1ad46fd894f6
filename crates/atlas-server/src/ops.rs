//! The operations behind every route and tool, free of any transport: each takes its arguments
//! as one JSON object (an HTTP body with the route's path and query folded in, or an MCP tool's
//! arguments), calls the runtime and answers in the CLI's `--json` shape (`atlas_runtime::wire`).
//! The argument types are the API's contract: they refuse unknown fields, and their doc comments
//! become the descriptions of the OpenAPI document and of the MCP tools' input schemas.

use crate::Op;
use atlas_domain::access::{Caller, Role};
use atlas_domain::policy::limits::{MAX_NAME_CHARS, check_name};
use atlas_domain::{AtlasError, MemoryId, MemoryKind, Scope, Timestamp};
use atlas_runtime::{Atlas, RecallRequest, Remember, wire};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most memories one `remember` request may carry, and most queries in one batch recall.
pub const MAX_BATCH: usize = 1_000;

/// Most hits one recall may ask for.
pub const MAX_K: usize = 1_000;

/// An error as the API answers it: a status class and `{"error": {"code", "message", "field"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub body: Value,
}

impl ApiError {
    pub fn new(status: u16, code: &str, message: impl Into<String>, field: Option<&str>) -> Self {
        ApiError { status, body: json!({"error": {"code": code, "message": message.into(), "field": field}}) }
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_input", message, Some(field))
    }

    pub fn forbidden(field: &str, message: &str) -> Self {
        ApiError::new(403, "forbidden", message, Some(field))
    }

    /// A serde error as a 400 whose `field` is the JSON path of the offending field
    /// (`queries[1].qury`, `k`), under `prefix` for an item of a batch.
    pub fn from_serde(e: &serde_path_to_error::Error<serde_json::Error>, prefix: &str) -> Self {
        let inner = e.inner().to_string();
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // An unknown or missing field is named by serde between backticks, below the path.
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|p| inner.strip_prefix(p))
            .and_then(|rest| rest.split('`').next());
        let field = match (named, path.is_empty()) {
            (Some(name), true) => name.to_owned(),
            (Some(name), false) if !path.ends_with(name) => format!("{path}.{name}"),
            (_, false) => path,
            (None, true) => String::new(),
        };
        let field = format!("{prefix}{field}");
        let field = field.trim_end_matches('.');
        let shown = if field.is_empty() { "body" } else { field };
        ApiError::new(400, "invalid_input", format!("{shown}: {inner}"), Some(shown))
    }

    /// This error as one of item `index` of a batch: its field under `prefix` (`memories[3].`).
    pub fn in_item(mut self, prefix: &str, index: usize) -> Self {
        let field = self.body["error"]["field"].as_str().map(|f| format!("{prefix}{f}"));
        self.body["error"]["field"] = field.map_or_else(|| Value::from(prefix.trim_end_matches('.')), Value::from);
        self.body["error"]["index"] = Value::from(index);
        self
    }

    /// A runtime error that named no field, as one naming `field`.
    fn or_field(mut self, field: &str) -> Self {
        if self.body["error"]["field"].is_null() {
            self.body["error"]["field"] = Value::from(field);
        }
        self
    }
}

impl From<AtlasError> for ApiError {
    fn from(e: AtlasError) -> Self {
        let status = match &e {
            AtlasError::InvalidInput { .. } => 400,
            AtlasError::Forbidden { .. } => 403,
            AtlasError::NotFound(_) => 404,
            AtlasError::Conflict(_) => 409,
            AtlasError::Busy(_) => 503,
            _ => 500,
        };
        let mut body = wire::error_value(e.code(), &e.to_string(), Some(&e));
        if let AtlasError::Conflict(_) = e {
            body["error"]["field"] = Value::from("Idempotency-Key");
        }
        ApiError { status, body }
    }
}

pub type OpResult = Result<Value, ApiError>;

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

fn scope(s: Option<ScopeArgs>) -> Scope {
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
    /// Tokens the context may take (4,000 by default; a token is about four characters).
    #[serde(default = "default_budget")]
    pub budget: usize,
    /// The session whose recent history ends the context.
    #[schemars(length(max = MAX_NAME_CHARS))]
    pub session: Option<String>,
    pub scope: Option<ScopeArgs>,
}

fn default_budget() -> usize {
    4_000
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

fn args<T: for<'de> Deserialize<'de>>(args: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(args).map_err(|e| ApiError::from_serde(&e, ""))
}

fn time(field: &str, value: Option<String>) -> Result<Option<Timestamp>, ApiError> {
    value.map(|t| Timestamp::parse(&t).map_err(|m| ApiError::invalid(field, m))).transpose()
}

fn memory_id(id: i64) -> Result<MemoryId, ApiError> {
    if id > 0 { Ok(MemoryId(id)) } else { Err(ApiError::invalid("id", format!("not a memory id: {id}"))) }
}

fn at_most(field: &str, value: usize, cap: usize) -> Result<(), ApiError> {
    if value > cap { Err(ApiError::invalid(field, format!("at most {cap}, got {value}"))) } else { Ok(()) }
}

/// A name given to look something up, within the cap every stored name has.
fn a_name(field: &str, value: &str) -> Result<(), ApiError> {
    check_name(value, field, field).map_err(ApiError::from)
}

fn not_blank(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() { Err(ApiError::invalid(field, format!("`{field}` is empty"))) } else { Ok(()) }
}

/// What an operation needs of its caller: a role, or the whole space (an unconfined caller).
enum Needs {
    Role(Role),
    WholeSpace,
}

fn needs(op: Op) -> Needs {
    match op {
        Op::Health | Op::OpenApi => Needs::Role(Role::Read),
        Op::Recall | Op::RecallMany | Op::Get | Op::Explain | Op::Context | Op::Export => Needs::Role(Role::Read),
        Op::Experiences | Op::Strategies | Op::Concepts => Needs::Role(Role::Read),
        Op::List | Op::Entity | Op::Sessions | Op::Session | Op::Archived => Needs::Role(Role::Read),
        Op::Recover | Op::Feedback => Needs::Role(Role::Write),
        Op::Remember | Op::RememberMany | Op::Import | Op::Forget | Op::Learn => Needs::Role(Role::Write),
        Op::StrategyOutcome | Op::ConceptOutcome => Needs::Role(Role::Write),
        // Counts and cycles over every tenant's memories.
        Op::Stats | Op::Metrics | Op::Consolidate | Op::Cycles => Needs::WholeSpace,
    }
}

/// Whether `caller` may run `op` at all (403 naming `authorization` if not).
pub fn permit(caller: &Caller, op: Op) -> Result<(), ApiError> {
    match (needs(op), caller) {
        (Needs::Role(role), _) => caller.may(role).map_err(|d| ApiError::forbidden("authorization", &d.to_string())),
        (Needs::WholeSpace, Caller::All) => Ok(()),
        (Needs::WholeSpace, Caller::Tenant { .. }) => Err(ApiError::forbidden(
            "authorization",
            "this covers every tenant of the space: it needs an unconfined admin key or the server's token \
             (the sleep cycle also runs in the background)",
        )),
    }
}

/// The request's scope within the caller's tenant: its user and agent forced, another's refused
/// (403 naming `<prefix>scope.user`).
fn confined(caller: &Caller, s: Option<ScopeArgs>, prefix: &str) -> Result<Scope, ApiError> {
    if let Some(s) = &s {
        for (field, value) in [("user", &s.user), ("agent", &s.agent), ("session", &s.session)] {
            if let Some(value) = value {
                a_name(&format!("{prefix}scope.{field}"), value)?;
            }
        }
    }
    caller.confine(scope(s)).map_err(|d| {
        let field = match &d {
            atlas_domain::access::Denied::Scope { field, .. } => format!("{prefix}scope.{field}"),
            atlas_domain::access::Denied::Role { .. } => "authorization".to_owned(),
        };
        ApiError::forbidden(&field, &d.to_string())
    })
}

/// The memory `id` if the caller may see it; another tenant's is not found, so that ids do not
/// tell what exists.
async fn own_memory(atlas: &Atlas, caller: &Caller, id: i64) -> Result<atlas_runtime::MemoryDetail, ApiError> {
    let id = memory_id(id)?;
    match atlas.get(id).await? {
        Some(detail) if caller.sees(&detail.memory.scope) => Ok(detail),
        _ => Err(AtlasError::NotFound(id).into()),
    }
}

/// Whether memory `id` is the caller's: one still in the store is checked there, one only the
/// archive holds by the archive's copy. Whole-space callers own whatever exists.
async fn owns(atlas: &Atlas, caller: &Caller, id: MemoryId) -> Result<bool, ApiError> {
    let scope = match atlas.get(id).await? {
        Some(detail) => Some(detail.memory.scope),
        None => atlas.archived_memory(id)?.map(|m| m.scope),
    };
    Ok(scope.is_some_and(|scope| caller.sees(&scope)))
}

/// The receipt key of a write under the caller's `Idempotency-Key`: a tenant's keys live in
/// their own space, and a batch's key never meets a single write's.
fn receipt_key(caller: &Caller, kind: &str, key: Option<String>) -> Option<String> {
    key.map(|k| match caller {
        Caller::All => format!("{kind}:{k}"),
        Caller::Tenant { tenant, .. } => format!("{kind}@{}:{k}", atlas_runtime::tenant_label(tenant)),
    })
}

/// Runs `op` with `arguments` for `caller`; `key` is the caller's idempotency key for writes.
pub async fn call(atlas: &Atlas, op: Op, arguments: Value, key: Option<String>, caller: &Caller) -> OpResult {
    permit(caller, op)?;
    match op {
        Op::Health => Ok(json!({"status": "ok"})),
        Op::Remember => {
            let item: RememberArgs = args(arguments)?;
            let receipt = receipt_key(caller, "remember", key);
            remember(atlas, caller, vec![item], receipt, false).await.map(|ids| json!({"id": ids[0]}))
        }
        Op::RememberMany => {
            let items: Vec<RememberArgs> = parse_items(arguments, "memories")?;
            let receipt = receipt_key(caller, "remember-batch", key);
            remember(atlas, caller, items, receipt, true).await.map(|ids| json!({"ids": ids}))
        }
        Op::Recall => recall(atlas, caller, args(arguments)?).await,
        Op::RecallMany => {
            let queries: Vec<RecallArgs> = parse_items(arguments, "queries")?;
            // Every query is checked before the first runs: a bad batch answers nothing.
            let mut requests = Vec::with_capacity(queries.len());
            for (i, query) in queries.into_iter().enumerate() {
                requests.push(recall_request(caller, query).map_err(|e| e.in_item(&format!("queries[{i}]."), i))?);
            }
            let mut results = Vec::with_capacity(requests.len());
            for (i, (request, explain)) in requests.into_iter().enumerate() {
                let answer =
                    atlas.recall(request).await.map_err(|e| ApiError::from(e).in_item(&format!("queries[{i}]."), i))?;
                results.push(tenant_view(caller, wire::recall_value(&answer, explain)));
            }
            Ok(json!({"results": results}))
        }
        Op::Get => {
            let mut detail = own_memory(atlas, caller, args::<IdArgs>(arguments)?.id).await?;
            let own = detail.memory.id;
            if *caller != Caller::All {
                // Only edges between the caller's own memories: another tenant's ids stay unseen.
                let ends: Vec<MemoryId> =
                    detail.edges.iter().map(|e| if e.src == own { e.dst } else { e.src }).collect();
                let seen: std::collections::HashSet<MemoryId> =
                    atlas.get_many(ends).await?.into_iter().filter(|m| caller.sees(&m.scope)).map(|m| m.id).collect();
                detail.edges.retain(|e| seen.contains(&e.src) || seen.contains(&e.dst) || e.src == e.dst);
            }
            Ok(wire::detail_value(&detail))
        }
        Op::Explain => {
            let memory = own_memory(atlas, caller, args::<IdArgs>(arguments)?.id).await?.memory;
            let mut e = atlas.explain(memory.id).await?.ok_or(AtlasError::NotFound(memory.id))?;
            for list in [&mut e.sources, &mut e.replaced, &mut e.replaced_by, &mut e.entities] {
                list.retain(|m| caller.sees(&m.scope));
            }
            Ok(wire::explanation_value(&e))
        }
        Op::Forget => {
            let ForgetArgs { id, hard } = args(arguments)?;
            // Wherever the memory lives, the store or only the archive: erasure must not depend
            // on where it is.
            let id = memory_id(id)?;
            if !owns(atlas, caller, id).await? {
                return Err(AtlasError::NotFound(id).into());
            }
            let found = if hard {
                let done = atlas.forget_hard(id).await?;
                done.from_store || done.archive_files > 0
            } else {
                atlas.forget(id).await?
            };
            if !found {
                return Err(AtlasError::NotFound(id).into());
            }
            Ok(json!({"forgotten": id.0, "hard": hard}))
        }
        Op::Stats => {
            args::<NoArgs>(arguments)?;
            Ok(wire::stats_value(atlas.config(), &atlas.stats().await?))
        }
        Op::Context => {
            let ContextArgs { task, budget, session, scope: s } = args(arguments)?;
            session.as_deref().map_or(Ok(()), |session| a_name("session", session))?;
            not_blank("task", &task)?;
            let mut scope = confined(caller, s, "")?;
            scope.session = session.or(scope.session);
            Ok(wire::context_value(
                &atlas.context(&task, budget, scope).await.map_err(|e| ApiError::from(e).or_field("task"))?,
            ))
        }
        Op::Consolidate => {
            let report = if args::<ConsolidateArgs>(arguments)?.end_sessions {
                atlas.consolidate_ending_sessions().await?
            } else {
                atlas.consolidate().await?
            };
            Ok(serde_json::to_value(report).expect("a report serialises"))
        }
        Op::Experiences => {
            let TaskArgs { task, k, scope: s, .. } = args(arguments)?;
            not_blank("task", &task)?;
            at_most("k", k, MAX_K)?;
            let hits = atlas.search_experiences(&task, k, confined(caller, s, "")?).await?;
            Ok(json!({"task": task, "hits": hits.iter().map(wire::experience_value).collect::<Vec<_>>()}))
        }
        Op::Strategies => {
            let TaskArgs { task, k, scope: s, explore } = args(arguments)?;
            not_blank("task", &task)?;
            at_most("k", k, MAX_K)?;
            let hits = atlas.read_strategies(&task, k, confined(caller, s, "")?, explore).await?;
            Ok(json!({"task": task, "hits": hits.iter().map(wire::strategy_value).collect::<Vec<_>>()}))
        }
        Op::Concepts => {
            let TaskArgs { task, k, scope: s, .. } = args(arguments)?;
            not_blank("task", &task)?;
            at_most("k", k, MAX_K)?;
            Ok(json!({"concepts": atlas.search_concepts(&task, k, confined(caller, s, "")?).await?}))
        }
        Op::StrategyOutcome => {
            let OutcomeArgs { id, success } = args(arguments)?;
            let id = own_memory(atlas, caller, id).await?.memory.id;
            let strategy = atlas.update_strategy(id, success).await.map_err(|e| ApiError::from(e).or_field("id"))?;
            Ok(wire::strategy_value(&strategy))
        }
        Op::ConceptOutcome => {
            let OutcomeArgs { id, success } = args(arguments)?;
            let id = own_memory(atlas, caller, id).await?.memory.id;
            let concept = atlas.record_concept_use(id, success).await.map_err(|e| ApiError::from(e).or_field("id"))?;
            Ok(serde_json::to_value(concept).expect("a concept serialises"))
        }
        Op::Learn => learn(atlas, caller, args(arguments)?).await,
        Op::List => list(atlas, caller, args(arguments)?).await,
        Op::Recover => {
            let id = memory_id(args::<IdArgs>(arguments)?.id)?;
            if !owns(atlas, caller, id).await? {
                return Err(AtlasError::NotFound(id).into());
            }
            match atlas.recover(id).await? {
                Some(how) => Ok(wire::recovered_value(id, how)),
                None => Err(AtlasError::NotFound(id).into()),
            }
        }
        Op::Feedback => {
            let FeedbackArgs { id, useful } = args(arguments)?;
            let id = own_memory(atlas, caller, id).await?.memory.id;
            let memory = atlas.feedback(id, useful).await.map_err(|e| ApiError::from(e).or_field("id"))?;
            Ok(wire::feedback_value(&memory, useful))
        }
        Op::Entity => {
            let EntityArgs { name, scope: s } = args(arguments)?;
            not_blank("name", &name)?;
            a_name("name", &name)?;
            let view =
                atlas.entity(&name, confined(caller, s, "")?).await.map_err(|e| ApiError::from(e).or_field("name"))?;
            Ok(wire::entity_value(&view, atlas_runtime::now()))
        }
        Op::Sessions => {
            let SessionsArgs { scope: s, before, limit } = args(arguments)?;
            at_most("limit", limit, MAX_PAGE)?;
            let sessions = atlas.sessions(confined(caller, s, "")?, cursor(before)?, limit).await?;
            Ok(wire::sessions_value(&sessions))
        }
        Op::Session => {
            let SessionArgs { session, scope: s, before, limit } = args(arguments)?;
            not_blank("session", &session)?;
            a_name("session", &session)?;
            at_most("limit", limit, MAX_PAGE)?;
            let mut scope = confined(caller, s, "")?;
            scope.session = Some(session);
            let view = atlas.session(scope, cursor(before)?, limit).await?;
            Ok(wire::session_value(&view, atlas_runtime::now()))
        }
        Op::Cycles => {
            args::<NoArgs>(arguments)?;
            Ok(json!({"cycles": atlas.cycles(RECENT_CYCLES).await?}))
        }
        Op::Archived => {
            args::<NoArgs>(arguments)?;
            let mut archived = atlas.archived(MAX_PAGE, |m| caller.sees(&m.scope)).await?;
            if *caller != Caller::All {
                // A file holds every tenant's memories: its name and size are not a tenant's to see.
                archived.files.clear();
                for (file, _) in &mut archived.memories {
                    file.clear();
                }
            }
            Ok(wire::archived_value(&archived))
        }
        Op::Metrics | Op::OpenApi | Op::Import | Op::Export => {
            unreachable!("{op:?} answers in its transport, not in JSON")
        }
    }
}

/// The items of `{"<field>": [...]}`, each parsed on its own so that an error names its index.
fn parse_items<T: for<'de> Deserialize<'de>>(arguments: Value, field: &str) -> Result<Vec<T>, ApiError> {
    let Value::Object(mut o) = arguments else {
        return Err(ApiError::invalid(field, format!("expected an object {{\"{field}\": [...]}}")));
    };
    if let Some(other) = o.keys().find(|k| *k != field) {
        return Err(ApiError::invalid(other, format!("unknown field `{other}` beside `{field}`")));
    }
    let Some(Value::Array(items)) = o.remove(field) else {
        return Err(ApiError::invalid(field, format!("`{field}` must be an array")));
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(ApiError::invalid(field, format!("give 1 to {MAX_BATCH} items, got {}", items.len())));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_path_to_error::deserialize(v)
                .map_err(|e| ApiError::from_serde(&e, "").in_item(&format!("{field}[{i}]."), i))
        })
        .collect()
}

/// Stores every item or none, in one transaction; in a `batch`, an error names its item
/// (`memories[i].time`, `index`).
async fn remember(
    atlas: &Atlas,
    caller: &Caller,
    items: Vec<RememberArgs>,
    receipt: Option<String>,
    batch: bool,
) -> Result<Vec<i64>, ApiError> {
    let in_item = |e: ApiError, i: usize| if batch { e.in_item(&format!("memories[{i}]."), i) } else { e };
    let mut inputs = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let mut scope = confined(caller, item.scope, "").map_err(|e| in_item(e, i))?;
        if item.session.is_some() {
            scope.session = item.session;
        }
        let when = time("time", item.time).map_err(|e| in_item(e, i))?;
        inputs.push(Remember { text: item.text, speaker: item.speaker, scope, time: when, meta: item.meta, key: None });
    }
    match atlas.remember_all(inputs, receipt).await {
        Ok(ids) => Ok(ids.into_iter().map(|id| id.0).collect()),
        // The runtime names a batch's item `memories[i]` and the field in its message.
        Err(e @ AtlasError::InvalidInput { .. }) => {
            let (location, field) = e.location().map(|(l, f)| (l.to_owned(), f.map(str::to_owned))).unzip();
            let index = location
                .as_deref()
                .and_then(|l| l.strip_prefix("memories["))
                .and_then(|l| l.split(']').next())
                .and_then(|n| n.parse::<usize>().ok());
            let mut error = ApiError::from(e);
            error.body["error"]["field"] = Value::from(field.flatten().unwrap_or_else(|| "text".into()));
            Err(match index {
                Some(i) if batch => error.in_item(&format!("memories[{i}]."), i),
                _ => error,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The kinds a request names, each checked (`kind[i]` names a bad one).
fn kinds(names: &[String]) -> Result<Vec<MemoryKind>, ApiError> {
    names
        .iter()
        .enumerate()
        .map(|(i, k)| k.parse::<MemoryKind>().map_err(|m| ApiError::invalid(&format!("kind[{i}]"), m)))
        .collect()
}

/// A recall's request within the caller's tenant, checked whole; and whether to explain.
fn recall_request(caller: &Caller, request: RecallArgs) -> Result<(RecallRequest, bool), ApiError> {
    not_blank("query", &request.query)?;
    at_most("k", request.k, MAX_K)?;
    let kinds = kinds(&request.kind)?;
    let recall = RecallRequest {
        query: request.query,
        k: request.k,
        scope: confined(caller, request.scope, "")?,
        kinds,
        since: time("since", request.since)?,
        until: time("until", request.until)?,
        as_of: time("as_of", request.as_of)?,
    };
    Ok((recall, request.explain))
}

async fn recall(atlas: &Atlas, caller: &Caller, request: RecallArgs) -> OpResult {
    let (request, explain) = recall_request(caller, request)?;
    let recall = atlas.recall(request).await.map_err(|e| ApiError::from(e).or_field("query"))?;
    Ok(tenant_view(caller, wire::recall_value(&recall, explain)))
}

/// An answer as a tenant may see it: without the space's backlog of vectors, which moves with
/// every tenant's writes.
fn tenant_view(caller: &Caller, mut value: Value) -> Value {
    if *caller != Caller::All
        && let Some(o) = value.as_object_mut()
    {
        o.remove("pending_vectors");
    }
    value
}

/// How many cycle reports the cycles route returns.
const RECENT_CYCLES: usize = 20;

fn cursor(before: Option<String>) -> Result<Option<atlas_runtime::inspect::Cursor>, ApiError> {
    before.map(|b| atlas_runtime::inspect::Cursor::parse(&b).map_err(|m| ApiError::invalid("before", m))).transpose()
}

async fn list(atlas: &Atlas, caller: &Caller, request: ListArgs) -> OpResult {
    at_most("limit", request.limit, MAX_PAGE)?;
    let filter = atlas_domain::RecallFilter {
        scope: confined(caller, request.scope, "")?,
        kinds: kinds(&request.kind)?,
        since: time("since", request.since)?,
        until: time("until", request.until)?,
        valid_at: time("as_of", request.as_of)?,
        forgotten: request.forgotten,
    };
    let page = atlas.list(filter, cursor(request.before)?, request.limit).await?;
    Ok(wire::page_value(&page, atlas_runtime::now()))
}

async fn learn(atlas: &Atlas, caller: &Caller, request: TrajectoryArgs) -> OpResult {
    let scope = confined(caller, request.scope, "")?;
    let line = Value::Object(request.trajectory).to_string();
    let trajectory = atlas_domain::jsonl::parse_trajectory_line(&line, atlas_runtime::now()).map_err(|e| {
        let field = e.field.as_deref().map(|f| format!("trajectory.{f}")).unwrap_or_else(|| "trajectory".into());
        ApiError::invalid(&field, e.message.clone())
    })?;
    let stored = atlas.store_experiences(vec![trajectory.clone()], scope.clone()).await?;
    let strategy = if request.learn {
        atlas
            .write_strategy(&trajectory, scope)
            .await?
            .map(|w| json!({"updated": w.updated, "strategy": wire::strategy_value(&w.strategy)}))
    } else {
        None
    };
    Ok(json!({"experience": stored.first(), "strategy": strategy}))
}
