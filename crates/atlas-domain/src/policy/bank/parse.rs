//! The bank read back: every record its pages hold, exactly, and the current lines a person may
//! have edited; a malformed page names its file, line and what is wrong.

use super::*;

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
        bank.pages.push(file.path.clone());
        for (id, line) in page {
            if let Some(first) = seen.insert(id, line.clone()) {
                return Err(bad(line, format!("^{} is recorded twice (first at {first})", id.0)));
            }
        }
    }
    let ids: HashSet<MemoryId> = bank.records.iter().map(|r| r.memory.id).collect();
    let kinds: HashMap<MemoryId, MemoryKind> = bank.records.iter().map(|r| (r.memory.id, r.memory.kind())).collect();
    for e in &edges {
        if e.kind == EdgeKind::Entity
            && let Some(kind) = kinds.get(&e.dst).filter(|k| **k != MemoryKind::Entity)
        {
            let at = seen.get(&e.src).cloned().unwrap_or_default();
            return Err(bad(at, format!("^{} is about ^{}, which is a {kind}, not an entity", e.src.0, e.dst.0)));
        }
    }
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
    bank.locations = seen.into_iter().collect();
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
    if !file.text.ends_with('\n') {
        // Every page the bank writes ends with a newline: one without was cut short (a copy,
        // a full disk), and its last line may be half of one.
        return Err(bad(
            at(lines.len()),
            "the page ends in the middle of a line (cut short?): end it with a newline if the line is whole",
        ));
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
    let folder = scope_dir(&user, &agent);
    if path.split_once('/').map(|(first, _)| first) != Some(folder.as_str()) {
        let line = front.get("user").or(front.get("agent")).map_or(1, |(_, n)| *n);
        return Err(bad(
            at(line),
            format!(
                "the page's scope ({folder}) is not its folder's: a page stays in its scope's folder (a line moves \
                 between scopes by removing it here and adding it on a page there)"
            ),
        ));
    }
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
    if section != Section::History {
        return Err(bad(
            at(first + body.len().saturating_sub(1)),
            "the page has no \"## History\" (cut short?): every page the bank writes ends with its History",
        ));
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
