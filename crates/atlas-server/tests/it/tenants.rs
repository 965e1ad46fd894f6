//! Tenant keys: random operations of two tenants through every route, and the invariant that
//! nothing of one is ever visible to, or changed by, the other. Each tenant's texts carry a
//! marker the other never sends, so a leak anywhere in any answer (a hit, an edge, an export
//! line, an error) is seen; ids of the other tenant answer 404, and after the run every memory
//! is exactly as its own tenant left it.

use crate::support;

use atlas_domain::Scope;
use atlas_domain::access::Role;
use atlas_server::ServerOptions;
use axum::http::StatusCode;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use support::{Api, atlas, mcp_tool};

const TENANTS: [&str; 2] = ["ann", "bob"];

#[derive(Debug, Clone)]
enum Step {
    Remember {
        words: usize,
    },
    RememberBatch {
        n: usize,
    },
    Import {
        n: usize,
    },
    Recall {
        scoped: bool,
    },
    RecallBatch,
    Context,
    /// Of one of the tenant's own memories (`own`) or of the other's.
    Get {
        own: bool,
        pick: usize,
    },
    Explain {
        own: bool,
        pick: usize,
    },
    Forget {
        own: bool,
        pick: usize,
        hard: bool,
    },
    Export,
    Learn {
        id: u8,
    },
    SearchExperiences,
    ReadStrategies,
    StrategyOutcome {
        own: bool,
        pick: usize,
    },
    SearchConcepts,
    ConceptOutcome {
        own: bool,
        pick: usize,
    },
    Stats,
    Consolidate,
    OtherScope,
    /// The inspector's listings: a page of memories (live or forgotten), sessions, one
    /// session's turns (both tenants import into a session of the same name), an entity, the
    /// archive.
    List {
        forgotten: bool,
    },
    Sessions,
    SessionTurns,
    Entity,
    Archive,
    Cycles,
    Recover {
        own: bool,
        pick: usize,
    },
    Feedback {
        own: bool,
        pick: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..6).prop_map(|words| Step::Remember { words }),
        (1usize..4).prop_map(|n| Step::RememberBatch { n }),
        (1usize..4).prop_map(|n| Step::Import { n }),
        any::<bool>().prop_map(|scoped| Step::Recall { scoped }),
        Just(Step::RecallBatch),
        Just(Step::Context),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::Get { own, pick }),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::Explain { own, pick }),
        (any::<bool>(), any::<usize>(), any::<bool>()).prop_map(|(own, pick, hard)| Step::Forget { own, pick, hard }),
        Just(Step::Export),
        (0u8..3).prop_map(|id| Step::Learn { id }),
        Just(Step::SearchExperiences),
        Just(Step::ReadStrategies),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::StrategyOutcome { own, pick }),
        Just(Step::SearchConcepts),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::ConceptOutcome { own, pick }),
        Just(Step::Stats),
        Just(Step::Consolidate),
        Just(Step::OtherScope),
        any::<bool>().prop_map(|forgotten| Step::List { forgotten }),
        Just(Step::Sessions),
        Just(Step::SessionTurns),
        Just(Step::Entity),
        Just(Step::Archive),
        Just(Step::Cycles),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::Recover { own, pick }),
        (any::<bool>(), any::<usize>()).prop_map(|(own, pick)| Step::Feedback { own, pick }),
    ]
}

/// What each tenant made, as the test saw it.
#[derive(Default)]
struct Ledger {
    ids: BTreeMap<usize, Vec<i64>>,
    soft: BTreeSet<i64>,
    hard: BTreeSet<i64>,
    counter: usize,
}

impl Ledger {
    fn text(&mut self, tenant: usize, words: usize) -> String {
        self.counter += 1;
        let filler = ["garden", "river", "invoice", "violin", "harbour", "pepper"];
        let body: Vec<&str> = (0..words).map(|i| filler[(self.counter + i) % filler.len()]).collect();
        format!("{}marker{} note {} {}", TENANTS[tenant], self.counter, body.join(" "), self.counter)
    }

    fn pick(&self, tenant: usize, own: bool, pick: usize) -> Option<i64> {
        let whose = if own { tenant } else { 1 - tenant };
        let ids = self.ids.get(&whose)?;
        (!ids.is_empty()).then(|| ids[pick % ids.len()])
    }
}

async fn run(steps: Vec<(usize, Step)>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let atlas = atlas(dir.path()).await;
    let mut tokens = Vec::new();
    for user in TENANTS {
        let made = atlas.add_key(Scope { user: Some(user.into()), ..Scope::default() }, Role::Write).await.unwrap();
        tokens.push(made.token);
    }
    let admin = atlas.add_key(Scope::default(), Role::Admin).await.unwrap().token;
    let api = Api { app: atlas_server::router(std::sync::Arc::clone(&atlas), ServerOptions::default()), token: None };
    let mut ledger = Ledger::default();
    for (tenant, step) in steps {
        let token = tokens[tenant].as_str();
        let other = TENANTS[1 - tenant];
        let call = |method: &'static str, path: String, body: Option<Value>| {
            let api = &api;
            async move { api.raw(method, &path, body.map(|b| b.to_string()), Some(token), &[]).await }
        };
        let (status, answer, _) = match &step {
            Step::Remember { words } => {
                let text = ledger.text(tenant, *words);
                let answer = call("POST", "/v1/remember".into(), Some(json!({"text": text, "session": "s"}))).await;
                prop_assert_eq!(answer.0, StatusCode::CREATED, "{}", answer.1);
                ledger.ids.entry(tenant).or_default().push(answer.1["id"].as_i64().unwrap());
                answer
            }
            Step::RememberBatch { n } => {
                let memories: Vec<Value> = (0..*n).map(|_| json!({"text": ledger.text(tenant, 3)})).collect();
                let answer = call("POST", "/v1/remember".into(), Some(json!({"memories": memories}))).await;
                prop_assert_eq!(answer.0, StatusCode::CREATED, "{}", answer.1);
                let ids = answer.1["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap());
                ledger.ids.entry(tenant).or_default().extend(ids);
                answer
            }
            Step::Import { n } => {
                let lines: String =
                    (0..*n).map(|_| format!("{}\n", json!({"text": ledger.text(tenant, 2), "session": "i"}))).collect();
                let answer = api
                    .raw("POST", "/v1/import", Some(lines), Some(token), &[("content-type", "application/x-ndjson")])
                    .await;
                prop_assert_eq!(answer.0, StatusCode::CREATED, "{}", answer.1);
                let ids = answer.1["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap());
                ledger.ids.entry(tenant).or_default().extend(ids);
                answer
            }
            Step::Recall { scoped } => {
                let scope = if *scoped { json!({"user": TENANTS[tenant]}) } else { json!({}) };
                call("POST", "/v1/recall".into(), Some(json!({"query": format!("{other} marker note garden"), "k": 50, "scope": scope, "explain": true}))).await
            }
            Step::RecallBatch => {
                let queries = json!([{"query": "note river"}, {"query": format!("{other}marker1")}]);
                call("POST", "/v1/recall".into(), Some(json!({"queries": queries}))).await
            }
            Step::Context => {
                call("POST", "/v1/context".into(), Some(json!({"task": "note garden invoice", "budget": 2000}))).await
            }
            Step::Get { own, pick } | Step::Explain { own, pick } => {
                let Some(id) = ledger.pick(tenant, *own, *pick) else { continue };
                let path = if matches!(step, Step::Get { .. }) {
                    format!("/v1/memories/{id}")
                } else {
                    format!("/v1/memories/{id}/explain")
                };
                let answer = call("GET", path, None).await;
                let gone = ledger.hard.contains(&id);
                if *own && !gone {
                    prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                } else {
                    prop_assert_eq!(
                        answer.0,
                        StatusCode::NOT_FOUND,
                        "another tenant's id {} is not found: {}",
                        id,
                        answer.1
                    );
                }
                answer
            }
            Step::Forget { own, pick, hard } => {
                let Some(id) = ledger.pick(tenant, *own, *pick) else { continue };
                let answer =
                    call("DELETE", format!("/v1/memories/{id}{}", if *hard { "?hard=true" } else { "" }), None).await;
                if *own && !ledger.hard.contains(&id) {
                    // Forgetting softly what is forgotten already may say it found nothing.
                    let again = !*hard && ledger.soft.contains(&id);
                    prop_assert!(
                        answer.0 == StatusCode::OK || (again && answer.0 == StatusCode::NOT_FOUND),
                        "{}",
                        answer.1
                    );
                    if *hard {
                        ledger.hard.insert(id);
                    } else {
                        ledger.soft.insert(id);
                    }
                } else {
                    prop_assert_eq!(answer.0, StatusCode::NOT_FOUND, "{}", answer.1);
                }
                answer
            }
            Step::Export => {
                let answer = call("GET", "/v1/export".into(), None).await;
                prop_assert_eq!(answer.0, StatusCode::OK);
                let text = answer.1.as_str().unwrap_or_default();
                let exported = text.lines().filter(|l| l.contains("\"text\"")).count();
                let live =
                    ledger.ids.get(&tenant).map_or(0, |ids| ids.iter().filter(|id| !ledger.hard.contains(id)).count());
                let experiences = text.lines().filter(|l| l.contains("\"experience\"")).count();
                prop_assert!(exported >= live, "export holds the tenant's own {live} memories: {text}");
                prop_assert!(exported <= live + experiences + 8, "and little else: {text}");
                answer
            }
            Step::Learn { id } => {
                let trajectory = json!({"id": format!("t{id}"), "task": format!("{} sort the invoices", TENANTS[tenant]),
                                        "steps": [format!("{}marker step", TENANTS[tenant])], "output": "done", "success": true});
                call("POST", "/v1/experiences".into(), Some(json!({"trajectory": trajectory, "learn": true}))).await
            }
            Step::SearchExperiences => {
                call("POST", "/v1/experiences/search".into(), Some(json!({"task": "sort the invoices"}))).await
            }
            Step::ReadStrategies => {
                call("POST", "/v1/strategies/search".into(), Some(json!({"task": "sort the invoices"}))).await
            }
            Step::SearchConcepts => {
                call("POST", "/v1/concepts/search".into(), Some(json!({"task": "sort the invoices"}))).await
            }
            Step::StrategyOutcome { own, pick } | Step::ConceptOutcome { own, pick } => {
                let Some(id) = ledger.pick(tenant, *own, *pick) else { continue };
                let kind = if matches!(step, Step::StrategyOutcome { .. }) { "strategies" } else { "concepts" };
                let answer = call("POST", format!("/v1/{kind}/{id}/outcome"), Some(json!({"success": true}))).await;
                if !*own {
                    prop_assert_eq!(answer.0, StatusCode::NOT_FOUND, "{}", answer.1);
                }
                answer
            }
            Step::List { forgotten } => {
                let answer =
                    call("POST", "/v1/memories/list".into(), Some(json!({"forgotten": forgotten, "limit": 500}))).await;
                prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                answer
            }
            Step::Sessions => {
                let answer = call("POST", "/v1/sessions".into(), Some(json!({}))).await;
                prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                answer
            }
            Step::SessionTurns => {
                let answer = call("POST", "/v1/sessions/turns".into(), Some(json!({"session": "i"}))).await;
                prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                answer
            }
            Step::Entity => {
                let answer = call("POST", "/v1/entity".into(), Some(json!({"name": "garden"}))).await;
                prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                answer
            }
            Step::Archive => {
                let answer = call("GET", "/v1/archive".into(), None).await;
                prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                prop_assert!(answer.1["files"].as_array().is_some_and(Vec::is_empty), "no file names: {}", answer.1);
                let named = answer.1["memories"].as_array().into_iter().flatten().any(|m| m.get("archive").is_some());
                prop_assert!(!named, "no archive file on a tenant's memory: {}", answer.1);
                answer
            }
            Step::Cycles => {
                let answer = call("GET", "/v1/cycles".into(), None).await;
                prop_assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);
                answer
            }
            Step::Recover { own, pick } | Step::Feedback { own, pick } => {
                let Some(id) = ledger.pick(tenant, *own, *pick) else { continue };
                let answer = if matches!(step, Step::Recover { .. }) {
                    let answer = call("POST", format!("/v1/memories/{id}/recover"), None).await;
                    if *own && answer.0 == StatusCode::OK {
                        ledger.soft.remove(&id);
                    }
                    answer
                } else {
                    call("POST", format!("/v1/memories/{id}/feedback"), Some(json!({"useful": true}))).await
                };
                if !*own || ledger.hard.contains(&id) {
                    prop_assert_eq!(answer.0, StatusCode::NOT_FOUND, "{}", answer.1);
                } else {
                    prop_assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
                }
                answer
            }
            Step::Stats | Step::Consolidate => {
                let (method, path) =
                    if matches!(step, Step::Stats) { ("GET", "/v1/stats") } else { ("POST", "/v1/consolidate") };
                let answer = call(method, path.into(), None).await;
                prop_assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.1);
                answer
            }
            Step::OtherScope => {
                let answer =
                    call("POST", "/v1/recall".into(), Some(json!({"query": "note", "scope": {"user": other}}))).await;
                prop_assert_eq!(
                    (answer.0, answer.1["error"]["field"].as_str()),
                    (StatusCode::FORBIDDEN, Some("scope.user"))
                );
                answer
            }
        };
        let shown = answer.to_string();
        prop_assert!(
            !shown.contains(&format!("{other}marker")),
            "{:?} by {}: {} leaked into {}",
            step,
            TENANTS[tenant],
            other,
            shown
        );
        prop_assert!(status.as_u16() < 500, "{:?}: {} {}", step, status, shown);
    }
    // Every memory is as its own tenant left it.
    for (tenant, ids) in &ledger.ids {
        for id in ids {
            let detail = atlas.get(atlas_domain::MemoryId(*id)).await.unwrap();
            if ledger.hard.contains(id) {
                prop_assert!(detail.is_none(), "{} hard-forgotten by its tenant", id);
                continue;
            }
            let memory = detail.unwrap().memory;
            prop_assert_eq!(memory.scope.user.as_deref(), Some(TENANTS[*tenant]), "{} keeps its tenant", id);
            prop_assert_eq!(
                memory.lifecycle.deleted_at.is_some(),
                ledger.soft.contains(id),
                "{} deleted only by its tenant",
                id
            );
        }
    }
    // The admin key sees both.
    let (status, stats, _) = api.raw("GET", "/v1/stats", None, Some(&admin), &[]).await;
    prop_assert_eq!(status, StatusCode::OK, "{}", stats);
    Ok(())
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]
    #[test]
    fn two_tenants_never_see_or_change_each_other(steps in prop::collection::vec((0usize..2, step()), 1..30)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(steps))?;
    }
}

/// A key added while the server runs confines its very first request, and a revoked key is
/// refused within a second.
#[tokio::test]
async fn keys_added_or_revoked_while_serving_take_effect_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = atlas(dir.path()).await;
    let api = Api { app: atlas_server::router(std::sync::Arc::clone(&atlas), ServerOptions::default()), token: None };
    // Open on loopback while there is no key.
    assert_eq!(api.raw("GET", "/v1/stats", None, None, &[]).await.0, StatusCode::OK);
    let made = atlas.add_key(Scope { user: Some("ann".into()), ..Scope::default() }, Role::Write).await.unwrap();
    let (status, body, _) =
        api.raw("POST", "/v1/remember", Some(json!({"text": "mine"}).to_string()), Some(&made.token), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_i64().unwrap();
    let stored = atlas.get(atlas_domain::MemoryId(id)).await.unwrap().unwrap().memory;
    assert_eq!(stored.scope.user.as_deref(), Some("ann"), "the first request is already confined");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(api.raw("GET", "/v1/stats", None, None, &[]).await.0, StatusCode::UNAUTHORIZED, "no longer open");
    atlas.revoke_key(&made.key.id).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (status, _, _) = api.raw("GET", &format!("/v1/memories/{id}"), None, Some(&made.token), &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "revoked within a second");
}

/// A tenant lists its own archived memories without the archive's file names (a file holds
/// every tenant's memories); the whole-space token sees them.
#[tokio::test]
async fn a_tenant_sees_its_archived_memories_without_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = atlas(dir.path()).await;
    let api = Api { app: atlas_server::router(std::sync::Arc::clone(&atlas), ServerOptions::default()), token: None };
    let ann = atlas.add_key(Scope { user: Some("ann".into()), ..Scope::default() }, Role::Write).await.unwrap().token;
    let admin = atlas.add_key(Scope::default(), Role::Admin).await.unwrap().token;
    let (status, body, _) =
        api.raw("POST", "/v1/remember", Some(json!({"text": "ann's old note"}).to_string()), Some(&ann), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_i64().unwrap();
    assert_eq!(api.raw("DELETE", &format!("/v1/memories/{id}"), None, Some(&ann), &[]).await.0, StatusCode::OK);
    let policy = atlas_runtime::forgetting::ArchivePolicy { deleted_days: 0.0, episode_days: None };
    assert_eq!(atlas.archive(policy).await.unwrap().archived, 1);
    let (_, own, _) = api.raw("GET", "/v1/archive", None, Some(&ann), &[]).await;
    assert_eq!(own["memories"][0]["id"], id, "{own}");
    assert!(own["memories"][0].get("archive").is_none() && own["files"] == json!([]), "no file name: {own}");
    let (_, all, _) = api.raw("GET", "/v1/archive", None, Some(&admin), &[]).await;
    assert!(all["memories"][0]["archive"].as_str().is_some_and(|f| f.ends_with(".jsonl.gz")), "{all}");
}

/// Erasure does not depend on where a memory lives: a tenant soft-forgets and hard-forgets its
/// own archived memories over HTTP and MCP (before, both answered 404 "no memory"), another
/// tenant cannot touch them, and after the hard forget no file of the space holds a byte of them.
#[tokio::test]
async fn a_tenant_forgets_its_archived_memories_softly_and_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = atlas(dir.path()).await;
    let api = Api { app: atlas_server::router(std::sync::Arc::clone(&atlas), ServerOptions::default()), token: None };
    let write = |user: &str| Scope { user: Some(user.into()), ..Scope::default() };
    let ann = atlas.add_key(write("ann"), Role::Write).await.unwrap().token;
    let bob = atlas.add_key(write("bob"), Role::Write).await.unwrap().token;
    let secret = "quuxwarbleannsecret";
    let mut ids = Vec::new();
    for text in [format!("ann's passport is {secret}1"), format!("ann's pin is {secret}2")] {
        let (status, body, _) =
            api.raw("POST", "/v1/remember", Some(json!({"text": text}).to_string()), Some(&ann), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    // Both archived as old episodes: live, out of the store.
    let policy = atlas_runtime::forgetting::ArchivePolicy { deleted_days: 0.0, episode_days: Some(0.0) };
    assert_eq!(atlas.archive(policy).await.unwrap().archived, 2);
    let (first, second) = (ids[0], ids[1]);

    for path in [format!("/v1/memories/{first}"), format!("/v1/memories/{first}?hard=true")] {
        let (status, body, _) = api.raw("DELETE", &path, None, Some(&bob), &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's archived memory: {body}");
    }
    let (status, body, _) = api.raw("DELETE", &format!("/v1/memories/{first}"), None, Some(&ann), &[]).await;
    assert_eq!((status, &body), (StatusCode::OK, &json!({"forgotten": first, "hard": false})));
    let archived = atlas.archived_memory(atlas_domain::MemoryId(first)).unwrap().expect("still archived");
    assert!(archived.lifecycle.deleted_at.is_some(), "the archive's copy records the soft forget");

    let (status, body, _) = api.raw("DELETE", &format!("/v1/memories/{first}?hard=true"), None, Some(&ann), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let refused = mcp_tool(&api, Some(&bob), "forget", json!({"id": second, "hard": true})).await;
    assert_eq!(refused["result"]["isError"], json!(true), "another tenant's, over MCP: {refused}");
    let answer = mcp_tool(&api, Some(&ann), "forget", json!({"id": second, "hard": true})).await;
    let forgotten = json!({"forgotten": second, "hard": true, "archive_files": 1});
    assert_eq!(answer["result"]["structuredContent"], forgotten, "{answer}");
    let (_, listed, _) = api.raw("GET", "/v1/archive", None, Some(&ann), &[]).await;
    assert_eq!(listed["memories"], json!([]), "{listed}");

    drop(api);
    drop(atlas);
    let files = files_under(dir.path());
    // The archive file held only these two, so it is gone (a gzip would hide the bytes).
    assert!(!files.iter().any(|f| f.to_string_lossy().ends_with(".gz")), "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{} holds it", file.display());
    }
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .flat_map(|p| if p.is_dir() { files_under(&p) } else { vec![p] })
        .collect()
}
