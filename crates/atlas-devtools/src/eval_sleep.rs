//! `cargo xtask eval --sleep`: the sleep cycle's model band, per model (the rules alone, then
//! each local model of models/manifest.toml on llama.cpp's server): precision and recall of the
//! facts a cycle files from the labelled conversations of `fixtures/extraction/labelled.jsonl`,
//! and the conflict suite's pass count.

use anyhow::{Context, Result, bail};
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::ports::{Consolidator, Llm};
use atlas_domain::{Body, Memory, MemoryKind, RecallFilter, Scope, Timestamp};
use atlas_runtime::config::ConsolidationConfig;
use atlas_runtime::{Atlas, Config, Parts, Remember};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::conflicts::{SuiteSpace, run_suite, scenarios};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Every model the report knows, in its order: `rules` is no model at all.
pub const SLEEP_MODELS: [&str; 4] = ["rules", "smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b"];

/// One labelled fact: what a careful reader files from the turn.
#[derive(Debug, Clone)]
struct Label {
    subject: String,
    relation: String,
    value: String,
}

struct Conversation {
    name: String,
    turns: Vec<(String, String, Vec<Label>)>,
}

fn labelled_set(root: &Path) -> Result<Vec<Conversation>> {
    let path = root.join("fixtures/extraction/labelled.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = |what: &str| format!("{}:{}: {what}", path.display(), i + 1);
        let v: Value = serde_json::from_str(line).with_context(|| at("not JSON"))?;
        let field = |v: &Value, key: &str| -> Result<String> {
            v[key].as_str().map(str::to_owned).with_context(|| at(&format!("field {key:?} missing or not text")))
        };
        let mut turns = Vec::new();
        for turn in v["turns"].as_array().with_context(|| at("field \"turns\" is not an array"))? {
            let mut labels = Vec::new();
            for f in turn["facts"].as_array().with_context(|| at("a turn's \"facts\" is not an array"))? {
                let relation = field(f, "relation")?;
                // A relation of the table, or an unknown one named by its verb (`drives`), as
                // docs/RELATIONS.md reads them.
                let verb = !relation.is_empty() && relation.chars().all(|c| c.is_ascii_lowercase() || c == '_');
                if atlas_domain::policy::relations::canonical_predicate(&relation).is_none() && !verb {
                    bail!(at(&format!("relation {relation:?} is neither in docs/RELATIONS.md nor a verb")));
                }
                labels.push(Label { subject: normalize(&field(f, "subject")?), relation, value: field(f, "value")? });
            }
            turns.push((field(turn, "speaker")?, field(turn, "text")?, labels));
        }
        out.push(Conversation { name: field(&v, "conversation")?, turns });
    }
    Ok(out)
}

/// A value's words, for matching: lower case, without articles and punctuation.
fn words(value: &str) -> Vec<String> {
    value
        .split(|c: char| !c.is_alphanumeric() && c != '@' && c != '.')
        .map(|w| w.trim_matches('.').to_lowercase())
        .filter(|w| !w.is_empty() && !matches!(w.as_str(), "a" | "an" | "the" | "my" | "his" | "her" | "their"))
        .collect()
}

/// A filed fact matches a label when subject and relation are the same and one value's words
/// all appear in the other's (`nurse` and `a nurse at St Mary's`; `not Acme` and `not acme`).
fn matches(label: &Label, subject: &str, relation: &str, object: &str) -> bool {
    let (a, b) = (words(&label.value), words(object));
    let within = |x: &[String], y: &[String]| !x.is_empty() && x.iter().all(|w| y.contains(w));
    label.subject == subject && label.relation == relation && (within(&a, &b) || within(&b, &a))
}

/// What one model scored on the labelled set.
struct Extraction {
    precision: f64,
    recall: f64,
    facts: usize,
    labels: usize,
    wall_s: f64,
    tokens: u64,
    calls: usize,
    failed: usize,
    misses: Vec<String>,
}

fn consolidation(turns_per_call: usize) -> ConsolidationConfig {
    ConsolidationConfig {
        batch: 10_000,
        turns_per_call,
        llm_calls: 10_000,
        judge_calls: 100,
        summaries: false,
        ..ConsolidationConfig::default()
    }
}

async fn space(
    llm: Option<Arc<dyn Llm>>,
    turns_per_call: usize,
) -> Result<(Atlas, Arc<SqliteStore>, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default())?);
    let consolidator: Arc<dyn Consolidator> = store.clone();
    let mut parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(consolidator);
    if let Some(llm) = llm {
        parts = parts.with_llm(llm);
    }
    let atlas =
        Atlas::from_parts(parts, Config { db, consolidation: consolidation(turns_per_call), ..Config::default() })
            .await?;
    Ok((atlas, store, dir))
}

async fn extraction(set: &[Conversation], llm: Option<Arc<dyn Llm>>, turns_per_call: usize) -> Result<Extraction> {
    let (atlas, _store, _dir) = space(llm, turns_per_call).await?;
    let start = Instant::now();
    for (c, conversation) in set.iter().enumerate() {
        let scope =
            Scope { user: Some(conversation.name.clone()), agent: None, session: Some(conversation.name.clone()) };
        for (t, (speaker, text, _)) in conversation.turns.iter().enumerate() {
            // A conversation a day, its turns a minute apart.
            let time = Timestamp(1_767_225_600_000 + c as i64 * 86_400_000 + t as i64 * 60_000);
            let turn = Remember {
                text: text.clone(),
                speaker: Some(speaker.clone()),
                scope: scope.clone(),
                time: Some(time),
                ..Remember::default()
            };
            atlas.remember(turn).await?;
        }
    }
    let (mut tokens, mut calls, mut failed) = (0, 0, 0);
    // Cycles until every turn is read or the model keeps failing the same ones.
    for _ in 0..3 {
        let report = atlas.consolidate().await?;
        tokens += report.input_tokens + report.output_tokens;
        calls += report.llm_calls;
        failed = report.failed;
        if report.failed == 0 {
            break;
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let (mut facts, mut labels, mut right, mut found) = (0, 0, 0, 0);
    let mut misses = Vec::new();
    for conversation in set {
        let filter = RecallFilter {
            scope: Scope { user: Some(conversation.name.clone()), agent: None, session: None },
            kinds: vec![MemoryKind::Fact],
            ..RecallFilter::default()
        };
        let filed: Vec<(String, String, String)> = atlas
            .latest(filter, 10_000)
            .await?
            .iter()
            .filter_map(|m: &Memory| match &m.body {
                Body::Fact { subject, predicate, object, .. } => {
                    Some((subject.clone(), predicate.clone(), object.clone()))
                }
                _ => None,
            })
            .collect();
        let wanted: Vec<&Label> = conversation.turns.iter().flat_map(|(_, _, l)| l).collect();
        facts += filed.len();
        labels += wanted.len();
        right += filed.iter().filter(|(s, p, o)| wanted.iter().any(|l| matches(l, s, p, o))).count();
        for label in &wanted {
            if filed.iter().any(|(s, p, o)| matches(label, s, p, o)) {
                found += 1;
            } else {
                misses.push(format!("{}: {}|{}|{}", conversation.name, label.subject, label.relation, label.value));
            }
        }
        for (s, p, o) in &filed {
            if !wanted.iter().any(|l| matches(l, s, p, o)) {
                misses.push(format!("{}: filed but not labelled: {s}|{p}|{o}", conversation.name));
            }
        }
    }
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Ok(Extraction {
        precision: ratio(right, facts),
        recall: ratio(found, labels),
        facts,
        labels,
        wall_s,
        tokens,
        calls,
        failed,
        misses,
    })
}

/// The runtime on SQLite as the conflict suite's space (the runtime's own test runs the same
/// suite through the same [`run_suite`]).
struct Suite {
    atlas: Atlas,
    store: Arc<SqliteStore>,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl SuiteSpace for Suite {
    async fn say(&self, scope: Scope, time: Timestamp, text: String) -> atlas_domain::Result<()> {
        let turn = Remember { text, speaker: Some("user".into()), scope, time: Some(time), ..Remember::default() };
        self.atlas.remember(turn).await.map(|_| ())
    }
    async fn sleep(&self) -> atlas_domain::Result<usize> {
        Ok(self.atlas.consolidate().await?.failed)
    }
    async fn facts(&self, subjects: Vec<String>, scope: Scope) -> atlas_domain::Result<Vec<Memory>> {
        self.store.known(subjects, Vec::new(), scope).await
    }
}

/// The conflict suite's pass count, and its misses.
async fn conflicts(llm: Option<Arc<dyn Llm>>, turns_per_call: usize) -> Result<(usize, usize, Vec<String>)> {
    let judged = llm.is_some();
    let (atlas, store, dir) = space(llm, turns_per_call).await?;
    let all = scenarios();
    let results = run_suite(&Suite { atlas, store, _dir: dir }, &all, judged).await?;
    let passed = results.iter().filter(|(_, m)| m.is_empty()).count();
    Ok((passed, all.len(), results.into_iter().flat_map(|(_, m)| m).collect()))
}

/// The local model `alias` behind llama.cpp's server, fetched first when missing; the server
/// lives as long as the returned guard.
fn local_model(alias: &str) -> Result<(Arc<dyn Llm>, atlas_testing::servers::LlmServer)> {
    let path = crate::fetch_llm_model(alias)?;
    let file = path.file_name().and_then(|f| f.to_str()).context("model file name")?.to_owned();
    let server = atlas_testing::servers::llama_server((alias, &file), &[]).map_err(anyhow::Error::msg)?;
    let mut endpoint = atlas_llm::Endpoint::new(alias, atlas_llm::Provider::OpenAi, &server.url, alias);
    // A call of 24 turns on 2 cores takes minutes with the larger model; its answer is bounded
    // by the schema.
    endpoint.timeout = std::time::Duration::from_secs(900);
    endpoint.max_tokens = 1024;
    let llm: Arc<dyn Llm> = Arc::new(atlas_llm::HttpLlm::new(endpoint)?);
    Ok((llm, server))
}

pub fn run(models: &[String], turns_per_call: usize, json_out: Option<&Path>, verbose: bool) -> Result<()> {
    for m in models {
        if !SLEEP_MODELS.contains(&m.as_str()) {
            bail!("--sleep-models: unknown model {m:?} (one of {})", SLEEP_MODELS.join(", "));
        }
    }
    let set = labelled_set(&crate::root())?;
    let turns: usize = set.iter().map(|c| c.turns.len()).sum();
    println!("labelled set: {} conversations, {turns} turns; {turns_per_call} turns per extraction call", set.len());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut extraction_json = serde_json::Map::new();
    let mut conflicts_json = serde_json::Map::new();
    let mut rows = Vec::new();
    for model in models {
        let (llm, _server) = if model == "rules" {
            (None, None)
        } else {
            let (llm, server) = local_model(model)?;
            (Some(llm), Some(server))
        };
        let e = runtime.block_on(extraction(&set, llm.clone(), turns_per_call))?;
        let (passed, total, conflict_misses) = runtime.block_on(conflicts(llm, turns_per_call))?;
        if verbose {
            for miss in e.misses.iter().chain(&conflict_misses) {
                println!("  {model} miss: {miss}");
            }
        }
        extraction_json.insert(
            model.clone(),
            json!({"precision": e.precision, "recall": e.recall, "facts": e.facts, "labels": e.labels,
                   "wall_s": e.wall_s, "tokens": e.tokens, "llm_calls": e.calls, "failed": e.failed,
                   "s_per_1000_turns": e.wall_s * 1000.0 / turns as f64}),
        );
        conflicts_json.insert(model.clone(), json!({"passed": passed, "total": total, "misses": conflict_misses}));
        rows.push((model.clone(), e, passed, total));
    }
    println!(
        "\n{:<14} {:>9} {:>7} {:>6} {:>7} {:>8} {:>8} {:>10}",
        "model", "precision", "recall", "facts", "labels", "wall s", "tokens", "conflicts"
    );
    for (model, e, passed, total) in &rows {
        println!(
            "{model:<14} {:>9.3} {:>7.3} {:>6} {:>7} {:>8.1} {:>8} {:>6}/{total}",
            e.precision, e.recall, e.facts, e.labels, e.wall_s, e.tokens, passed
        );
    }
    if let Some(path) = json_out {
        let out = json!({"extraction": extraction_json, "conflicts": conflicts_json, "turns": turns,
                         "turns_per_call": turns_per_call});
        std::fs::write(path, serde_json::to_string_pretty(&out)?).with_context(|| path.display().to_string())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_matches_by_its_words_either_way() {
        let label = Label { subject: "ann".into(), relation: "role".into(), value: "nurse".into() };
        assert!(matches(&label, "ann", "role", "a nurse at St Mary's"));
        assert!(!matches(&label, "ann", "works_at", "a nurse"));
        assert!(!matches(&label, "bob", "role", "nurse"));
        assert!(!matches(&label, "ann", "role", "the"));
        let email = Label { subject: "e".into(), relation: "email".into(), value: "elena.v@ugent.example".into() };
        assert!(!matches(&email, "e", "email", "elena.vos@proton.example"));
    }

    #[test]
    fn the_labelled_set_is_large_enough_and_reads() {
        let set = labelled_set(&crate::root()).unwrap();
        let turns: usize = set.iter().map(|c| c.turns.len()).sum();
        assert!(turns >= 150, "{turns} turns");
        assert!(set.iter().flat_map(|c| &c.turns).flat_map(|t| &t.2).count() >= 80);
    }
}
