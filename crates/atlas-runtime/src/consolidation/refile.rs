//! Facts in words stored before the one rule read them (a space, or a restored export, from
//! before `policy::reading`): a `world` / `fact` statement that the rules now read as a
//! relation ("Frank lives in Berlin") is filed again, by each of its statements, into that
//! relation's timeline, where a newer value supersedes it as any other; the old record is
//! forgotten softly once the cycle that filed its statements is stored (a crash in between
//! files the same statements again, which join the facts already filed: nothing doubles).

use crate::Parts;
use atlas_domain::policy::consolidation::Candidate;
use atlas_domain::policy::reading::key_fact;
use atlas_domain::ports::Update;
use atlas_domain::{Body, EdgeKind, Lifecycle, Memory, Result, Scope, Timestamp};

/// The subject statements in words were filed under before they were read.
const WORLD: &str = "world";

/// The statements of `scope`'s legacy facts in words, as candidates, and those facts.
pub(super) async fn legacy_statements(
    parts: &Parts,
    scope: &Scope,
) -> Result<(Vec<(Candidate, &'static str)>, Vec<Memory>)> {
    let Some(store) = &parts.consolidator else { return Ok(Default::default()) };
    let world: Vec<Memory> = store.known(vec![WORLD.into()], Vec::new(), scope.clone()).await?;
    let mut candidates = Vec::new();
    let mut ended = Vec::new();
    for fact in world {
        let Body::Fact { subject, predicate, object, confidence } = &fact.body else { continue };
        let current = fact.validity.valid_until.is_none() && !fact.lifecycle.is_deleted();
        if subject != WORLD || predicate != "fact" || !current || fact.id.0 <= 0 {
            continue;
        }
        let Some(keyed) = key_fact(subject, predicate, object, "user").filter(|k| k.predicate != "fact") else {
            continue;
        };
        let edges = parts.store.edges_of(fact.id).await?;
        let mut said: Vec<_> = edges
            .iter()
            .filter(|e| e.kind == EdgeKind::DerivedFrom && e.src == fact.id)
            .map(|e| (e.dst, e.validity.valid_from))
            .collect();
        if said.is_empty() {
            // No recorded statement: the fact itself stands for one said when it began.
            said.push((fact.id, fact.validity.valid_from));
        }
        for (source, said_at) in said {
            let candidate = Candidate {
                subject: keyed.subject.clone(),
                subject_shown: keyed.subject_shown.clone(),
                predicate: keyed.predicate.clone(),
                object: keyed.object.clone(),
                confidence: *confidence,
                source,
                said_at,
                wording: Some(fact.text.clone()),
            };
            candidates.push((candidate, "refiled"));
        }
        ended.push(fact);
    }
    Ok((candidates, ended))
}

/// Forgets, softly, the legacy facts whose statements a stored cycle filed again.
pub(super) async fn forget_refiled(parts: &Parts, refiled: Vec<Memory>, at: Timestamp) -> Result<()> {
    if refiled.is_empty() {
        return Ok(());
    }
    let updates = refiled
        .into_iter()
        .map(|m| Update { id: m.id, lifecycle: Lifecycle { deleted_at: Some(at), ..m.lifecycle }, body: None })
        .collect();
    parts.store.update(updates).await.map(|_| ())
}
