//! The bank's folder on disk: its lock, its manifest, and writes staged and applied through a
//! journal. Every step stays inside the folder and touches only files the bank wrote
//! ([`atlas_domain::policy::bank::files`] decides which); no link below the folder is followed.
//!
//! A write lands whole or not at all: the files that change are first written to a staging
//! folder inside the bank, then a journal naming every rename and removal (and, last, the new
//! manifest) is committed (written, synced, renamed into place), then applied. A process that
//! dies before the commit leaves the bank as it was; one that dies after it leaves a journal
//! that the next write or sync checks and finishes first. A journal that names a path outside
//! the folder, or that is not one the bank writes, is refused whole before anything is done: a
//! bank received from someone else can carry any `.atlas-staging` folder.

use super::BankWritten;
use crate::markdown_files::{find, io_error, sha256_hex};
use atlas_domain::policy::bank::files::{
    JOURNAL, Journal, JournalStep, MANIFEST_FILE, Manifest, Owner, STAGING, check_path, owner, plan_write,
};
use atlas_domain::policy::bank::{self, BankFile};
use atlas_domain::{AtlasError, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file whose lock one process holds while it reads or writes the bank: the sleep cycle of
/// a server and a person's `atlas bank sync` never interleave.
const LOCK: &str = ".atlas-lock";

/// How a bank is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// A write: the folder is made when missing; the lock is held alone.
    Write,
    /// A sync: the folder must exist; the lock is held alone.
    Sync,
    /// A rebuild reads only: it never creates a file in the bank, so it shares an existing lock.
    Read,
}

/// A bank folder opened for one operation: resolved once, its lock held until dropped.
pub(super) struct OpenBank {
    pub dir: PathBuf,
    _lock: Option<File>,
}

/// Opens `dir` for `access`, waiting for another process to let go of the lock.
pub(super) fn open(dir: &Path, access: Access) -> Result<OpenBank> {
    if access == Access::Write {
        atlas_files::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    let dir = crate::markdown_files::resolve_dir(dir)?;
    let path = dir.join(LOCK);
    let lock = if access == Access::Read && std::fs::symlink_metadata(&path).is_err() {
        None
    } else {
        let file = open_no_follow(&path, access != Access::Read)?;
        match access {
            Access::Read => file.lock_shared(),
            _ => file.lock(),
        }
        .map_err(|e| io_error(&path, e))?;
        Some(file)
    };
    Ok(OpenBank { dir, _lock: lock })
}

/// Opens (and with `create`, makes) a file without following a link in its place.
fn open_no_follow(path: &Path, create: bool) -> Result<File> {
    let mut options = atlas_files::options();
    options.read(true);
    if create {
        options.write(true).create(true).truncate(false);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    if is_link(path) {
        return Err(link_refused(path));
    }
    options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return link_refused(path);
        }
        io_error(path, e)
    })
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn link_refused(path: &Path) -> AtlasError {
    AtlasError::invalid(path.display().to_string(), "a link: the bank never follows one below its folder; remove it")
}

/// What is at a path, seen without following a link.
enum FileState {
    Absent,
    /// A regular file, with the sha256 of its bytes.
    File(String),
    /// A link, a folder or anything else: never the bank's.
    Other,
}

fn state(path: &Path) -> Result<FileState> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileState::Absent),
        Err(e) => Err(io_error(path, e)),
        Ok(m) if m.file_type().is_file() => {
            Ok(FileState::File(sha256_hex(&std::fs::read(path).map_err(|e| io_error(path, e))?)))
        }
        Ok(_) => Ok(FileState::Other),
    }
}

/// Refuses a relative path whose folders below `dir` include a link or a file (what is missing
/// is made by the rename).
fn check_folders(dir: &Path, relative: &str) -> Result<()> {
    let mut at = dir.to_owned();
    let parts: Vec<&str> = relative.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&at, e)),
            Ok(m) if m.file_type().is_symlink() => return Err(link_refused(&at)),
            Ok(m) if !m.is_dir() => {
                return Err(AtlasError::invalid(at.display().to_string(), "a file where the bank needs a folder"));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

fn sync_dir(path: &Path) {
    if let Ok(d) = File::open(path) {
        let _ = d.sync_all();
    }
}

/// Whether `dir` is a bank: it has a manifest, or (written before manifests) the marker README.
pub(super) fn is_bank(dir: &Path) -> bool {
    let marked =
        std::fs::read_to_string(dir.join(bank::MARKER_FILE)).is_ok_and(|t| t.lines().next() == Some(bank::MARKER));
    marked || matches!(state(&dir.join(MANIFEST_FILE)), Ok(FileState::File(_)))
}

/// The markdown files below `dir` with the sha256 of their bytes (files whose names are not
/// UTF-8 are a person's: the bank never names one).
fn existing(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for found in find(dir)? {
        if let Some(path) = found.path {
            let bytes = std::fs::read(&found.full).map_err(|e| io_error(&found.full, e))?;
            out.insert(path, sha256_hex(&bytes));
        }
    }
    Ok(out)
}

/// The manifest of the bank in `dir`. A bank written before manifests existed (its marker
/// README and no manifest) owns its README and the files that begin like its pages.
fn manifest(dir: &Path, existing: &BTreeMap<String, String>) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    match state(&path)? {
        FileState::File(_) => {
            let text = std::fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
            Manifest::parse(&path.display().to_string(), &text)
        }
        FileState::Other => Err(AtlasError::invalid(path.display().to_string(), "not a file the bank wrote")),
        FileState::Absent => {
            let mut files = BTreeMap::new();
            if is_bank(dir) {
                for (relative, hash) in existing {
                    let text = std::fs::read(dir.join(relative)).unwrap_or_default();
                    let marker = relative == bank::MARKER_FILE && text.starts_with(bank::MARKER.as_bytes());
                    if marker || text.starts_with(b"---\natlas: ") {
                        files.insert(relative.clone(), hash.clone());
                    }
                }
            }
            Ok(Manifest { files })
        }
    }
}

/// Writes `files` into `dir` as one change. `consumed` names the pages a sync has just read
/// (with their hashes then): their edits are in the space, so they may be written again.
pub(super) fn write_files(dir: &Path, files: &[BankFile], consumed: &BTreeMap<String, String>) -> Result<BankWritten> {
    finish_staged(dir)?;
    let existing = existing(dir)?;
    let manifest = manifest(dir, &existing)?;
    let mut wanted = Vec::with_capacity(files.len());
    for f in files {
        check_path(&f.path).map_err(|m| AtlasError::Storage(format!("the bank would write {m}")))?;
        wanted.push((f.path.clone(), sha256_hex(f.text.as_bytes())));
    }
    let plan = plan_write(&manifest, consumed, &existing, &wanted);
    let written = BankWritten {
        pages: files.len(),
        changed: plan.write.len(),
        removed: plan.remove.len(),
        skipped: plan.skipped.clone(),
    };
    let manifest_text = plan.manifest.render();
    let manifest_path = dir.join(MANIFEST_FILE);
    let manifest_same = std::fs::read(&manifest_path).is_ok_and(|b| b == manifest_text.as_bytes());
    if plan.write.is_empty() && plan.remove.is_empty() && manifest_same {
        return Ok(written);
    }
    for &i in &plan.write {
        check_folders(dir, &files[i].path)?;
    }
    let staging = dir.join(STAGING);
    match state(&staging)? {
        FileState::Absent => {}
        FileState::Other if !is_link(&staging) => {
            std::fs::remove_dir_all(&staging).map_err(|e| io_error(&staging, e))?
        }
        _ => return Err(AtlasError::invalid(staging.display().to_string(), "not a folder the bank made: remove it")),
    }
    atlas_files::create_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
    let stage = |n: usize, bytes: &[u8]| -> Result<()> {
        let staged = staging.join(n.to_string());
        let mut f = atlas_files::create_new(&staged).map_err(|e| io_error(&staged, e))?;
        f.write_all(bytes).map_err(|e| io_error(&staged, e))?;
        f.sync_all().map_err(|e| io_error(&staged, e))
    };
    let mut journal = Journal::default();
    for (n, &i) in plan.write.iter().enumerate() {
        stage(n, files[i].text.as_bytes())?;
        journal.steps.push(JournalStep::Rename {
            staged: n,
            hash: wanted[i].1.clone(),
            replaces: existing.get(&files[i].path).cloned(),
            path: files[i].path.clone(),
        });
    }
    for path in &plan.remove {
        journal.steps.push(JournalStep::Remove { path: path.clone() });
    }
    let n = plan.write.len();
    stage(n, manifest_text.as_bytes())?;
    journal.steps.push(JournalStep::Manifest { staged: n, hash: sha256_hex(manifest_text.as_bytes()) });
    let pending = staging.join("JOURNAL.tmp");
    let mut f = atlas_files::create_new(&pending).map_err(|e| io_error(&pending, e))?;
    f.write_all(journal.render().as_bytes()).map_err(|e| io_error(&pending, e))?;
    f.sync_all().map_err(|e| io_error(&pending, e))?;
    std::fs::rename(&pending, staging.join(JOURNAL)).map_err(|e| io_error(&pending, e))?;
    sync_dir(&staging);
    finish_staged(dir)?;
    Ok(written)
}

/// Whether a committed journal waits in `dir` (a rebuild, which writes nothing, refuses it).
pub(super) fn has_journal(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(STAGING).join(JOURNAL)).is_ok()
}

/// One checked step of a journal.
enum Action {
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
}

/// Finishes a committed journal left in the staging folder, or drops a staging folder whose
/// journal was never committed. Every step is checked before any is done: a path outside the
/// folder or through a link, or a staged file that is not what the journal says, refuses the
/// journal whole; a step onto a file that is not the bank's (a person's, or edited since) is
/// left undone. Steps already done (their staged file gone) are skipped.
pub(super) fn finish_staged(dir: &Path) -> Result<()> {
    let staging = dir.join(STAGING);
    match std::fs::symlink_metadata(&staging) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(&staging, e)),
        Ok(m) if !m.is_dir() => {
            return Err(AtlasError::invalid(
                staging.display().to_string(),
                "not a folder the bank made (a link or a file): remove it",
            ));
        }
        Ok(_) => {}
    }
    let journal_path = staging.join(JOURNAL);
    let name = journal_path.display().to_string();
    let hint = format!("nothing was done (remove {} if the bank did not leave it there)", staging.display());
    let refuse = |message: String| AtlasError::invalid(name.clone(), format!("{message}; {hint}"));
    // A refusal from the journal's reader already names the line.
    let refuse_read = |e: AtlasError| match e {
        AtlasError::InvalidInput { location, message } => {
            AtlasError::InvalidInput { location, message: format!("{message}; {hint}") }
        }
        other => other,
    };
    if !matches!(state(&journal_path)?, FileState::Absent) {
        let FileState::File(_) = state(&journal_path)? else {
            return Err(refuse("the journal is not a file".into()));
        };
        let text = std::fs::read_to_string(&journal_path).map_err(|e| io_error(&journal_path, e))?;
        let journal = Journal::parse(&name, &text).map_err(refuse_read)?;
        let manifest = manifest(dir, &existing(dir)?)?;
        let no_consumed = BTreeMap::new();
        let mut actions = Vec::new();
        let staged_hash = |n: usize, hash: &str| -> Result<Option<PathBuf>> {
            let from = staging.join(n.to_string());
            match state(&from)? {
                FileState::Absent => Ok(None),
                FileState::File(h) if h == hash => Ok(Some(from)),
                _ => Err(refuse(format!("staged file {n} does not hold what the journal says"))),
            }
        };
        for step in &journal.steps {
            match step {
                JournalStep::Rename { staged, hash, replaces, path } => {
                    let Some(from) = staged_hash(*staged, hash)? else { continue };
                    check_folders(dir, path).map_err(refuse_read)?;
                    let to = dir.join(path);
                    match state(&to)? {
                        FileState::Absent => actions.push(Action::Rename(from, to)),
                        // What the write planned to replace (a page a sync read), or a file of
                        // the bank's: a file changed since the plan is a person's now.
                        FileState::File(h)
                            if h == *hash
                                || replaces.as_ref() == Some(&h)
                                || owner(&manifest, &no_consumed, path, &h) == Owner::Bank =>
                        {
                            actions.push(Action::Rename(from, to))
                        }
                        _ => {
                            tracing::warn!(path = %to.display(), "the bank's journal left a file it did not write alone")
                        }
                    }
                }
                JournalStep::Remove { path } => {
                    check_folders(dir, path).map_err(refuse_read)?;
                    let to = dir.join(path);
                    if let FileState::File(h) = state(&to)?
                        && owner(&manifest, &no_consumed, path, &h) == Owner::Bank
                    {
                        actions.push(Action::Remove(to));
                    }
                }
                JournalStep::Manifest { staged, hash } => {
                    if let Some(from) = staged_hash(*staged, hash)? {
                        actions.push(Action::Rename(from, dir.join(MANIFEST_FILE)));
                    }
                }
            }
        }
        for action in actions {
            match action {
                Action::Rename(from, to) => {
                    if let Some(parent) = to.parent() {
                        atlas_files::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
                    }
                    std::fs::rename(&from, &to).map_err(|e| io_error(&to, e))?;
                }
                Action::Remove(target) => {
                    match std::fs::remove_file(&target) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_error(&target, e)),
                    }
                    // A folder the removal emptied goes too.
                    if let Some(parent) = target.parent()
                        && parent != dir
                    {
                        let _ = std::fs::remove_dir(parent);
                    }
                }
            }
        }
        sync_dir(dir);
    }
    std::fs::remove_dir_all(&staging).map_err(|e| io_error(&staging, e))
}
