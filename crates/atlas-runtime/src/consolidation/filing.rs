//! The batch a cycle builds (new memories with negative ids, edges, revisions) and how the
//! statements of one subject and predicate are filed into that key's timeline of facts.

use super::CycleReport;
use atlas_domain::policy::consolidation::{Candidate, fact_text, normalize};
use atlas_domain::policy::embedding::cosine;
use atlas_domain::policy::relations::{self, Kind};
use atlas_domain::policy::timeline::{Relation, Statement, StoredFact, Verdict, by_rule_for, reconcile};
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision};
use atlas_domain::{Body, EdgeKind, Memory, MemoryId, NewMemory, Scope, Timestamp, Validity};
use serde_json::Value;

/// The batch under construction, and the facts and entities it already knows of, where the
/// ones it is adding carry negative ids (`-1` is the batch's first new memory).
pub(super) struct Plan {
    pub(super) batch: Consolidation,
    pub(super) known: Vec<Memory>,
    pub(super) now: Timestamp,
}

/// What the rules know of a group's objects: their embeddings, where an embedder is configured
/// (near-duplicates that share no word, "NYC" and "New York City", are the same fact), and the
/// similarities from which two are the same, or ambiguous.
pub(super) struct Rules {
    pub(super) objects: std::collections::HashMap<String, Vec<f32>>,
    pub(super) same_from: f64,
    pub(super) judge_from: f64,
}

impl Rules {
    /// How `b` relates to `a` under a relation of `kind`.
    pub(super) fn relation(&self, kind: Kind, a: &str, b: &str) -> Relation {
        let similarity = self.objects.get(a).zip(self.objects.get(b)).map(|(x, y)| cosine(x, y));
        by_rule_for(kind, a, b, similarity, self.same_from, self.judge_from)
    }
}

pub(super) fn reference(id: MemoryId) -> MemoryRef {
    if id.0 < 0 { MemoryRef::New((-id.0 - 1) as usize) } else { MemoryRef::Stored(id) }
}

impl Plan {
    pub(super) fn add(&mut self, memory: NewMemory) -> MemoryId {
        self.batch.memories.push(memory.clone());
        let id = MemoryId(-(self.batch.memories.len() as i64));
        self.known.push(memory.with_id(id));
        id
    }

    pub(super) fn link(&mut self, src: MemoryId, dst: MemoryId, kind: EdgeKind, from: Timestamp) {
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
    pub(super) fn entity(&mut self, name: &str, scope: &Scope, at: Timestamp, report: &mut CycleReport) -> MemoryId {
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
    pub(super) fn file(
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
