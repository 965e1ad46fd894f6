//! The bank written: a space's beliefs as pages, the same bytes for the same beliefs.

use super::*;

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

    // Two pages that would share a file (two entities of one name, or names that differ only
    // in case, which are one file on macOS and Windows): the later gets its id.
    let mut taken: HashSet<String> = HashSet::new();
    let mut files = vec![marker_file()];
    for (key, items) in &pages {
        let base = format!("{}/{}", scope_dir(&key.user, &key.agent), key.file_name());
        let mut path = format!("{base}.md");
        let mut n = 0;
        while !taken.insert(path.to_ascii_lowercase()) {
            let id = key.entity.map_or(0, |e| e.0);
            path = if n == 0 { format!("{base}~{id}.md") } else { format!("{base}~{id}-{n}.md") };
            n += 1;
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

/// A title as one line a person can read: control characters and line separators shown as
/// `\u{..}` escapes (the front matter keeps the exact name).
fn visible(title: &str) -> String {
    let mut out = String::with_capacity(title.len());
    for c in title.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
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
    out.push_str(&format!("# {}\n\n## Now\n\n", visible(&title)));
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
