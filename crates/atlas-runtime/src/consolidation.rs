//! The sleep cycle: turns episodes into current facts with history, and links the turns that
//! mention the same names. Rules first (phatic turns, retain tags, names); the language model,
//! when one is configured, only for what rules cannot read, at most `llm_calls` times a cycle.
//! A cycle's outcome (facts, edges, supersessions, which episodes are done or failed, and its
//! report) commits in one transaction: an episode is processed only when its outcome is stored.

mod dialectic;
mod extract;
mod filing;
mod judge;
mod refile;
mod sleeper;
mod summary;

pub(crate) use sleeper::Sleeper;

use crate::Parts;
use crate::config::ConsolidationConfig;
use atlas_domain::policy::consolidation::{Candidate, NameMention, fact_text, is_phatic, name_mentions, normalize};
use atlas_domain::policy::reading::tag_fact;
use atlas_domain::policy::relations;
use atlas_domain::policy::retain::{RetainTag, harvest};
use atlas_domain::policy::speakers::said_by_the_agent;
use atlas_domain::policy::timeline::{Relation, StoredFact, Verdict};
use atlas_domain::ports::Consolidation;
use atlas_domain::{AtlasError, Body, EdgeKind, Memory, MemoryId, Result, Scope, Timestamp};
use dialectic::dialectic;
use extract::extract;
use filing::{Plan, Rules};
use judge::{Pair, judge};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use summary::summarise;

/// What one cycle did; also its row in the store's ledger of cycles.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CycleReport {
    pub episodes_seen: usize,
    pub skipped_phatic: usize,
    /// Episodes whose metadata says `"infer": false`: kept as said, nothing learned from them.
    pub not_inferred: usize,
    pub tags: usize,
    pub facts_added: usize,
    pub facts_merged: usize,
    pub facts_superseded: usize,
    /// Facts older than the current one they contradict, stored as history.
    pub facts_historical: usize,
    /// Facts in words stored before the rules read them, filed again under their relation.
    #[serde(skip_serializing_if = "is_zero")]
    pub facts_refiled: usize,
    pub entities_added: usize,
    pub entity_links: usize,
    /// Facts the model proposed that the one rule does not read as one plain statement about
    /// someone (what might be, a question, no one named: policy::reading::key_statements).
    pub predicates_rejected: usize,
    /// Facts the model proposed that the turn it cited does not say (policy::grounding).
    #[serde(skip_serializing_if = "is_zero")]
    pub facts_ungrounded: usize,
    pub llm_calls: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// What the calls cost, at the endpoints' configured prices (US dollars).
    pub cost_usd: f64,
    /// Episodes whose extraction failed (retried later with backoff).
    pub failed: usize,
    /// Episodes left for a later cycle (the model's call budget was spent).
    pub deferred: usize,
    /// Observations about the user this cycle touched, by stage of the dialectic.
    pub user_observations: usize,
    pub user_hypotheses: usize,
    pub user_verified: usize,
    /// Verified observations copied into core memory.
    pub core_added: usize,
    /// Summaries of closed sessions written (replacing older ones of sessions that went on).
    pub summaries_added: usize,
    /// Closed sessions left for a later cycle (the model's call budget was spent).
    pub summaries_deferred: usize,
    /// Pairs of objects the rules could not tell apart (alike, agreeing on every value, not
    /// close enough to be the same): each with its verdict and who gave it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub judgments: Vec<Judgment>,
    /// Model answers refused for departing from their schema or from the input limits (the turns
    /// they were about wait for a later cycle; a summary falls back to an extractive one).
    #[serde(skip_serializing_if = "is_zero")]
    pub answers_refused: usize,
    /// Why, for the first [`REFUSALS_SHOWN`] of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<String>,
    pub took_ms: f64,
}

/// How many refusals a cycle's report quotes (the count holds them all).
pub const REFUSALS_SHOWN: usize = 20;

impl CycleReport {
    /// Counts a refused model answer, quoting why while the report has room.
    pub(crate) fn refuse(&mut self, why: String) {
        self.answers_refused += 1;
        if self.refusals.len() < REFUSALS_SHOWN {
            self.refusals.push(why);
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How the cycle decided one ambiguous pair of objects of a subject and predicate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgment {
    pub subject: String,
    pub predicate: String,
    /// The two objects, in text order (whichever was said later is the one that may replace).
    pub objects: [String; 2],
    pub verdict: Verdict,
    /// `model`, or `rule` (then `why` says why the model did not decide).
    pub by: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The stored facts of one subject and predicate among `known`, each with its statements and
/// the facts it supersedes (read from its edges).
async fn stored_timeline(parts: &Parts, known: &[Memory], subject: &str, predicate: &str) -> Result<Vec<StoredFact>> {
    let mut facts = Vec::new();
    for m in known {
        let Body::Fact { subject: s, predicate: p, object, confidence } = &m.body else { continue };
        if s != subject || p != predicate || m.id.0 < 0 {
            continue;
        }
        facts.push((m.id, object.clone(), m.validity, *confidence));
    }
    let ids: std::collections::BTreeSet<MemoryId> = facts.iter().map(|f| f.0).collect();
    let mut out = Vec::with_capacity(facts.len());
    for (id, object, validity, confidence) in facts {
        let edges = parts.store.edges_of(id).await?;
        let from_it = edges.iter().filter(|e| e.src == id);
        let sources = from_it
            .clone()
            .filter(|e| e.kind == EdgeKind::DerivedFrom)
            .map(|e| (e.dst, e.validity.valid_from))
            .collect();
        let supersedes =
            from_it.filter(|e| e.kind == EdgeKind::Supersedes && ids.contains(&e.dst)).map(|e| e.dst).collect();
        out.push(StoredFact { id, object, validity, confidence, sources, supersedes });
    }
    Ok(out)
}

/// The facts a turn's retain tags state, about whom.
fn tag_candidates(episode: &Memory, tags: Vec<RetainTag>) -> Vec<(Candidate, &'static str)> {
    let speaker = episode.body.speaker().unwrap_or("agent");
    tags.into_iter()
        .map(|tag| {
            let fact = tag_fact(tag, speaker);
            let candidate = Candidate {
                subject: normalize(&fact.subject),
                subject_shown: fact.subject,
                predicate: fact.predicate,
                object: fact.object,
                confidence: fact.confidence,
                source: episode.id,
                said_at: episode.event_time,
                wording: fact.wording,
            };
            (candidate, fact.origin)
        })
        .collect()
}

/// Runs one cycle over up to `config.batch` unprocessed episodes. Everything it stores stays
/// within the limits every other door enforces (`max_text_bytes`, the name caps), so that a
/// space the cycle wrote always exports and imports back whole.
pub async fn run_cycle(
    parts: &Parts,
    config: &ConsolidationConfig,
    max_text_bytes: usize,
    now: Timestamp,
) -> Result<CycleReport> {
    let started = std::time::Instant::now();
    let store = parts.consolidator.as_ref().ok_or_else(|| {
        AtlasError::Config(
            "consolidation needs a store that implements its port (the SQLite and Qdrant stores do)".into(),
        )
    })?;
    let episodes = store.unprocessed(config.batch.max(1), config.max_attempts, config.retry_after_ms, now).await?;
    let mut report = CycleReport { episodes_seen: episodes.len(), ..CycleReport::default() };
    let mut plan = Plan { batch: Consolidation::empty(now), known: Vec::new(), now };
    // Each user and agent has its own facts and entities.
    let mut groups: BTreeMap<(Option<String>, Option<String>), Vec<Memory>> = BTreeMap::new();
    for e in episodes {
        groups.entry((e.scope.user.clone(), e.scope.agent.clone())).or_default().push(e);
    }
    let mut calls_left = if parts.llm.is_some() { config.llm_calls } else { 0 };
    let mut judgments_left = if parts.llm.is_some() { config.judge_calls } else { 0 };
    let mut refiled = Vec::new();
    for ((user, agent), episodes) in groups {
        let scope = Scope { user, agent, session: None };
        let mut candidates: Vec<(Candidate, &'static str)> = Vec::new();
        let mut mentions: Vec<(MemoryId, Timestamp, Vec<NameMention>)> = Vec::new();
        let mut for_model: Vec<&Memory> = Vec::new();
        for e in &episodes {
            if is_phatic(&e.text) {
                report.skipped_phatic += 1;
                plan.batch.processed.push(e.id);
                continue;
            }
            if e.meta.get("infer") == Some(&Value::Bool(false)) {
                report.not_inferred += 1;
                plan.batch.processed.push(e.id);
                continue;
            }
            let tags = harvest(&e.text);
            report.tags += tags.len();
            let tagged = !tags.is_empty();
            let mut names = name_mentions(&e.text);
            names.extend(tags.iter().filter_map(|t| match t {
                RetainTag::State { entity, .. } => {
                    Some(NameMention { name: entity.clone(), only_at_sentence_start: false })
                }
                _ => None,
            }));
            candidates.extend(tag_candidates(e, tags));
            if config.entities && !names.is_empty() {
                mentions.push((e.id, e.event_time, names));
            }
            // The agent's own turns say what it said, not what people told it: the model reads
            // people's turns only (an agent's tags are read by rule above).
            if tagged || parts.llm.is_none() || said_by_the_agent(e) {
                plan.batch.processed.push(e.id);
            } else {
                for_model.push(e);
            }
        }
        // Statements in words stored before they were read are filed again by the one rule.
        let (statements, legacy) = refile::legacy_statements(parts, &scope).await?;
        report.facts_refiled += legacy.len();
        candidates.extend(statements);
        refiled.extend(legacy);
        // The model reads what rules could not, within the cycle's call budget.
        let mut chunks = for_model.chunks(config.turns_per_call.max(1));
        for chunk in chunks.by_ref() {
            if calls_left == 0 {
                report.deferred += chunk.len();
                continue;
            }
            calls_left -= 1;
            match extract(parts, chunk, &mut report).await {
                Ok(found) => {
                    candidates.extend(found);
                    plan.batch.processed.extend(chunk.iter().map(|e| e.id));
                }
                Err(error) => {
                    tracing::warn!(error = %error.why, episodes = chunk.len(), "extraction failed; the episodes will be retried");
                    if error.refused {
                        report.refuse(format!("extraction of {} turns: {}", chunk.len(), error.why));
                    }
                    let error = error.why;
                    report.failed += chunk.len();
                    plan.batch.failed.extend(chunk.iter().map(|e| (e.id, error.clone())));
                }
            }
        }
        // A statement the rules or the model read is filed only within the input limits (a
        // retain tag may name a subject longer than a name may be).
        candidates.retain(|(c, origin)| match within_limits(c, &scope, max_text_bytes) {
            Ok(()) => true,
            Err(why) => {
                report.refuse(format!("a fact read by {origin}: {why}"));
                false
            }
        });
        let subjects: Vec<String> = candidates.iter().map(|(c, _)| c.subject.clone()).collect();
        let names: Vec<String> = mentions.iter().flat_map(|(_, _, n)| n.iter().map(|n| normalize(&n.name))).collect();
        plan.known = store.known(subjects, names, scope.clone()).await?;
        // A word that only ever opened a sentence is a name only if it is one elsewhere: seen
        // inside a sentence in this batch, or already an entity.
        let mut sure: std::collections::HashSet<String> = mentions
            .iter()
            .flat_map(|(_, _, n)| n.iter().filter(|m| !m.only_at_sentence_start).map(|m| normalize(&m.name)))
            .collect();
        sure.extend(plan.known.iter().filter_map(|m| match &m.body {
            Body::Entity { name, .. } => Some(normalize(name)),
            _ => None,
        }));
        for (id, at, names) in mentions {
            for mention in names.into_iter().filter(|m| sure.contains(&normalize(&m.name))) {
                let entity = plan.entity(&mention.name, &scope, at, &mut report);
                plan.link(id, entity, EdgeKind::Entity, at);
                report.entity_links += 1;
            }
        }
        let rules = Rules {
            objects: embed_objects(parts, &candidates, &plan.known).await,
            same_from: config.merge_similarity,
            judge_from: config.judge_similarity,
        };
        let mut keys: BTreeMap<(String, String), Vec<(Candidate, &'static str)>> = BTreeMap::new();
        for (candidate, origin) in candidates {
            keys.entry((candidate.subject.clone(), candidate.predicate.clone())).or_default().push((candidate, origin));
        }
        let mut timelines = Vec::with_capacity(keys.len());
        let mut unclear = std::collections::BTreeSet::new();
        for ((subject, predicate), statements) in keys {
            let stored = stored_timeline(parts, &plan.known, &subject, &predicate).await?;
            // Pairs with a new object only: two stored facts were decided when they were filed,
            // and asking again could undo a judgment.
            let old: std::collections::BTreeSet<&str> = stored.iter().map(|f| f.object.as_str()).collect();
            let mut fresh: Vec<&str> =
                statements.iter().map(|(c, _)| c.object.as_str()).filter(|o| !old.contains(o)).collect();
            fresh.sort_unstable();
            fresh.dedup();
            let kind = relations::kind(&predicate);
            for (i, a) in fresh.iter().enumerate() {
                for b in fresh[i + 1..].iter().chain(&old) {
                    if rules.relation(kind, a, b) == Relation::Ambiguous {
                        unclear.insert(Pair::of(&subject, &predicate, a, b));
                    }
                }
            }
            timelines.push((stored, statements));
        }
        // What the rules cannot tell, the model judges, within the cycle's judgment budget.
        let judged = judge(parts, unclear, &mut judgments_left, &mut report).await;
        for (stored, statements) in timelines {
            let Some((first, _)) = statements.first() else { continue };
            let (subject, predicate) = (first.subject.clone(), first.predicate.clone());
            let kind = relations::kind(&predicate);
            let relate = |a: &str, b: &str| match rules.relation(kind, a, b) {
                Relation::Decided(verdict) => verdict,
                Relation::Ambiguous => {
                    judged.get(&Pair::of(&subject, &predicate, a, b)).copied().unwrap_or(Verdict::Both)
                }
            };
            plan.file(&stored, statements, &relate, &scope, &mut report);
        }
    }
    dialectic(parts, &mut plan, &mut report).await?;
    if config.summaries {
        let said_before = Timestamp(now.millis() - config.session_idle_secs as i64 * 1000);
        let closed = store.closed_sessions(said_before, config.summaries_per_cycle).await?;
        for session in closed {
            summarise(parts, session, &mut plan, &mut report, &mut calls_left).await;
        }
    }
    // The last word: nothing outside the limits is stored (what the steps above let through
    // would make the space one that cannot be restored). A memory here outside them is a bug
    // of the cycle's: the cycle stores nothing, and says which.
    for (i, memory) in plan.batch.memories.iter().enumerate() {
        atlas_domain::policy::limits::validate(memory, max_text_bytes, &format!("sleep cycle, new memory {}", i + 1))?;
    }
    report.took_ms = started.elapsed().as_secs_f64() * 1e3;
    plan.batch.report = serde_json::to_value(&report).expect("a report serialises");
    if report.episodes_seen > 0 || !plan.batch.memories.is_empty() {
        store.apply(plan.batch).await?;
    }
    refile::forget_refiled(parts, refiled, now).await?;
    Ok(report)
}

/// Whether the fact `candidate` would become passes the input limits.
fn within_limits(candidate: &Candidate, scope: &Scope, max_text_bytes: usize) -> std::result::Result<(), String> {
    let text = candidate
        .wording
        .clone()
        .unwrap_or_else(|| fact_text(&candidate.subject_shown, &candidate.predicate, &candidate.object));
    let fact = atlas_domain::NewMemory {
        scope: scope.clone(),
        text,
        event_time: candidate.said_at,
        recorded_at: candidate.said_at,
        validity: atlas_domain::Validity::from(candidate.said_at),
        meta: serde_json::Map::new(),
        body: Body::Fact {
            subject: candidate.subject.clone(),
            predicate: candidate.predicate.clone(),
            object: candidate.object.clone(),
            confidence: candidate.confidence.clamp(0.0, 1.0),
        },
    };
    atlas_domain::policy::limits::validate(&fact, max_text_bytes, "fact").map_err(|e| e.to_string())?;
    atlas_domain::policy::limits::check_name(&candidate.subject_shown, "subject", "fact").map_err(|e| e.to_string())
}

/// The embeddings of the candidates' objects and of the objects of the known facts they meet
/// (same subject and predicate), in one call; empty without an embedder or when it fails (the
/// rules still decide).
async fn embed_objects(
    parts: &Parts,
    candidates: &[(Candidate, &'static str)],
    known: &[Memory],
) -> std::collections::HashMap<String, Vec<f32>> {
    let Some(embedder) = &parts.embedder else { return std::collections::HashMap::new() };
    let mut texts: std::collections::BTreeSet<String> = candidates.iter().map(|(c, _)| c.object.clone()).collect();
    for m in known {
        if let Body::Fact { subject, predicate, object, .. } = &m.body
            && candidates.iter().any(|(c, _)| c.subject == *subject && c.predicate == *predicate)
        {
            texts.insert(object.clone());
        }
    }
    if texts.len() < 2 {
        return std::collections::HashMap::new();
    }
    let texts: Vec<String> = texts.into_iter().collect();
    match embedder.embed(texts.clone()).await {
        Ok(vectors) => texts.into_iter().zip(vectors).collect(),
        Err(error) => {
            tracing::warn!(%error, "embedding facts for near-duplicates failed; rules alone decide this cycle");
            std::collections::HashMap::new()
        }
    }
}
