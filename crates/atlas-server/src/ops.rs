//! The operations behind every route and tool, free of any transport: each takes its arguments
//! as one JSON object (an HTTP body with the route's path and query folded in, or an MCP tool's
//! arguments), checks them ([`crate::args`]) and the caller ([`crate::access`]), calls the
//! runtime and answers in the CLI's `--json` shape (`atlas_runtime::wire`).

use crate::Op;
use crate::access::{confined, own_memory, owns, permit, receipt_key};
use crate::args::*;
use atlas_domain::access::Caller;
use atlas_domain::{AtlasError, MemoryId};
use atlas_runtime::{Atlas, RecallRequest, Remember, wire};
use serde::Deserialize;
use serde_json::{Value, json};

pub use crate::args::{MAX_BATCH, MAX_K, MAX_PAGE, schema_of};
pub use crate::error::{ApiError, OpResult};

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
            Ok(wire::forgotten_value(id, atlas.forget_as(id, hard).await?))
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
