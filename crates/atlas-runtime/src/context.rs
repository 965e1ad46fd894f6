//! The context builder: gathers, for a task, the agent's persona and core memory, the active
//! goal, what the memories retrieve for it (facts, strategies, experiences, concepts,
//! episodes) and the session's recent history (older turns as the session's summary), and
//! packs them into a token budget (`atlas_domain::policy::context`).

use crate::recall::RecallRequest;
use crate::{Atlas, now};
use atlas_domain::policy::context::{Section, assemble, scaled};
use atlas_domain::policy::embedding::{line, speaker_line};
use atlas_domain::{Body, MemoryKind, RecallFilter, Result, Scope};
use serde::Serialize;

/// Raw turns of the session given verbatim; older ones come as the session's summary.
const RAW_TURNS: usize = 5;

/// Core memory entries read (the profile is small by design).
const CORE_ENTRIES: usize = 50;

/// The assembled context.
#[derive(Debug, Clone, Serialize)]
pub struct Context {
    pub budget: usize,
    pub tokens: usize,
    pub sections: Vec<Section>,
}

impl Context {
    /// The prompt text: each non-empty section under its heading, in order.
    pub fn text(&self) -> String {
        self.sections
            .iter()
            .filter(|s| !s.items.is_empty())
            .map(|s| format!("## {}\n{}", s.name, s.items.join("\n")))
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

impl Atlas {
    /// The context for `task` within `budget` tokens, for `scope` (its session's history when
    /// it names one).
    pub async fn context(&self, task: &str, budget: usize, scope: Scope) -> Result<Context> {
        let owner = Scope { session: None, ..scope.clone() };
        let core = self
            .parts
            .store
            .latest(
                RecallFilter { scope: owner.clone(), kinds: vec![MemoryKind::Core], ..Default::default() },
                CORE_ENTRIES,
            )
            .await?;
        let (mut persona, mut profile, mut goal) = (Vec::new(), Vec::new(), vec![format!("Task: {}", task.trim())]);
        for m in core.iter().rev() {
            match &m.body {
                Body::Core { category } if category == "agent_persona" => persona.push(m.text.clone()),
                Body::Core { category } if category == "active_goal" => goal.push(format!("Goal: {}", m.text)),
                _ => profile.push(m.text.clone()),
            }
        }

        let mut retrieved = Vec::new();
        let facts = RecallRequest {
            query: task.into(),
            k: 10,
            scope: owner.clone(),
            kinds: vec![MemoryKind::Fact],
            ..Default::default()
        };
        retrieved.extend(self.recall(facts).await?.hits.into_iter().map(|h| format!("Fact: {}", h.memory.text)));
        for s in self.read_strategies(task, 3, owner.clone(), false).await? {
            retrieved.push(format!(
                "Strategy ({:.0}% of {} uses): when {} → {}",
                s.success_rate * 100.0,
                s.usage_count,
                s.situation,
                s.suggestion
            ));
        }
        for e in self.search_experiences(task, 2, owner.clone()).await? {
            let verdict = if e.success { "succeeded" } else { "failed" };
            let feedback = e.feedback.map(|f| format!(" ({f})")).unwrap_or_default();
            retrieved.push(format!("Experience: {} — {verdict}{feedback}; steps: {}", e.task, e.steps.join("; ")));
        }
        for c in self.search_concepts(task, 2, owner.clone()).await? {
            retrieved.push(format!(
                "Concept {}({}): {} [{:.0}% of {} uses]\n{}",
                c.name,
                c.params.join(", "),
                c.description,
                c.success_rate * 100.0,
                c.usage_count,
                c.code
            ));
        }
        let episodes = RecallRequest {
            query: task.into(),
            k: 10,
            scope: owner.clone(),
            kinds: vec![MemoryKind::Episode],
            ..Default::default()
        };
        // The session's own recent turns come in the history, not twice.
        let recent = match &scope.session {
            Some(_) => {
                let filter =
                    RecallFilter { scope: scope.clone(), kinds: vec![MemoryKind::Episode], ..Default::default() };
                self.parts.store.latest(filter, RAW_TURNS).await?
            }
            None => Vec::new(),
        };
        retrieved.extend(
            self.recall(episodes).await?.hits.into_iter().filter(|h| !recent.iter().any(|r| r.id == h.memory.id)).map(
                |h| {
                    // A long memory is quoted where the task matched it, a turn's length of it.
                    let said = match &h.passage {
                        Some(passage) => speaker_line(h.memory.body.speaker(), &passage.quote(&h.memory.text)),
                        None => line(&h.memory),
                    };
                    format!("[{}] {said}", h.memory.event_time)
                },
            ),
        );

        // Newest first, so that a small budget keeps the latest turns; shown oldest first.
        let mut history: Vec<String> = recent.iter().map(line).collect();
        if scope.session.is_some() {
            let summaries = RecallFilter {
                scope: scope.clone(),
                kinds: vec![MemoryKind::Summary],
                valid_at: Some(now()),
                ..Default::default()
            };
            if let Some(summary) = self.parts.store.latest(summaries, 1).await?.pop() {
                history.push(format!("Earlier in this session: {}", summary.text));
            }
        }

        let mut sections = assemble([persona, profile, goal, retrieved, history], scaled(budget));
        if let Some(history) = sections.last_mut() {
            history.items.reverse();
        }
        let tokens = sections.iter().map(|s| s.tokens).sum();
        Ok(Context { budget, tokens, sections })
    }
}
