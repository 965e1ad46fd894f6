//! The markdown bank (seed 003): what ATLAS believes as files a person reads, edits and
//! versions. `render` writes a space's beliefs as pages; `parse` reads pages back, exactly
//! (every version of every fact, core memory, agent memories) so that a space can be rebuilt
//! from its bank alone; `plan_sync` turns a person's edits of the current lines into changes.
//!
//! A page is one entity (or one subject without an entity) or one scope's core memory:
//!
//! ```text
//! ---
//! atlas: entity
//! subject: "checkout-service"
//! user: "ann"
//! entity: 12
//! said: 2024-03-04T09:01:30Z
//! learned: 2024-03-05T02:00:00Z
//! ---
//!
//! # checkout-service
//!
//! ## Now
//!
//! - state: rolled back to Python after the latency spike ^19
//!
//! ## History
//!
//! - ^19 state: rolled back to Python after the latency spike
//!   - valid: 2024-05-07T16:26:00Z → now
//!   ...
//! ```
//!
//! "Now" is what a person edits: a changed line becomes a new version, a removed line is
//! forgotten, a line without `^id` is a new fact. "History" is the record: every version with
//! its validity, when it was said and learned, what it replaced and the episodes it came from.
//! Agent memories (strategies, concepts, experiences) are one JSON record per heading, as the
//! full export writes them. The bank never holds episodes: they stay in the database.

use crate::jsonl;
use crate::policy::consolidation::fact_text;
use crate::ports::StoredMemory;
use crate::{
    AtlasError, Body, Edge, EdgeKind, Memory, MemoryId, MemoryKind, NewMemory, Result, Scope, Timestamp, Validity,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The file `write` puts at the bank's root; `sync` refuses a folder without it.
pub const MARKER_FILE: &str = "README.md";
/// The line of [`MARKER_FILE`] that says this folder is an ATLAS bank, and its format.
pub const MARKER: &str = "<!-- atlas-bank: 1 -->";
/// What a fact or core entry edited or added in the bank carries as `meta.origin`.
pub const EDITED_ORIGIN: &str = "bank";

/// One file of the bank: its path below the bank's folder (`/`-separated) and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BankFile {
    pub path: String,
    pub text: String,
}

/// Whether the bank keeps this memory: what ATLAS believes, not what it was told.
pub fn keeps(memory: &Memory) -> bool {
    !memory.lifecycle.is_deleted()
        && matches!(
            memory.kind(),
            MemoryKind::Fact
                | MemoryKind::Entity
                | MemoryKind::Core
                | MemoryKind::Experience
                | MemoryKind::Concept
                | MemoryKind::Strategy
        )
}

/// The README that marks a bank folder.
pub fn marker_file() -> BankFile {
    BankFile {
        path: MARKER_FILE.to_owned(),
        text: format!(
            "{MARKER}\n# ATLAS memory bank\n\nWritten by `atlas bank write` (and by every sleep cycle when the config names \
             this folder as `[bank] dir`). Each scope has a folder: `entities/` holds one page per entity or \
             subject, `core.md` the core memory, and `strategies.md`, `concepts.md` and `experiences.md` the agent \
             memories.\n\nEdit the lines under \"Now\" and run `atlas bank sync` on this folder: a changed line becomes \
             a new version (the old one stays in History), a removed line is forgotten softly, and a line without \
             `^id` is a new fact. History and the agent memories' records are read only by `atlas bank rebuild`.\n"
        ),
    }
}

/// The page kinds, as the `atlas:` line of their front matter names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum PageKind {
    /// Facts about one entity, with the entity's own record in the front matter.
    Entity,
    /// Facts about a subject no entity stands for ("user", "world").
    Facts,
    Core,
    Strategies,
    Concepts,
    Experiences,
}

impl PageKind {
    fn as_str(self) -> &'static str {
        match self {
            PageKind::Entity => "entity",
            PageKind::Facts => "facts",
            PageKind::Core => "core",
            PageKind::Strategies => "strategies",
            PageKind::Concepts => "concepts",
            PageKind::Experiences => "experiences",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            PageKind::Entity,
            PageKind::Facts,
            PageKind::Core,
            PageKind::Strategies,
            PageKind::Concepts,
            PageKind::Experiences,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }

    fn of_agent_memory(kind: MemoryKind) -> Option<Self> {
        match kind {
            MemoryKind::Strategy => Some(PageKind::Strategies),
            MemoryKind::Concept => Some(PageKind::Concepts),
            MemoryKind::Experience => Some(PageKind::Experiences),
            _ => None,
        }
    }

    fn title(self) -> &'static str {
        match self {
            PageKind::Core => "Core memory",
            PageKind::Strategies => "Strategies",
            PageKind::Concepts => "Concepts",
            PageKind::Experiences => "Experiences",
            PageKind::Entity | PageKind::Facts => "",
        }
    }
}

/// A page before it is written: whose it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PageKey {
    user: Option<String>,
    agent: Option<String>,
    kind: PageKind,
    /// The subject of an entity or facts page (empty for the others).
    subject: String,
    /// The entity of an entity page.
    entity: Option<MemoryId>,
}

impl PageKey {
    fn file_name(&self) -> String {
        match self.kind {
            PageKind::Entity | PageKind::Facts => format!("entities/{}", slug(&self.subject)),
            other => other.as_str().to_owned(),
        }
    }
}

/// The scope's folder: `everyone`, `user-ann`, `user-ann+agent-helper`.
fn scope_dir(user: &Option<String>, agent: &Option<String>) -> String {
    let parts: Vec<String> = [("user", user), ("agent", agent)]
        .into_iter()
        .filter_map(|(name, value)| value.as_ref().map(|v| format!("{name}-{}", slug(v))))
        .collect();
    if parts.is_empty() { "everyone".to_owned() } else { parts.join("+") }
}

/// A file name for any text: ASCII letters, digits and `-` stay, every other byte becomes
/// `_` and two hex digits, so that two different names never share a file.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push('_');
    }
    if out.len() > 120 {
        // Past what every file system takes: a prefix and a hash of the whole name.
        let hash =
            text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let mut cut = 100;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out = format!("{}~{hash:016x}", &out[..cut]);
    }
    out
}

/// Writes a value of a line so that it reads back the same: as it is when it is plain text,
/// else as a JSON string.
fn encode_value(text: &str) -> String {
    let plain = !text.is_empty()
        && !text.contains(['\n', '\r'])
        && text.trim() == text
        && !text.starts_with('"')
        && !ends_with_anchor(text);
    if plain { text.to_owned() } else { Value::from(text).to_string() }
}

/// A label (predicate, category): plain when it has no `:`, else a JSON string.
fn encode_label(text: &str) -> String {
    let plain =
        !text.is_empty() && !text.contains([':', '\n', '\r']) && text.trim() == text && !text.starts_with(['"', '^']);
    if plain { text.to_owned() } else { Value::from(text).to_string() }
}

fn ends_with_anchor(text: &str) -> bool {
    split_anchor(text).1.is_some()
}

/// `"text ^123"` → `("text", Some(123))`.
fn split_anchor(line: &str) -> (&str, Option<MemoryId>) {
    if let Some(pos) = line.rfind(" ^") {
        let digits = &line[pos + 2..];
        if digits.bytes().all(|b| b.is_ascii_digit())
            && let Some(id) = anchor_id(digits)
        {
            return (&line[..pos], Some(id));
        }
    }
    (line, None)
}

/// Reads a JSON string at the start of `text`; returns it and the rest.
fn json_string_prefix(text: &str) -> std::result::Result<(String, &str), String> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<String>();
    match stream.next() {
        Some(Ok(s)) => Ok((s, &text[stream.byte_offset()..])),
        _ => Err(format!("expected a quoted string, got {text:?}")),
    }
}

/// `label: value` as [`encode_label`] and [`encode_value`] write them.
fn parse_label_value(text: &str) -> std::result::Result<(String, String), String> {
    let (label, rest) = if text.starts_with('"') {
        let (label, rest) = json_string_prefix(text)?;
        (label, rest)
    } else {
        let colon = text.find(':').ok_or_else(|| format!("expected \"label: value\", got {text:?}"))?;
        (text[..colon].to_owned(), &text[colon..])
    };
    let value =
        rest.strip_prefix(": ").ok_or_else(|| format!("expected \": \" after the label {label:?}, got {rest:?}"))?;
    if label.trim().is_empty() {
        return Err("the label before \":\" is empty".into());
    }
    let value = if value.starts_with('"') {
        let (value, tail) = json_string_prefix(value)?;
        if !tail.trim().is_empty() {
            return Err(format!("unexpected text after the quoted value: {tail:?}"));
        }
        value
    } else if value.trim().is_empty() {
        return Err(format!("the value of {label:?} is empty"));
    } else {
        value.to_owned()
    };
    Ok((label, value))
}

/// The label and value a fact or core entry shows on its line.
fn label_value(memory: &Memory) -> (String, String) {
    match &memory.body {
        Body::Fact { predicate, object, .. } => (predicate.clone(), object.clone()),
        Body::Core { category } => (category.clone(), memory.text.clone()),
        _ => (memory.kind().as_str().to_owned(), memory.text.clone()),
    }
}

fn time(t: Timestamp) -> String {
    t.to_rfc3339()
}

fn validity_text(v: &Validity) -> String {
    match v.valid_until {
        Some(until) => format!("{} → {}", time(v.valid_from), time(until)),
        None => format!("{} → now", time(v.valid_from)),
    }
}

/// Writes every kept memory of `items` as the bank's pages, sorted by path; the same beliefs
/// always give the same bytes, whatever the order of `items`. Memories [`keeps`] refuses are
/// left out, and so are edges to them (except a fact's episodes, which History names).
pub fn render(items: &[StoredMemory]) -> Vec<BankFile> {
    let mut kept: Vec<&StoredMemory> = items.iter().filter(|s| keeps(&s.memory)).collect();
    kept.sort_by_key(|s| s.memory.id);
    let by_id: HashMap<MemoryId, &Memory> = kept.iter().map(|s| (s.memory.id, &s.memory)).collect();
    let edges: Vec<&Edge> = items.iter().flat_map(|s| s.edges.iter()).collect();
    let mut entity_of: HashMap<MemoryId, MemoryId> = HashMap::new();
    let mut links = Links::default();
    for e in &edges {
        match e.kind {
            EdgeKind::Entity
                if by_id.get(&e.dst).is_some_and(|m| m.kind() == MemoryKind::Entity)
                    && by_id.get(&e.src).is_some_and(|m| m.kind() == MemoryKind::Fact) =>
            {
                links.entities.entry(e.src).or_default().insert(e.dst);
                let slot = entity_of.entry(e.src).or_insert(e.dst);
                *slot = (*slot).min(e.dst);
            }
            EdgeKind::Supersedes if by_id.contains_key(&e.src) && by_id.contains_key(&e.dst) => {
                links.replaces.entry(e.src).or_default().insert(e.dst);
            }
            EdgeKind::DerivedFrom if by_id.contains_key(&e.src) && by_id.contains_key(&e.dst) => {
                links.from.entry(e.src).or_default().insert(e.dst);
            }
            EdgeKind::DerivedFrom if by_id.contains_key(&e.src) => {
                links.episodes.entry(e.src).or_default().insert(e.dst);
            }
            _ => {}
        }
    }

    let mut pages: BTreeMap<PageKey, Vec<&StoredMemory>> = BTreeMap::new();
    let mut entities: HashMap<MemoryId, &Memory> = HashMap::new();
    for item in &kept {
        let m = &item.memory;
        let key = match &m.body {
            Body::Entity { name, .. } => {
                entities.insert(m.id, m);
                PageKey {
                    user: m.scope.user.clone(),
                    agent: m.scope.agent.clone(),
                    kind: PageKind::Entity,
                    subject: name.clone(),
                    entity: Some(m.id),
                }
            }
            Body::Fact { subject, .. } => match entity_of.get(&m.id).and_then(|e| by_id.get(e)) {
                Some(entity) => PageKey {
                    user: entity.scope.user.clone(),
                    agent: entity.scope.agent.clone(),
                    kind: PageKind::Entity,
                    subject: entity_name(entity),
                    entity: Some(entity.id),
                },
                None => PageKey {
                    user: m.scope.user.clone(),
                    agent: m.scope.agent.clone(),
                    kind: PageKind::Facts,
                    subject: subject.clone(),
                    entity: None,
                },
            },
            Body::Core { .. } => PageKey {
                user: m.scope.user.clone(),
                agent: m.scope.agent.clone(),
                kind: PageKind::Core,
                subject: String::new(),
                entity: None,
            },
            other => PageKey {
                user: m.scope.user.clone(),
                agent: m.scope.agent.clone(),
                kind: PageKind::of_agent_memory(other.kind()).expect("keeps() admits only these kinds"),
                subject: String::new(),
                entity: None,
            },
        };
        let page = pages.entry(key).or_default();
        if !matches!(m.body, Body::Entity { .. }) {
            page.push(item);
        }
    }

    // Two pages that would share a file (two entities of one name): the later gets its id.
    let mut taken: HashSet<String> = HashSet::new();
    let mut files = vec![marker_file()];
    for (key, items) in &pages {
        let base = format!("{}/{}", scope_dir(&key.user, &key.agent), key.file_name());
        let mut path = format!("{base}.md");
        if !taken.insert(path.clone()) {
            path = format!("{base}~{}.md", key.entity.map_or(0, |e| e.0));
            taken.insert(path.clone());
        }
        let entity = key.entity.and_then(|e| entities.get(&e).copied());
        let text = match key.kind {
            PageKind::Entity | PageKind::Facts | PageKind::Core => render_page(key, entity, items, &links),
            _ => render_records(key, items, &by_id),
        };
        files.push(BankFile { path, text });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

fn entity_name(entity: &Memory) -> String {
    match &entity.body {
        Body::Entity { name, .. } => name.clone(),
        _ => entity.text.clone(),
    }
}

fn front_matter(out: &mut String, key: &PageKey) {
    out.push_str("---\n");
    out.push_str(&format!("atlas: {}\n", key.kind.as_str()));
    if matches!(key.kind, PageKind::Entity | PageKind::Facts) {
        out.push_str(&format!("subject: {}\n", Value::from(key.subject.clone())));
    }
    if let Some(user) = &key.user {
        out.push_str(&format!("user: {}\n", Value::from(user.clone())));
    }
    if let Some(agent) = &key.agent {
        out.push_str(&format!("agent: {}\n", Value::from(agent.clone())));
    }
}

/// The edges a page shows, by the memory that holds them.
#[derive(Default)]
struct Links {
    /// Entities a fact is about (its page's and any other).
    entities: HashMap<MemoryId, BTreeSet<MemoryId>>,
    replaces: HashMap<MemoryId, BTreeSet<MemoryId>>,
    /// Memories of the bank it was derived from.
    from: HashMap<MemoryId, BTreeSet<MemoryId>>,
    /// Episodes (outside the bank) it was derived from.
    episodes: HashMap<MemoryId, BTreeSet<MemoryId>>,
}

fn anchors(ids: &BTreeSet<MemoryId>) -> String {
    ids.iter().map(|id| format!("^{}", id.0)).collect::<Vec<_>>().join(", ")
}

fn render_page(key: &PageKey, entity: Option<&Memory>, items: &[&StoredMemory], links: &Links) -> String {
    let mut out = String::new();
    front_matter(&mut out, key);
    if let Some(e) = entity {
        out.push_str(&format!("entity: {}\n", e.id.0));
        if let Body::Entity { entity_type: Some(t), .. } = &e.body {
            out.push_str(&format!("type: {}\n", Value::from(t.clone())));
        }
        if e.text != key.subject {
            out.push_str(&format!("text: {}\n", Value::from(e.text.clone())));
        }
        if e.scope.session.is_some() {
            out.push_str(&format!("session: {}\n", Value::from(e.scope.session.clone())));
        }
        out.push_str(&format!("said: {}\n", time(e.event_time)));
        out.push_str(&format!("learned: {}\n", time(e.recorded_at)));
        if e.validity != Validity::from(e.event_time) {
            out.push_str(&format!("valid: {}\n", validity_text(&e.validity)));
        }
        if !e.meta.is_empty() {
            out.push_str(&format!("meta: {}\n", Value::Object(e.meta.clone())));
        }
    }
    out.push_str("---\n\n");
    let title = if key.kind == PageKind::Core { key.kind.title().to_owned() } else { key.subject.clone() };
    out.push_str(&format!("# {}\n\n## Now\n\n", title.replace('\n', " ")));
    let mut now: Vec<(String, String, MemoryId)> = items
        .iter()
        .filter(|s| s.memory.validity.valid_until.is_none())
        .map(|s| {
            let (label, value) = label_value(&s.memory);
            (label, value, s.memory.id)
        })
        .collect();
    now.sort();
    for (label, value, id) in &now {
        out.push_str(&format!("- {}: {} ^{}\n", encode_label(label), encode_value(value), id.0));
    }
    if !now.is_empty() {
        out.push('\n');
    }
    out.push_str("## History\n\n");
    let mut history: Vec<&Memory> = items.iter().map(|s| &s.memory).collect();
    history.sort_by(|a, b| {
        label_value(a)
            .0
            .cmp(&label_value(b).0)
            .then(a.validity.valid_from.cmp(&b.validity.valid_from))
            .then(a.id.cmp(&b.id))
    });
    for m in history {
        let (label, value) = label_value(m);
        out.push_str(&format!("- ^{} {}: {}\n", m.id.0, encode_label(&label), encode_value(&value)));
        let mut detail = |k: &str, v: String| out.push_str(&format!("  - {k}: {v}\n"));
        if let Body::Fact { subject, predicate, object, confidence } = &m.body {
            if *subject != key.subject {
                detail("subject", Value::from(subject.clone()).to_string());
            }
            if m.text != fact_text(subject, predicate, object) {
                detail("text", Value::from(m.text.clone()).to_string());
            }
            detail("confidence", confidence.to_string());
        }
        detail("valid", validity_text(&m.validity));
        detail("said", time(m.event_time));
        detail("learned", time(m.recorded_at));
        if m.scope.session.is_some() || m.scope.user != key.user || m.scope.agent != key.agent {
            detail("scope", serde_json::to_value(&m.scope).expect("a scope serialises").to_string());
        }
        if let Some(old) = links.replaces.get(&m.id) {
            detail("replaces", anchors(old));
        }
        if let Some(others) = links
            .entities
            .get(&m.id)
            .map(|all| all.iter().filter(|e| Some(**e) != key.entity).copied().collect::<BTreeSet<_>>())
            && !others.is_empty()
        {
            detail("also about", anchors(&others));
        }
        if let Some(from) = links.from.get(&m.id) {
            detail("from", anchors(from));
        }
        if let Some(eps) = links.episodes.get(&m.id) {
            detail("from episodes", eps.iter().map(|id| id.0.to_string()).collect::<Vec<_>>().join(", "));
        }
        if !m.meta.is_empty() {
            detail("meta", Value::Object(m.meta.clone()).to_string());
        }
        if let Some(context) = &m.context {
            detail("context", Value::from(context.clone()).to_string());
        }
    }
    out
}

/// A strategy's, concept's or experience's one-line title.
fn record_title(m: &Memory) -> String {
    let title = match &m.body {
        Body::Strategy { situation, suggestion, successes, failures } => {
            format!("{situation} → {suggestion} ({successes} successes, {failures} failures)")
        }
        Body::Concept { name, .. } => name.clone(),
        Body::Experience { task, outcome, .. } => format!("{task} ({outcome:?})").to_lowercase(),
        _ => m.text.clone(),
    };
    let one_line: String = title.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(160).collect()
}

fn render_records(key: &PageKey, items: &[&StoredMemory], by_id: &HashMap<MemoryId, &Memory>) -> String {
    let mut out = String::new();
    front_matter(&mut out, key);
    out.push_str("---\n\n");
    out.push_str(&format!("# {}\n", key.kind.title()));
    for item in items {
        let m = &item.memory;
        let edges: Vec<Edge> =
            item.edges.iter().filter(|e| by_id.contains_key(&e.src) && by_id.contains_key(&e.dst)).cloned().collect();
        let record = StoredMemory { memory: m.clone(), vector: None, edges, consolidated_at: None };
        let line = jsonl::stored_to_line(&record, false);
        let pretty = serde_json::to_string_pretty(&line).expect("a record serialises");
        out.push_str(&format!("\n## ^{} {}\n\n```json\n{pretty}\n```\n", m.id.0, record_title(m)));
    }
    out
}

/// A current line of a page: a fact (or core entry) as a person left it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stated {
    /// `file:line`, for errors.
    pub location: String,
    /// The memory it shows, absent on a line a person added.
    pub id: Option<MemoryId>,
    pub kind: MemoryKind,
    /// The page's scope (user and agent).
    pub scope: Scope,
    /// The page's subject (facts); empty for core memory.
    pub subject: String,
    /// The page's entity, for facts added on an entity page.
    pub entity: Option<MemoryId>,
    /// Predicate of a fact, category of a core entry.
    pub label: String,
    /// Object of a fact, text of a core entry.
    pub value: String,
}

/// A bank read back: the current lines a person may have edited, and every record for a
/// rebuild (which also tells which memories the bank showed, so that only a line removed from
/// it is a forgetting).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bank {
    pub stated: Vec<Stated>,
    /// Every memory the bank records, with the edges it records: between two of them, carried
    /// by the later end, as a restore wants them; to an episode outside the bank, by the memory
    /// derived from it.
    pub records: Vec<StoredMemory>,
}

fn bad(location: String, message: impl Into<String>) -> AtlasError {
    AtlasError::invalid(location, message)
}

/// Reads the bank's files (any order). A file that is not a page of the bank (no front matter
/// beginning `atlas:`) is skipped; a malformed page fails the whole read, naming file, line and
/// what was wrong.
pub fn parse(files: &[BankFile]) -> Result<Bank> {
    let mut bank = Bank::default();
    let mut seen: HashMap<MemoryId, String> = HashMap::new();
    let mut edges: Vec<Edge> = Vec::new();
    let mut sorted: Vec<&BankFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    for file in sorted {
        let Some(page) = read_page(file, &mut bank, &mut edges)? else { continue };
        for (id, line) in page {
            if let Some(first) = seen.insert(id, line.clone()) {
                return Err(bad(line, format!("^{} is recorded twice (first at {first})", id.0)));
            }
        }
    }
    let ids: HashSet<MemoryId> = bank.records.iter().map(|r| r.memory.id).collect();
    for s in &bank.stated {
        if let Some(id) = s.id
            && !ids.contains(&id)
        {
            return Err(bad(s.location.clone(), format!("^{} is not in this bank's History", id.0)));
        }
    }
    let index: HashMap<MemoryId, usize> = bank.records.iter().enumerate().map(|(i, r)| (r.memory.id, i)).collect();
    let mut unique = HashSet::new();
    for e in edges {
        // An edge to a memory outside the bank (an episode a fact came from) stays with the
        // memory that names it; a rebuild, which has no episodes, leaves it out.
        let holder = if ids.contains(&e.dst) { e.src.max(e.dst) } else { e.src };
        if !ids.contains(&e.src) || !unique.insert((e.src, e.dst, e.kind)) {
            continue;
        }
        bank.records[index[&holder]].edges.push(e);
    }
    bank.records.sort_by_key(|r| r.memory.id);
    for r in &mut bank.records {
        r.edges.sort_by_key(|e| (e.src, e.dst, e.kind.as_str()));
    }
    Ok(bank)
}

/// The front matter's `key: value` lines, with their line numbers.
struct FrontMatter {
    fields: BTreeMap<String, (String, usize)>,
}

impl FrontMatter {
    fn get(&self, key: &str) -> Option<&(String, usize)> {
        self.fields.get(key)
    }

    fn string(&self, path: &str, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some((raw, line)) => match serde_json::from_str::<Value>(raw) {
                Ok(Value::String(s)) => Ok(Some(s)),
                Ok(Value::Null) => Ok(None),
                _ => {
                    Err(bad(format!("{path}:{line}"), format!("field \"{key}\": expected a quoted string, got {raw}")))
                }
            },
        }
    }

    fn time(&self, path: &str, key: &str) -> Result<Option<Timestamp>> {
        match self.get(key) {
            None => Ok(None),
            Some((raw, line)) => Timestamp::parse(raw)
                .map(Some)
                .map_err(|m| bad(format!("{path}:{line}"), format!("field \"{key}\": {m}"))),
        }
    }
}

/// Reads one file; returns the ids it records with where, or `None` when it is not a page.
fn read_page(file: &BankFile, bank: &mut Bank, edges: &mut Vec<Edge>) -> Result<Option<Vec<(MemoryId, String)>>> {
    let path = file.path.as_str();
    let lines: Vec<&str> = file.text.lines().collect();
    let at = |n: usize| format!("{path}:{n}");
    if lines.first().map(|l| l.trim_end()) != Some("---") {
        return Ok(None);
    }
    let mut fields = BTreeMap::new();
    let mut end = None;
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line.trim_end() == "---" {
            end = Some(i);
            break;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| bad(at(i + 1), format!("expected \"key: value\" in the front matter, got {line:?}")))?;
        fields.insert(key.trim().to_owned(), (value.trim().to_owned(), i + 1));
    }
    let Some(end) = end else {
        return Err(bad(at(1), "the front matter has no closing \"---\""));
    };
    let front = FrontMatter { fields };
    let Some((kind_text, kind_line)) = front.get("atlas") else { return Ok(None) };
    let kind = PageKind::parse(kind_text).ok_or_else(|| {
        bad(at(*kind_line), format!("field \"atlas\": unknown page kind {kind_text:?} (known: entity, facts, core, strategies, concepts, experiences)"))
    })?;
    let user = front.string(path, "user")?;
    let agent = front.string(path, "agent")?;
    let scope = Scope { user: user.clone(), agent: agent.clone(), session: None };
    let subject = match kind {
        PageKind::Entity | PageKind::Facts => front
            .string(path, "subject")?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| bad(at(1), "field \"subject\": missing (a page of facts names its subject)"))?,
        _ => String::new(),
    };
    let mut recorded = Vec::new();
    let mut entity = None;
    if kind == PageKind::Entity {
        let (raw, line) = front
            .get("entity")
            .ok_or_else(|| bad(at(1), "field \"entity\": missing (an entity page names its entity's id)"))?;
        let id = anchor_id(raw)
            .ok_or_else(|| bad(at(*line), format!("field \"entity\": expected a memory id, got {raw:?}")))?;
        let said = front.time(path, "said")?.ok_or_else(|| bad(at(1), "field \"said\": missing"))?;
        let learned = front.time(path, "learned")?.ok_or_else(|| bad(at(1), "field \"learned\": missing"))?;
        let validity = match front.get("valid") {
            None => Validity::from(said),
            Some((raw, line)) => parse_validity(raw).map_err(|m| bad(at(*line), format!("field \"valid\": {m}")))?,
        };
        let meta = match front.get("meta") {
            None => Map::new(),
            Some((raw, line)) => match serde_json::from_str::<Value>(raw) {
                Ok(Value::Object(m)) => m,
                _ => return Err(bad(at(*line), format!("field \"meta\": expected a JSON object, got {raw}"))),
            },
        };
        let memory = NewMemory {
            scope: Scope { session: front.string(path, "session")?, ..scope.clone() },
            text: front.string(path, "text")?.unwrap_or_else(|| subject.clone()),
            event_time: said,
            recorded_at: learned,
            validity,
            meta,
            body: Body::Entity { name: subject.clone(), entity_type: front.string(path, "type")? },
        }
        .with_id(id);
        bank.records.push(StoredMemory { memory, vector: None, edges: Vec::new(), consolidated_at: None });
        recorded.push((id, at(*line)));
        entity = Some(id);
    }
    let body = &lines[end + 1..];
    let first = end + 2;
    match kind {
        PageKind::Entity | PageKind::Facts | PageKind::Core => {
            let page = PageContext { path, kind, scope, subject, entity };
            read_lines(&page, body, first, bank, edges, &mut recorded)?;
        }
        _ => read_records(path, kind, body, first, bank, &mut recorded)?,
    }
    Ok(Some(recorded))
}

struct PageContext<'a> {
    path: &'a str,
    kind: PageKind,
    scope: Scope,
    subject: String,
    entity: Option<MemoryId>,
}

/// The memory id written after a `^`.
fn anchor_id(digits: &str) -> Option<MemoryId> {
    digits.parse::<i64>().ok().filter(|v| *v > 0).map(MemoryId)
}

fn parse_validity(raw: &str) -> std::result::Result<Validity, String> {
    let (from, until) =
        raw.split_once('→').ok_or_else(|| format!("expected \"FROM → UNTIL\" or \"FROM → now\", got {raw:?}"))?;
    let valid_from = Timestamp::parse(from.trim())?;
    let valid_until = match until.trim() {
        "now" => None,
        other => Some(Timestamp::parse(other)?),
    };
    Ok(Validity { valid_from, valid_until })
}

fn parse_ids(raw: &str, anchored: bool) -> std::result::Result<Vec<MemoryId>, String> {
    raw.split(',')
        .map(|part| {
            let part = part.trim();
            let digits = if anchored {
                part.strip_prefix('^').ok_or_else(|| format!("expected ^ID, got {part:?}"))?
            } else {
                part
            };
            anchor_id(digits).ok_or_else(|| format!("expected a memory id, got {part:?}"))
        })
        .collect()
}

#[derive(PartialEq)]
enum Section {
    None,
    Now,
    History,
}

/// One History entry being read.
struct Entry {
    line: usize,
    id: MemoryId,
    label: String,
    value: String,
    details: BTreeMap<String, (String, usize)>,
}

fn read_lines(
    page: &PageContext<'_>,
    body: &[&str],
    first: usize,
    bank: &mut Bank,
    edges: &mut Vec<Edge>,
    recorded: &mut Vec<(MemoryId, String)>,
) -> Result<()> {
    let at = |n: usize| format!("{}:{n}", page.path);
    let stated_kind = if page.kind == PageKind::Core { MemoryKind::Core } else { MemoryKind::Fact };
    let mut section = Section::None;
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in body.iter().enumerate() {
        let n = first + i;
        let line = raw.trim_end();
        if line.trim().is_empty() || line.starts_with("# ") {
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            section = match heading.trim() {
                "Now" => Section::Now,
                "History" => Section::History,
                other => {
                    return Err(bad(at(n), format!("unknown section {other:?} (a page has \"Now\" and \"History\")")));
                }
            };
            continue;
        }
        match section {
            Section::None => return Err(bad(at(n), "text before \"## Now\"; lines go under Now or History")),
            Section::Now => {
                let item = line
                    .strip_prefix("- ")
                    .ok_or_else(|| bad(at(n), format!("expected \"- label: value\" under Now, got {line:?}")))?;
                let (text, id) = split_anchor(item);
                let (label, value) = parse_label_value(text).map_err(|m| bad(at(n), m))?;
                bank.stated.push(Stated {
                    location: at(n),
                    id,
                    kind: stated_kind,
                    scope: page.scope.clone(),
                    subject: page.subject.clone(),
                    entity: page.entity,
                    label,
                    value,
                });
            }
            Section::History => {
                if let Some(detail) = line.strip_prefix("  - ") {
                    let entry =
                        entries.last_mut().ok_or_else(|| bad(at(n), "a detail line before any History entry"))?;
                    let (key, value) = detail
                        .split_once(": ")
                        .ok_or_else(|| bad(at(n), format!("expected \"  - key: value\", got {line:?}")))?;
                    if entry.details.insert(key.to_owned(), (value.to_owned(), n)).is_some() {
                        return Err(bad(at(n), format!("{key:?} is given twice for ^{}", entry.id.0)));
                    }
                } else {
                    let item = line.strip_prefix("- ^").ok_or_else(|| {
                        bad(at(n), format!("expected \"- ^ID label: value\" under History, got {line:?}"))
                    })?;
                    let (digits, rest) =
                        item.split_once(' ').ok_or_else(|| bad(at(n), "expected \"- ^ID label: value\""))?;
                    let id = anchor_id(digits)
                        .ok_or_else(|| bad(at(n), format!("expected a memory id after ^, got {digits:?}")))?;
                    let (label, value) = parse_label_value(rest).map_err(|m| bad(at(n), m))?;
                    entries.push(Entry { line: n, id, label, value, details: BTreeMap::new() });
                }
            }
        }
    }
    for entry in entries {
        let (memory, links) = entry_memory(page, &entry)?;
        let edge = |dst: MemoryId, kind: EdgeKind, from: Timestamp| Edge {
            src: memory.id,
            dst,
            kind,
            weight: 1.0,
            validity: Validity::from(from),
            recorded_at: memory.recorded_at,
        };
        let page_entity = page.entity.filter(|_| page.kind != PageKind::Core);
        for entity in page_entity.into_iter().chain(links.about.iter().copied()) {
            edges.push(edge(entity, EdgeKind::Entity, memory.event_time));
        }
        for old in &links.replaced {
            edges.push(edge(*old, EdgeKind::Supersedes, memory.validity.valid_from));
        }
        for source in &links.from {
            edges.push(edge(*source, EdgeKind::DerivedFrom, memory.event_time));
        }
        for episode in &links.episodes {
            edges.push(edge(*episode, EdgeKind::DerivedFrom, memory.event_time));
        }
        recorded.push((memory.id, at(entry.line)));
        bank.records.push(StoredMemory { memory, vector: None, edges: Vec::new(), consolidated_at: None });
    }
    Ok(())
}

/// The memory a History entry records, and its edges.
fn entry_memory(page: &PageContext<'_>, entry: &Entry) -> Result<(Memory, EntryLinks)> {
    let at = |n: usize| format!("{}:{n}", page.path);
    let detail = |key: &str| entry.details.get(key);
    let required =
        |key: &str| detail(key).ok_or_else(|| bad(at(entry.line), format!("^{}: \"{key}\" is missing", entry.id.0)));
    let quoted = |key: &str| -> Result<Option<String>> {
        match detail(key) {
            None => Ok(None),
            Some((raw, n)) => match serde_json::from_str::<Value>(raw) {
                Ok(Value::String(s)) => Ok(Some(s)),
                _ => Err(bad(at(*n), format!("field \"{key}\": expected a quoted string, got {raw}"))),
            },
        }
    };
    let time_of = |key: &str| -> Result<Timestamp> {
        let (raw, n) = required(key)?;
        Timestamp::parse(raw).map_err(|m| bad(at(*n), format!("field \"{key}\": {m}")))
    };
    for (key, (_, n)) in &entry.details {
        const KNOWN: [&str; 13] = [
            "subject",
            "text",
            "confidence",
            "valid",
            "said",
            "learned",
            "scope",
            "replaces",
            "also about",
            "from",
            "from episodes",
            "meta",
            "context",
        ];
        if !KNOWN.contains(&key.as_str()) {
            return Err(bad(at(*n), format!("unknown detail {key:?} (known: {})", KNOWN.join(", "))));
        }
    }
    let (raw, n) = required("valid")?;
    let validity = parse_validity(raw).map_err(|m| bad(at(*n), format!("field \"valid\": {m}")))?;
    let scope = match detail("scope") {
        None => page.scope.clone(),
        Some((raw, n)) => {
            serde_json::from_str::<Scope>(raw).map_err(|e| bad(at(*n), format!("field \"scope\": {e}")))?
        }
    };
    let meta = match detail("meta") {
        None => Map::new(),
        Some((raw, n)) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            _ => return Err(bad(at(*n), format!("field \"meta\": expected a JSON object, got {raw}"))),
        },
    };
    let (body, text) = if page.kind == PageKind::Core {
        (Body::Core { category: entry.label.clone() }, quoted("text")?.unwrap_or_else(|| entry.value.clone()))
    } else {
        let subject = quoted("subject")?.unwrap_or_else(|| page.subject.clone());
        let (raw, n) = required("confidence")?;
        let confidence =
            raw.parse::<f32>().ok().filter(|c| (0.0..=1.0).contains(c)).ok_or_else(|| {
                bad(at(*n), format!("field \"confidence\": expected a number from 0 to 1, got {raw:?}"))
            })?;
        let text = quoted("text")?.unwrap_or_else(|| fact_text(&subject, &entry.label, &entry.value));
        (Body::Fact { subject, predicate: entry.label.clone(), object: entry.value.clone(), confidence }, text)
    };
    let anchored = |key: &str| -> Result<Vec<MemoryId>> {
        match detail(key) {
            None => Ok(Vec::new()),
            Some((raw, n)) => parse_ids(raw, true).map_err(|m| bad(at(*n), format!("field \"{key}\": {m}"))),
        }
    };
    let links = EntryLinks {
        replaced: anchored("replaces")?,
        about: anchored("also about")?,
        from: anchored("from")?,
        episodes: Vec::new(),
    };
    let episodes = match detail("from episodes") {
        None => Vec::new(),
        Some((raw, n)) => parse_ids(raw, false).map_err(|m| bad(at(*n), format!("field \"from episodes\": {m}")))?,
    };
    let links = EntryLinks { episodes, ..links };
    let mut memory =
        NewMemory { scope, text, event_time: time_of("said")?, recorded_at: time_of("learned")?, validity, meta, body }
            .with_id(entry.id);
    memory.context = quoted("context")?;
    Ok((memory, links))
}

/// The edges a History entry records.
struct EntryLinks {
    replaced: Vec<MemoryId>,
    about: Vec<MemoryId>,
    from: Vec<MemoryId>,
    episodes: Vec<MemoryId>,
}

fn read_records(
    path: &str,
    kind: PageKind,
    body: &[&str],
    first: usize,
    bank: &mut Bank,
    recorded: &mut Vec<(MemoryId, String)>,
) -> Result<()> {
    let at = |n: usize| format!("{path}:{n}");
    let mut i = 0;
    while i < body.len() {
        let n = first + i;
        let line = body[i].trim_end();
        i += 1;
        if line.trim().is_empty() || line.starts_with("# ") {
            continue;
        }
        let heading = line
            .strip_prefix("## ^")
            .ok_or_else(|| bad(at(n), format!("expected \"## ^ID title\" followed by a json block, got {line:?}")))?;
        let digits = heading.split(' ').next().unwrap_or_default();
        let id =
            anchor_id(digits).ok_or_else(|| bad(at(n), format!("expected a memory id after ^, got {digits:?}")))?;
        while i < body.len() && body[i].trim().is_empty() {
            i += 1;
        }
        if i >= body.len() || body[i].trim_end() != "```json" {
            return Err(bad(at(n), format!("^{}: expected a ```json block after the heading", id.0)));
        }
        let start = first + i;
        i += 1;
        let mut json = String::new();
        loop {
            if i >= body.len() {
                return Err(bad(at(start), "the ```json block is not closed"));
            }
            let l = body[i];
            i += 1;
            if l.trim_end() == "```" {
                break;
            }
            json.push_str(l);
            json.push('\n');
        }
        let compact = serde_json::from_str::<Value>(&json)
            .map_err(|e| bad(at(start + e.line()), format!("^{}: not JSON: {e}", id.0)))?
            .to_string();
        let record =
            jsonl::parse_stored_line(&compact, Timestamp(0)).map_err(|e| bad(at(start), format!("^{}: {e}", id.0)))?;
        if record.memory.id != id {
            return Err(bad(
                at(start),
                format!("field \"id\": the record is {} but its heading says ^{}", record.memory.id.0, id.0),
            ));
        }
        if PageKind::of_agent_memory(record.memory.kind()) != Some(kind) {
            return Err(bad(
                at(start),
                format!("field \"kind\": a {} does not belong on a page of {}", record.memory.kind(), kind.as_str()),
            ));
        }
        recorded.push((id, at(n)));
        bank.records.push(record);
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp(1_700_000_000_000 + ms)
    }

    fn memory(id: i64, body: Body, text: &str, scope: Scope, from: i64, until: Option<i64>) -> Memory {
        let mut m = NewMemory {
            scope,
            text: text.to_owned(),
            event_time: t(from),
            recorded_at: t(from + 5),
            validity: Validity { valid_from: t(from), valid_until: until.map(t) },
            meta: Map::new(),
            body,
        }
        .with_id(MemoryId(id));
        if id % 3 == 0 {
            m.meta.insert("origin".into(), Value::from("tag:S"));
        }
        m
    }

    fn edge(src: i64, dst: i64, kind: EdgeKind, at: Timestamp) -> Edge {
        Edge {
            src: MemoryId(src),
            dst: MemoryId(dst),
            kind,
            weight: 1.0,
            validity: Validity::from(at),
            recorded_at: at,
        }
    }

    /// A space: entities, facts about them (chains of versions) and about subjects without an
    /// entity, episodes they came from, core entries and a strategy.
    fn space(values: &[String], labels: &[String], user: Option<String>) -> Vec<StoredMemory> {
        let scope = Scope { user, agent: None, session: None };
        let mut out: Vec<StoredMemory> = Vec::new();
        fn add(out: &mut Vec<StoredMemory>, m: Memory, edges: Vec<Edge>) {
            out.push(StoredMemory { memory: m, vector: None, edges, consolidated_at: None })
        }
        add(
            &mut out,
            memory(1, Body::Episode { speaker: Some("Ann".into()) }, "hello", scope.clone(), 0, None),
            vec![],
        );
        add(
            &mut out,
            memory(
                2,
                Body::Entity { name: "Caroline".into(), entity_type: Some("person".into()) },
                "Caroline",
                scope.clone(),
                0,
                None,
            ),
            vec![],
        );
        let mut id = 10;
        for (i, value) in values.iter().enumerate() {
            let label = &labels[i % labels.len()];
            let on_entity = i % 2 == 0;
            let subject = if on_entity { "Caroline".to_owned() } else { format!("subject {}", i % 3) };
            // Every third value replaces the fact before it.
            let replaces = i % 3 == 2 && id > 10;
            let from = (i as i64) * 1000;
            let body = Body::Fact {
                subject: subject.clone(),
                predicate: label.clone(),
                object: value.clone(),
                confidence: 0.5,
            };
            let text = fact_text(&subject, label, value);
            let mut edges = vec![edge(id, 1, EdgeKind::DerivedFrom, t(from))];
            if on_entity {
                edges.push(edge(id, 2, EdgeKind::Entity, t(from)));
            }
            if replaces {
                let prev = out.iter_mut().rev().find(|s| s.memory.kind() == MemoryKind::Fact).expect("a fact before");
                prev.memory.validity.valid_until = Some(t(from));
                edges.push(edge(id, prev.memory.id.0, EdgeKind::Supersedes, t(from)));
            }
            add(&mut out, memory(id, body, &text, scope.clone(), from, None), edges);
            id += 1;
            if i % 4 == 1 {
                add(
                    &mut out,
                    memory(id, Body::Core { category: label.clone() }, value, scope.clone(), from, None),
                    vec![],
                );
                id += 1;
            }
        }
        add(
            &mut out,
            memory(
                id,
                Body::Strategy {
                    situation: "a flaky test".into(),
                    suggestion: values.first().cloned().unwrap_or_default(),
                    successes: 2,
                    failures: 1,
                },
                "when a test is flaky, rerun it",
                scope,
                0,
                None,
            ),
            vec![],
        );
        out
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9 ,.]{1,20}",
            any::<String>().prop_filter("not blank", |s| !s.trim().is_empty()),
            Just("ends like an anchor ^12".to_owned()),
            Just("\"quoted\" start".to_owned()),
            Just("two\nlines".to_owned()),
            Just(" padded ".to_owned()),
        ]
    }

    fn label() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z_]{1,10}", Just("odd: label".to_owned()), Just("^caret".to_owned())]
    }

    fn current(items: &[StoredMemory]) -> Vec<Memory> {
        items.iter().map(|s| s.memory.clone()).filter(|m| m.validity.valid_until.is_none()).collect()
    }

    /// What the bank can carry of a space: its kept memories and the edges between them.
    /// A memory with its edges as (src, dst, kind).
    type Linked = (Memory, Vec<(MemoryId, MemoryId, &'static str)>);

    fn kept(items: &[StoredMemory]) -> Vec<Linked> {
        let ids: HashSet<MemoryId> = items.iter().filter(|s| keeps(&s.memory)).map(|s| s.memory.id).collect();
        let mut out: Vec<_> = items
            .iter()
            .filter(|s| ids.contains(&s.memory.id))
            .map(|s| {
                let mut edges: Vec<_> = s
                    .edges
                    .iter()
                    .filter(|e| ids.contains(&e.src) && ids.contains(&e.dst))
                    .map(|e| (e.src, e.dst, e.kind.as_str()))
                    .collect();
                edges.sort();
                (s.memory.clone(), edges)
            })
            .collect();
        out.sort_by_key(|(m, _)| m.id);
        out
    }

    proptest! {
        #[test]
        fn a_bank_reads_back_every_record_it_writes(
            values in proptest::collection::vec(value(), 1..12),
            labels in proptest::collection::vec(label(), 1..4),
            user in proptest::option::of("[a-z]{1,6}"),
        ) {
            let items = space(&values, &labels, user);
            let files = render(&items);
            let bank = parse(&files).unwrap();
            let read: Vec<StoredMemory> = bank.records.clone();
            prop_assert_eq!(kept(&read), kept(&items));
            // Written again from what it read, the bank is the same bytes.
            prop_assert_eq!(render(&read), files.clone());
            // The order of the input does not matter.
            let mut reversed = items.clone();
            reversed.reverse();
            prop_assert_eq!(render(&reversed), files);
        }

        #[test]
        fn a_bank_synced_unedited_changes_nothing(
            values in proptest::collection::vec(value(), 1..12),
            labels in proptest::collection::vec(label(), 1..4),
        ) {
            let items = space(&values, &labels, Some("ann".into()));
            let bank = parse(&render(&items)).unwrap();
            let plan = plan_sync(&bank, &current(&items), t(99_000)).unwrap();
            prop_assert!(plan.is_empty(), "{:?}", plan);
        }

        #[test]
        fn an_edit_synced_and_written_again_shows_the_edit(
            values in proptest::collection::vec(value(), 1..12),
            labels in proptest::collection::vec(label(), 1..4),
            edit in value(),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut items = space(&values, &labels, None);
            let files = render(&items);
            let bank = parse(&files).unwrap();
            let target = &bank.stated[pick.index(bank.stated.len())];
            let id = target.id.unwrap();
            prop_assume!(target.value != edit);
            // The person's edit: the line's value replaced, its anchor kept.
            let old_line = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&target.value), id.0);
            let new_line = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&edit), id.0);
            let edited: Vec<BankFile> = files
                .iter()
                .map(|f| BankFile { path: f.path.clone(), text: f.text.replacen(&old_line, &new_line, 1) })
                .collect();
            let now = t(99_000);
            let plan = plan_sync(&parse(&edited).unwrap(), &current(&items), now).unwrap();
            prop_assert_eq!(plan.edited.len(), 1);
            prop_assert!(plan.removed.is_empty() && plan.added.is_empty());
            // Applied as the runtime applies it: the old version ends, the new one replaces it.
            let (old, new) = plan.edited[0].clone();
            let new_id = MemoryId(10_000);
            let entity = items.iter().find(|s| s.memory.id == old).unwrap().edges.iter().find(|e| e.kind == EdgeKind::Entity).map(|e| e.dst);
            for s in &mut items {
                if s.memory.id == old {
                    s.memory.validity.valid_until = Some(now);
                }
            }
            let mut edges = vec![edge(new_id.0, old.0, EdgeKind::Supersedes, now)];
            if let Some(e) = entity {
                edges.push(edge(new_id.0, e.0, EdgeKind::Entity, now));
            }
            items.push(StoredMemory { memory: new.with_id(new_id), vector: None, edges, consolidated_at: None });
            let rewritten = render(&items);
            let wanted = format!("- {}: {} ^{}", encode_label(&target.label), encode_value(&edit), new_id.0);
            prop_assert!(rewritten.iter().any(|f| f.text.lines().any(|l| l == wanted)), "{wanted} not in {:?}", rewritten);
            let again = parse(&rewritten).unwrap();
            prop_assert!(plan_sync(&again, &current(&items), now).unwrap().is_empty());
        }

        #[test]
        fn slugs_never_share_a_file(a in any::<String>(), b in any::<String>()) {
            prop_assume!(a != b && a.len() < 40 && b.len() < 40);
            prop_assert_ne!(slug(&a), slug(&b));
        }

        #[test]
        fn label_and_value_read_back(l in label(), v in value()) {
            let line = format!("{}: {}", encode_label(&l), encode_value(&v));
            prop_assert_eq!(parse_label_value(&line).unwrap(), (l, v));
        }
    }

    #[test]
    fn removed_and_added_lines_become_forgettings_and_facts() {
        let items = space(&["Vienna".into(), "hiking".into(), "tea".into()], &["lives_in".into()], None);
        let files = render(&items);
        let page = files.iter().find(|f| f.path == "everyone/entities/Caroline.md").expect("Caroline's page");
        let removed_line = page.text.lines().find(|l| l.starts_with("- lives_in: Vienna ^")).unwrap().to_owned();
        let text =
            page.text.replace(&format!("{removed_line}\n"), "").replace("## Now\n\n", "## Now\n\n- likes: jazz\n");
        let edited: Vec<BankFile> = files
            .iter()
            .map(
                |f| if f.path == page.path { BankFile { path: f.path.clone(), text: text.clone() } } else { f.clone() },
            )
            .collect();
        let plan = plan_sync(&parse(&edited).unwrap(), &current(&items), t(50_000)).unwrap();
        assert_eq!(plan.removed, vec![MemoryId(10)]);
        assert_eq!(plan.added.len(), 1);
        let (added, entity) = &plan.added[0];
        assert_eq!(*entity, Some(MemoryId(2)));
        assert_eq!(added.text, "Caroline likes jazz");
        assert_eq!(added.meta.get("origin"), Some(&Value::from(EDITED_ORIGIN)));
    }

    #[test]
    fn a_fact_learned_after_the_bank_was_written_is_left_alone() {
        let mut items = space(&["Vienna".into()], &["lives_in".into()], None);
        let files = render(&items);
        let later = memory(
            500,
            Body::Fact {
                subject: "Caroline".into(),
                predicate: "likes".into(),
                object: "jazz".into(),
                confidence: 1.0,
            },
            "Caroline likes jazz",
            Scope::default(),
            9_000,
            None,
        );
        items.push(StoredMemory { memory: later, vector: None, edges: vec![], consolidated_at: None });
        assert!(plan_sync(&parse(&files).unwrap(), &current(&items), t(50_000)).unwrap().is_empty());
    }

    #[test]
    fn malformed_pages_name_file_line_and_what_is_wrong() {
        let items = space(&["Vienna".into()], &["lives_in".into()], None);
        let files = render(&items);
        let page = files.iter().find(|f| f.path == "everyone/entities/Caroline.md").unwrap();
        let cases = [
            (page.text.replace("## Now\n\n", "## Now\n\nno dash here\n"), ":14", "under Now"),
            (page.text.replace("## Now\n\n", "## Now\n\n- no colon ^10\n"), ":14", "label: value"),
            (page.text.replace("  - confidence: 0.5", "  - confidence: lots"), "", "confidence"),
            (page.text.replace("## History", "## Elsewhere"), "", "unknown section"),
            (page.text.replace("→ now", "until whenever"), "", "valid"),
            (
                page.text.replace("- lives_in: Vienna ^10", "- lives_in: Vienna ^77"),
                ":14",
                "not in this bank's History",
            ),
        ];
        for (text, line, words) in cases {
            let broken: Vec<BankFile> = files
                .iter()
                .map(|f| {
                    if f.path == page.path { BankFile { path: f.path.clone(), text: text.clone() } } else { f.clone() }
                })
                .collect();
            let err =
                parse(&broken).and_then(|b| plan_sync(&b, &current(&items), t(1)).map(|_| b)).unwrap_err().to_string();
            assert!(err.contains(&format!("everyone/entities/Caroline.md{line}")), "{err}");
            assert!(err.contains(words), "{err} should say {words}");
        }
    }

    #[test]
    fn a_line_of_a_replaced_fact_asks_for_a_write_first() {
        let mut items = space(&["Vienna".into()], &["lives_in".into()], None);
        let files = render(&items);
        items[2].memory.validity.valid_until = Some(t(10));
        let err = plan_sync(&parse(&files).unwrap(), &current(&items), t(20)).unwrap_err().to_string();
        assert!(err.contains("bank write"), "{err}");
    }
}
