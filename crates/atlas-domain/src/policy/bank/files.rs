//! What the bank may do to its folder: the paths it may name (relative, inside the folder, no
//! `..`, nothing hidden), the manifest of the files it wrote (which alone it may replace or
//! remove), the journal of a staged write, and the plan that decides, file by file, what a write
//! changes and what it leaves alone. Text in, text out: the runtime does the I/O.
//!
//! A bank folder can arrive from anyone (a git clone, a shared drive), so nothing read from it
//! is trusted: a journal or manifest line whose path fails [`check_path`] refuses the whole file
//! before anything is done.

use super::*;

/// The folder inside a bank where a write stages its pages (never a page itself).
pub const STAGING: &str = ".atlas-staging";
/// The committed journal of a staged write, inside [`STAGING`].
pub const JOURNAL: &str = "JOURNAL";
/// The manifest of the files the bank wrote, at the bank's root.
pub const MANIFEST_FILE: &str = ".atlas-manifest";
/// The first line of the manifest, and its format.
pub const MANIFEST_HEADER: &str = "# atlas-bank manifest 1: the files `atlas bank write` wrote (sha256, path)";

/// Longest path the bank names (bytes).
const MAX_PATH: usize = 1_024;

/// Names Windows reserves whatever the extension (`CON.md` is `CON`).
const RESERVED: [&str; 22] = [
    "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8", "com9", "lpt1", "lpt2",
    "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// Whether a file name's stem is one Windows reserves.
pub fn is_reserved_name(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or_default().to_ascii_lowercase();
    RESERVED.contains(&stem.as_str())
}

/// Checks a path the bank reads from its own records before it touches it: `/`-separated,
/// relative, every part a plain name (not empty, `.` or `..`, not hidden, no `\`, `:` or
/// control character), a markdown file.
pub fn check_path(path: &str) -> std::result::Result<(), String> {
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.len() > MAX_PATH {
        return Err(format!("a path of {} bytes (at most {MAX_PATH})", path.len()));
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} is absolute; a bank names its files relative to its folder"));
    }
    if let Some(c) = path.chars().find(|c| c.is_control() || matches!(c, '\\' | ':')) {
        return Err(format!("{path:?} holds {c:?}; a bank's paths hold none"));
    }
    for part in path.split('/') {
        match part {
            "" => return Err(format!("{path:?} has an empty part")),
            "." | ".." => return Err(format!("{path:?} leaves its folder or names it (\"{part}\")")),
            _ if part.starts_with('.') => return Err(format!("{path:?} names a hidden file or folder ({part:?})")),
            _ => {}
        }
    }
    if !path.ends_with(".md") {
        return Err(format!("{path:?} is not a markdown file"));
    }
    Ok(())
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The files the bank wrote, each with the sha256 (lowercase hex) of the bytes it wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub files: BTreeMap<String, String>,
}

impl Manifest {
    /// The manifest as its file holds it: the header, then `SHA256  PATH` lines in path order
    /// (the layout of `sha256sum`, so `sha256sum -c` checks a bank).
    pub fn render(&self) -> String {
        let mut out = format!("{MANIFEST_HEADER}\n");
        for (path, hash) in &self.files {
            out.push_str(&format!("{hash}  {path}\n"));
        }
        out
    }

    /// Reads a manifest; `name` is where it was read from, for errors (`name:line`).
    pub fn parse(name: &str, text: &str) -> Result<Manifest> {
        let mut files = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let at = format!("{name}:{}", i + 1);
            if i == 0 {
                if line != MANIFEST_HEADER {
                    return Err(bad(at, format!("expected the manifest's first line {MANIFEST_HEADER:?}")));
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            let (hash, path) = line
                .split_once("  ")
                .ok_or_else(|| bad(at.clone(), format!("expected \"SHA256  PATH\", got {line:?}")))?;
            if !is_sha256(hash) {
                return Err(bad(at, format!("expected a sha256 in hex, got {hash:?}")));
            }
            check_path(path).map_err(|m| bad(at.clone(), m))?;
            if files.insert(path.to_owned(), hash.to_owned()).is_some() {
                return Err(bad(at, format!("{path:?} is listed twice")));
            }
        }
        if text.is_empty() {
            return Err(bad(format!("{name}:1"), "the manifest is empty"));
        }
        Ok(Manifest { files })
    }
}

/// One step of a committed journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalStep {
    /// Move staged file `staged` (its bytes hash to `hash`) to `path`, replacing the file whose
    /// bytes hashed to `replaces` when the write was planned (none: the path was free).
    Rename { staged: usize, hash: String, replaces: Option<String>, path: String },
    /// Remove `path`, a file the bank wrote.
    Remove { path: String },
    /// Move staged file `staged` to [`MANIFEST_FILE`]: the last step, so that the manifest
    /// before the write decides what each step may touch until all are done.
    Manifest { staged: usize, hash: String },
}

/// A staged write's journal: every rename and removal, checked as a whole when read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    pub steps: Vec<JournalStep>,
}

impl Journal {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            match step {
                JournalStep::Rename { staged, hash, replaces, path } => {
                    let replaces = replaces.as_deref().unwrap_or("-");
                    out.push_str(&format!("rename {staged} {hash} {replaces} {path}\n"))
                }
                JournalStep::Remove { path } => out.push_str(&format!("remove {path}\n")),
                JournalStep::Manifest { staged, hash } => out.push_str(&format!("manifest {staged} {hash}\n")),
            }
        }
        out
    }

    /// Reads a journal; any line that is not one the bank writes, or whose path leaves the
    /// folder, refuses it whole (`name:line` and what is wrong).
    pub fn parse(name: &str, text: &str) -> Result<Journal> {
        let mut steps = Vec::new();
        let mut targets = HashSet::new();
        let mut staged_seen = HashSet::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let at = format!("{name}:{}", i + 1);
            let staged_and_hash = |staged: &str, hash: &str| -> Result<(usize, String)> {
                let number = staged
                    .parse::<usize>()
                    .ok()
                    .filter(|_| staged.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| bad(at.clone(), format!("expected a staged file's number, got {staged:?}")))?;
                if !is_sha256(hash) {
                    return Err(bad(at.clone(), format!("expected a sha256 in hex, got {hash:?}")));
                }
                Ok((number, hash.to_owned()))
            };
            let step = match line.split_once(' ') {
                Some(("rename", rest)) => {
                    let mut parts = rest.splitn(4, ' ');
                    let (Some(staged), Some(hash), Some(replaces), Some(path)) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        return Err(bad(at, format!("expected \"rename N SHA256 SHA256|- PATH\", got {line:?}")));
                    };
                    let (staged, hash) = staged_and_hash(staged, hash)?;
                    let replaces = match replaces {
                        "-" => None,
                        h if is_sha256(h) => Some(h.to_owned()),
                        other => return Err(bad(at, format!("expected a sha256 in hex or \"-\", got {other:?}"))),
                    };
                    JournalStep::Rename { staged, hash, replaces, path: path.to_owned() }
                }
                Some(("remove", path)) => JournalStep::Remove { path: path.to_owned() },
                Some(("manifest", rest)) => {
                    let Some((staged, hash)) = rest.split_once(' ') else {
                        return Err(bad(at, format!("expected \"manifest N SHA256\", got {line:?}")));
                    };
                    if i + 1 != lines.len() {
                        return Err(bad(at, "the manifest step is not the journal's last"));
                    }
                    let (staged, hash) = staged_and_hash(staged, hash)?;
                    JournalStep::Manifest { staged, hash }
                }
                _ => {
                    return Err(bad(
                        at,
                        format!(
                            "expected \"rename N SHA256 SHA256|- PATH\", \"remove PATH\" or \"manifest N SHA256\", got {line:?}"
                        ),
                    ));
                }
            };
            match &step {
                JournalStep::Rename { path, .. } | JournalStep::Remove { path } => {
                    check_path(path).map_err(|m| bad(at.clone(), m))?;
                    if !targets.insert(path.clone()) {
                        return Err(bad(at, format!("{path:?} is named twice")));
                    }
                }
                JournalStep::Manifest { .. } => {}
            }
            if let JournalStep::Rename { staged, .. } | JournalStep::Manifest { staged, .. } = &step
                && !staged_seen.insert(*staged)
            {
                return Err(bad(at, format!("staged file {staged} is named twice")));
            }
            steps.push(step);
        }
        Ok(Journal { steps })
    }
}

/// Whose a file in the bank's folder is, from the manifest and the file's current hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The bank wrote it and nobody changed it since: it may be replaced or removed.
    Bank,
    /// The bank wrote it and a person changed it: left alone until a sync reads it.
    Edited,
    /// The bank never wrote it: a person's file, never touched.
    Person,
}

/// Whose the file at `path` is, given the hash of its bytes now. `consumed` names the files a
/// sync has just read (path and hash when read): their edits are in the space, so they are the
/// bank's to write again.
pub fn owner(manifest: &Manifest, consumed: &BTreeMap<String, String>, path: &str, hash: &str) -> Owner {
    if consumed.get(path).is_some_and(|h| h == hash) {
        return Owner::Bank;
    }
    match manifest.files.get(path) {
        Some(h) if h == hash => Owner::Bank,
        Some(_) => Owner::Edited,
        None => Owner::Person,
    }
}

/// A file the write left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// What a write does to the folder: the files to write (index into the wanted files), the
/// files to remove, what it leaves alone, and the manifest after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritePlan {
    pub write: Vec<usize>,
    pub remove: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// The manifest after the write: what it wrote, and what it wrote before that is still
    /// there (an edited page stays the bank's to take back after a sync).
    pub manifest: Manifest,
}

/// Plans a write of `wanted` (each with the sha256 of its text) over the folder's markdown
/// files `existing` (path → sha256 of their bytes): a file is written when it is missing or
/// the bank's own and different; a file of the bank's that is no longer wanted is removed; a
/// person's file, or a page a person edited since the bank wrote it, is never written over or
/// removed, and is reported.
pub fn plan_write(
    manifest: &Manifest,
    consumed: &BTreeMap<String, String>,
    existing: &BTreeMap<String, String>,
    wanted: &[(String, String)],
) -> WritePlan {
    let mut plan = WritePlan::default();
    let mut wanted_paths = HashSet::new();
    for (i, (path, hash)) in wanted.iter().enumerate() {
        wanted_paths.insert(path.as_str());
        let Some(now) = existing.get(path) else {
            plan.write.push(i);
            continue;
        };
        if now == hash {
            continue;
        }
        match owner(manifest, consumed, path, now) {
            Owner::Bank => plan.write.push(i),
            Owner::Edited => plan.skipped.push(Skipped {
                path: path.clone(),
                reason:
                    "edited since the bank wrote it: run `atlas bank sync` to take the edit in (or remove the file)"
                        .into(),
            }),
            Owner::Person => plan.skipped.push(Skipped {
                path: path.clone(),
                reason: "a file the bank did not write, left as it is (move it away to let the bank write there)"
                    .into(),
            }),
        }
    }
    for (path, now) in existing {
        if wanted_paths.contains(path.as_str()) {
            continue;
        }
        match owner(manifest, consumed, path, now) {
            Owner::Bank => plan.remove.push(path.clone()),
            Owner::Edited => plan.skipped.push(Skipped {
                path: path.clone(),
                reason: "no longer written by the bank, but edited since: left in place".into(),
            }),
            Owner::Person => {}
        }
    }
    plan.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    let mut files: BTreeMap<String, String> = manifest
        .files
        .iter()
        .filter(|(path, _)| existing.contains_key(*path))
        .map(|(p, h)| (p.clone(), h.clone()))
        .collect();
    for path in &plan.remove {
        files.remove(path);
    }
    for &i in &plan.write {
        let (path, hash) = &wanted[i];
        files.insert(path.clone(), hash.clone());
    }
    // A file that already holds exactly what the bank writes there is the bank's.
    for (path, hash) in wanted {
        if existing.get(path) == Some(hash) {
            files.insert(path.clone(), hash.clone());
        }
    }
    plan.manifest = Manifest { files };
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    #[test]
    fn the_planted_journal_of_the_probe_is_refused_whole() {
        let planted = "rename 0 /tmp/out/fake-bashrc\nremove ../out/victim.txt\n";
        let e = Journal::parse("B/.atlas-staging/JOURNAL", planted).unwrap_err().to_string();
        assert!(e.contains("JOURNAL:1"), "{e}");
        let old_form = format!("rename 0 {} - /tmp/out/fake-bashrc\n", "a".repeat(64));
        let e = Journal::parse("J", &old_form).unwrap_err().to_string();
        assert!(e.contains("J:1") && e.contains("absolute"), "{e}");
        let e = Journal::parse("J", "remove ../out/victim.md\n").unwrap_err().to_string();
        assert!(e.contains("leaves its folder"), "{e}");
        for bad_path in [
            "a/../b.md",
            "./a.md",
            ".atlas-staging/0.md",
            ".git/config.md",
            "a//b.md",
            "a\\..\\b.md",
            "C:x.md",
            "a\u{0}b.md",
            "a\nb.md",
            "notes.txt",
            "",
        ] {
            assert!(check_path(bad_path).is_err(), "{bad_path:?} accepted");
        }
        assert!(check_path("user-ann/entities/Rust.md").is_ok());
        assert!(check_path("README.md").is_ok());
    }

    #[test]
    fn a_manifest_step_must_come_last_and_a_staged_file_is_used_once() {
        let h = "b".repeat(64);
        assert!(Journal::parse("J", &format!("manifest 0 {h}\nremove a.md\n")).is_err());
        assert!(Journal::parse("J", &format!("rename 0 {h} - a.md\nrename 0 {h} - b.md\n")).is_err());
        assert!(Journal::parse("J", &format!("rename 0 {h} - a.md\nremove a.md\n")).is_err());
        assert!(Journal::parse("J", &format!("rename 0 {h} {h} a.md\nremove b.md\nmanifest 1 {h}\n")).is_ok());
        assert!(Journal::parse("J", &format!("rename 0 {h} x a.md\n")).is_err());
    }

    #[test]
    fn reserved_windows_names_are_known_whatever_their_case_and_extension() {
        assert!(is_reserved_name("CON.md") && is_reserved_name("lpt1") && is_reserved_name("Nul.md"));
        assert!(!is_reserved_name("console.md") && !is_reserved_name("com10.md"));
    }

    fn any_path() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof!["[a-z]{1,3}", Just("..".to_owned()), Just(".".to_owned()), "\\PC{0,4}"],
            1..4,
        )
        .prop_map(|parts| format!("{}.md", parts.join("/")))
    }

    fn hash() -> impl Strategy<Value = String> {
        "[0-9a-f]{64}"
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Whatever a path says, one that passes stays below the folder it is joined to.
        #[test]
        fn a_path_that_passes_stays_inside_its_folder(path in any_path()) {
            if check_path(&path).is_ok() {
                for c in Path::new(&path).components() {
                    prop_assert!(matches!(c, Component::Normal(_)), "{path:?}: {c:?}");
                }
                prop_assert!(!path.split('/').any(|p| p.starts_with('.')));
            }
        }

        #[test]
        fn journals_and_manifests_read_back_what_was_written(
            files in proptest::collection::btree_map("[a-z]{1,6}(/[a-z]{1,6}){0,2}\\.md", hash(), 0..8),
            removed in proptest::collection::btree_set("[A-Z]{1,6}\\.md", 0..4),
            manifest_hash in hash(),
            replaced in hash(),
        ) {
            let manifest = Manifest { files: files.clone() };
            prop_assert_eq!(Manifest::parse("M", &manifest.render()).unwrap(), manifest.clone());
            let mut steps: Vec<JournalStep> = files
                .iter()
                .enumerate()
                .map(|(i, (path, hash))| JournalStep::Rename {
                    staged: i,
                    hash: hash.clone(),
                    replaces: (i % 2 == 0).then(|| replaced.clone()),
                    path: path.clone(),
                })
                .collect();
            steps.extend(removed.iter().map(|p| JournalStep::Remove { path: p.clone() }));
            steps.push(JournalStep::Manifest { staged: files.len(), hash: manifest_hash });
            let journal = Journal { steps };
            prop_assert_eq!(Journal::parse("J", &journal.render()).unwrap(), journal);
        }

        /// A write never replaces or removes a file the bank did not write, nor one a person
        /// edited since (unless a sync just read it); it writes every page that is missing or
        /// its own and stale; the manifest after names what it wrote.
        #[test]
        fn a_write_touches_only_the_banks_own_files(
            listed in proptest::collection::btree_map("[a-e]\\.md", hash(), 0..5),
            existing in proptest::collection::btree_map("[a-g]\\.md", hash(), 0..7),
            wanted in proptest::collection::btree_map("[a-g]\\.md", hash(), 0..7),
            consumed_paths in proptest::collection::btree_set("[a-g]\\.md", 0..3),
            keep_listed_hash in proptest::collection::vec(any::<bool>(), 5),
        ) {
            // Some listed files still hold what the bank wrote.
            let mut existing = existing;
            for (i, (path, hash)) in listed.iter().enumerate() {
                if keep_listed_hash[i % 5] && existing.contains_key(path) {
                    existing.insert(path.clone(), hash.clone());
                }
            }
            let consumed: BTreeMap<String, String> = consumed_paths
                .iter()
                .filter_map(|p| existing.get(p).map(|h| (p.clone(), h.clone())))
                .collect();
            let manifest = Manifest { files: listed };
            let wanted: Vec<(String, String)> = wanted.into_iter().collect();
            let plan = plan_write(&manifest, &consumed, &existing, &wanted);
            let touched = plan.write.iter().map(|&i| wanted[i].0.clone()).chain(plan.remove.iter().cloned());
            for path in touched {
                if let Some(now) = existing.get(&path) {
                    prop_assert_eq!(owner(&manifest, &consumed, &path, now), Owner::Bank, "{}", path);
                }
            }
            for (i, (path, hash)) in wanted.iter().enumerate() {
                let stale_own = existing.get(path).is_some_and(|now| {
                    now != hash && owner(&manifest, &consumed, path, now) == Owner::Bank
                });
                if !existing.contains_key(path) || stale_own {
                    prop_assert!(plan.write.contains(&i), "{} not written", path);
                }
                if plan.write.contains(&i) || existing.get(path) == Some(hash) {
                    prop_assert_eq!(plan.manifest.files.get(path), Some(hash));
                }
            }
            for path in &plan.remove {
                prop_assert!(!plan.manifest.files.contains_key(path));
            }
        }
    }
}
