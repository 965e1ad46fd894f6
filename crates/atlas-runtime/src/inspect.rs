//! What a person browsing a memory space reads (the inspector): pages of memories newest first
//! behind a cursor, what is known of one entity through time, sessions with their turns and the
//! facts found in them, and what the archive holds. Every read is bounded: nothing loads the
//! whole space.

use crate::{Atlas, now};
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::{AtlasError, EdgeKind, Memory, MemoryId, MemoryKind, RecallFilter, Result, Scope, Timestamp};
use std::collections::{BTreeMap, HashSet};

/// Where a page of memories newest first ends: the next page holds what sorts after it by
/// (event time, id), descending. Written `<event time ms>.<id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub event_time: Timestamp,
    pub id: MemoryId,
}

impl Cursor {
    pub fn of(m: &Memory) -> Cursor {
        Cursor { event_time: m.event_time, id: m.id }
    }

    /// Reads `<event time ms>.<id>`, naming what is wrong.
    pub fn parse(text: &str) -> std::result::Result<Cursor, String> {
        let (time, id) = text.split_once('.').ok_or_else(|| format!("a cursor is `<time>.<id>`, not {text:?}"))?;
        let event_time = time.parse::<i64>().map_err(|_| format!("the cursor's time is not a number: {time:?}"))?;
        let id =
            id.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| format!("the cursor's id is not an id: {id:?}"))?;
        Ok(Cursor { event_time: Timestamp(event_time), id: MemoryId(id) })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.event_time.millis(), self.id.0)
    }
}

/// A page of memories, and where the next one starts (none after the last).
#[derive(Debug, Clone)]
pub struct Page {
    pub memories: Vec<Memory>,
    pub next: Option<Cursor>,
}

/// What is known of an entity: the entity memories of that name, every fact about it, current
/// and past, oldest first (each with its validity, so that any date can be read off), and the
/// latest memories that name it, oldest first.
#[derive(Debug, Clone)]
pub struct EntityView {
    pub name: String,
    pub entities: Vec<Memory>,
    pub facts: Vec<Memory>,
    pub mentions: Vec<Memory>,
}

/// How many of the latest memories naming an entity its view shows.
const MENTIONS: usize = 50;

/// A session as listed: its scope, its current summary when it has one, its last turn.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub scope: Scope,
    pub summary: Option<Memory>,
    pub last_turn: Option<Timestamp>,
}

/// Sessions newest first: summarised ones by page, and, on the first page, the recent sessions
/// that have no summary yet.
#[derive(Debug, Clone)]
pub struct Sessions {
    pub sessions: Vec<SessionRow>,
    pub open: Vec<SessionRow>,
    pub next: Option<Cursor>,
}

/// A session's turns in spoken order (a page, going back in time), its summary, and the facts
/// the sleep cycle found in those turns.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub scope: Scope,
    pub summary: Option<Memory>,
    pub turns: Vec<Memory>,
    /// For each turn that yielded facts, their ids.
    pub found: BTreeMap<MemoryId, Vec<MemoryId>>,
    pub facts: Vec<Memory>,
    /// The cursor of the page of earlier turns, if there are any.
    pub earlier: Option<Cursor>,
}

/// Archived memories, newest archive first: each with the file that holds it.
#[derive(Debug, Clone)]
pub struct Archived {
    pub memories: Vec<(String, Memory)>,
    pub files: Vec<(String, usize)>,
}

/// How many recent episodes the first page of sessions looks through for open sessions.
const OPEN_SESSION_WINDOW: usize = 2_000;

/// The most memories one page of the archive listing reads out of its files.
const ARCHIVE_PAGE: usize = 500;

impl Atlas {
    /// Up to `limit` memories the filter admits, newest first, after `before` (a page's cursor).
    /// Memories that share an event time are ordered by id, so that no page repeats or skips
    /// one, however many share it.
    pub async fn list(&self, filter: RecallFilter, before: Option<Cursor>, limit: usize) -> Result<Page> {
        if limit == 0 {
            return Ok(Page { memories: Vec::new(), next: before });
        }
        let Some(cursor) = before else {
            let mut memories = self.parts.store.latest(filter, limit + 1).await?;
            let next = (memories.len() > limit).then(|| Cursor::of(&memories[limit - 1]));
            memories.truncate(limit);
            return Ok(Page { memories, next });
        };
        // The store pages by event time alone: read from the cursor's time on (inclusive) and
        // drop what the last page already showed; a run of equal times longer than the read
        // is read again, larger.
        let until = Timestamp(cursor.event_time.millis().saturating_add(1));
        let bounded = RecallFilter { until: Some(filter.until.map_or(until, |u| u.min(until))), ..filter };
        let mut read = 2 * limit + 1;
        loop {
            let found = self.parts.store.latest(bounded.clone(), read).await?;
            let exhausted = found.len() < read;
            let mut memories: Vec<Memory> = found.into_iter().filter(|m| Cursor::of(m) < cursor).collect();
            if memories.len() > limit || exhausted {
                let next = (memories.len() > limit).then(|| Cursor::of(&memories[limit - 1]));
                memories.truncate(limit);
                return Ok(Page { memories, next });
            }
            read *= 4;
        }
    }

    /// Every fact about `name` (current and past, oldest first by validity) and its entity
    /// memories, within `scope`'s user and agent.
    pub async fn entity(&self, name: &str, scope: Scope) -> Result<EntityView> {
        let key = normalize(name);
        if key.is_empty() {
            return Err(AtlasError::invalid("name", "field \"name\": an entity's name has letters or digits"));
        }
        let Some(consolidator) = &self.parts.consolidator else {
            return Ok(EntityView {
                name: name.to_owned(),
                entities: Vec::new(),
                facts: Vec::new(),
                mentions: Vec::new(),
            });
        };
        let scope = Scope { session: None, ..scope };
        let known = consolidator.known(vec![key.clone()], vec![key], scope).await?;
        let (entities, mut facts): (Vec<Memory>, Vec<Memory>) =
            known.into_iter().partition(|m| m.kind() == MemoryKind::Entity);
        facts.sort_by_key(|m| (m.validity.valid_from, m.id));
        let ids: Vec<MemoryId> = entities.iter().map(|m| m.id).collect();
        let mut named: Vec<MemoryId> = self
            .parts
            .store
            .edges_of_many(ids.clone())
            .await?
            .into_values()
            .flatten()
            .filter(|e| e.kind == EdgeKind::Entity)
            .map(|e| if ids.contains(&e.src) { e.dst } else { e.src })
            .filter(|id| !ids.contains(id))
            .collect();
        named.sort_unstable_by(|a, b| b.cmp(a));
        named.dedup();
        named.truncate(MENTIONS);
        let mut mentions: Vec<Memory> =
            self.parts.store.get_many(named).await?.into_iter().filter(|m| !m.lifecycle.is_deleted()).collect();
        mentions.sort_by_key(|m| (m.event_time, m.id));
        Ok(EntityView { name: name.to_owned(), entities, facts, mentions })
    }

    /// Sessions within `scope` (its user and agent), newest first: a page of the summarised
    /// ones after `before`, and on the first page the recent sessions with no summary yet.
    pub async fn sessions(&self, scope: Scope, before: Option<Cursor>, limit: usize) -> Result<Sessions> {
        let scope = Scope { session: None, ..scope };
        let summaries = RecallFilter {
            scope: scope.clone(),
            kinds: vec![MemoryKind::Summary],
            valid_at: Some(now()),
            ..RecallFilter::default()
        };
        let first_page = before.is_none();
        let page = self.list(summaries, before, limit).await?;
        let sessions: Vec<SessionRow> = page
            .memories
            .into_iter()
            .map(|summary| SessionRow {
                scope: summary.scope.clone(),
                last_turn: Some(summary.event_time),
                summary: Some(summary),
            })
            .collect();
        let mut open = Vec::new();
        if first_page {
            let episodes = RecallFilter { scope, kinds: vec![MemoryKind::Episode], ..RecallFilter::default() };
            let summarised: HashSet<Scope> = sessions.iter().map(|s| s.scope.clone()).collect();
            let mut seen = HashSet::new();
            for turn in self.parts.store.latest(episodes, OPEN_SESSION_WINDOW).await? {
                if turn.scope.session.is_none() || summarised.contains(&turn.scope) || !seen.insert(turn.scope.clone())
                {
                    continue;
                }
                open.push(SessionRow { scope: turn.scope, summary: None, last_turn: Some(turn.event_time) });
                if open.len() == limit {
                    break;
                }
            }
            // A session summarised on a later page is not open: look its summary up.
            let mut still_open = Vec::with_capacity(open.len());
            for row in open {
                let filter = RecallFilter {
                    scope: row.scope.clone(),
                    kinds: vec![MemoryKind::Summary],
                    valid_at: Some(now()),
                    ..RecallFilter::default()
                };
                if self.parts.store.latest(filter, 1).await?.is_empty() {
                    still_open.push(row);
                }
            }
            open = still_open;
        }
        Ok(Sessions { sessions, open, next: page.next })
    }

    /// Session `scope.session`'s turns in spoken order: the last `limit` before `before` (the
    /// latest when `None`), its current summary, and the facts found in those turns.
    pub async fn session(&self, scope: Scope, before: Option<Cursor>, limit: usize) -> Result<SessionView> {
        if scope.session.as_deref().is_none_or(|s| s.trim().is_empty()) {
            return Err(AtlasError::invalid("session", "field \"session\": name the session"));
        }
        let turns = RecallFilter { scope: scope.clone(), kinds: vec![MemoryKind::Episode], ..RecallFilter::default() };
        let page = self.list(turns, before, limit).await?;
        let summary_filter = RecallFilter {
            scope: scope.clone(),
            kinds: vec![MemoryKind::Summary],
            valid_at: Some(now()),
            ..RecallFilter::default()
        };
        let summary = self.parts.store.latest(summary_filter, 1).await?.pop();
        let mut turns = page.memories;
        turns.reverse();
        let ids: Vec<MemoryId> = turns.iter().map(|m| m.id).collect();
        let edges = self.parts.store.edges_of_many(ids).await?;
        let mut found: BTreeMap<MemoryId, Vec<MemoryId>> = BTreeMap::new();
        for (turn, edges) in edges {
            for e in edges.iter().filter(|e| e.kind == EdgeKind::DerivedFrom && e.dst == turn) {
                found.entry(turn).or_default().push(e.src);
            }
        }
        let fact_ids: Vec<MemoryId> = {
            let mut all: Vec<MemoryId> = found.values().flatten().copied().collect();
            all.sort();
            all.dedup();
            all
        };
        let facts: Vec<Memory> =
            self.parts.store.get_many(fact_ids).await?.into_iter().filter(|m| m.kind() == MemoryKind::Fact).collect();
        let kept: HashSet<MemoryId> = facts.iter().map(|m| m.id).collect();
        for ids in found.values_mut() {
            ids.retain(|id| kept.contains(id));
        }
        found.retain(|_, ids| !ids.is_empty());
        Ok(SessionView { scope, summary, turns, found, facts, earlier: page.next })
    }

    /// Archived memories that `visible` admits, newest archive first, at most `limit`, and
    /// every archive file with how many memories it holds.
    pub async fn archived(&self, limit: usize, visible: impl Fn(&Memory) -> bool) -> Result<Archived> {
        let files = self.archive_files()?;
        let mut out = Archived { memories: Vec::new(), files: Vec::new() };
        for file in files.iter().rev() {
            let name = file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let items = crate::forgetting::read_archive(file)?;
            out.files.push((name.clone(), items.len()));
            for item in items.into_iter().rev() {
                if out.memories.len() < limit.min(ARCHIVE_PAGE) && visible(&item.memory) {
                    out.memories.push((name.clone(), item.memory));
                }
            }
        }
        Ok(out)
    }
}
