//! `explain`: where a memory came from and what became of it: its sources, the versions it
//! replaced and what replaced it (with why, by the relation's rule or a model's judgment), the
//! entities it names, and how it is ageing.

use crate::{Atlas, now};
use atlas_domain::policy::relations::why_superseded;
use atlas_domain::{Body, Edge, EdgeKind, Memory, MemoryId, Result};

/// Where a memory came from and what became of it (`atlas explain`).
#[derive(Debug, Clone)]
pub struct Explanation {
    pub memory: Memory,
    /// The episodes it was consolidated from (more than one: the same fact stated again).
    pub sources: Vec<Memory>,
    /// The older versions it replaced, newest first, each with its validity.
    pub replaced: Vec<Memory>,
    /// What replaced it, if it no longer holds.
    pub replaced_by: Vec<Memory>,
    /// The entities it names, or, for an entity, the memories that name it.
    pub entities: Vec<Memory>,
    /// Its strength now ([`atlas_domain::policy::decay::strength_at`]); 1 for what never decays.
    pub strength: f64,
    /// Whether it decays at all.
    pub decays: bool,
    /// For a fact: how the sleep cycle judged pairs of its object with another of the same
    /// subject and predicate that the rules could not tell apart (the cycles' `judgments`,
    /// newest first, from the last [`EXPLAINED_CYCLES`] cycles).
    pub judgments: Vec<serde_json::Value>,
    /// For a fact that replaced another or was replaced: why, in words, for each such step
    /// (the relation's rule, or a model's judgment).
    pub supersession: Vec<String>,
}

/// How many of the latest cycles `explain` searches for a fact's judgments.
pub const EXPLAINED_CYCLES: usize = 1_000;

impl Atlas {
    /// A memory's provenance and history: its sources, the versions it replaced (following
    /// `supersedes` edges back to the first), what replaced it, and the entities it names.
    pub async fn explain(&self, id: MemoryId) -> Result<Option<Explanation>> {
        let Some(memory) = self.parts.store.get(id).await? else {
            return Ok(None);
        };
        let edges = self.parts.store.edges_of(id).await?;
        let ends = |pick: &dyn Fn(&Edge) -> Option<MemoryId>| edges.iter().filter_map(pick).collect::<Vec<_>>();
        let sources = ends(&|e| (e.kind == EdgeKind::DerivedFrom && e.src == id).then_some(e.dst));
        let replaced_by = ends(&|e| (e.kind == EdgeKind::Supersedes && e.dst == id).then_some(e.src));
        let entities = ends(&|e| (e.kind == EdgeKind::Entity).then(|| if e.src == id { e.dst } else { e.src }));
        // The chain of older versions, each reached from the one that replaced it.
        let mut replaced = Vec::new();
        let mut at = id;
        let mut seen = std::collections::HashSet::from([id]);
        while let Some(older) = self
            .parts
            .store
            .edges_of(at)
            .await?
            .into_iter()
            .find(|e| e.kind == EdgeKind::Supersedes && e.src == at && seen.insert(e.dst))
        {
            at = older.dst;
            replaced.extend(self.parts.store.get(at).await?);
        }
        let mut judgments = Vec::new();
        if let (Body::Fact { subject, predicate, object, .. }, Some(store)) = (&memory.body, &self.parts.consolidator) {
            for report in store.cycles(EXPLAINED_CYCLES).await? {
                let found = report["judgments"].as_array().into_iter().flatten().filter(|j| {
                    j["subject"] == subject.as_str()
                        && j["predicate"] == predicate.as_str()
                        && j["objects"].as_array().is_some_and(|o| o.iter().any(|x| x == object.as_str()))
                });
                judgments.extend(found.cloned());
            }
        }
        let replaced_by = self.parts.store.get_many(replaced_by).await?;
        let supersession = match &memory.body {
            Body::Fact { predicate, object, .. } => {
                let newer = replaced_by.iter().filter_map(object_of).map(|newer| (object.clone(), newer));
                let older = replaced.first().and_then(object_of).map(|older| (older, object.clone()));
                newer
                    .chain(older)
                    .map(|(older, newer)| why_superseded(predicate, &older, &newer, judged(&judgments, &older, &newer)))
                    .collect()
            }
            _ => Vec::new(),
        };
        Ok(Some(Explanation {
            supersession,
            judgments,
            sources: self.parts.store.get_many(sources).await?,
            replaced,
            replaced_by,
            entities: self.parts.store.get_many(entities).await?,
            strength: atlas_domain::policy::decay::strength_at(&memory, now()),
            decays: atlas_domain::policy::decay::aging_of(&memory) != atlas_domain::policy::decay::Aging::Never,
            memory,
        }))
    }
}

/// A fact's object.
fn object_of(m: &Memory) -> Option<String> {
    match &m.body {
        Body::Fact { object, .. } => Some(object.clone()),
        _ => None,
    }
}

/// Whether a model judged that `newer` replaces `older` (a cycle's judgment of the pair).
fn judged(judgments: &[serde_json::Value], older: &str, newer: &str) -> bool {
    judgments.iter().any(|j| {
        j["verdict"] == "replaces"
            && j["by"] == "model"
            && j["objects"].as_array().is_some_and(|o| o.iter().any(|x| x == older) && o.iter().any(|x| x == newer))
    })
}
