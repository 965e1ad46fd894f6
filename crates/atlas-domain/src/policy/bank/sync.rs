//! A person's edits of the current lines, as changes to the space.

use super::*;

/// What a sync changes: edited lines become new versions, removed lines are forgotten, new
/// lines are added. Empty when the bank says what the space believes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncPlan {
    /// A new version (memory) of a current one (id), which it supersedes.
    pub edited: Vec<(MemoryId, NewMemory)>,
    /// Current memories whose line was removed from the bank: forgotten softly.
    pub removed: Vec<MemoryId>,
    /// New memories, each with the entity its page is about.
    pub added: Vec<(NewMemory, Option<MemoryId>)>,
}

impl SyncPlan {
    pub fn is_empty(&self) -> bool {
        self.edited.is_empty() && self.removed.is_empty() && self.added.is_empty()
    }
}

/// Compares a bank's current lines with the space's current facts and core entries (`current`:
/// live memories whose validity is open). A memory the bank's History records but whose line
/// is gone is removed; one the bank never recorded (learned after it was written) is left
/// alone. A line naming a memory that is no longer current is an error: the bank is older than
/// the space, and `write` must come first.
pub fn plan_sync(bank: &Bank, current: &[Memory], now: Timestamp) -> Result<SyncPlan> {
    let current: HashMap<MemoryId, &Memory> = current
        .iter()
        .filter(|m| matches!(m.kind(), MemoryKind::Fact | MemoryKind::Core) && !m.lifecycle.is_deleted())
        .map(|m| (m.id, m))
        .collect();
    let recorded: HashSet<MemoryId> = bank.records.iter().map(|r| r.memory.id).collect();
    let mut plan = SyncPlan::default();
    let mut shown: HashSet<MemoryId> = HashSet::new();
    for s in &bank.stated {
        let Some(id) = s.id else {
            plan.added.push((stated_memory(s, None, now), s.entity));
            continue;
        };
        if !shown.insert(id) {
            return Err(bad(s.location.clone(), format!("^{} is on two lines", id.0)));
        }
        let Some(old) = current.get(&id) else {
            return Err(bad(
                s.location.clone(),
                format!(
                    "^{} is not a current fact or core entry of this space (replaced or forgotten since the bank was written: run `atlas bank write` first)",
                    id.0
                ),
            ));
        };
        if old.kind() != s.kind {
            return Err(bad(s.location.clone(), format!("^{} is a {}, not a {}", id.0, old.kind(), s.kind)));
        }
        if label_value(old) != (s.label.clone(), s.value.clone()) {
            plan.edited.push((id, stated_memory(s, Some(old), now)));
        }
    }
    let mut removed: Vec<MemoryId> =
        current.keys().filter(|id| recorded.contains(id) && !shown.contains(id)).copied().collect();
    removed.sort();
    plan.removed = removed;
    Ok(plan)
}

/// The memory a current line states, as a new version of `old` or a new memory.
fn stated_memory(s: &Stated, old: Option<&Memory>, now: Timestamp) -> NewMemory {
    let mut meta = Map::new();
    meta.insert("origin".into(), Value::from(EDITED_ORIGIN));
    let (body, text, scope) = match s.kind {
        MemoryKind::Core => (
            Body::Core { category: s.label.clone() },
            s.value.clone(),
            old.map_or(s.scope.clone(), |o| o.scope.clone()),
        ),
        _ => {
            let (subject, confidence) = match old.map(|o| &o.body) {
                Some(Body::Fact { subject, confidence, .. }) => (subject.clone(), *confidence),
                _ => (s.subject.clone(), 1.0),
            };
            let text = fact_text(&subject, &s.label, &s.value);
            let body = Body::Fact { subject, predicate: s.label.clone(), object: s.value.clone(), confidence };
            (body, text, old.map_or(s.scope.clone(), |o| o.scope.clone()))
        }
    };
    NewMemory { scope, text, event_time: now, recorded_at: now, validity: Validity::from(now), meta, body }
}
