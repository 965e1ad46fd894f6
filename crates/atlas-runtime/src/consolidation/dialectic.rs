//! The dialectic over observations about the user: stages from supporting episodes, confidence
//! raised to match, and a verified observation copied once into core memory.

use super::CycleReport;
use super::filing::{Plan, reference};
use crate::Parts;
use atlas_domain::ports::{MemoryRef, Revision};
use atlas_domain::{Body, EdgeKind, Memory, MemoryId, NewMemory, Result, Scope, Validity};
use serde_json::Value;
use std::collections::BTreeMap;

/// A batch reference as the plan's id: stored ids as they are, new memories negative.
pub(super) fn plan_id(r: MemoryRef) -> MemoryId {
    match r {
        MemoryRef::Stored(id) => id,
        MemoryRef::New(i) => MemoryId(-(i as i64) - 1),
    }
}

/// The dialectic over the observations about the user (`U-` tags) this cycle touched: each
/// one's stage from its distinct supporting episodes (stored and new), its confidence raised to
/// match, and a verified one, still current, copied once into core memory (`derived_from` it).
pub(super) async fn dialectic(parts: &Parts, plan: &mut Plan, report: &mut CycleReport) -> Result<()> {
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
