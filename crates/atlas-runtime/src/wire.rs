//! The JSON shapes ATLAS answers in, shared by every driving adapter (the CLI's `--json` and
//! the HTTP and MCP server), so that a client can switch between them: a recall, a memory with
//! its edges, the stats of a space, a context, the agent memories' hits, an error.

use crate::agents::{ExperienceHit, StrategyHit};
use crate::context::Context;
use crate::forgetting::{Forgotten, Recovered};
use crate::{Imported, MemoryDetail, Recall, Stats};
use atlas_domain::{AtlasError, Body, Memory, Scope};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// A memory as every door answers it: id, kind, text, session and the rest of its scope, the
/// speaker of an episode or the body of anything else, its times and meta. Owned here, apart
/// from the export file's line (`atlas_domain::jsonl`), so that a change to the file format never
/// changes an answer of the API, nor the other way round.
pub fn memory_value(m: &Memory) -> Value {
    #[derive(Serialize)]
    struct Shape<'a> {
        id: i64,
        kind: &'a str,
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<Scope>,
        #[serde(skip_serializing_if = "Option::is_none")]
        speaker: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
        time: String,
        recorded_at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        valid_from: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        valid_until: Option<String>,
        #[serde(skip_serializing_if = "Map::is_empty")]
        meta: &'a Map<String, Value>,
    }
    let scope = Scope { session: None, ..m.scope.clone() };
    let body = match &m.body {
        Body::Episode { .. } => None,
        other => {
            let mut body = serde_json::to_value(other).expect("a body serialises");
            if let Value::Object(fields) = &mut body {
                // Said once, at the top.
                fields.remove("kind");
            }
            Some(body)
        }
    };
    let shape = Shape {
        id: m.id.0,
        kind: m.kind().as_str(),
        text: &m.text,
        session: m.scope.session.as_deref(),
        scope: (!scope.is_empty()).then_some(scope),
        speaker: m.body.speaker(),
        body,
        time: m.event_time.to_rfc3339(),
        recorded_at: m.recorded_at.to_rfc3339(),
        valid_from: (m.validity.valid_from != m.event_time).then(|| m.validity.valid_from.to_rfc3339()),
        valid_until: m.validity.valid_until.map(|t| t.to_rfc3339()),
        meta: &m.meta,
    };
    serde_json::to_value(shape).expect("a memory's shape serialises")
}

/// The answer of a forget: the id, whether for good, and then from how many archive files.
pub fn forgotten_value(id: atlas_domain::MemoryId, forgotten: Forgotten) -> Value {
    match forgotten {
        Forgotten::Soft => json!({"forgotten": id.0, "hard": false}),
        Forgotten::Hard { archive_files } => json!({"forgotten": id.0, "hard": true, "archive_files": archive_files}),
    }
}

/// One recall: its hits (each memory's record with its score, its rank per signal, folded
/// duplicates, a fact's validity and confidence, a consolidated memory's sources and, with
/// `explain`, each signal's rank, score and contribution), the signals, stages and backlog.
pub fn recall_value(recall: &Recall, explain: bool) -> Value {
    let hits: Vec<Value> = recall
        .hits
        .iter()
        .map(|h| {
            let mut line = memory_value(&h.memory);
            let ranks: serde_json::Map<String, Value> =
                h.signals.iter().map(|(s, v)| (s.as_str().to_owned(), Value::from(v.rank))).collect();
            line["score"] = Value::from(h.score);
            line["ranks"] = Value::Object(ranks);
            if !h.duplicates.is_empty() {
                line["duplicates"] = h.duplicates.iter().map(|d| Value::from(d.0)).collect();
            }
            if let atlas_domain::Body::Fact { confidence, .. } = &h.memory.body {
                // A fact says when it held and how sure ATLAS is of it.
                line["valid_from"] = Value::from(h.memory.validity.valid_from.to_rfc3339());
                line["valid_until"] =
                    h.memory.validity.valid_until.map_or(Value::Null, |t| Value::from(t.to_rfc3339()));
                line["confidence"] = Value::from(f64::from(*confidence));
            }
            if !h.sources.is_empty() {
                line["sources"] = h.sources.iter().map(memory_value).collect();
            }
            if let Some(passage) = &h.passage {
                // Offsets in Unicode code points, as Python slices strings (JavaScript counts
                // UTF-16 units: its clients read `text`).
                let chars = |byte: usize| h.memory.text[..byte].chars().count();
                line["passage"] = json!({"start": chars(passage.start), "end": chars(passage.end),
                                         "text": passage.of(&h.memory.text)});
            }
            if explain {
                let detail: serde_json::Map<String, Value> = h
                    .signals
                    .iter()
                    .map(|(s, v)| {
                        let entry = json!({"rank": v.rank, "score": v.raw, "contribution": v.contribution});
                        (s.as_str().to_owned(), entry)
                    })
                    .collect();
                line["explain"] = Value::Object(detail);
            }
            line
        })
        .collect();
    let signals: serde_json::Map<String, Value> = recall
        .signals
        .iter()
        .map(|s| (s.signal.as_str().to_owned(), json!({"used": s.used, "note": s.note})))
        .collect();
    let s = &recall.stages;
    let stages = json!({
        "words_ms": s.words_ms,
        "query_embedding_ms": s.query_embedding_ms,
        "text_ms": s.text_ms,
        "text_rows_ms": s.text_rows_ms,
        "vector_ms": s.vector_ms,
        "fusion_ms": s.fusion_ms,
        "fuse_ms": s.fuse_ms,
        "walk_ms": s.walk_ms,
        "spread_ms": s.spread_ms,
        "fetch_ms": s.fetch_ms,
        "rules_ms": s.rules_ms,
        "folding_ms": s.folding_ms,
        "sources_ms": s.sources_ms,
    });
    json!({"took_ms": recall.took_ms, "stages": stages, "hits": hits, "signals": signals,
           "pending_vectors": recall.pending_vectors})
}

/// A memory's record with its edges (and its lifecycle once something happened to it).
pub fn detail_value(detail: &MemoryDetail) -> Value {
    let edges: Vec<Value> = detail
        .edges
        .iter()
        .map(|e| {
            json!({"src": e.src.0, "dst": e.dst.0, "kind": e.kind.as_str(), "weight": e.weight,
                   "valid_from": e.validity.valid_from.to_rfc3339(),
                   "valid_until": e.validity.valid_until.map(|t| t.to_rfc3339())})
        })
        .collect();
    let mut line = record_value(&detail.memory);
    line["edges"] = Value::Array(edges);
    line
}

/// A memory's record with its lifecycle once something happened to it (soft deletion, use,
/// review): what `get` answers without the edges, and what the bindings' `latest` lists.
pub fn record_value(m: &Memory) -> Value {
    let mut line = memory_value(m);
    if !m.lifecycle.is_fresh() {
        line["lifecycle"] = serde_json::to_value(m.lifecycle).expect("a lifecycle serialises");
    }
    line
}

/// The counts and sizes of a memory space; `db` is its file, null for a space named on a Qdrant server
/// (`space` then holds its name).
pub fn stats_value(config: &crate::Config, stats: &Stats) -> Value {
    let s = &stats.store;
    let by_kind: serde_json::Map<String, Value> =
        s.memories_by_kind.iter().map(|(k, n)| (k.as_str().to_owned(), Value::from(*n))).collect();
    let model = s.embedding_model.as_ref().map(|m| json!({"name": m.name, "dimension": m.dimension}));
    let space = config.named_space();
    let db = space.is_none().then(|| config.db.display().to_string());
    let usage = stats.embedder_usage.map(|u| {
        json!({"calls": u.calls, "retries": u.retries, "failures": u.failures, "texts": u.texts, "tokens": u.tokens})
    });
    json!({"db": db, "space": space, "memories": s.memories(), "by_kind": by_kind, "edges": s.edges,
    "soft_deleted": s.soft_deleted, "vectors": s.vectors, "pending_vectors": s.pending_vectors, "bytes": s.bytes,
    "schema_version": s.schema_version, "embedding_model": model, "embedder": stats.embedder,
    "embedder_usage": usage, "vector_failed": {
        "count": stats.vector_failed.0,
        "memories": stats.vector_failed.1.iter().map(|(id, why)| json!({"id": id.0, "reason": why})).collect::<Vec<_>>()
    }})
}

/// `{"error": {"code", "message", "field", "location"}}`: what was wrong and where.
pub fn error_value(code: &str, message: &str, error: Option<&AtlasError>) -> Value {
    let (location, field) = error.and_then(AtlasError::location).unzip();
    json!({"error": {"code": code, "message": message, "field": field.flatten(), "location": location}})
}

/// An experience found for a task: what was done, how it ended, what was said about it.
pub fn experience_value(h: &ExperienceHit) -> Value {
    json!({"id": h.id, "memory_id": h.memory_id.0, "task": h.task, "success": h.success, "outcome": h.outcome,
           "feedback": h.feedback, "steps": h.steps, "score": h.score})
}

/// A strategy with its success statistics.
pub fn strategy_value(s: &StrategyHit) -> Value {
    json!({"id": s.id.0, "situation": s.situation, "suggestion": s.suggestion, "usage_count": s.usage_count,
           "success_rate": s.success_rate, "score": s.score})
}

/// A built context: its sections, budget and tokens, and the prompt text they make.
pub fn context_value(context: &Context) -> Value {
    let mut value = serde_json::to_value(context).expect("a context serialises");
    value["text"] = Value::from(context.text());
    value
}

/// A memory's provenance and history: its sources, the versions it replaced and what replaced
/// it, the entities it names, its decay.
pub fn explanation_value(e: &crate::Explanation) -> Value {
    let lines = |ms: &[atlas_domain::Memory]| -> Vec<Value> { ms.iter().map(memory_value).collect() };
    let mut memory = memory_value(&e.memory);
    memory["valid_from"] = Value::from(e.memory.validity.valid_from.to_rfc3339());
    memory["valid_until"] = e.memory.validity.valid_until.map_or(Value::Null, |t| Value::from(t.to_rfc3339()));
    json!({"memory": memory, "sources": lines(&e.sources), "replaced": lines(&e.replaced),
           "replaced_by": lines(&e.replaced_by), "entities": lines(&e.entities),
           "decay": {"strength": e.strength, "decays": e.decays, "lifecycle": e.memory.lifecycle},
           "judgments": e.judgments, "supersession": e.supersession})
}

/// What an import stored: how many, their ids, and whether it was a replay, a restore, renumbered.
pub fn imported_value(imported: &Imported) -> Value {
    // `imported`: what this call stored (none on a replay); `ids`: the memories that hold this
    // content, stored now or by the earlier import a replay answers for.
    let stored_now = if imported.replayed { 0 } else { imported.ids.len() };
    json!({"imported": stored_now, "ids": imported.ids, "replayed": imported.replayed,
           "restored": imported.restored, "renumbered": imported.renumbered,
           "vectors": imported.vectors, "recorded_at": imported.recorded_at.to_rfc3339()})
}

/// A memory brought back, and how (undeleted, from the archive, or never forgotten).
pub fn recovered_value(id: atlas_domain::MemoryId, how: Recovered) -> Value {
    json!({"recovered": id.0, "how": how})
}

/// Feedback on a recalled memory, with the lifecycle it left.
pub fn feedback_value(memory: &atlas_domain::Memory, useful: bool) -> Value {
    json!({"id": memory.id.0, "useful": useful, "lifecycle": memory.lifecycle})
}

/// A memory as a listing shows it: its record, its validity (and a fact's confidence), its
/// lifecycle, and how it is ageing now: its strength, whether it decays at all, whether the
/// decay pass would let it go, when a reviewed fact is due again.
pub fn listed_value(m: &atlas_domain::Memory, at: atlas_domain::Timestamp) -> Value {
    use atlas_domain::policy::decay;
    let mut line = memory_value(m);
    line["valid_from"] = Value::from(m.validity.valid_from.to_rfc3339());
    line["valid_until"] = m.validity.valid_until.map_or(Value::Null, |t| Value::from(t.to_rfc3339()));
    if let atlas_domain::Body::Fact { confidence, .. } = &m.body {
        line["confidence"] = Value::from(f64::from(*confidence));
    }
    let strength = decay::strength_at(m, at);
    let aging = decay::aging_of(m);
    line["lifecycle"] = serde_json::to_value(m.lifecycle).expect("a lifecycle serialises");
    line["decay"] = json!({"strength": strength, "decays": aging != decay::Aging::Never,
                           "fading": decay::fades(strength, aging),
                           "next_review": decay::next_review(m).map(|t| t.to_rfc3339())});
    line
}

/// A page of a listing, and the cursor of the next (null after the last).
pub fn page_value(page: &crate::inspect::Page, at: atlas_domain::Timestamp) -> Value {
    json!({"memories": page.memories.iter().map(|m| listed_value(m, at)).collect::<Vec<_>>(),
           "next": page.next.map(|c| c.to_string())})
}

/// What is known of an entity: its entity memories, every fact about it and the latest
/// memories that name it, oldest first.
pub fn entity_value(view: &crate::inspect::EntityView, at: atlas_domain::Timestamp) -> Value {
    let list = |ms: &[atlas_domain::Memory]| ms.iter().map(|m| listed_value(m, at)).collect::<Vec<_>>();
    json!({"name": view.name, "entities": list(&view.entities), "facts": list(&view.facts),
           "mentions": view.mentions.iter().map(memory_value).collect::<Vec<_>>()})
}

/// Sessions newest first (summarised, then open ones on the first page) and the next cursor.
pub fn sessions_value(sessions: &crate::inspect::Sessions) -> Value {
    let row = |r: &crate::inspect::SessionRow| {
        json!({"session": r.scope.session, "user": r.scope.user, "agent": r.scope.agent,
               "last_turn": r.last_turn.map(|t| t.to_rfc3339()),
               "summary": r.summary.as_ref().map(memory_value)})
    };
    json!({"sessions": sessions.sessions.iter().map(row).collect::<Vec<_>>(),
           "open": sessions.open.iter().map(row).collect::<Vec<_>>(),
           "next": sessions.next.map(|c| c.to_string())})
}

/// A session's turns in spoken order, each with the ids of the facts found in it, the facts,
/// its summary and the cursor of earlier turns.
pub fn session_value(view: &crate::inspect::SessionView, at: atlas_domain::Timestamp) -> Value {
    let turns: Vec<Value> = view
        .turns
        .iter()
        .map(|m| {
            let mut line = memory_value(m);
            line["facts"] = view.found.get(&m.id).map_or_else(Vec::new, |ids| ids.iter().map(|i| i.0).collect()).into();
            line
        })
        .collect();
    json!({"session": view.scope.session, "user": view.scope.user, "agent": view.scope.agent,
           "summary": view.summary.as_ref().map(memory_value), "turns": turns,
           "facts": view.facts.iter().map(|m| listed_value(m, at)).collect::<Vec<_>>(),
           "earlier": view.earlier.map(|c| c.to_string())})
}

/// What the archive holds: memories (each with its file, when the caller may see file names)
/// and the files with their counts.
pub fn archived_value(archived: &crate::inspect::Archived) -> Value {
    let memories: Vec<Value> = archived
        .memories
        .iter()
        .map(|(file, m)| {
            let mut line = memory_value(m);
            if !file.is_empty() {
                line["archive"] = Value::from(file.as_str());
            }
            line
        })
        .collect();
    let files: Vec<Value> = archived.files.iter().map(|(f, n)| json!({"file": f, "memories": n})).collect();
    json!({"memories": memories, "files": files})
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_domain::{MemoryId, Timestamp, Validity};

    fn at(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// The answer shape is a contract of every door (HTTP, MCP, the CLI's `--json`, Python):
    /// pinned here field by field, so that changing it is a decision, not a side effect.
    #[test]
    fn a_memory_answers_in_the_documented_shape() {
        let scope = Scope { user: Some("ann".into()), session: Some("s1".into()), ..Scope::default() };
        let mut meta = Map::new();
        meta.insert("mid".into(), Value::from(7));
        let episode = Memory {
            id: MemoryId(42),
            scope: scope.clone(),
            text: "I moved to Lisbon".into(),
            event_time: at(1_700_000_000_000),
            recorded_at: at(1_700_000_001_000),
            validity: Validity { valid_from: at(1_700_000_000_000), valid_until: None },
            meta,
            body: Body::Episode { speaker: Some("Ann".into()) },
            context: Some("Bo: where do you live now?".into()),
            lifecycle: atlas_domain::Lifecycle::default(),
        };
        assert_eq!(
            memory_value(&episode),
            json!({"id": 42, "kind": "episode", "text": "I moved to Lisbon", "session": "s1",
                   "scope": {"user": "ann"}, "speaker": "Ann", "time": "2023-11-14T22:13:20Z",
                   "recorded_at": "2023-11-14T22:13:21Z", "meta": {"mid": 7}})
        );
        let fact = Memory {
            text: "Ann lives in Lisbon".into(),
            scope: Scope { user: Some("ann".into()), ..Scope::default() },
            validity: Validity { valid_from: at(1_600_000_000_000), valid_until: Some(at(1_800_000_000_000)) },
            meta: Map::new(),
            body: serde_json::from_value(json!({"kind": "fact", "subject": "Ann", "predicate": "lives_in",
                                                "object": "Lisbon", "confidence": 0.9}))
            .expect("a fact's body"),
            ..episode
        };
        let value = memory_value(&fact);
        assert_eq!(value["kind"], "fact");
        assert_eq!(value["body"]["object"], "Lisbon");
        assert!(
            value["body"].get("kind").is_none() && value.get("speaker").is_none() && value.get("session").is_none()
        );
        assert_eq!(value["valid_from"], "2020-09-13T12:26:40Z");
        assert_eq!(value["valid_until"], "2027-01-15T08:00:00Z");
        assert!(value.get("meta").is_none() && value.get("context").is_none());
    }
}
