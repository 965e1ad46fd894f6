//! The sleep cycle: turns episodes into current facts with history, and links the turns that
//! mention the same names. Rules first (phatic turns, retain tags, names); the language model,
//! when one is configured, only for what rules cannot read, at most `llm_calls` times a cycle.
//! A cycle's outcome (facts, edges, supersessions, which episodes are done or failed, and its
//! report) commits in one transaction: an episode is processed only when its outcome is stored.

mod judge;

use crate::Parts;
use crate::config::ConsolidationConfig;
use atlas_domain::policy::consolidation::{
    Candidate, NameMention, fact_text, is_phatic, name_mentions, normalize, tag_fact,
};
use atlas_domain::policy::embedding::cosine;
use atlas_domain::policy::reading::key_fact;
use atlas_domain::policy::relations::{self, Kind};
use atlas_domain::policy::retain::{RetainTag, harvest};
use atlas_domain::policy::timeline::{Relation, Statement, StoredFact, Verdict, by_rule_for, reconcile};
use atlas_domain::ports::{Consolidation, LlmRequest, MemoryRef, NewEdge, Revision};
use atlas_domain::{AtlasError, Body, EdgeKind, Memory, MemoryId, NewMemory, Result, Scope, Timestamp, Validity};
use judge::{Pair, judge};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

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
    pub entities_added: usize,
    pub entity_links: usize,
    /// Facts the model proposed with a predicate outside the vocabulary.
    pub predicates_rejected: usize,
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
    pub took_ms: f64,
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

const SYSTEM: &str = "You extract durable facts from conversation turns for an agent's long-term memory. \
Answer with JSON only, of the form {\"facts\": [{\"turn\": 1, \"subject\": \"...\", \"predicate\": \"...\", \
\"object\": \"...\", \"confidence\": 0.9}]}. `turn` is the number of the turn that states the fact. Use the \
speaker's name for \"I\" and \"me\". Skip small talk and questions. Predicates: ";

/// Bounded everywhere: a constrained small model otherwise repeats items, or one string,
/// until it runs out of tokens.
fn schema(turns: usize) -> Value {
    let text = |max: usize| json!({"type": "string", "minLength": 1, "maxLength": max});
    json!({
        "type": "object",
        "required": ["facts"],
        "properties": {"facts": {"type": "array", "maxItems": 2 * turns, "items": {
            "type": "object",
            "required": ["turn", "subject", "predicate", "object"],
            "properties": {
                "turn": {"type": "integer", "minimum": 1, "maximum": turns},
                "subject": text(60), "predicate": text(30), "object": text(120),
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}
            }
        }}}
    })
}

/// Most turns one model call reads.
const TURNS_PER_CALL: usize = 24;

/// One fact as the model proposed it, checked against the schema.
struct Proposed {
    turn: usize,
    subject: String,
    predicate: String,
    object: String,
    confidence: f32,
}

/// Reads the model's answer; any departure from the schema fails the whole answer, so that a
/// half-understood reply never becomes memory.
fn parse_answer(text: &str, turns: usize) -> std::result::Result<Vec<Proposed>, String> {
    let trimmed = text.trim().trim_start_matches("```json").trim_start_matches("```").trim_end_matches("```");
    let value: Value =
        serde_json::from_str(trimmed.trim()).map_err(|e| format!("the model's answer is not JSON ({e})"))?;
    let facts = value.get("facts").and_then(Value::as_array).ok_or("the answer has no \"facts\" array")?;
    facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let text = |key: &str| {
                f.get(key)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("facts[{i}].{key}: missing or not a non-empty string"))
            };
            let turn = f
                .get("turn")
                .and_then(Value::as_u64)
                .filter(|t| (1..=turns as u64).contains(t))
                .ok_or_else(|| format!("facts[{i}].turn: not a turn number from 1 to {turns}"))?;
            let confidence = match f.get("confidence") {
                None | Some(Value::Null) => 0.8,
                Some(c) => c
                    .as_f64()
                    .filter(|c| (0.0..=1.0).contains(c))
                    .ok_or_else(|| format!("facts[{i}].confidence: not a number from 0 to 1"))?
                    as f32,
            };
            Ok(Proposed {
                turn: turn as usize,
                subject: text("subject")?,
                predicate: text("predicate")?,
                object: text("object")?,
                confidence,
            })
        })
        .collect()
}

/// The batch under construction, and the facts and entities it already knows of, where the
/// ones it is adding carry negative ids (`-1` is the batch's first new memory).
struct Plan {
    batch: Consolidation,
    known: Vec<Memory>,
    now: Timestamp,
}

/// What the rules know of a group's objects: their embeddings, where an embedder is configured
/// (near-duplicates that share no word, "NYC" and "New York City", are the same fact), and the
/// similarities from which two are the same, or ambiguous.
struct Rules {
    objects: std::collections::HashMap<String, Vec<f32>>,
    same_from: f64,
    judge_from: f64,
}

impl Rules {
    /// How `b` relates to `a` under a relation of `kind`.
    fn relation(&self, kind: Kind, a: &str, b: &str) -> Relation {
        let similarity = self.objects.get(a).zip(self.objects.get(b)).map(|(x, y)| cosine(x, y));
        by_rule_for(kind, a, b, similarity, self.same_from, self.judge_from)
    }
}

fn reference(id: MemoryId) -> MemoryRef {
    if id.0 < 0 { MemoryRef::New((-id.0 - 1) as usize) } else { MemoryRef::Stored(id) }
}

impl Plan {
    fn add(&mut self, memory: NewMemory) -> MemoryId {
        self.batch.memories.push(memory.clone());
        let id = MemoryId(-(self.batch.memories.len() as i64));
        self.known.push(memory.with_id(id));
        id
    }

    fn link(&mut self, src: MemoryId, dst: MemoryId, kind: EdgeKind, from: Timestamp) {
        self.batch.edges.push(NewEdge {
            src: reference(src),
            dst: reference(dst),
            kind,
            weight: 1.0,
            validity: Validity::from(from),
            recorded_at: self.now,
        });
    }

    /// The entity named `name` in `scope`, found or added.
    fn entity(&mut self, name: &str, scope: &Scope, at: Timestamp, report: &mut CycleReport) -> MemoryId {
        let key = normalize(name);
        let found = self.known.iter().find(|m| matches!(&m.body, Body::Entity { name, .. } if normalize(name) == key));
        if let Some(m) = found {
            return m.id;
        }
        report.entities_added += 1;
        self.add(NewMemory {
            scope: scope.clone(),
            text: name.to_owned(),
            event_time: at,
            recorded_at: self.now,
            validity: Validity::from(at),
            meta: serde_json::Map::new(),
            body: Body::Entity { name: name.to_owned(), entity_type: None },
        })
    }

    /// Files the statements a cycle read about one subject and predicate into the timeline of
    /// that key's stored facts ([`reconcile`]): new facts, stored ones revised (validity,
    /// confidence), sources added or moved, `supersedes` edges between the facts that follow
    /// each other.
    fn file(
        &mut self,
        stored: &[StoredFact],
        statements: Vec<(Candidate, &'static str)>,
        relate: &dyn Fn(&str, &str) -> Verdict,
        scope: &Scope,
        report: &mut CycleReport,
    ) {
        let Some((first, _)) = statements.first() else { return };
        let (subject, shown, predicate) = (first.subject.clone(), first.subject_shown.clone(), first.predicate.clone());
        let new: Vec<Statement> = statements
            .iter()
            .map(|(c, origin)| Statement {
                source: c.source,
                said_at: c.said_at,
                object: c.object.clone(),
                confidence: c.confidence,
                origin: (*origin).to_owned(),
                wording: c.wording.clone(),
            })
            .collect();
        let timeline = reconcile(relations::is_functional(&predicate), stored, &new, relate);
        let mut ids = Vec::with_capacity(timeline.segments.len());
        for segment in &timeline.segments {
            report.facts_merged += segment.joined;
            let id = match segment.fact.and_then(|id| stored.iter().find(|f| f.id == id)) {
                Some(before) => {
                    let from = (segment.validity.valid_from != before.validity.valid_from)
                        .then_some(segment.validity.valid_from);
                    let confidence =
                        ((segment.confidence - before.confidence).abs() > 1e-6).then_some(segment.confidence);
                    if from.is_some()
                        || confidence.is_some()
                        || segment.validity.valid_until != before.validity.valid_until
                    {
                        self.batch.revisions.push(Revision {
                            id: before.id,
                            valid_from: from,
                            valid_until: segment.validity.valid_until,
                            confidence,
                        });
                    }
                    before.id
                }
                None => {
                    let mut meta = serde_json::Map::new();
                    meta.insert("origin".into(), Value::from(segment.origin.clone()));
                    report.facts_added += 1;
                    if segment.validity.valid_until.is_some() {
                        report.facts_historical += 1;
                    }
                    let id = self.add(NewMemory {
                        scope: scope.clone(),
                        text: segment.wording.clone().unwrap_or_else(|| fact_text(&shown, &predicate, &segment.object)),
                        event_time: segment.validity.valid_from,
                        recorded_at: self.now,
                        validity: segment.validity,
                        meta,
                        body: Body::Fact {
                            subject: subject.clone(),
                            predicate: predicate.clone(),
                            object: segment.object.clone(),
                            confidence: segment.confidence,
                        },
                    });
                    // A fact about a named thing joins that thing's node.
                    let subject_is_entity = self
                        .known
                        .iter()
                        .any(|m| matches!(&m.body, Body::Entity { name, .. } if normalize(name) == subject));
                    if subject_is_entity {
                        let entity = self.entity(&shown, scope, segment.validity.valid_from, report);
                        self.link(id, entity, EdgeKind::Entity, segment.validity.valid_from);
                    }
                    id
                }
            };
            let had: Vec<MemoryId> =
                stored.iter().filter(|f| f.id == id).flat_map(|f| f.sources.iter().map(|s| s.0)).collect();
            for (source, said_at) in &segment.sources {
                if !had.contains(source) {
                    self.link(id, *source, EdgeKind::DerivedFrom, *said_at);
                }
            }
            ids.push(id);
        }
        for (i, segment) in timeline.segments.iter().enumerate() {
            let Some(j) = segment.replaces else { continue };
            let (newer, older) = (ids[i], ids[j]);
            let linked = stored.iter().any(|f| f.id == newer && f.supersedes.contains(&older));
            if !linked {
                report.facts_superseded += 1;
                self.link(newer, older, EdgeKind::Supersedes, segment.validity.valid_from);
            }
        }
        self.batch
            .unlinked
            .extend(timeline.moved.iter().map(|(fact, episode)| (*fact, *episode, EdgeKind::DerivedFrom)));
        self.batch
            .unlinked
            .extend(timeline.unlinked.iter().map(|(newer, older)| (*newer, *older, EdgeKind::Supersedes)));
    }
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

/// Runs one cycle over up to `config.batch` unprocessed episodes.
pub async fn run_cycle(parts: &Parts, config: &ConsolidationConfig, now: Timestamp) -> Result<CycleReport> {
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
            if tagged || parts.llm.is_none() {
                plan.batch.processed.push(e.id);
            } else {
                for_model.push(e);
            }
        }
        // The model reads what rules could not, within the cycle's call budget.
        let mut chunks = for_model.chunks(TURNS_PER_CALL);
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
                    tracing::warn!(%error, episodes = chunk.len(), "extraction failed; the episodes will be retried");
                    report.failed += chunk.len();
                    plan.batch.failed.extend(chunk.iter().map(|e| (e.id, error.clone())));
                }
            }
        }
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
    report.took_ms = started.elapsed().as_secs_f64() * 1e3;
    plan.batch.report = serde_json::to_value(&report).expect("a report serialises");
    if report.episodes_seen > 0 || !plan.batch.memories.is_empty() {
        store.apply(plan.batch).await?;
    }
    Ok(report)
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

/// A batch reference as the plan's id: stored ids as they are, new memories negative.
fn plan_id(r: MemoryRef) -> MemoryId {
    match r {
        MemoryRef::Stored(id) => id,
        MemoryRef::New(i) => MemoryId(-(i as i64) - 1),
    }
}

/// The dialectic over the observations about the user (`U-` tags) this cycle touched: each
/// one's stage from its distinct supporting episodes (stored and new), its confidence raised to
/// match, and a verified one, still current, copied once into core memory (`derived_from` it).
async fn dialectic(parts: &Parts, plan: &mut Plan, report: &mut CycleReport) -> Result<()> {
    use atlas_domain::policy::dialectic::{Stage, confidence, enters_core, stage};
    let mut support: BTreeMap<MemoryId, std::collections::BTreeSet<MemoryId>> = BTreeMap::new();
    for e in plan.batch.edges.iter().filter(|e| e.kind == EdgeKind::DerivedFrom) {
        support.entry(plan_id(e.src)).or_default().insert(plan_id(e.dst));
    }
    let stored_ids: Vec<MemoryId> = support.keys().copied().filter(|id| id.0 > 0).collect();
    let stored: BTreeMap<MemoryId, Memory> =
        parts.store.get_many(stored_ids).await?.into_iter().map(|m| (m.id, m)).collect();
    let is_observation = |m: &serde_json::Map<String, Value>| m.get("origin").and_then(Value::as_str) == Some("tag:U");
    for (fact, mut sources) in support {
        let (memory, current) = match reference(fact) {
            MemoryRef::New(i) => {
                let m = &plan.batch.memories[i];
                (m.clone().with_id(fact), m.validity.valid_until.is_none())
            }
            MemoryRef::Stored(id) => match stored.get(&id) {
                Some(m) => (m.clone(), m.validity.valid_until.is_none()),
                None => continue,
            },
        };
        if !is_observation(&memory.meta) || !matches!(memory.body, Body::Fact { .. }) {
            continue;
        }
        let mut promoted = false;
        if fact.0 > 0 {
            let edges = parts.store.edges_of(fact).await?;
            sources.extend(edges.iter().filter(|e| e.kind == EdgeKind::DerivedFrom && e.src == fact).map(|e| e.dst));
            let derived: Vec<MemoryId> =
                edges.iter().filter(|e| e.kind == EdgeKind::DerivedFrom && e.dst == fact).map(|e| e.src).collect();
            promoted = parts.store.get_many(derived).await?.iter().any(|m| matches!(m.body, Body::Core { .. }));
        }
        let reached = stage(sources.len());
        match reached {
            Stage::Observation => report.user_observations += 1,
            Stage::Hypothesis => report.user_hypotheses += 1,
            Stage::Verified => report.user_verified += 1,
        }
        let belief = confidence(reached);
        match reference(fact) {
            MemoryRef::New(i) => {
                if let Body::Fact { confidence, .. } = &mut plan.batch.memories[i].body {
                    *confidence = confidence.max(belief);
                }
            }
            MemoryRef::Stored(id) => {
                let revised = plan.batch.revisions.iter().any(|r| r.id == id);
                let below = matches!(memory.body, Body::Fact { confidence, .. } if confidence < belief);
                if current && below && !revised {
                    plan.batch.revisions.push(Revision {
                        id,
                        valid_from: None,
                        valid_until: None,
                        confidence: Some(belief),
                    });
                }
            }
        }
        if enters_core(reached) && current && !promoted {
            report.core_added += 1;
            let mut meta = serde_json::Map::new();
            meta.insert("origin".into(), Value::from("dialectic"));
            let core = plan.add(NewMemory {
                scope: Scope { session: None, ..memory.scope.clone() },
                text: memory.text.clone(),
                event_time: plan.now,
                recorded_at: plan.now,
                validity: Validity::from(plan.now),
                meta,
                body: Body::Core { category: "user_profile".into() },
            });
            plan.link(core, fact, EdgeKind::DerivedFrom, plan.now);
        }
    }
    Ok(())
}

const SUMMARY_SYSTEM: &str = "You summarise one conversation session for an agent's long-term memory, in at \
most three sentences: who took part, what was decided, learned or planned, and what was left open. Answer with \
JSON only: {\"summary\": \"...\"}.";

/// Most characters of a session the model reads (its last turns when longer).
const SUMMARY_INPUT_CHARS: usize = 12_000;

/// Characters an extractive summary may quote.
const EXTRACTIVE_CHARS: usize = 600;

/// Adds the summary of a closed session to the plan: the model's, when one is configured and
/// the cycle's budget allows (a session waits otherwise; a failed call falls back to the
/// extractive summary), or an extractive one. It is `derived_from` every turn and supersedes
/// the session's older summary.
async fn summarise(
    parts: &Parts,
    session: atlas_domain::ports::ClosedSession,
    plan: &mut Plan,
    report: &mut CycleReport,
    calls_left: &mut usize,
) {
    use atlas_domain::policy::summary::{Turn, extractive};
    let Some(last) = session.turns.last() else { return };
    let said_at = last.event_time;
    let mut written: Option<(String, &str)> = None;
    if let Some(llm) = &parts.llm {
        if *calls_left == 0 {
            report.summaries_deferred += 1;
            return;
        }
        *calls_left -= 1;
        report.llm_calls += 1;
        let mut lines: Vec<String> = Vec::new();
        let mut size = 0;
        for turn in session.turns.iter().rev() {
            let line = format!("[{}] {}", turn.event_time.to_rfc3339(), atlas_domain::policy::embedding::line(turn));
            size += line.len() + 1;
            if size > SUMMARY_INPUT_CHARS && !lines.is_empty() {
                break;
            }
            lines.push(line);
        }
        lines.reverse();
        let request = LlmRequest {
            system: SUMMARY_SYSTEM.into(),
            prompt: lines.join("\n"),
            json_schema: Some(json!({
                "type": "object", "required": ["summary"],
                "properties": {"summary": {"type": "string", "minLength": 1, "maxLength": 600}}
            })),
        };
        match llm.complete(request).await {
            Ok(answer) => {
                report.input_tokens += answer.input_tokens;
                report.output_tokens += answer.output_tokens;
                report.cost_usd += answer.cost;
                let text = serde_json::from_str::<Value>(answer.text.trim())
                    .ok()
                    .and_then(|v| v.get("summary").and_then(Value::as_str).map(str::trim).map(str::to_owned))
                    .filter(|s| !s.is_empty());
                match text {
                    Some(text) => written = Some((text, "llm")),
                    None => {
                        tracing::warn!("the model's summary is not {{\"summary\": text}}; an extractive one is kept")
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "summary call failed; an extractive summary is kept"),
        }
    }
    let (text, origin) = match written {
        Some(w) => w,
        None => {
            let turns: Vec<Turn<'_>> =
                session.turns.iter().map(|t| Turn { speaker: t.body.speaker(), text: &t.text }).collect();
            (extractive(&turns, EXTRACTIVE_CHARS), "extractive")
        }
    };
    if text.is_empty() {
        return;
    }
    let name = session.scope.session.clone().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    meta.insert("origin".into(), Value::from(origin));
    let summary = plan.add(NewMemory {
        scope: session.scope.clone(),
        text,
        event_time: said_at,
        recorded_at: plan.now,
        validity: Validity::from(said_at),
        meta,
        body: Body::Summary { session: name, turns: session.turns.len() as u32 },
    });
    report.summaries_added += 1;
    for turn in &session.turns {
        plan.link(summary, turn.id, EdgeKind::DerivedFrom, said_at);
        // Provenance, not association: recall's graph walk does not pass through a summary
        // from one turn of its session to all the others (the temporal walk relates turns).
        plan.batch.edges.last_mut().expect("just linked").weight = 0.0;
    }
    if let Some(previous) = session.previous {
        plan.batch.revisions.push(Revision {
            id: previous,
            valid_from: None,
            valid_until: Some(said_at),
            confidence: None,
        });
        plan.link(summary, previous, EdgeKind::Supersedes, said_at);
    }
}

/// One model call over `turns`; the facts it proposed as candidates, or why it failed.
async fn extract(
    parts: &Parts,
    turns: &[&Memory],
    report: &mut CycleReport,
) -> std::result::Result<Vec<(Candidate, &'static str)>, String> {
    let llm = parts.llm.as_ref().expect("only called with a model");
    let vocabulary = relations::vocabulary().collect::<Vec<_>>().join(", ");
    let prompt = turns
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!("{}. [{}] {}", i + 1, e.event_time.to_rfc3339(), atlas_domain::policy::embedding::line(e))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let request =
        LlmRequest { system: format!("{SYSTEM}{vocabulary}."), prompt, json_schema: Some(schema(turns.len())) };
    report.llm_calls += 1;
    let answer = llm.complete(request).await.map_err(|e| e.to_string())?;
    report.input_tokens += answer.input_tokens;
    report.output_tokens += answer.output_tokens;
    report.cost_usd += answer.cost;
    let proposed = parse_answer(&answer.text, turns.len())?;
    let mut out = Vec::new();
    for p in proposed {
        let episode = turns[p.turn - 1];
        let speaker = episode.body.speaker().unwrap_or("user");
        let subject = match p.subject.to_lowercase().as_str() {
            "i" | "me" | "myself" => speaker.to_owned(),
            _ => p.subject,
        };
        // The one rule keys it: a predicate of the table, or words it can read.
        let Some(keyed) = key_fact(&subject, &p.predicate, &p.object, speaker) else {
            report.predicates_rejected += 1;
            continue;
        };
        out.push((
            Candidate {
                subject: keyed.subject,
                subject_shown: keyed.subject_shown,
                predicate: keyed.predicate,
                object: keyed.object,
                confidence: p.confidence,
                source: episode.id,
                said_at: episode.event_time,
                wording: keyed.wording,
            },
            "llm",
        ));
    }
    Ok(out)
}

/// The sleep cycle in the background of a long-lived process (a server, an agent's host): it
/// runs after every `every` new episodes, after `idle_secs` without one when some wait, and at
/// the end of a session. A CLI process is too short-lived and runs `atlas consolidate` instead.
pub(crate) struct Sleeper {
    shared: Arc<SleepShared>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct SleepShared {
    new_episodes: AtomicUsize,
    wake: Notify,
    /// A session ended: the next cycle closes (summarises) every session.
    ending: std::sync::atomic::AtomicBool,
}

impl Sleeper {
    pub fn new() -> Self {
        Sleeper { shared: Arc::new(SleepShared::default()), task: std::sync::Mutex::new(None) }
    }

    /// Counts `n` new episodes; wakes the cycle once `every` have come in.
    pub fn written(&self, n: usize, every: usize) {
        let total = self.shared.new_episodes.fetch_add(n, Ordering::SeqCst) + n;
        if every > 0 && total >= every {
            self.shared.wake.notify_one();
        }
    }

    pub fn session_ended(&self) {
        self.shared.ending.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Starts the task once; later calls do nothing.
    pub fn start(
        &self,
        parts: Arc<Parts>,
        config: ConsolidationConfig,
        decay_every_hours: f64,
        bank_dir: Option<std::path::PathBuf>,
    ) {
        let mut task = self.task.lock().expect("sleeper lock");
        if task.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        *task = Some(tokio::spawn(async move {
            let idle = std::time::Duration::from_secs(config.idle_secs.max(1));
            let mut last_decay: Option<std::time::Instant> = None;
            loop {
                let woken = tokio::select! {
                    () = shared.wake.notified() => true,
                    () = tokio::time::sleep(idle) => false,
                };
                if !woken && shared.new_episodes.load(Ordering::SeqCst) == 0 {
                    continue;
                }
                shared.new_episodes.store(0, Ordering::SeqCst);
                let ending = shared.ending.swap(false, Ordering::SeqCst);
                let config = ConsolidationConfig {
                    session_idle_secs: if ending { 0 } else { config.session_idle_secs },
                    ..config.clone()
                };
                // Full batches follow each other; a cycle that deferred or failed anything
                // waits for the next occasion, so a model's budget is never run through.
                loop {
                    let outcome = run_cycle(&parts, &config, crate::now()).await;
                    if outcome.is_ok()
                        && let Some(dir) = &bank_dir
                    {
                        match crate::bank::write(&parts, dir).await {
                            Ok(written) => {
                                for s in &written.skipped {
                                    tracing::warn!(bank = %dir.display(), path = %s.path, reason = %s.reason, "the bank left a file alone");
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, bank = %dir.display(), "writing the bank after a sleep cycle failed; the next cycle writes it whole")
                            }
                        }
                    }
                    match outcome {
                        Ok(r) if r.episodes_seen >= config.batch && r.deferred == 0 && r.failed == 0 => continue,
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "background consolidation failed; it runs again at the next occasion");
                            break;
                        }
                    }
                }
                let due = decay_every_hours > 0.0
                    && last_decay.is_none_or(|t| t.elapsed().as_secs_f64() >= decay_every_hours * 3600.0);
                if due {
                    last_decay = Some(std::time::Instant::now());
                    match crate::forgetting::decay_pass(parts.store.as_ref(), crate::now()).await {
                        Ok(r) => tracing::info!(soft_deleted = r.ids.len(), "decay pass"),
                        Err(e) => tracing::warn!(error = %e, "background decay pass failed; it runs again later"),
                    }
                }
            }
        }));
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().expect("sleeper lock").take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn answers_outside_the_schema_fail_whole() {
        assert!(parse_answer("not json", 2).is_err());
        assert!(parse_answer("{\"facts\": {}}", 2).is_err());
        assert!(
            parse_answer(
                "{\"facts\": [{\"turn\": 3, \"subject\": \"a\", \"predicate\": \"b\", \"object\": \"c\"}]}",
                2
            )
            .is_err()
        );
        assert!(
            parse_answer("{\"facts\": [{\"turn\": 1, \"subject\": \"\", \"predicate\": \"b\", \"object\": \"c\"}]}", 2)
                .is_err()
        );
        let ok = parse_answer("```json\n{\"facts\": [{\"turn\": 2, \"subject\": \"Ann\", \"predicate\": \"prefers\", \"object\": \"Rust\", \"confidence\": 0.7}]}\n```", 2).unwrap();
        assert_eq!((ok[0].turn, ok[0].object.as_str(), ok[0].confidence), (2, "Rust", 0.7));
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_answer_parser_never_panics(text in "\\PC{0,300}", turns in 0usize..5) {
            let _ = parse_answer(&text, turns);
        }
    }
}
