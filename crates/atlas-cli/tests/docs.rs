//! The README's and every guide's `atlas` shell lines, held to the binary so that the docs
//! cannot drift: each is a command line it accepts (every optional `[...]` both left out and put
//! in), and each that needs no server, no memory id and no network runs, in the document's
//! order, in a fresh directory per document holding the files the lines name and a space
//! (`memory.db`) of the demo conversation.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One `atlas` line of a shell block: where it is, and what a reader would type.
struct Example {
    at: String,
    line: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/atlas-cli").to_path_buf()
}

/// README.md and every docs/*.md, in a fixed order.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root().join("README.md"));
    docs
}

/// The `atlas` lines of `doc`'s shell and text blocks, comments cut.
fn examples(doc: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(doc).expect("a document");
    let name = doc.strip_prefix(root()).unwrap_or(doc).display().to_string();
    let mut inside = false;
    let mut found = Vec::new();
    for (number, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            inside = !inside && matches!(info.trim(), "sh" | "bash" | "console" | "text");
            continue;
        }
        let line = without_comment(trimmed);
        if inside && command_of(&line).is_some() {
            found.push(Example { at: format!("{name}:{}", number + 1), line });
        }
    }
    found
}

/// The line up to a `#` that starts a shell comment (outside quotes, after a space).
fn without_comment(line: &str) -> String {
    let (mut quote, mut previous) = (None, ' ');
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..at].trim_end().to_owned(),
            _ => {}
        }
        previous = c;
    }
    line.to_owned()
}

/// The part of a shell line that runs atlas: after variables set for it and after a pipe into
/// it; `None` for a line that does not run atlas.
fn command_of(line: &str) -> Option<&str> {
    let after_pipe = line.rfind("| atlas ").map_or(line, |at| &line[at + 2..]);
    let mut rest = after_pipe.trim_start();
    while let Some((word, tail)) = rest.split_once(' ') {
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        if !assignment {
            break;
        }
        rest = tail.trim_start();
    }
    rest.starts_with("atlas ").then_some(rest)
}

/// The line with every `[...]` left out, and with every one put in (brackets dropped).
fn variants(line: &str) -> Vec<String> {
    if !line.contains('[') {
        return vec![line.to_owned()];
    }
    let (mut without, mut with, mut depth) = (String::new(), String::new(), 0);
    for c in line.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => {
                without.push(c);
                with.push(c);
            }
            _ => with.push(c),
        }
    }
    let tidy = |s: String| s.split_whitespace().collect::<Vec<_>>().join(" ");
    vec![tidy(without), tidy(with)]
}

/// Whether a line can run here: no server to start or reach, no id of a memory the reader's
/// space has and this one may not, nothing left for the reader to fill in.
fn runs_here(words: &[String]) -> bool {
    let serves = words.iter().any(|w| matches!(w.as_str(), "serve" | "ui" | "mcp"));
    let remote = words.iter().any(|w| w == "qdrant" || w.starts_with("http"));
    // A number after a flag is its value (`--k 5`); one in its own place names a memory.
    let id = words.iter().enumerate().any(|(at, w)| {
        let positional = at == 0 || !words[at - 1].starts_with("--");
        (positional && w.bytes().all(|b| b.is_ascii_digit())) || is_key_id(w)
    });
    let placeholder = words.iter().any(|w| w.contains("..."));
    !(serves || remote || id || placeholder)
}

/// A key's id as `keys add` prints it (12 hex digits).
fn is_key_id(word: &str) -> bool {
    word.len() == 12 && word.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn every_documented_atlas_line_is_one_the_binary_accepts() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for doc in documents() {
        for example in examples(&doc) {
            let command = command_of(&example.line).expect("an atlas line");
            for variant in variants(command) {
                let Some(words) = shlex::split(&variant) else {
                    refused.push(format!("{}: not shell words: {variant}", example.at));
                    continue;
                };
                checked += 1;
                if let Err(why) = atlas_cli::check_command_line(&words) {
                    let why = why.lines().next().unwrap_or_default().to_owned();
                    refused.push(format!("{}: {variant}\n    {why}", example.at));
                }
            }
        }
    }
    assert!(checked >= 60, "only {checked} documented lines found: has the extraction broken?");
    assert!(refused.is_empty(), "documented lines the binary refuses:\n{}", refused.join("\n"));
}

#[test]
fn the_documented_lines_that_need_no_server_run_on_a_fresh_space() {
    let fixtures = root().join("fixtures");
    let mut ran = 0;
    for doc in documents() {
        let runnable: Vec<(String, String)> = examples(&doc)
            .into_iter()
            .flat_map(|example| {
                let at = example.at.clone();
                variants(&example.line).into_iter().map(move |v| (at.clone(), v))
            })
            .filter(|(_, line)| command_of(line).and_then(shlex::split).is_some_and(|words| runs_here(&words)))
            .collect();
        if runnable.is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path();
        // The files the lines name, from the repository's own fixtures.
        for (name, from) in [
            ("conversation.jsonl", "demo/conversation.jsonl"),
            ("more.jsonl", "demo/changes.jsonl"),
            ("queries.jsonl", "demo/queries.jsonl"),
            ("trajectories.jsonl", "agents/trajectories.jsonl"),
        ] {
            std::fs::copy(fixtures.join(from), here.join(name)).unwrap();
        }
        std::fs::write(here.join("texts.jsonl"), "{\"id\": \"a\", \"text\": \"I moved to Lisbon\"}\n").unwrap();
        // A guide that starts on a space of the reader's finds one: the demo conversation.
        let seeded = Command::new(env!("CARGO_BIN_EXE_atlas"))
            .args(["--db", "memory.db", "import", "conversation.jsonl"])
            .current_dir(here)
            .env_remove("ATLAS_DB")
            .env_remove("ATLAS_CONFIG")
            .env_remove("ATLAS_EMBEDDER")
            .output()
            .unwrap();
        assert!(seeded.status.success(), "{}", String::from_utf8_lossy(&seeded.stderr));
        std::fs::create_dir(here.join("docs")).unwrap();
        std::fs::write(here.join("docs/guide.md"), "# Deploys\n\nDeploys go out on Thursdays.\n").unwrap();
        let bin = Path::new(env!("CARGO_BIN_EXE_atlas")).parent().unwrap().to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        for (at, line) in runnable {
            let out = Command::new("sh")
                .arg("-c")
                .arg(&line)
                .current_dir(here)
                .env("PATH", &path)
                .env_remove("ATLAS_DB")
                .env_remove("ATLAS_CONFIG")
                .env_remove("ATLAS_EMBEDDER")
                .output()
                .expect("run sh");
            assert!(
                out.status.success(),
                "{at}: `{line}` failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 30, "only {ran} documented lines ran: has the extraction broken?");
}

#[test]
fn the_extraction_reads_lines_as_a_reader_types_them() {
    assert_eq!(without_comment(r#"atlas recall "a # b" --k 5   # five"#), r#"atlas recall "a # b" --k 5"#);
    assert_eq!(command_of("cat more.jsonl | atlas --db m.db import -"), Some("atlas --db m.db import -"));
    assert_eq!(command_of("ATLAS_TOKEN=s3cret atlas serve"), Some("atlas serve"));
    assert_eq!(command_of("cargo xtask demo"), None);
    assert_eq!(variants("atlas forget 42 [--hard]"), ["atlas forget 42", "atlas forget 42 --hard"]);
    let words = |l: &str| shlex::split(l).unwrap();
    assert!(runs_here(&words("atlas --db m.db recall \"where\" --k 5")));
    assert!(!runs_here(&words("atlas --db m.db get 42")));
    assert!(!runs_here(&words("atlas --db m.db keys revoke 3fa9c2d1e0b4")));
    assert!(!runs_here(&words("atlas --db m.db serve")));
}
