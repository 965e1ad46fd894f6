//! A person's edits of the current lines, as changes to the space.

use super::*;
use crate::policy::consolidation::normalize;
use crate::policy::limits::validate;

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

/// The space a sync compares a bank with.
#[derive(Debug, Clone, Copy)]
pub struct SyncSpace<'a> {
    /// Every live memory whose validity is open (facts, core entries, entities, ...).
    pub current: &'a [Memory],
    /// For a replaced version, the current version that replaced it (`supersedes` edges).
    pub replaced_by: &'a HashMap<MemoryId, MemoryId>,
    /// The longest text a memory may hold (import's limit).
    pub max_text_bytes: usize,
}

/// The (user, agent) a memory or page belongs to.
fn owner_of(scope: &Scope) -> (Option<&str>, Option<&str>) {
    (scope.user.as_deref(), scope.agent.as_deref())
}

fn scope_name(scope: &Scope) -> String {
    scope_dir(&scope.user, &scope.agent)
}

/// Whether `memory` says what line `s` says, on the same page: an added line already taken in
/// by an earlier sync, or stating what the space already holds.
fn states(memory: &Memory, s: &Stated) -> bool {
    if memory.kind() != s.kind || owner_of(&memory.scope) != owner_of(&s.scope) {
        return false;
    }
    match &memory.body {
        Body::Fact { subject, predicate, object, .. } => {
            let line = keyed_line(s);
            (*subject == s.subject && *predicate == s.label && *object == s.value)
                || (normalize(subject) == line.subject && *predicate == line.predicate && *object == line.object)
        }
        Body::Core { category } => *category == s.label && memory.text == s.value,
        _ => false,
    }
}

/// Compares a bank's current lines with the space (`space`). A memory the bank's History
/// records but whose line is gone is removed; one the bank never recorded (learned after it
/// was written) is left alone. A line naming a memory that is no longer current is an error
/// (the bank is older than the space, and `write` must come first), unless the version that
/// replaced it says exactly what the line says: a sync cut short after its commit, whose line
/// is taken in already. In the same way an added line that the space already states is not
/// added again, so that running a sync again after a crash at any point adds nothing.
///
/// Every line is checked as an import checks a memory (text size, NUL, validity), and against
/// its page: a line's memory must belong to the page's scope, and a page's entity must be a
/// current entity of that scope.
pub fn plan_sync(bank: &Bank, space: SyncSpace<'_>, now: Timestamp) -> Result<SyncPlan> {
    let live: HashMap<MemoryId, &Memory> =
        space.current.iter().filter(|m| !m.lifecycle.is_deleted()).map(|m| (m.id, m)).collect();
    let current: HashMap<MemoryId, &Memory> = live
        .iter()
        .filter(|(_, m)| matches!(m.kind(), MemoryKind::Fact | MemoryKind::Core))
        .map(|(id, m)| (*id, *m))
        .collect();
    let recorded: HashSet<MemoryId> = bank.records.iter().map(|r| r.memory.id).collect();
    let mut plan = SyncPlan::default();
    let mut shown: HashSet<MemoryId> = HashSet::new();
    // Anchored lines first, so that an added line matching a memory another line shows is
    // never taken for that memory.
    let anchored = bank.stated.iter().filter(|s| s.id.is_some());
    for s in anchored.chain(bank.stated.iter().filter(|s| s.id.is_none())) {
        let Some(id) = s.id else {
            if let Some(entity) = s.entity {
                match live.get(&entity) {
                    Some(e) if e.kind() == MemoryKind::Entity && owner_of(&e.scope) == owner_of(&s.scope) => {}
                    Some(e) if e.kind() == MemoryKind::Entity => {
                        return Err(bad(
                            s.location.clone(),
                            format!(
                                "the page's entity ^{} belongs to {}, not to this page's {}",
                                entity.0,
                                scope_name(&e.scope),
                                scope_name(&s.scope)
                            ),
                        ));
                    }
                    Some(e) => {
                        return Err(bad(
                            s.location.clone(),
                            format!("the page's entity ^{} is a {}, not an entity", entity.0, e.kind()),
                        ));
                    }
                    None => {
                        return Err(bad(
                            s.location.clone(),
                            format!("the page's entity ^{} is not a current entity of this space", entity.0),
                        ));
                    }
                }
            }
            if let Some(known) = current.values().find(|m| states(m, s)) {
                // Said already (by an earlier sync cut short, or by the space itself).
                shown.insert(known.id);
                continue;
            }
            let memory = stated_memory(s, None, now);
            validate(&memory, space.max_text_bytes, &s.location)?;
            if plan.added.iter().any(|(m, _)| m.text == memory.text && m.body == memory.body && m.scope == memory.scope)
            {
                continue;
            }
            // A new value of a relation with one value at a time is a new version of the
            // current fact, which it supersedes: the same rule as the sleep cycle's.
            if let Some(old) = superseded_by_line(&current, &memory, &plan) {
                shown.insert(old);
                plan.edited.push((old, memory));
                continue;
            }
            plan.added.push((memory, s.entity));
            continue;
        };
        let old = match current.get(&id) {
            Some(old) => *old,
            None => match space.replaced_by.get(&id).and_then(|new| current.get(new)) {
                Some(new) if states(new, s) && shown.insert(new.id) => continue,
                _ => {
                    return Err(bad(
                        s.location.clone(),
                        format!(
                            "^{} is not a current fact or core entry of this space (replaced or forgotten since the bank was written: run `atlas bank write` first)",
                            id.0
                        ),
                    ));
                }
            },
        };
        if !shown.insert(id) {
            return Err(bad(s.location.clone(), format!("^{} is on two lines", id.0)));
        }
        if old.kind() != s.kind {
            return Err(bad(s.location.clone(), format!("^{} is a {}, not a {}", id.0, old.kind(), s.kind)));
        }
        if owner_of(&old.scope) != owner_of(&s.scope) {
            return Err(bad(
                s.location.clone(),
                format!(
                    "^{} belongs to {}, not to this page's {} (a line moves between scopes only by removing it here and adding it there)",
                    id.0,
                    scope_name(&old.scope),
                    scope_name(&s.scope)
                ),
            ));
        }
        if label_value(old) != (s.label.clone(), s.value.clone()) {
            let memory = stated_memory(s, Some(old), now);
            validate(&memory, space.max_text_bytes, &s.location)?;
            plan.edited.push((id, memory));
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
            let body;
            let text;
            if old.is_some() {
                text = fact_text(&subject, &s.label, &s.value);
                body = Body::Fact { subject, predicate: s.label.clone(), object: s.value.clone(), confidence };
            } else {
                // A line a person added is keyed by the one rule ("fact: Frank lives in Vienna").
                let line = keyed_line(s);
                text = line.text;
                body = Body::Fact { subject: line.subject, predicate: line.predicate, object: line.object, confidence };
            }
            (body, text, old.map_or(s.scope.clone(), |o| o.scope.clone()))
        }
    };
    NewMemory { scope, text, event_time: now, recorded_at: now, validity: Validity::from(now), meta, body }
}

/// A fact line as the one rule (`policy::reading::key_fact`) keys it, with its text.
struct KeyedLine {
    subject: String,
    predicate: String,
    object: String,
    text: String,
}

fn keyed_line(s: &Stated) -> KeyedLine {
    match crate::policy::reading::key_fact(&s.subject, &s.label, &s.value, "user") {
        Some(k) => KeyedLine {
            text: k.wording.unwrap_or_else(|| fact_text(&k.subject_shown, &k.predicate, &k.object)),
            subject: k.subject,
            predicate: k.predicate,
            object: k.object,
        },
        None => KeyedLine {
            subject: s.subject.clone(),
            predicate: s.label.clone(),
            object: s.value.clone(),
            text: fact_text(&s.subject, &s.label, &s.value),
        },
    }
}

/// The current fact of the same owner, subject and relation that `memory`, a fact added by a
/// line, supersedes: only under a relation with one value at a time, and only one that no
/// other line of this sync edits already.
fn superseded_by_line(current: &HashMap<MemoryId, &Memory>, memory: &NewMemory, plan: &SyncPlan) -> Option<MemoryId> {
    let Body::Fact { subject, predicate, object, .. } = &memory.body else { return None };
    if !crate::policy::relations::is_functional(predicate) {
        return None;
    }
    let mut found: Vec<MemoryId> = current
        .values()
        .filter(|m| owner_of(&m.scope) == owner_of(&memory.scope))
        .filter(|m| {
            matches!(&m.body, Body::Fact { subject: s, predicate: p, object: o, .. }
                if normalize(s) == *subject && p == predicate && o != object)
        })
        .map(|m| m.id)
        .filter(|id| !plan.edited.iter().any(|(edited, _)| edited == id))
        .collect();
    found.sort();
    found.pop()
}
