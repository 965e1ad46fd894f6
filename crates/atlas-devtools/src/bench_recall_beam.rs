//! `cargo xtask bench recall --beam 500K,1M`: the stage profile of recall on BEAM dev chats as
//! a user meets them (a process imports a chat, another answers its questions: the shared
//! harness `beam_recall.py` drives the `atlas` CLI), plain and after the sleep cycle
//! (`--consolidate`); the first recall after each import apart from the rest.

use crate::stage_profile::{self, Timed};
use anyhow::{Context, Result, bail};
use std::path::Path;

/// The line the wrapper writes before each `atlas recall` call's output in the log.
const CALL_MARK: &str = "{\"atlas_recall_call\": true}";

/// Runs the BEAM harness at each of `sizes` (dev chats under `data`/beam-dev), once plain and
/// once with the sleep cycle between import and recall, and prints each run's profiles.
pub fn run(sizes: &[String], data: &Path) -> Result<()> {
    let root = crate::root();
    let data = if data.is_absolute() { data.to_path_buf() } else { root.join(data) };
    let script = data.join("beam_recall.py");
    if !script.is_file() {
        bail!("{} has no beam_recall.py; pass --beam-data with the folder of the harnesses", data.display());
    }
    crate::fetch_default_model()?;
    let atlas = crate::atlas_binary()?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("recalls.jsonl");
    let wrapper = dir.path().join("atlas-logged");
    // Every `recall` call's output goes to the harness as it is and, after a mark, to the log.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in\n*\" recall \"*)\n  out=$(mktemp)\n  '{atlas}' \"$@\" > \"$out\"\n  rc=$?\n  \
             echo '{CALL_MARK}' >> '{log}'\n  cat \"$out\" >> '{log}'\n  cat \"$out\"\n  rm -f \"$out\"\n  exit $rc;;\n\
             *) exec '{atlas}' \"$@\";;\nesac\n",
            atlas = atlas.display(),
            log = log.display()
        ),
    )?;
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let command = wrapper.display().to_string();
    for size in sizes {
        for consolidate in [false, true] {
            let _ = std::fs::remove_file(&log);
            let mode = if consolidate { "after the sleep cycle" } else { "plain" };
            let out = dir.path().join(format!("beam-{size}-{consolidate}.json"));
            let mut extra = vec!["--size", size.as_str()];
            if consolidate {
                extra.push("--consolidate");
            }
            let result = crate::eval::harness(&script, &data.join("beam-dev"), &command, &out, &[], &extra, true)?;
            let chats = read_log(&log)?;
            let r10 = result["R@10"].as_f64().unwrap_or(f64::NAN);
            let title = format!("BEAM {size} dev, {mode} ({} chats, R@10 {r10:.3})", chats.len());
            let firsts: Vec<Timed> = chats.iter().filter_map(|c| c.first().cloned()).collect();
            let rest: Vec<Timed> = chats.iter().flat_map(|c| c.iter().skip(1).cloned()).collect();
            let all: Vec<Timed> = chats.into_iter().flatten().collect();
            stage_profile::print(&format!("{title}: every recall"), &all);
            stage_profile::print(
                &format!("{title}: the first recall of each process, right after its import"),
                &firsts,
            );
            stage_profile::print(&format!("{title}: the other recalls"), &rest);
        }
    }
    Ok(())
}

/// The log's recalls, one list per `atlas recall` call (per chat), in order.
fn read_log(log: &Path) -> Result<Vec<Vec<Timed>>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("read {}", log.display()))?;
    let mut calls: Vec<Vec<Timed>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line == CALL_MARK {
            calls.push(Vec::new());
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}: not a recall's JSON", log.display(), n + 1))?;
        let label = value["id"].as_str().map_or_else(|| value["id"].to_string(), str::to_owned);
        let timed = Timed::from_wire(label, &value, &[])
            .with_context(|| format!("{}:{}: a recall line without took_ms and stages", log.display(), n + 1))?;
        calls.last_mut().context("a recall line before the first call's mark")?.push(timed);
    }
    Ok(calls)
}
