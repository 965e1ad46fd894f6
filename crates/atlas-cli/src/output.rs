//! How the CLI prints: human text by default, JSON with `--json`.

use atlas_runtime::{MemoryDetail, Recall, Stats};
use serde_json::{Value, json};

pub fn print_line(json: bool, value: Value, human: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        println!("{}", human());
    }
}

/// Prints one recall; `batch` is the query's id and text when it came from a `--batch` file.
/// With `explain`, every hit also shows each signal's rank, raw score and contribution.
pub fn print_recall(batch: Option<(&str, &str)>, recall: &Recall, json: bool, explain: bool) {
    if json {
        let mut out = atlas_runtime::wire::recall_value(recall, explain);
        if let Some((id, _)) = batch {
            out["id"] = Value::from(id);
        }
        println!("{out}");
        return;
    }
    if let Some((id, query)) = batch {
        println!("\n# {id}: {query}");
    }
    for s in &recall.signals {
        if let Some(note) = &s.note {
            let state = if s.used { "note" } else { "skipped" };
            eprintln!("{state}: {} signal: {note}", s.signal.as_str());
        }
    }
    if recall.hits.is_empty() {
        println!("no memories found");
    }
    for (i, h) in recall.hits.iter().enumerate() {
        let m = &h.memory;
        let who = m.body.speaker().map(|s| format!("{s}: ")).unwrap_or_default();
        let ranks: Vec<String> = h
            .signals
            .iter()
            .map(|(s, v)| {
                if explain {
                    format!("{} #{} score {:.4} adds {:.4}", s.as_str(), v.rank, v.raw, v.contribution)
                } else {
                    format!("{} #{}", s.as_str(), v.rank)
                }
            })
            .collect();
        let duplicates = if h.duplicates.is_empty() {
            String::new()
        } else {
            let ids: Vec<String> = h.duplicates.iter().map(|d| d.to_string()).collect();
            format!(" [also said as memory {}]", ids.join(", "))
        };
        // A long memory shows the part that matched (`get ID` prints all of it).
        let said = h.passage.map_or_else(|| m.text.clone(), |p| p.quote(&m.text));
        println!(
            "{:>3}. [{:.4}] memory {} ({}, {}) {who}{said}  ({}){duplicates}",
            i + 1,
            h.score,
            m.id,
            m.kind(),
            m.event_time,
            ranks.join(", ")
        );
    }
    println!("({:.2} ms)", recall.took_ms);
}

pub fn print_detail(detail: &MemoryDetail, json: bool) {
    if json {
        println!("{}", atlas_runtime::wire::detail_value(detail));
        return;
    }
    let m = &detail.memory;
    println!("memory {} ({})", m.id, m.kind());
    println!("  text:        {}", m.text);
    if let Some(s) = m.body.speaker() {
        println!("  speaker:     {s}");
    }
    println!("  scope:       {}", m.scope);
    println!("  event time:  {}", m.event_time);
    println!("  recorded at: {}", m.recorded_at);
    if let Some(at) = m.lifecycle.deleted_at {
        println!("  forgotten:   {at} (soft: `atlas recover {}` brings it back)", m.id);
    }
    let until = m.validity.valid_until.map_or("now".to_owned(), |t| t.to_rfc3339());
    println!("  valid:       {} .. {until}", m.validity.valid_from);
    if !m.meta.is_empty() {
        println!("  meta:        {}", Value::Object(m.meta.clone()));
    }
    for e in &detail.edges {
        println!("  edge:        {} -[{}]-> {}", e.src, e.kind, e.dst);
    }
}

pub fn print_stats(config: &atlas_runtime::Config, stats: &Stats, json: bool) {
    let s = &stats.store;
    if json {
        println!("{}", atlas_runtime::wire::stats_value(config, stats));
        return;
    }
    match config.named_space() {
        Some(name) => println!("space:           {name} (on {})", config.qdrant.url.as_deref().unwrap_or("?")),
        None => println!("database:        {}", config.db.display()),
    }
    println!("memories:        {}", s.memories());
    for (kind, n) in &s.memories_by_kind {
        println!("  {kind:<14} {n}");
    }
    if s.soft_deleted > 0 {
        println!("  (soft-deleted) {}", s.soft_deleted);
    }
    println!("edges:           {}", s.edges);
    println!("vectors:         {} ({} pending)", s.vectors, s.pending_vectors);
    let (failed, listed) = &stats.vector_failed;
    if *failed > 0 {
        println!("vector failed:   {failed} (set aside, tried again later or after `atlas reembed`)");
        for (id, why) in listed {
            println!("  memory {id}: {why}");
        }
    }
    let made_by = s.embedding_model.as_ref().map(|m| format!("{} ({} dimensions)", m.name, m.dimension));
    println!("vectors made by: {}", made_by.as_deref().unwrap_or("no model bound yet"));
    if let Some(bytes) = s.bytes {
        println!("size:            {:.1} MB", bytes as f64 / 1e6);
    }
    if let Some(v) = s.schema_version {
        println!("schema version:  {v}");
    }
}

/// A memory's provenance and history.
pub fn print_explanation(e: &atlas_runtime::Explanation, json: bool) {
    if json {
        println!("{}", atlas_runtime::wire::explanation_value(e));
        return;
    }
    let m = &e.memory;
    let until = m.validity.valid_until.map_or("now".to_owned(), |t| t.to_string());
    println!("memory {} ({}): {}", m.id, m.kind(), m.text);
    println!("  valid:        {} .. {until}", m.validity.valid_from);
    if let atlas_domain::Body::Fact { confidence, .. } = &m.body {
        println!("  confidence:   {confidence:.2}");
    }
    if e.decays {
        let used = m.lifecycle.last_used.map_or("never used".to_owned(), |t| format!("last used {t}"));
        println!("  strength:     {:.2} (soft-deleted below 0.30; {used}, {} uses)", e.strength, m.lifecycle.uses);
    }
    if let Some(at) = m.lifecycle.deleted_at {
        println!("  forgotten:    {at} (soft: `atlas recover {}` brings it back)", m.id);
    }
    for s in &e.sources {
        println!("  from:         memory {} ({}) {}", s.id, s.event_time, s.text.replace('\n', " / "));
    }
    if e.sources.len() > 1 {
        println!("  merged:       stated {} times", e.sources.len());
    }
    for j in &e.judgments {
        let objects =
            j["objects"].as_array().map(|o| o.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("\" | \""));
        let why = j["why"].as_str().map(|w| format!(" ({w})")).unwrap_or_default();
        println!(
            "  judged:       \"{}\": {} by {}{why}",
            objects.unwrap_or_default(),
            j["verdict"].as_str().unwrap_or("?"),
            j["by"].as_str().unwrap_or("?")
        );
    }
    for r in &e.replaced_by {
        println!("  replaced by:  memory {} (from {}) {}", r.id, r.validity.valid_from, r.text);
    }
    for r in &e.replaced {
        let until = r.validity.valid_until.map_or("now".to_owned(), |t| t.to_string());
        println!("  replaced:     memory {} ({} .. {until}) {}", r.id, r.validity.valid_from, r.text);
    }
    for why in &e.supersession {
        println!("  why:          {why}");
    }
    for x in &e.entities {
        println!("  entity:       memory {} {}", x.id, x.text);
    }
}

/// What one sleep cycle did.
pub fn print_cycle(report: &atlas_runtime::CycleReport, json: bool) {
    let r = report;
    print_line(json, serde_json::to_value(r).expect("a report serialises"), || {
        let mut line = format!(
            "consolidated {} episodes ({} phatic): {} facts added, {} merged, {} superseded, {} entities, {} links",
            r.episodes_seen,
            r.skipped_phatic,
            r.facts_added,
            r.facts_merged,
            r.facts_superseded,
            r.entities_added,
            r.entity_links
        );
        if r.llm_calls > 0 {
            line.push_str(&format!("; {} model calls, {} + {} tokens", r.llm_calls, r.input_tokens, r.output_tokens));
        }
        if r.failed > 0 || r.deferred > 0 {
            line.push_str(&format!("; {} failed (retried later), {} deferred", r.failed, r.deferred));
        }
        if r.summaries_added + r.summaries_deferred > 0 {
            line.push_str(&format!(
                "; {} session summaries ({} waiting for the model)",
                r.summaries_added, r.summaries_deferred
            ));
        }
        if r.user_observations + r.user_hypotheses + r.user_verified > 0 {
            line.push_str(&format!(
                "; about the user: {} observations, {} hypotheses, {} verified ({} into core memory)",
                r.user_observations, r.user_hypotheses, r.user_verified, r.core_added
            ));
        }
        line
    });
}

/// A failed command under `--json`: `{"error": {"code", "message", "field"}}` (the shape the
/// server's errors take too), so that a script never has to parse prose.
pub fn error_json(e: &anyhow::Error) -> Value {
    let domain = e.downcast_ref::<atlas_domain::AtlasError>();
    let code = domain.map_or("error", atlas_domain::AtlasError::code);
    let (location, field) = domain.and_then(atlas_domain::AtlasError::location).unzip();
    json!({"error": {"code": code, "message": format!("{e:#}"), "field": field.flatten(), "location": location}})
}
