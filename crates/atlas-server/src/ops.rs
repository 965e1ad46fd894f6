//! The operations behind every route and tool, free of any transport: each takes its arguments
//! as one JSON object (an HTTP body with the route's path and query folded in, or an MCP tool's
//! arguments), calls the runtime and answers in the CLI's `--json` shape (`atlas_runtime::wire`).
//! The argument types are the API's contract: they refuse unknown fields, and their doc comments
//! become the descriptions of the OpenAPI document and of the MCP tools' input schemas.

use crate::Op;
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

    /// A serde error as a 400 naming the field (serde names it between backticks: "unknown
    /// field `x`", "missing field `text`"), under `prefix` for an item of a batch.
    pub fn from_serde(e: &serde_json::Error, prefix: &str) -> Self {
        let message = e.to_string();
        let field = message.split('`').nth(1).map(|f| format!("{prefix}{f}"));
        ApiError::new(400, "invalid_input", format!("request body: {message}"), field.as_deref())
    }
}

impl From<AtlasError> for ApiError {
    fn from(e: AtlasError) -> Self {
        let status = match &e {
            AtlasError::InvalidInput { .. } => 400,
            AtlasError::NotFound(_) => 404,
            AtlasError::Busy(_) => 503,
            _ => 500,
        };
        ApiError { status, body: wire::error_value(e.code(), &e.to_string(), Some(&e)) }
    }
}

pub type OpResult = Result<Value, ApiError>;

/// Who a memory belongs to; recall only looks inside the scope it is given.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ScopeArgs {
    /// The user the memory is about or from (one per person the agent serves).
    pub user: Option<String>,
    /// The agent that keeps it (when several agents share one space).
    pub agent: Option<String>,
    /// One conversation or task run.
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
    pub speaker: Option<String>,
    /// The conversation it belongs to (the same as `scope.session`); turns of one session are
    /// linked in order.
    pub session: Option<String>,
    pub scope: Option<ScopeArgs>,
    /// When it happened (RFC 3339, e.g. "2026-11-23T17:00:00Z"); now when absent.
    pub time: Option<String>,
    /// Any JSON object kept with the memory and returned with it.
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
        Op::Get | Op::Explain => generator.into_root_schema_for::<IdArgs>(),
        Op::Forget => generator.into_root_schema_for::<ForgetArgs>(),
        Op::Context => generator.into_root_schema_for::<ContextArgs>(),
        Op::Consolidate => generator.into_root_schema_for::<ConsolidateArgs>(),
        Op::Experiences | Op::Strategies | Op::Concepts => generator.into_root_schema_for::<TaskArgs>(),
        Op::StrategyOutcome | Op::ConceptOutcome => generator.into_root_schema_for::<OutcomeArgs>(),
        Op::Learn => generator.into_root_schema_for::<TrajectoryArgs>(),
        Op::Stats | Op::Health | Op::Metrics | Op::OpenApi | Op::Import | Op::Export => {
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
    serde_json::from_value(args).map_err(|e| ApiError::from_serde(&e, ""))
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

/// Runs `op` with `arguments`; `key` is the caller's idempotency key for writes.
pub async fn call(atlas: &Atlas, op: Op, arguments: Value, key: Option<String>) -> OpResult {
    match op {
        Op::Health => Ok(json!({"status": "ok"})),
        Op::Remember => remember(atlas, vec![(args(arguments)?, key)], false).await.map(|ids| json!({"id": ids[0]})),
        Op::RememberMany => {
            let items: Vec<RememberArgs> = parse_items(arguments, "memories")?;
            // One key per request; each memory of a batch gets its own under it.
            let keyed =
                items.into_iter().enumerate().map(|(i, m)| (m, key.as_ref().map(|k| format!("{k}#{i}")))).collect();
            remember(atlas, keyed, true).await.map(|ids| json!({"ids": ids}))
        }
        Op::Recall => recall(atlas, args(arguments)?).await,
        Op::RecallMany => {
            let queries: Vec<RecallArgs> = parse_items(arguments, "queries")?;
            let mut results = Vec::with_capacity(queries.len());
            for (i, query) in queries.into_iter().enumerate() {
                results.push(recall(atlas, query).await.map_err(|e| prefixed(e, &format!("queries[{i}]."), i))?);
            }
            Ok(json!({"results": results}))
        }
        Op::Get => {
            let id = memory_id(args::<IdArgs>(arguments)?.id)?;
            let detail = atlas.get(id).await?.ok_or(AtlasError::NotFound(id))?;
            Ok(wire::detail_value(&detail))
        }
        Op::Explain => {
            let id = memory_id(args::<IdArgs>(arguments)?.id)?;
            let e = atlas.explain(id).await?.ok_or(AtlasError::NotFound(id))?;
            Ok(wire::explanation_value(&e))
        }
        Op::Forget => {
            let ForgetArgs { id, hard } = args(arguments)?;
            let id = memory_id(id)?;
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
            let mut scope = scope(s);
            scope.session = session.or(scope.session);
            Ok(wire::context_value(&atlas.context(&task, budget, scope).await?))
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
            at_most("k", k, MAX_K)?;
            let hits = atlas.search_experiences(&task, k, scope(s)).await?;
            Ok(json!({"task": task, "hits": hits.iter().map(wire::experience_value).collect::<Vec<_>>()}))
        }
        Op::Strategies => {
            let TaskArgs { task, k, scope: s, explore } = args(arguments)?;
            at_most("k", k, MAX_K)?;
            let hits = atlas.read_strategies(&task, k, scope(s), explore).await?;
            Ok(json!({"task": task, "hits": hits.iter().map(wire::strategy_value).collect::<Vec<_>>()}))
        }
        Op::Concepts => {
            let TaskArgs { task, k, scope: s, .. } = args(arguments)?;
            at_most("k", k, MAX_K)?;
            Ok(json!({"concepts": atlas.search_concepts(&task, k, scope(s)).await?}))
        }
        Op::StrategyOutcome => {
            let OutcomeArgs { id, success } = args(arguments)?;
            Ok(wire::strategy_value(&atlas.update_strategy(memory_id(id)?, success).await?))
        }
        Op::ConceptOutcome => {
            let OutcomeArgs { id, success } = args(arguments)?;
            let concept = atlas.record_concept_use(memory_id(id)?, success).await?;
            Ok(serde_json::to_value(concept).expect("a concept serialises"))
        }
        Op::Learn => learn(atlas, args(arguments)?).await,
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
        .map(|(i, v)| serde_json::from_value(v).map_err(|e| ApiError::from_serde(&e, &format!("{field}[{i}]."))))
        .collect()
}

/// An error of one item of a batch, its field under the item's path.
fn prefixed(mut e: ApiError, prefix: &str, index: usize) -> ApiError {
    let field = e.body["error"]["field"].as_str().map(|f| format!("{prefix}{f}"));
    e.body["error"]["field"] = field.map_or_else(|| Value::from(prefix.trim_end_matches('.')), Value::from);
    e.body["error"]["index"] = Value::from(index);
    e
}

/// Stores `items` in order; in a `batch`, an error names its item (`memories[i].time`).
async fn remember(
    atlas: &Atlas,
    items: Vec<(RememberArgs, Option<String>)>,
    batch: bool,
) -> Result<Vec<i64>, ApiError> {
    // Every item is checked before the first is stored: a bad batch stores nothing.
    let mut inputs = Vec::with_capacity(items.len());
    for (i, (item, key)) in items.into_iter().enumerate() {
        let mut scope = scope(item.scope);
        if item.session.is_some() {
            scope.session = item.session;
        }
        let when =
            time("time", item.time).map_err(|e| if batch { prefixed(e, &format!("memories[{i}]."), i) } else { e })?;
        inputs.push(Remember { text: item.text, speaker: item.speaker, scope, time: when, meta: item.meta, key });
    }
    let mut ids = Vec::with_capacity(inputs.len());
    for input in inputs {
        ids.push(atlas.remember(input).await?.0);
    }
    Ok(ids)
}

async fn recall(atlas: &Atlas, request: RecallArgs) -> OpResult {
    at_most("k", request.k, MAX_K)?;
    let kinds = request
        .kind
        .iter()
        .map(|k| k.parse::<MemoryKind>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| ApiError::invalid("kind", m))?;
    let recall = atlas
        .recall(RecallRequest {
            query: request.query,
            k: request.k,
            scope: scope(request.scope),
            kinds,
            since: time("since", request.since)?,
            until: time("until", request.until)?,
            as_of: time("as_of", request.as_of)?,
        })
        .await?;
    Ok(wire::recall_value(&recall, request.explain))
}

async fn learn(atlas: &Atlas, request: TrajectoryArgs) -> OpResult {
    let line = Value::Object(request.trajectory).to_string();
    let trajectory = atlas_domain::jsonl::parse_trajectory_line(&line, atlas_runtime::now()).map_err(|e| {
        let field = e.field.as_deref().map(|f| format!("trajectory.{f}")).unwrap_or_else(|| "trajectory".into());
        ApiError::invalid(&field, e.message.clone())
    })?;
    let scope = scope(request.scope);
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
