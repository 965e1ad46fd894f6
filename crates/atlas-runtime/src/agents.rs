//! The agent memories (seed 002) over the runtime's recall and ports: the Experience memory
//! (past tasks with outcome and feedback, ReMem), the Strategy bank (situation → suggestion
//! with success statistics, ArcMemo), and the MemorySystem that combines them, each part
//! optional. Their policies are pure and live in `atlas_domain::policy::{experience, strategy}`.

use crate::recall::RecallRequest;
use crate::{Atlas, now};
use atlas_domain::policy::consolidation::word_overlap;
use atlas_domain::policy::experience::{clusters, duplicate_key, informative, rank, weight};
use atlas_domain::policy::fusion::Signal;
use atlas_domain::policy::strategy::{rank_score, record, relevance, success_rate, upper_bound};
use atlas_domain::ports::{LlmRequest, Update};
use atlas_domain::{
    AtlasError, Body, Lifecycle, Memory, MemoryId, MemoryKind, NewMemory, Outcome, Result, Scope, Trajectory, Validity,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Candidates a search reads per result it returns, before re-ranking.
const CANDIDATES_PER_RESULT: usize = 3;

/// Experiences at least this alike (cosine of their embeddings) form one cluster.
const CLUSTER_SIMILARITY: f64 = 0.8;

/// A strategy whose situation shares this share of its content words with a new one's is the
/// same strategy (its statistics are updated instead of a new one added).
const SAME_SITUATION: f64 = 0.6;

/// One remembered trajectory, found for a task.
#[derive(Debug, Clone, Serialize)]
pub struct ExperienceHit {
    /// The trajectory's own id (the memory's id is `memory_id`).
    pub id: Option<String>,
    pub memory_id: MemoryId,
    pub task: String,
    pub success: bool,
    pub outcome: Outcome,
    pub feedback: Option<String>,
    pub steps: Vec<String>,
    /// Its relevance to the task, by which experiences are ranked first: the cosine of the task
    /// asked and the experience's task, else (no embedder) its best share of the best raw
    /// full-text score.
    /// The outcome reorders only experiences comparably relevant
    /// ([`atlas_domain::policy::experience::rank`]).
    pub score: f64,
    /// The cosine of task and experience, where the vector search found it.
    pub similarity: Option<f64>,
}

/// What storing trajectories did, one line per trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct StoredExperience {
    pub id: String,
    pub memory_id: MemoryId,
    /// This trajectory had been stored before: nothing was written again.
    pub replayed: bool,
}

/// What `refine` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Refined {
    /// Near-duplicates folded into the experience they repeat (soft-deleted, their trajectory
    /// ids kept in its `merged`).
    pub merged: u64,
    /// Failures whose feedback teaches nothing: they weigh 0.3 in every search.
    pub demoted: u64,
    /// The groups of trajectory ids whose tasks are alike in embedding space (with an embedder).
    pub clusters: Vec<Vec<String>>,
}

/// Which experiences `prune` removes (softly: `recover` brings any back).
#[derive(Debug, Clone, Copy, Default)]
pub struct PruneCriteria {
    /// Learned at least this many days ago.
    pub older_than_days: Option<f64>,
    /// Only failures.
    pub failures_only: bool,
    /// Only those never used (no feedback recorded on them).
    pub unused_only: bool,
}

/// A strategy, found for a task.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyHit {
    pub id: MemoryId,
    pub situation: String,
    pub suggestion: String,
    pub usage_count: u32,
    pub success_rate: f64,
    /// [`atlas_domain::policy::strategy`]'s rank.
    pub score: f64,
    /// The cosine of task and situation, where the vector search found it.
    pub similarity: Option<f64>,
}

/// What `write_strategy` did with a trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenStrategy {
    pub strategy: StrategyHit,
    /// A near-duplicate existed: its statistics took this trajectory's outcome instead.
    pub updated: bool,
}

/// Which parts of the agent memory a [`MemorySystem`] uses (each optional, for ablation).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    pub experiences: bool,
    pub strategies: bool,
    pub concepts: bool,
}

impl Parts {
    pub const ALL: Parts = Parts { experiences: true, strategies: true, concepts: true };
}

/// The parts' results for one task, labelled; a part that is off answers `None`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemQuery {
    pub experiences: Option<Vec<ExperienceHit>>,
    pub strategies: Option<Vec<StrategyHit>>,
    pub concepts: Option<Vec<crate::concepts::ConceptHit>>,
}

/// What storing one trajectory did in each part: the experience stored, the strategy written
/// or updated, the concepts its steps called (their statistics took its outcome).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemStore {
    pub experience: Option<StoredExperience>,
    pub strategy: Option<WrittenStrategy>,
    pub concepts: Option<Vec<crate::concepts::ConceptHit>>,
}

/// The agent memories combined.
pub struct MemorySystem<'a> {
    pub atlas: &'a Atlas,
    pub parts: Parts,
    pub scope: Scope,
}

impl MemorySystem<'_> {
    pub async fn query(&self, task: &str, k: usize) -> Result<SystemQuery> {
        Ok(SystemQuery {
            experiences: match self.parts.experiences {
                true => Some(self.atlas.search_experiences(task, k, self.scope.clone()).await?),
                false => None,
            },
            strategies: match self.parts.strategies {
                true => Some(self.atlas.read_strategies(task, k, self.scope.clone(), false).await?),
                false => None,
            },
            concepts: match self.parts.concepts {
                true => Some(self.atlas.search_concepts(task, k, self.scope.clone()).await?),
                false => None,
            },
        })
    }

    /// Compresses trajectories into the Concept library (when that part is on).
    pub async fn compress(&self, trajectories: &[Trajectory], max: usize) -> Result<Vec<crate::concepts::ConceptHit>> {
        match self.parts.concepts {
            true => self.atlas.compress_trajectories(trajectories, max, self.scope.clone()).await,
            false => Ok(Vec::new()),
        }
    }

    pub async fn store(&self, trajectory: &Trajectory) -> Result<SystemStore> {
        let experience = match self.parts.experiences {
            true => self.atlas.store_experiences(vec![trajectory.clone()], self.scope.clone()).await?.pop(),
            false => None,
        };
        let strategy = match self.parts.strategies {
            true => self.atlas.write_strategy(trajectory, self.scope.clone()).await?,
            false => None,
        };
        let concepts = match self.parts.concepts {
            true => Some(self.atlas.record_concepts_called(trajectory, self.scope.clone()).await?),
            false => None,
        };
        Ok(SystemStore { experience, strategy, concepts })
    }
}

fn experience_hit(memory: Memory, score: f64) -> Option<ExperienceHit> {
    match &memory.body {
        Body::Experience { task, outcome, feedback, trajectory, steps, .. } => Some(ExperienceHit {
            id: trajectory.clone(),
            memory_id: memory.id,
            task: task.clone(),
            success: *outcome == Outcome::Success,
            outcome: *outcome,
            feedback: feedback.clone(),
            steps: steps.clone(),
            score,
            similarity: None,
        }),
        _ => None,
    }
}

fn strategy_hit(memory: &Memory, score: f64) -> Option<StrategyHit> {
    match &memory.body {
        Body::Strategy { situation, suggestion, successes, failures } => Some(StrategyHit {
            id: memory.id,
            situation: situation.clone(),
            suggestion: suggestion.clone(),
            usage_count: successes + failures,
            success_rate: success_rate(*successes, *failures),
            score,
            similarity: None,
        }),
        _ => None,
    }
}

impl Atlas {
    /// Every live memory of `kind` in `scope` (a maintenance pass: reads the whole space).
    async fn all_of(&self, kind: MemoryKind, scope: &Scope) -> Result<Vec<Memory>> {
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let page = self.parts.store.scan(after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            found.extend(
                page.into_iter().filter(|m| m.kind() == kind && !m.lifecycle.is_deleted() && scope.admits(&m.scope)),
            );
        }
        Ok(found)
    }

    /// Recall restricted to one kind, `k × CANDIDATES_PER_RESULT` candidates, each with its
    /// relevance ([`atlas_domain::policy::strategy::relevance`]: its best share of the best raw
    /// full-text or vector score) and its similarity (the cosine of query and memory, where the
    /// vector search found it: an absolute measure a caller may set a floor on).
    pub(crate) async fn candidates(
        &self,
        query: &str,
        kind: MemoryKind,
        k: usize,
        scope: Scope,
    ) -> Result<Vec<(Memory, f64, Option<f64>)>> {
        let request = RecallRequest {
            query: query.into(),
            k: k * CANDIDATES_PER_RESULT,
            scope,
            kinds: vec![kind],
            ..Default::default()
        };
        let hits = self.recall(request).await?.hits;
        let searches = [Signal::Text, Signal::Vector];
        let best: Vec<f64> = searches
            .iter()
            .map(|s| hits.iter().filter_map(|h| h.signals.get(s)).map(|x| x.raw).fold(0.0, f64::max))
            .collect();
        Ok(hits
            .into_iter()
            .map(|h| {
                let found: Vec<(f64, f64)> =
                    searches.iter().zip(&best).filter_map(|(s, b)| h.signals.get(s).map(|x| (x.raw, *b))).collect();
                let similarity = h.signals.get(&Signal::Vector).map(|x| x.raw);
                (h.memory, relevance(&found), similarity)
            })
            .collect())
    }

    /// Reads a trajectory file (errors name file, line and field) and stores it.
    pub async fn store_experience_file(&self, path: &std::path::Path, scope: Scope) -> Result<Vec<StoredExperience>> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| AtlasError::invalid(&shown, format!("cannot read: {e}")))?;
        let trajectories = crate::parse_trajectories(&bytes, &shown, now())?;
        self.store_experiences(trajectories, scope).await
    }

    /// Stores each trajectory as an experience, at most once per trajectory id.
    pub async fn store_experiences(
        &self,
        trajectories: Vec<Trajectory>,
        scope: Scope,
    ) -> Result<Vec<StoredExperience>> {
        let mut stored = Vec::with_capacity(trajectories.len());
        for t in trajectories {
            // Once per id within a scope: two tenants' trajectories of one id are two experiences.
            let key = if scope.is_empty() {
                format!("trajectory:{}", t.id)
            } else {
                format!("trajectory@{}:{}", serde_json::json!([scope.user, scope.agent, scope.session]), t.id)
            };
            let receipt = self.parts.store.insert_once(key, vec![t.to_experience(scope.clone(), now())], None).await?;
            let memory_id =
                *receipt.ids.first().ok_or_else(|| AtlasError::Storage("an insert returned no id".into()))?;
            stored.push(StoredExperience { id: t.id, memory_id, replayed: receipt.replayed });
        }
        if stored.iter().any(|s| !s.replayed) {
            self.background.wake();
        }
        Ok(stored)
    }

    /// The `k` experiences most worth reading for `task`: recall over experiences, re-ranked by
    /// outcome ([`atlas_domain::policy::experience::weight`]): what worked first, failures that
    /// teach next, failures that say nothing last.
    pub async fn search_experiences(&self, task: &str, k: usize, scope: Scope) -> Result<Vec<ExperienceHit>> {
        let found: Vec<(ExperienceHit, f64)> = self
            .candidates(task, MemoryKind::Experience, k, scope)
            .await?
            .into_iter()
            .filter_map(|(m, relevance, similarity)| {
                let hit = experience_hit(m, relevance)?;
                Some((ExperienceHit { similarity, ..hit }, relevance))
            })
            .collect();
        // Relevance must be absolute and about the task, to compare tasks: the cosine of the
        // task asked and each experience's task (its memory's own vector also holds its steps
        // and feedback, which may repeat the task's words); without an embedder, the relative
        // relevance of the full-text search.
        let absolute = match &self.parts.embedder {
            Some(embedder) if !found.is_empty() => {
                let query = embedder.embed_query(task.to_owned()).await?;
                let tasks = embedder.embed(found.iter().map(|(h, _)| h.task.clone()).collect()).await?;
                Some(tasks.iter().map(|t| atlas_domain::policy::embedding::cosine(&query, t)).collect::<Vec<f64>>())
            }
            _ => None,
        };
        let mut found: Vec<(ExperienceHit, f64)> = found
            .into_iter()
            .enumerate()
            .map(|(i, (mut hit, relevance))| {
                let relevance = absolute.as_ref().map_or(relevance, |a| a[i]);
                hit.score = relevance;
                (hit, relevance)
            })
            .collect();
        found.sort_by_key(|(h, _)| h.memory_id);
        let ranked: Vec<(f64, f64)> =
            found.iter().map(|(h, relevance)| (*relevance, weight(h.outcome, h.feedback.as_deref()))).collect();
        let order = rank(&ranked);
        let mut slots: Vec<Option<ExperienceHit>> = found.into_iter().map(|(h, _)| Some(h)).collect();
        let mut hits: Vec<ExperienceHit> = order.into_iter().filter_map(|i| slots[i].take()).collect();
        hits.truncate(k);
        Ok(hits)
    }

    /// ReMem's refine over the experiences of `scope`: near-duplicates (same task, same outcome)
    /// fold into the first, which keeps their trajectory ids; uninformative failures are
    /// counted (search already weighs them down); the clusters of the embedding space are
    /// reported.
    pub async fn refine_experiences(&self, scope: Scope) -> Result<Refined> {
        let experiences = self.all_of(MemoryKind::Experience, &scope).await?;
        let mut report = Refined::default();
        let mut groups: BTreeMap<String, Vec<&Memory>> = BTreeMap::new();
        for m in &experiences {
            if let Body::Experience { task, outcome, feedback, .. } = &m.body {
                groups.entry(duplicate_key(task, *outcome)).or_default().push(m);
                if *outcome == Outcome::Failure && !informative(feedback.as_deref()) {
                    report.demoted += 1;
                }
            }
        }
        let at = now();
        let mut updates = Vec::new();
        for group in groups.values().filter(|g| g.len() > 1) {
            let (kept, rest) = group.split_first().expect("a group has a member");
            let mut body = kept.body.clone();
            if let Body::Experience { merged, .. } = &mut body {
                for m in rest {
                    if let Body::Experience { trajectory, merged: theirs, .. } = &m.body {
                        merged.extend(trajectory.iter().cloned());
                        merged.extend(theirs.iter().cloned());
                    }
                }
            }
            updates.push(Update { id: kept.id, lifecycle: kept.lifecycle, body: Some(body) });
            for m in rest {
                updates.push(Update {
                    id: m.id,
                    lifecycle: Lifecycle { deleted_at: Some(at), ..m.lifecycle },
                    body: None,
                });
                report.merged += 1;
            }
        }
        if !updates.is_empty() {
            self.parts.store.update(updates).await?;
        }
        if let Some(embedder) = &self.parts.embedder {
            let live: Vec<&Memory> = experiences
                .iter()
                .filter(|m| !groups.values().any(|g| g.len() > 1 && g[1..].iter().any(|d| d.id == m.id)))
                .collect();
            // By task: experiences of the same kind of task group, whatever their outcome.
            let tasks = live
                .iter()
                .map(|m| match &m.body {
                    Body::Experience { task, .. } => task.clone(),
                    _ => m.text.clone(),
                })
                .collect();
            let vectors = embedder.embed(tasks).await?;
            let id_of = |m: &Memory| match &m.body {
                Body::Experience { trajectory: Some(t), .. } => t.clone(),
                _ => m.id.to_string(),
            };
            report.clusters = clusters(&vectors, CLUSTER_SIMILARITY)
                .into_iter()
                .map(|group| group.into_iter().map(|i| id_of(live[i])).collect())
                .collect();
        }
        Ok(report)
    }

    /// Soft-deletes the experiences of `scope` that meet every criterion given; returns how
    /// many. `recover ID` (or `archive restore` once archived) brings any back.
    pub async fn prune_experiences(&self, criteria: PruneCriteria, scope: Scope) -> Result<u64> {
        let at = now();
        let updates: Vec<Update> = self
            .all_of(MemoryKind::Experience, &scope)
            .await?
            .into_iter()
            .filter(|m| {
                let old = criteria
                    .older_than_days
                    .is_none_or(|d| (at.millis() - m.recorded_at.millis()) as f64 >= d * 86_400_000.0);
                let failed =
                    !criteria.failures_only || matches!(m.body, Body::Experience { outcome: Outcome::Failure, .. });
                let unused = !criteria.unused_only || m.lifecycle.uses == 0;
                old && failed && unused
            })
            .map(|m| Update { id: m.id, lifecycle: Lifecycle { deleted_at: Some(at), ..m.lifecycle }, body: None })
            .collect();
        let n = updates.len() as u64;
        if n > 0 {
            self.parts.store.update(updates).await?;
        }
        Ok(n)
    }

    /// Adds a strategy with no uses yet (success rate 0.5).
    pub async fn add_strategy(&self, situation: &str, suggestion: &str, scope: Scope) -> Result<MemoryId> {
        for (field, value) in [("situation", situation), ("suggestion", suggestion)] {
            if value.trim().is_empty() {
                return Err(AtlasError::invalid(format!("--{field}"), format!("field \"{field}\": must not be blank")));
            }
        }
        let at = now();
        let memory = NewMemory {
            scope,
            text: format!("{}\n→ {}", situation.trim(), suggestion.trim()),
            event_time: at,
            recorded_at: at,
            validity: Validity::from(at),
            meta: serde_json::Map::new(),
            body: Body::Strategy {
                situation: situation.trim().to_owned(),
                suggestion: suggestion.trim().to_owned(),
                successes: 0,
                failures: 0,
            },
        };
        let id = self.parts.store.insert(vec![memory], None).await?[0];
        self.background.wake();
        Ok(id)
    }

    /// The `k` strategies for `task`, ranked by relevance and success
    /// ([`atlas_domain::policy::strategy`]); `explore` ranks by the rate's upper confidence
    /// bound instead, favouring strategies tried rarely.
    pub async fn read_strategies(&self, task: &str, k: usize, scope: Scope, explore: bool) -> Result<Vec<StrategyHit>> {
        let candidates = self.candidates(task, MemoryKind::Strategy, k, scope).await?;
        let total: u64 = candidates
            .iter()
            .map(|(m, _, _)| match m.body {
                Body::Strategy { successes, failures, .. } => u64::from(successes) + u64::from(failures),
                _ => 0,
            })
            .sum();
        let mut hits: Vec<StrategyHit> = candidates
            .iter()
            .filter_map(|(m, relevance, similarity)| {
                let Body::Strategy { successes, failures, .. } = m.body else { return None };
                let rate = if explore {
                    upper_bound(successes, failures, total, 1.0)
                } else {
                    success_rate(successes, failures)
                };
                strategy_hit(m, rank_score(*relevance, rate)).map(|h| StrategyHit { similarity: *similarity, ..h })
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(k);
        Ok(hits)
    }

    /// Records one use of a strategy and whether it worked.
    pub async fn update_strategy(&self, id: MemoryId, success: bool) -> Result<StrategyHit> {
        let m = self.parts.store.get(id).await?.ok_or(AtlasError::NotFound(id))?;
        let Body::Strategy { situation, suggestion, successes, failures } = &m.body else {
            return Err(AtlasError::invalid(format!("memory {id}"), format!("is a {}, not a strategy", m.kind())));
        };
        let (successes, failures) = record(*successes, *failures, success);
        let body = Body::Strategy { situation: situation.clone(), suggestion: suggestion.clone(), successes, failures };
        let lifecycle = Lifecycle { last_used: Some(now()), uses: m.lifecycle.uses.saturating_add(1), ..m.lifecycle };
        self.parts.store.update(vec![Update { id, lifecycle, body: Some(body.clone()) }]).await?;
        let updated = Memory { body, lifecycle, ..m };
        Ok(strategy_hit(&updated, 0.0).expect("a strategy"))
    }

    /// Abstracts a trajectory into a strategy (ArcMemo's write): the model states the
    /// situation and the suggestion where one is configured; otherwise the task is the
    /// situation and the first steps (or the output) the suggestion. A near-duplicate of a
    /// stored strategy (same situation, same suggestion) takes the trajectory's outcome into its
    /// statistics instead of a new strategy being added. `None` when the trajectory has nothing
    /// to suggest, or failed without a strategy to count it against.
    pub async fn write_strategy(&self, t: &Trajectory, scope: Scope) -> Result<Option<WrittenStrategy>> {
        let (situation, suggestion) = match self.abstract_by_model(t).await {
            Some(pair) => pair,
            None => {
                let steps: Vec<&str> = t.steps.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).take(3).collect();
                let suggestion = if steps.is_empty() { t.output.trim().to_owned() } else { steps.join("; ") };
                (t.task.trim().to_owned(), suggestion)
            }
        };
        if suggestion.is_empty() {
            return Ok(None);
        }
        // The same strategy: the same situation and the same suggestion. Another suggestion for
        // the same situation competes as a strategy of its own, and the statistics decide.
        let near =
            self.candidates(&situation, MemoryKind::Strategy, 3, scope.clone()).await?.into_iter().find(|(m, _, _)| {
                matches!(&m.body, Body::Strategy { situation: s, suggestion: g, .. }
                    if word_overlap(s, &situation) >= SAME_SITUATION && word_overlap(g, &suggestion) >= SAME_SITUATION)
            });
        if let Some((m, _, _)) = near {
            let strategy = self.update_strategy(m.id, t.success).await?;
            return Ok(Some(WrittenStrategy { strategy, updated: true }));
        }
        // A failure says what not to do: it counts against a strategy that suggested it, and
        // never becomes a suggestion itself.
        if !t.success {
            return Ok(None);
        }
        let id = self.add_strategy(&situation, &suggestion, scope).await?;
        let strategy = self.update_strategy(id, t.success).await?;
        Ok(Some(WrittenStrategy { strategy, updated: false }))
    }

    /// The model's abstraction of a trajectory, or `None` (no model, a failed call, an answer
    /// outside the schema: the rule takes over).
    async fn abstract_by_model(&self, t: &Trajectory) -> Option<(String, String)> {
        let llm = self.parts.llm.as_ref()?;
        let schema = serde_json::json!({
            "type": "object", "required": ["situation", "suggestion"],
            "properties": {
                "situation": {"type": "string", "minLength": 1, "maxLength": 300},
                "suggestion": {"type": "string", "minLength": 1, "maxLength": 500}
            }
        });
        let request = LlmRequest {
            system: "You turn one task an agent did into a reusable strategy: the situation it applies to \
                     (general, no specifics of this task) and what to do in it. Answer with JSON only: \
                     {\"situation\": \"...\", \"suggestion\": \"...\"}."
                .into(),
            prompt: format!(
                "Task: {}\nSteps:\n{}\nOutput: {}\nOutcome: {}\nFeedback: {}",
                t.task,
                t.steps.join("\n"),
                t.output,
                if t.success { "success" } else { "failure" },
                t.feedback.as_deref().unwrap_or("none")
            ),
            json_schema: Some(schema.clone()),
        };
        let answer = match llm.complete(request).await {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(%error, "strategy abstraction failed; the rule writes it");
                return None;
            }
        };
        let value = atlas_domain::policy::model_answer::read_answer(&answer.text, &schema)
            .map_err(|why| tracing::warn!(%why, "the model's strategy is outside its schema; the rule writes it"))
            .ok()?;
        let field = |k: &str| value.get(k)?.as_str().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        Some((field("situation")?, field("suggestion")?))
    }
}
