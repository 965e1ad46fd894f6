//! The sleep cycle end to end on SQLite: the seeds' scenarios of changed minds and states, with
//! rules only and with a scripted model; failures of the model lose nothing and are retried.

use atlas_domain::ports::{Consolidator, MemoryStore};
use atlas_domain::{Body, EdgeKind, MemoryKind, Scope, Timestamp};
use atlas_runtime::config::ConsolidationConfig;
use atlas_runtime::{Atlas, Config, ImportOptions, Parts, RecallRequest, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::ScriptedLlm;
use std::path::Path;
use std::sync::Arc;

const DAY: i64 = 86_400_000;

async fn space(dir: &Path, llm: Option<Arc<ScriptedLlm>>) -> (Atlas, Arc<SqliteStore>) {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let mut parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store.clone());
    if let Some(llm) = llm {
        parts = parts.with_llm(llm);
    }
    let config = Config {
        db,
        consolidation: ConsolidationConfig { retry_after_ms: 0, ..ConsolidationConfig::default() },
        ..Config::default()
    };
    (Atlas::from_parts(parts, config).await.unwrap(), store)
}

fn said(text: &str, speaker: &str, day: i64) -> Remember {
    Remember {
        text: text.into(),
        speaker: Some(speaker.into()),
        scope: Scope { user: Some("ann".into()), agent: None, session: Some(format!("day{day}")) },
        time: Some(Timestamp(day * DAY)),
        ..Remember::default()
    }
}

fn facts(query: &str, as_of: Option<i64>) -> RecallRequest {
    RecallRequest {
        query: query.into(),
        k: 5,
        kinds: vec![MemoryKind::Fact],
        as_of: as_of.map(|d| Timestamp(d * DAY)),
        ..RecallRequest::default()
    }
}

async fn first_fact(atlas: &Atlas, query: &str, as_of: Option<i64>) -> String {
    let recall = atlas.recall(facts(query, as_of)).await.unwrap();
    recall.hits.first().map(|h| h.memory.text.clone()).unwrap_or_default()
}

#[tokio::test]
async fn the_fixture_consolidates_by_rule_into_current_states_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, _) = space(dir.path(), None).await;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo/changes.jsonl");
    atlas.import_file(&fixture, ImportOptions::default(), None).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.episodes_seen, report.skipped_phatic, report.llm_calls), (10, 3, 0));
    assert_eq!(report.facts_superseded, 2, "{report:?}");
    let now = first_fact(&atlas, "what does the checkout service run on", None).await;
    assert_eq!(now, "checkout-service is now: rolled back to Python after the latency spike");
    let april = Timestamp::parse("2024-04-20T00:00:00Z").unwrap().millis() / DAY;
    assert_eq!(
        first_fact(&atlas, "what does the checkout service run on", Some(april)).await,
        "checkout-service is now: migrated to Rust"
    );
    let march = Timestamp::parse("2024-03-10T00:00:00Z").unwrap().millis() / DAY;
    assert_eq!(
        first_fact(&atlas, "what does the checkout service run on", Some(march)).await,
        "checkout-service is now: running on Python 3.11"
    );
    // Rules found the names the turns share; a second cycle has nothing left to do.
    let again = atlas.consolidate().await.unwrap();
    assert_eq!(again.episodes_seen, 0);
    assert_eq!(atlas.cycles(10).await.unwrap().len(), 1, "an empty cycle leaves no ledger row");
}

#[tokio::test]
async fn python_then_rust_with_a_model_gives_one_current_truth_and_a_history() {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![Ok(r#"{"facts": [
        {"turn": 1, "fact": "I prefer Python", "confidence": 0.9},
        {"turn": 2, "fact": "Ann prefers Rust", "confidence": 0.9},
        {"turn": 3, "fact": "Ann works for Company A"},
        {"turn": 4, "fact": "Ann works at Company B."},
        {"turn": 4, "fact": "Ann might teleport to Mars"},
        {"turn": 3, "fact": "Ann lives in Paris"}
    ]}"#
    .into())]));
    let (atlas, store) = space(dir.path(), Some(llm.clone())).await;
    for (text, day) in
        [("I prefer Python", 1), ("I write Rust now", 10), ("I work at Company A", 2), ("I joined Company B", 12)]
    {
        atlas.remember(said(text, "Ann", day)).await.unwrap();
    }
    let report = atlas.consolidate().await.unwrap();
    assert_eq!(
        (report.llm_calls, report.facts_added, report.facts_superseded, report.predicates_rejected),
        (1, 4, 2, 1)
    );
    assert_eq!(report.facts_ungrounded, 1, "Paris is not said in turn 3: {report:?}");
    assert!(report.input_tokens > 0 && report.output_tokens > 0, "the ledger counts tokens");
    assert!(llm.requests()[0].json_schema.is_some(), "the answer is constrained by a schema");
    assert_eq!(first_fact(&atlas, "which language does Ann prefer", None).await, "Ann prefers Rust");
    assert_eq!(first_fact(&atlas, "which language does Ann prefer", Some(5)).await, "Ann prefers Python");
    assert_eq!(first_fact(&atlas, "where does Ann work", None).await, "Ann works at Company B");
    assert_eq!(first_fact(&atlas, "where does Ann work", Some(5)).await, "Ann works at Company A");
    // The old fact stays, ended when the new one was said, and the new one says what it replaced.
    let rust = atlas.recall(facts("which language does Ann prefer", None)).await.unwrap().hits.remove(0);
    let edges = store.edges_of(rust.memory.id).await.unwrap();
    let replaced = edges.iter().find(|e| e.kind == EdgeKind::Supersedes).expect("a supersedes edge").dst;
    let python = store.get(replaced).await.unwrap().unwrap();
    assert_eq!(python.validity.valid_until, Some(Timestamp(10 * DAY)));
    assert_eq!(rust.sources.len(), 1);
    assert_eq!(rust.sources[0].text, "I write Rust now");
}

#[tokio::test]
async fn a_fact_stated_twice_is_one_fact_with_two_sources_and_others_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, _) = space(dir.path(), None).await;
    atlas.remember(said("Noted.\n- S:billing: on call is Bruno\n- S:search: healthy", "Agent", 1)).await.unwrap();
    atlas.remember(said("- S:billing: on call is Bruno", "Agent", 2)).await.unwrap();
    atlas.remember(said("- S:billing: on call is Chloe", "Agent", 3)).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.facts_added, report.facts_merged, report.facts_superseded), (3, 1, 1), "{report:?}");
    let bruno = atlas.recall(facts("billing on call Bruno", Some(2))).await.unwrap().hits.remove(0);
    assert_eq!(bruno.memory.text, "billing is now: on call is Bruno");
    assert_eq!(bruno.sources.len(), 2, "one fact, two sources");
    assert_eq!(first_fact(&atlas, "who is on call for billing", None).await, "billing is now: on call is Chloe");
    assert_eq!(
        first_fact(&atlas, "is search healthy", None).await,
        "search is now: healthy",
        "an unrelated entity is never superseded"
    );
}

#[tokio::test]
async fn a_bad_answer_loses_nothing_and_the_episodes_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![
        Ok("Sure! Here are the facts: Ann likes tea.".into()),
        Err("timed out after 30 s".into()),
        Ok(r#"{"facts": [{"turn": 1, "fact": "Ann likes green tea"}]}"#.into()),
    ]));
    let (atlas, store) = space(dir.path(), Some(llm.clone())).await;
    atlas.remember(said("I really like green tea", "Ann", 1)).await.unwrap();
    atlas.remember(said("ok", "Ann", 1)).await.unwrap();
    for expected in ["not JSON", "timed out"] {
        let report = atlas.consolidate().await.unwrap();
        assert_eq!(
            (report.failed, report.facts_added, report.skipped_phatic),
            (1, 0, usize::from(expected == "not JSON"))
        );
        let left = store.unprocessed(10, 5, 0, Timestamp(i64::MAX / 4)).await.unwrap();
        assert_eq!(left.len(), 1, "the episode waits for a retry");
        let last = atlas.cycles(1).await.unwrap().remove(0);
        assert_eq!(last["failed"], 1);
    }
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.failed, report.facts_added), (0, 1));
    assert_eq!(llm.requests().len(), 3);
    assert!(store.unprocessed(10, 5, 0, Timestamp(i64::MAX / 4)).await.unwrap().is_empty());
}

#[tokio::test]
async fn at_most_one_model_call_per_cycle_the_rest_deferred() {
    let dir = tempfile::tempdir().unwrap();
    let answer = r#"{"facts": []}"#.to_string();
    let llm = Arc::new(ScriptedLlm::new(vec![Ok(answer.clone()), Ok(answer)]));
    let (atlas, _) = space(dir.path(), Some(llm.clone())).await;
    for i in 0..30 {
        atlas.remember(said(&format!("note number {i} about the garden shed"), "Ann", 1)).await.unwrap();
    }
    let first = atlas.consolidate().await.unwrap();
    assert_eq!((first.llm_calls, first.deferred), (1, 6));
    let second = atlas.consolidate().await.unwrap();
    assert_eq!((second.episodes_seen, second.llm_calls, second.deferred), (6, 1, 0));
    assert_eq!(llm.requests().len(), 2);
}

/// `turns_per_call = 1`, the offline set-up: each call reads one person's turn, the budget counts
/// calls, and the agent's own turns are never sent.
#[tokio::test]
async fn one_turn_a_call_reads_people_not_the_agent_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let answer = r#"{"facts": []}"#.to_string();
    let llm = Arc::new(ScriptedLlm::new(vec![Ok(answer.clone()), Ok(answer.clone()), Ok(answer)]));
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store.clone()).with_llm(llm.clone());
    let consolidation = ConsolidationConfig { turns_per_call: 1, llm_calls: 3, ..ConsolidationConfig::default() };
    let atlas = Atlas::from_parts(parts, Config { db, consolidation, ..Config::default() }).await.unwrap();
    for i in 0..5 {
        atlas.remember(said(&format!("the shed needs coat number {i} of paint"), "Ann", 1)).await.unwrap();
        atlas.remember(said(&format!("I can suggest paint brand {i} for it"), "assistant", 1)).await.unwrap();
    }
    let report = atlas.consolidate().await.unwrap();
    assert_eq!((report.llm_calls, report.deferred), (3, 2), "{report:?}");
    for request in llm.requests() {
        let lines: Vec<&str> = request.prompt.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one turn a call: {lines:?}");
        assert!(lines[0].contains("coat number"), "a person's turn, never the agent's: {lines:?}");
        let most = &request.json_schema.as_ref().unwrap()["properties"]["facts"]["maxItems"];
        assert_eq!(most, 3, "the schema allows a few facts for one turn");
    }
}

#[tokio::test]
async fn entities_link_the_turns_that_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, store) = space(dir.path(), None).await;
    let a = atlas.remember(said("We decided to move the checkout to Kafka last week.", "Ann", 1)).await.unwrap();
    let b = atlas
        .remember(said("During the latency spike the Kafka cluster was on call with Bruno.", "Ann", 2))
        .await
        .unwrap();
    atlas.consolidate().await.unwrap();
    let kafka = |id| {
        let store = store.clone();
        async move {
            let mut out = Vec::new();
            for e in store.edges_of(id).await.unwrap().into_iter().filter(|e| e.kind == EdgeKind::Entity) {
                if let Body::Entity { name, .. } = store.get(e.dst).await.unwrap().unwrap().body {
                    out.push(name);
                }
            }
            out
        }
    };
    assert_eq!(kafka(a).await, vec!["Kafka"]);
    let mut names = kafka(b).await;
    names.sort();
    assert_eq!(names, vec!["Bruno", "Kafka"]);
}

/// The whole cycle through the HTTP adapter against a real server (the sleep cycle's local
/// model: the wire, the schema and the pipeline; `cargo xtask eval --sleep` measures quality).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_runs_the_cycle_end_to_end() {
    let server = match atlas_testing::servers::llm_server() {
        Ok(server) => server,
        Err(why) => {
            return atlas_testing::servers::skipped("atlas-runtime a_real_model_runs_the_cycle_end_to_end", &why);
        }
    };
    let mut endpoint = atlas_llm::Endpoint::new("real", atlas_llm::Provider::OpenAi, &server.url, &server.model);
    endpoint.max_tokens = 1024;
    endpoint.timeout = std::time::Duration::from_secs(300);
    let llm: Arc<dyn atlas_domain::ports::Llm> = Arc::new(atlas_llm::HttpLlm::new(endpoint).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store.clone()).with_llm(llm);
    let atlas = Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap();
    atlas.remember(said("I used to prefer Python, but I write Rust at work now.", "Ann", 1)).await.unwrap();
    atlas.remember(said("My sister Maria lives in Lisbon.", "Ann", 2)).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!(report.llm_calls, 1, "{report:?}");
    assert!(report.input_tokens > 0 && report.output_tokens > 0, "{report:?}");
    // A schema-constrained answer is always readable: the episodes are done, not failed.
    assert_eq!(report.failed, 0, "{report:?}");
    assert!(store.unprocessed(10, 5, 0, Timestamp(i64::MAX / 4)).await.unwrap().is_empty());
    assert_eq!(atlas.cycles(1).await.unwrap()[0]["llm_calls"], 1);
}

async fn until_a_cycle(atlas: &Atlas) -> serde_json::Value {
    for _ in 0..100 {
        if let Some(report) = atlas.cycles(1).await.unwrap().pop() {
            return report;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no background cycle ran within 5 s");
}

#[tokio::test]
async fn a_long_lived_process_consolidates_by_count_idleness_and_session_end() {
    for (every, idle_secs, end_session) in [(3, 3_600, false), (1_000, 1, false), (1_000, 3_600, true)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("atlas.db");
        let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
        let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store.clone());
        let consolidation = ConsolidationConfig { every, idle_secs, ..ConsolidationConfig::default() };
        let atlas = Atlas::from_parts(parts, Config { db, consolidation, ..Config::default() }).await.unwrap();
        atlas.start_sleep_cycle();
        for day in 1..=3 {
            atlas.remember(said(&format!("- S:billing: on call is person {day}"), "Agent", day)).await.unwrap();
        }
        if end_session {
            atlas.end_session();
        }
        let report = until_a_cycle(&atlas).await;
        assert!(report["episodes_seen"].as_u64().unwrap() >= 1, "every {every}, idle {idle_secs}: {report}");
    }
}

/// The dialectic (seed 003): an observation about the user enters core memory only when three
/// episodes bear it out, once, with its provenance.
#[tokio::test]
async fn observations_about_the_user_enter_core_memory_once_verified() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, _) = space(dir.path(), None).await;
    let stages = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 1)];
    for (day, (observations, hypotheses, verified)) in stages.into_iter().enumerate() {
        atlas
            .remember(said("- U-Preference: wants short answers with code first", "Ann", day as i64 + 1))
            .await
            .unwrap();
        let r = atlas.consolidate().await.unwrap();
        assert_eq!((r.user_observations, r.user_hypotheses, r.user_verified), (observations, hypotheses, verified));
        assert_eq!(r.core_added, usize::from(day == 2), "day {day}: {r:?}");
    }
    let core = atlas
        .recall(RecallRequest {
            query: "short answers code first".into(),
            k: 5,
            kinds: vec![MemoryKind::Core],
            ..RecallRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(core.hits.len(), 1, "one core entry, however often it is borne out");
    let entry = &core.hits[0].memory;
    assert!(matches!(&entry.body, Body::Core { category } if category == "user_profile"));
    let explained = atlas.explain(entry.id).await.unwrap().unwrap();
    let observation = &explained.sources[0];
    assert!(matches!(observation.body, Body::Fact { confidence, .. } if confidence >= 0.9), "{observation:?}");
    assert_eq!(atlas.explain(observation.id).await.unwrap().unwrap().sources.len(), 4, "four supporting turns");
}

/// Closed sessions get a summary for context assembly: extractive without a model, the model's
/// when the budget allows; a session that goes on gets a new one that supersedes the old.
#[tokio::test]
async fn closed_sessions_are_summarised_and_resummarised_when_they_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, store) = space(dir.path(), None).await;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo/changes.jsonl");
    atlas.import_file(&fixture, ImportOptions::default(), None).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!(report.summaries_added, 3, "one per closed session: {report:?}");
    let summaries = |query: &str| {
        atlas.recall(RecallRequest {
            query: query.into(),
            k: 5,
            kinds: vec![MemoryKind::Summary],
            ..RecallRequest::default()
        })
    };
    let hits = summaries("checkout service Python").await.unwrap().hits;
    let s1 = hits.iter().find(|h| h.memory.scope.session.as_deref() == Some("ops/s1")).expect("s1's summary");
    assert!(s1.memory.text.contains("checkout service runs on Python"), "{}", s1.memory.text);
    assert!(!s1.memory.text.contains("Hi there"), "small talk stays out: {}", s1.memory.text);
    assert_eq!(s1.memory.meta["origin"], "extractive");
    let turns = store.edges_of(s1.memory.id).await.unwrap();
    assert!(turns.iter().filter(|e| e.kind == EdgeKind::DerivedFrom).count() >= 3, "derived from its turns");
    // Plain recall never returns summaries: they restate turns.
    let plain =
        atlas.recall(RecallRequest { query: "checkout service Python".into(), k: 10, ..RecallRequest::default() });
    assert!(plain.await.unwrap().hits.iter().all(|h| h.memory.kind() != MemoryKind::Summary));
    assert_eq!(atlas.consolidate().await.unwrap().summaries_added, 0, "summarised once");

    // The session goes on: its new summary replaces the old one, kept as history.
    let later = Remember {
        text: "The checkout service moved to the platform team in June.".into(),
        speaker: Some("Ann".into()),
        scope: Scope { user: Some("ann".into()), agent: None, session: Some("ops/s1".into()) },
        time: Some(Timestamp::parse("2024-06-01T09:00:00Z").unwrap()),
        ..Remember::default()
    };
    atlas.remember(later).await.unwrap();
    assert_eq!(atlas.consolidate().await.unwrap().summaries_added, 1);
    let hits = summaries("checkout service Python platform team").await.unwrap().hits;
    let current: Vec<_> = hits.iter().filter(|h| h.memory.scope.session.as_deref() == Some("ops/s1")).collect();
    assert_eq!(current.len(), 1, "only the current summary is valid now");
    assert!(matches!(current[0].memory.body, Body::Summary { turns, .. } if turns > 3));
    let replaced = store.edges_of(current[0].memory.id).await.unwrap();
    assert!(replaced.iter().any(|e| e.kind == EdgeKind::Supersedes && e.dst == s1.memory.id));
}

#[tokio::test]
async fn the_model_writes_summaries_within_the_cycles_budget() {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![
        // Two things Ann did, alike in words: the model judges them once (its own budget).
        Ok(r#"{"judgments": [{"pair": 1, "verdict": "both"}]}"#.into()),
        Ok(r#"{"summary": "Ann planned the garden shed."}"#.into()),
        Ok("no JSON here".into()),
    ]));
    let (atlas, _) = space(dir.path(), Some(llm.clone())).await;
    atlas.remember(said("- B: built the garden shed frame", "Ann", 1)).await.unwrap();
    atlas.remember(said("- B: painted the garden shed", "Ann", 2)).await.unwrap();
    let first = atlas.consolidate().await.unwrap();
    assert_eq!((first.summaries_added, first.summaries_deferred, first.llm_calls), (1, 1, 2), "{first:?}");
    assert_eq!((first.judgments.len(), first.judgments[0].by, first.facts_added), (1, "model", 2));
    let second = atlas.consolidate().await.unwrap();
    assert_eq!((second.summaries_added, second.llm_calls), (1, 1), "a bad answer falls back to extractive");
    let all = atlas
        .recall(RecallRequest {
            query: "garden shed".into(),
            k: 5,
            kinds: vec![MemoryKind::Summary],
            ..RecallRequest::default()
        })
        .await
        .unwrap();
    let origins: Vec<String> = all.hits.iter().map(|h| h.memory.meta["origin"].as_str().unwrap().to_owned()).collect();
    assert_eq!(origins.len(), 2);
    assert!(origins.contains(&"llm".to_owned()) && origins.contains(&"extractive".to_owned()), "{origins:?}");
    assert!(llm.requests()[0].json_schema.is_some());
}

/// Embeds "NYC" as "New York City" (as a real model nearly does); everything else by its words.
struct Synonyms(atlas_testing::HashEmbedder);

#[async_trait::async_trait]
impl atlas_domain::ports::Embedder for Synonyms {
    fn model(&self) -> atlas_domain::ports::EmbeddingModel {
        atlas_domain::ports::Embedder::model(&self.0)
    }

    async fn embed(&self, texts: Vec<String>) -> atlas_domain::Result<Vec<Vec<f32>>> {
        let texts = texts.into_iter().map(|t| if t == "NYC" { "New York City".to_owned() } else { t }).collect();
        atlas_domain::ports::Embedder::embed(&self.0, texts).await
    }
}

/// Near-duplicates that share no word merge by the similarity of their embeddings; without an
/// embedder the rule sees a change of state.
#[tokio::test]
async fn a_restatement_in_other_words_is_the_same_fact_by_embedding() {
    for with_embedder in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("atlas.db");
        let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
        let embedder: Option<Arc<dyn atlas_domain::ports::Embedder>> =
            with_embedder.then(|| Arc::new(Synonyms(atlas_testing::HashEmbedder::new(64))) as _);
        let parts = Parts::from_store(Arc::clone(&store), embedder).with_consolidator(store.clone());
        let atlas = Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap();
        atlas.remember(said("- S:ann-home: NYC", "Agent", 1)).await.unwrap();
        atlas.remember(said("- S:ann-home: New York City", "Agent", 2)).await.unwrap();
        let r = atlas.consolidate().await.unwrap();
        if with_embedder {
            assert_eq!((r.facts_added, r.facts_merged, r.facts_superseded), (1, 1, 0), "{r:?}");
        } else {
            assert_eq!((r.facts_added, r.facts_merged, r.facts_superseded), (2, 0, 1), "{r:?}");
        }
    }
}

/// Seed 001's multi-hop question: two facts from different days answer one question, and
/// recall brings both, each with the turn it came from.
#[tokio::test]
async fn a_multi_hop_question_finds_the_decision_and_who_was_on_call() {
    let dir = tempfile::tempdir().unwrap();
    let (atlas, _) = space(dir.path(), None).await;
    let turns = [
        ("We decided in the design review: checkout moves to Kafka.\n- S:checkout: moving to Kafka", 10),
        ("Lunch is at noon today.", 10),
        ("The search index rebuild finished overnight.", 11),
        ("Heads up: a latency spike at 14:05 on the API.", 12),
        (
            "During the latency spike the on call service was billing-service.\n- S:billing-service: on call during the latency spike",
            12,
        ),
        ("The design review notes are in the wiki.", 13),
    ];
    for (text, day) in turns {
        atlas.remember(said(text, "Agent", day)).await.unwrap();
    }
    atlas.consolidate().await.unwrap();
    let question =
        "what did we decide about checkout last week, and which service was on call when the latency spike happened?";
    let recall = atlas.recall(facts(question, None)).await.unwrap();
    let texts: Vec<&str> = recall.hits.iter().take(2).map(|h| h.memory.text.as_str()).collect();
    assert!(texts.contains(&"checkout is now: moving to Kafka"), "{texts:?}");
    assert!(texts.contains(&"billing-service is now: on call during the latency spike"), "{texts:?}");
    assert!(recall.hits.iter().take(2).all(|h| h.sources.len() == 1), "each with the turn it came from");
    // Over everything (episodes too), both evidence turns are in the top five.
    let all = atlas.recall(RecallRequest { query: question.into(), k: 5, ..RecallRequest::default() }).await.unwrap();
    let found: Vec<&str> = all.hits.iter().map(|h| h.memory.text.as_str()).collect();
    assert!(
        found.iter().any(|t| t.contains("checkout")) && found.iter().any(|t| t.contains("billing-service")),
        "{found:?}"
    );
}

/// The fixture again, with a (scripted) model reading the turns the rules cannot: its facts
/// join the rules' in one cycle and one call, a statement of what might be is rejected and counted.
#[tokio::test]
async fn the_fixture_consolidates_with_the_fake_model_too() {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![Ok(r#"{"facts": [
        {"turn": 3, "fact": "Bruno is on call for the latency spike on Tuesday"},
        {"turn": 4, "fact": "Ann decided to roll checkout back to Python"},
        {"turn": 4, "fact": "Ann might teleport nowhere"}
    ]}"#
    .into())]));
    let (atlas, _) = space(dir.path(), Some(llm.clone())).await;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo/changes.jsonl");
    atlas.import_file(&fixture, ImportOptions::default(), None).await.unwrap();
    let report = atlas.consolidate().await.unwrap();
    assert_eq!(
        (report.llm_calls, report.failed, report.deferred, report.predicates_rejected),
        (1, 0, 0, 1),
        "{report:?}"
    );
    let read: Vec<String> = llm.requests()[0].prompt.lines().map(str::to_owned).collect();
    assert_eq!(read.len(), 4, "the model reads only the untagged, non-phatic turns: {read:?}");
    assert_eq!(
        first_fact(&atlas, "who was on call during the latency spike", None).await,
        "Bruno on call the latency spike on Tuesday"
    );
    assert_eq!(
        first_fact(&atlas, "what did Ann decide about checkout", None).await,
        "Ann decided to roll checkout back to Python"
    );
    // The rules' current truth stands beside the model's facts; the history stays history.
    let now = atlas.recall(facts("what does the checkout service run on", None)).await.unwrap();
    let texts: Vec<&str> = now.hits.iter().map(|h| h.memory.text.as_str()).collect();
    assert!(
        texts[..2].contains(&"checkout-service is now: rolled back to Python after the latency spike"),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.contains("migrated to Rust") || t.contains("running on Python 3.11")), "{texts:?}");
    assert_eq!(atlas.cycles(1).await.unwrap()[0]["llm_calls"], 1, "the ledger counts the call");
}

/// What consolidation believes, independent of ids and of when it was learned: each fact with
/// its validity and the turns it was said in, and which fact supersedes which.
type Belief = (Vec<(String, String, String, i64, Option<i64>, Vec<String>)>, Vec<(String, String)>);

async fn belief(store: &SqliteStore) -> Belief {
    let subjects = vec!["ann".to_owned(), "bo".to_owned(), "world".to_owned()];
    let scope = Scope { user: Some("ann".into()), agent: None, session: None };
    let facts = store.known(subjects, Vec::new(), scope).await.unwrap();
    let name = |m: &atlas_domain::Memory| match &m.body {
        Body::Fact { subject, predicate, object, .. } => {
            format!("{subject}|{predicate}|{object}@{}", m.validity.valid_from.millis() / DAY)
        }
        _ => unreachable!("known facts only"),
    };
    let mut rows = Vec::new();
    let mut supersedes = Vec::new();
    for m in &facts {
        let Body::Fact { subject, predicate, object, .. } = &m.body else { continue };
        let edges = store.edges_of(m.id).await.unwrap();
        let mut sources = Vec::new();
        for e in edges.iter().filter(|e| e.src == m.id) {
            let other = store.get(e.dst).await.unwrap().unwrap();
            match e.kind {
                EdgeKind::DerivedFrom => sources.push(other.text.lines().next().unwrap_or_default().to_owned()),
                EdgeKind::Supersedes => supersedes.push((name(m), name(&other))),
                _ => {}
            }
        }
        sources.sort();
        let until = m.validity.valid_until.map(|t| t.millis() / DAY);
        rows.push((
            subject.clone(),
            predicate.clone(),
            object.clone(),
            m.validity.valid_from.millis() / DAY,
            until,
            sources,
        ));
    }
    rows.sort();
    supersedes.sort();
    (rows, supersedes)
}

async fn consolidating_space(dir: &Path, batch: usize) -> (Atlas, Arc<SqliteStore>) {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store.clone());
    let consolidation = ConsolidationConfig { batch, summaries: false, ..ConsolidationConfig::default() };
    (Atlas::from_parts(parts, Config { db, consolidation, ..Config::default() }).await.unwrap(), store)
}

proptest::proptest! {
    #![proptest_config(atlas_testing::proptest_config(64))]

    /// Issue 27: the same turns consolidated in one cycle, and imported in random chunks with
    /// cycles of random sizes in between, give the same facts, validity, sources and supersessions.
    #[test]
    fn batching_never_changes_what_consolidation_believes(
        turns in proptest::collection::vec((0usize..5, 1i64..12), 2..14),
        chunks in proptest::collection::vec(1usize..5, 14),
        batch in 1usize..4,
    ) {
        const SAID: [&str; 5] = [
            "- S:Ann: lives in Berlin",
            "- S:Ann: lives in Vienna",
            "- S:Ann: no longer lives in Berlin",
            "- W: the cafe sells sushi",
            "- W: the cafe no longer sells sushi",
        ];
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (whole, split) = runtime.block_on(async {
            let remember = |i: usize, (what, day): (usize, i64)| Remember {
                text: format!("turn {i}\n{}", SAID[what]),
                speaker: Some("Ann".into()),
                scope: Scope { user: Some("ann".into()), agent: None, session: Some("s".into()) },
                time: Some(Timestamp(day * DAY)),
                ..Remember::default()
            };
            let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (atlas, store) = consolidating_space(one.path(), 1_000).await;
            for (i, t) in turns.iter().enumerate() {
                atlas.remember(remember(i, *t)).await.unwrap();
            }
            atlas.consolidate().await.unwrap();
            let whole = belief(&store).await;

            let (atlas, store) = consolidating_space(two.path(), batch).await;
            let mut i = 0;
            for size in &chunks {
                for t in turns.iter().skip(i).take(*size) {
                    atlas.remember(remember(i, *t)).await.unwrap();
                    i += 1;
                }
                atlas.consolidate().await.unwrap();
            }
            while atlas.consolidate().await.unwrap().episodes_seen > 0 {}
            (whole, belief(&store).await)
        });
        proptest::prop_assert_eq!(whole, split);
    }
}

/// Issue 27: a restored backup knows what the sleep cycle consumed, so consolidating it adds
/// nothing and never brings back a fact forgotten on purpose; into a busy space as well.
#[tokio::test]
async fn a_restored_backup_consolidates_nothing_again() {
    let dir = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    let (atlas, store) = space(source.path(), None).await;
    atlas.remember(said("- S:Frank: lives in Berlin", "Ann", 1)).await.unwrap();
    atlas.remember(said("- S:Frank: lives in Vienna", "Ann", 5)).await.unwrap();
    atlas.remember(said("- W: the cafe sells sushi", "Ann", 6)).await.unwrap();
    atlas.consolidate().await.unwrap();
    let facts = |store: Arc<SqliteStore>| async move {
        let scope = Scope { user: Some("ann".into()), agent: None, session: None };
        store.known(vec!["frank".into(), "world".into()], Vec::new(), scope).await.unwrap()
    };
    let sushi = facts(store.clone()).await.into_iter().find(|m| m.text.contains("sushi")).unwrap();
    assert!(atlas.forget(sushi.id).await.unwrap(), "forgotten on purpose");
    let mut backup = Vec::new();
    atlas.export(&mut backup, false).await.unwrap();
    let file = dir.path().join("backup.jsonl");
    std::fs::write(&file, &backup).unwrap();

    for busy in [false, true] {
        let sub = tempfile::tempdir().unwrap();
        let (restored, restored_store) = space(sub.path(), None).await;
        if busy {
            restored.remember(said("something else entirely", "Bo", 2)).await.unwrap();
            restored.consolidate().await.unwrap();
        }
        let before = restored_store.stats().await.unwrap();
        restored.import_file(&file, ImportOptions::default(), None).await.unwrap();
        let imported = restored_store.stats().await.unwrap();
        let report = restored.consolidate().await.unwrap();
        assert_eq!((report.episodes_seen, report.facts_added), (0, 0), "busy {busy}: {report:?}");
        let after = restored_store.stats().await.unwrap();
        assert_eq!((after.memories_by_kind, after.edges), (imported.memories_by_kind.clone(), imported.edges));
        let live: Vec<String> = facts(restored_store.clone())
            .await
            .into_iter()
            .filter(|m| !m.lifecycle.is_deleted())
            .map(|m| m.text)
            .collect();
        assert!(!live.iter().any(|t| t.contains("sushi")), "busy {busy}: the forgotten fact stays forgotten: {live:?}");
        assert!(
            restored.cycles(100).await.unwrap().len() >= atlas.cycles(100).await.unwrap().len(),
            "the ledger of cycles came along"
        );
        let _ = before;
    }
}
