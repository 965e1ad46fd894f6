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

pub mod files;
mod parse;
mod render;
mod sync;
#[cfg(test)]
mod tests;

pub use parse::parse;
pub use render::render;
pub use sync::{SyncPlan, SyncSpace, plan_sync};

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
/// `_` and two hex digits, so that two different names never share a file; a name Windows
/// reserves (`CON`, `nul`, `COM1`) has its last letter escaped too.
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
    if files::is_reserved_name(&out) {
        // A name Windows keeps for a device (CON, NUL, COM1, ...): its last letter written as
        // the escape of its byte, which no other name gives.
        let last = out.pop().expect("a reserved name is not empty");
        out.push_str(&format!("_{:02x}", last as u32));
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
    /// The paths of the files read as pages (a person's own notes are not among them).
    pub pages: Vec<String>,
    /// Where each record is (`file:line`), for errors.
    pub locations: HashMap<MemoryId, String>,
}

fn bad(location: String, message: impl Into<String>) -> AtlasError {
    AtlasError::invalid(location, message)
}

/// The memory id written after a `^`.
fn anchor_id(digits: &str) -> Option<MemoryId> {
    digits.parse::<i64>().ok().filter(|v| *v > 0).map(MemoryId)
}
