//! `eval --preferences`: how often the stated-preference rule (`policy::preferences`) fires on
//! real people's turns (LoCoMo dev, LongMemEval dev, BEAM dev), with an even sample of what it
//! took, for a person to judge which are preferences and which are false positives.

use anyhow::{Context, Result};
use atlas_domain::policy::preferences::states_preference;
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// Turns of one corpus said by a person (not an assistant), and which of them the rule takes.
#[derive(Default)]
struct Tally {
    turns: usize,
    taken: Vec<String>,
}

impl Tally {
    fn read(&mut self, text: &str) {
        self.turns += 1;
        if states_preference(text) {
            self.taken.push(text.to_owned());
        }
    }
}

/// How many taken turns each corpus shows, spread evenly over what it took.
const SAMPLE: usize = 12;

pub fn run(data: &Path, json: Option<&Path>) -> Result<()> {
    let corpora = [
        ("LoCoMo dev (both speakers)", locomo(&data.join("locomo-dev"))?),
        ("LongMemEval dev (user turns, distinct)", longmemeval(&data.join("longmemeval-dev"))?),
        ("BEAM dev (user messages)", beam(&data.join("beam-dev/chats"))?),
    ];
    let mut out = serde_json::Map::new();
    println!("| corpus | turns | taken | share |\n|---|---|---|---|");
    for (name, tally) in &corpora {
        let share = tally.taken.len() as f64 / tally.turns.max(1) as f64;
        println!("| {name} | {} | {} | {:.2}% |", tally.turns, tally.taken.len(), share * 100.0);
        out.insert(
            (*name).to_owned(),
            serde_json::json!({"turns": tally.turns, "taken": tally.taken.len(), "sample": sample(&tally.taken)}),
        );
    }
    for (name, tally) in &corpora {
        println!("\n{name}: a sample of what the rule took");
        for text in sample(&tally.taken) {
            println!("- {}", text.chars().take(220).collect::<String>().replace('\n', " "));
        }
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&out)?).with_context(|| path.display().to_string())?;
    }
    Ok(())
}

fn sample(taken: &[String]) -> Vec<&str> {
    let step = taken.len().div_ceil(SAMPLE).max(1);
    taken.iter().step_by(step).map(String::as_str).collect()
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut s).with_context(|| path.display().to_string())?;
        s
    } else {
        String::from_utf8(bytes).with_context(|| path.display().to_string())?
    };
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
}

fn files(dir: &Path, ending: &str) -> Result<Vec<std::path::PathBuf>> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(ending))
        .collect();
    found.sort();
    Ok(found)
}

/// LoCoMo: `{"conversation": {"session_N": [{"speaker", "text"}, ...]}}` (or the conversation
/// alone); both speakers are people.
fn locomo(dir: &Path) -> Result<Tally> {
    let mut tally = Tally::default();
    for path in files(dir, ".json")? {
        let doc = read_json(&path)?;
        let conversation = doc.get("conversation").unwrap_or(&doc);
        let Some(sessions) = conversation.as_object() else { continue };
        for (key, turns) in sessions {
            if !key.starts_with("session_") {
                continue;
            }
            for turn in turns.as_array().into_iter().flatten() {
                tally.read(turn["text"].as_str().unwrap_or_default());
            }
        }
    }
    Ok(tally)
}

/// LongMemEval: a list of questions, each with `haystack_sessions` of `{"role", "content"}`;
/// haystacks share sessions, so each distinct user turn counts once.
fn longmemeval(dir: &Path) -> Result<Tally> {
    let mut tally = Tally::default();
    let mut seen = std::collections::HashSet::new();
    for path in files(dir, ".json.gz")? {
        for question in read_json(&path)?.as_array().into_iter().flatten() {
            for turn in
                question["haystack_sessions"].as_array().into_iter().flatten().flat_map(|s| s.as_array()).flatten()
            {
                let text = turn["content"].as_str().unwrap_or_default();
                if turn["role"] == "user" && seen.insert(text.to_owned()) {
                    tally.read(text);
                }
            }
        }
    }
    Ok(tally)
}

/// BEAM: `<SIZE>/<N>/chat.json`, a list of batches whose `turns` are lists of messages
/// `{"role", "content"}`.
fn beam(dir: &Path) -> Result<Tally> {
    let mut tally = Tally::default();
    for size in files(dir, "")? {
        for chat in files(&size, "")? {
            let path = chat.join("chat.json");
            if !path.is_file() {
                continue;
            }
            for batch in read_json(&path)?.as_array().into_iter().flatten() {
                for message in batch["turns"].as_array().into_iter().flatten().flat_map(|t| t.as_array()).flatten() {
                    if message["role"] == "user" {
                        tally.read(message["content"].as_str().unwrap_or_default());
                    }
                }
            }
        }
    }
    Ok(tally)
}
