//! The markdown bank on disk (`atlas bank write|sync|rebuild`, `[bank] dir`): a space's beliefs
//! read out of the store and written as pages ([`atlas_domain::policy::bank`]), a person's
//! edits applied back, and a space rebuilt from a bank alone.
//!
//! A write lands whole or not at all: the pages that change are first written to a staging
//! folder inside the bank, then a journal naming every rename and removal is committed (written,
//! synced, renamed into place), then applied. A process that dies before the journal is
//! committed leaves the bank as it was; one that dies after it leaves a journal that the next
//! write, sync or rebuild finishes first.

use crate::{Atlas, Parts, now};
use atlas_domain::policy::bank::{self, BankFile, SyncPlan};
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision, StoredMemory, Update};
use atlas_domain::{AtlasError, Body, EdgeKind, Lifecycle, Memory, Result, Validity};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The folder inside a bank where a write stages its pages (never a page itself).
const STAGING: &str = ".atlas-staging";
/// The committed journal of a staged write.
const JOURNAL: &str = "JOURNAL";
/// The file whose lock one process holds while it reads or writes the bank: the sleep cycle of
/// a server and a person's `atlas bank sync` never interleave.
const LOCK: &str = ".atlas-lock";
/// How many memories one read of the store returns.
const PIECE: usize = 1_000;

/// What a bank write changed on disk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BankWritten {
    /// Pages in the bank (the README included).
    pub pages: usize,
    /// Pages written because they are new or changed.
    pub changed: usize,
    /// Pages removed because what they held is gone.
    pub removed: usize,
}

/// What a sync did to the space.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BankSynced {
    pub edited: usize,
    pub added: usize,
    pub forgotten: usize,
    /// The bank as written again after the changes (new versions carry new ids).
    pub written: BankWritten,
}

/// Every memory of the space with what the bank needs of it: kept memories whole, the others
/// (episodes, summaries) only as the holders of their edges.
async fn snapshot(parts: &Parts) -> Result<Vec<StoredMemory>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let piece = parts.replica.export_batch(after, PIECE).await?;
        let Some(last) = piece.last() else { break };
        after = Some(last.memory.id);
        for mut item in piece {
            item.vector = None;
            if !bank::keeps(&item.memory) {
                // An episode holds what links it to a belief (a fact consolidated before the
                // episode's id was given); the turns' own chain is not the bank's.
                item.edges.retain(|e| e.kind != EdgeKind::Temporal);
                if item.edges.is_empty() {
                    continue;
                }
                item.memory.text.clear();
                item.memory.context = None;
                item.memory.meta.clear();
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// Writes the space's beliefs into `dir` (created if missing), changing only the pages whose
/// bytes differ and removing pages of the bank that are no longer produced.
pub async fn write(parts: &Parts, dir: &Path) -> Result<BankWritten> {
    let lock = lock(dir, true).await?;
    let written = write_locked(parts, dir).await;
    drop(lock);
    written
}

/// [`write`] by a caller that holds the bank's lock.
async fn write_locked(parts: &Parts, dir: &Path) -> Result<BankWritten> {
    let items = snapshot(parts).await?;
    let files = bank::render(&items);
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || write_files(&dir, &files))
        .await
        .map_err(|e| AtlasError::Storage(format!("bank write task: {e}")))?
}

/// Takes the bank's lock, waiting for another process to let it go; `create` makes a missing
/// folder (a write), else a missing folder is an error (a sync or rebuild reads one).
async fn lock(dir: &Path, create: bool) -> Result<std::fs::File> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        if create {
            std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        } else if !dir.is_dir() {
            return Err(AtlasError::invalid(dir.display().to_string(), "no such folder"));
        }
        let path = dir.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        file.lock().map_err(|e| io_error(&path, e))?;
        Ok(file)
    })
    .await
    .map_err(|e| AtlasError::Storage(format!("bank lock task: {e}")))?
}

fn io_error(path: &Path, e: std::io::Error) -> AtlasError {
    AtlasError::Storage(format!("{}: {e}", path.display()))
}

/// The bank's files as they are.
fn read_files(dir: &Path) -> Result<Vec<BankFile>> {
    Ok(crate::markdown_files::read(dir)?.into_iter().map(|f| BankFile { path: f.path, text: f.text }).collect())
}

/// Whether a file is a page this bank owns (so that a write may remove it): its front matter
/// begins with `atlas:`. A person's own notes in the folder are never touched.
fn is_page(text: &str) -> bool {
    text.starts_with("---\natlas: ")
}

fn sync_dir(path: &Path) {
    if let Ok(d) = std::fs::File::open(path) {
        let _ = d.sync_all();
    }
}

/// Writes `files` into `dir` as one change (see the module's comment).
fn write_files(dir: &Path, files: &[BankFile]) -> Result<BankWritten> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    finish_staged(dir)?;
    let existing: BTreeMap<String, String> = read_files(dir)?.into_iter().map(|f| (f.path, f.text)).collect();
    let wanted: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let changed: Vec<&BankFile> = files.iter().filter(|f| existing.get(&f.path) != Some(&f.text)).collect();
    let removed: Vec<&String> = existing
        .iter()
        .filter(|(path, text)| !wanted.contains(path.as_str()) && is_page(text))
        .map(|(p, _)| p)
        .collect();
    let written = BankWritten { pages: files.len(), changed: changed.len(), removed: removed.len() };
    if changed.is_empty() && removed.is_empty() {
        return Ok(written);
    }
    let staging = dir.join(STAGING);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
    }
    std::fs::create_dir_all(&staging).map_err(|e| io_error(&staging, e))?;
    let mut journal = String::new();
    for (i, file) in changed.iter().enumerate() {
        let staged = staging.join(i.to_string());
        let mut f = std::fs::File::create(&staged).map_err(|e| io_error(&staged, e))?;
        f.write_all(file.text.as_bytes()).map_err(|e| io_error(&staged, e))?;
        f.sync_all().map_err(|e| io_error(&staged, e))?;
        journal.push_str(&format!("rename {i} {}\n", file.path));
    }
    for path in &removed {
        journal.push_str(&format!("remove {path}\n"));
    }
    let pending = staging.join("JOURNAL.tmp");
    let mut f = std::fs::File::create(&pending).map_err(|e| io_error(&pending, e))?;
    f.write_all(journal.as_bytes()).map_err(|e| io_error(&pending, e))?;
    f.sync_all().map_err(|e| io_error(&pending, e))?;
    std::fs::rename(&pending, staging.join(JOURNAL)).map_err(|e| io_error(&pending, e))?;
    sync_dir(&staging);
    finish_staged(dir)?;
    Ok(written)
}

/// Applies a committed journal left in the staging folder (renames already done are skipped),
/// or drops a staging folder whose journal was never committed.
fn finish_staged(dir: &Path) -> Result<()> {
    let staging = dir.join(STAGING);
    if !staging.exists() {
        return Ok(());
    }
    let journal = staging.join(JOURNAL);
    if journal.exists() {
        let text = std::fs::read_to_string(&journal).map_err(|e| io_error(&journal, e))?;
        for line in text.lines() {
            let mut parts = line.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("rename"), Some(n), Some(path)) => {
                    let from = staging.join(n);
                    let to = dir.join(path);
                    if from.exists() {
                        if let Some(parent) = to.parent() {
                            std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
                        }
                        std::fs::rename(&from, &to).map_err(|e| io_error(&to, e))?;
                    }
                }
                (Some("remove"), Some(first), rest) => {
                    let path = match rest {
                        Some(rest) => format!("{first} {rest}"),
                        None => first.to_owned(),
                    };
                    let target = dir.join(&path);
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
                _ => {
                    return Err(AtlasError::Storage(format!(
                        "{}: unreadable journal line {line:?}",
                        journal.display()
                    )));
                }
            }
        }
        sync_dir(dir);
    }
    std::fs::remove_dir_all(&staging).map_err(|e| io_error(&staging, e))
}

/// Reads and checks a bank folder: it must be one (`README.md` with the marker), and every page
/// must parse.
fn read_bank(dir: &Path) -> Result<bank::Bank> {
    finish_staged(dir)?;
    let marker = dir.join(bank::MARKER_FILE);
    let is_bank = std::fs::read_to_string(&marker).is_ok_and(|t| t.lines().next() == Some(bank::MARKER));
    if !is_bank {
        return Err(AtlasError::invalid(
            dir.display().to_string(),
            format!(
                "not an ATLAS bank (no {} beginning {}): run `atlas bank write` on it first",
                bank::MARKER_FILE,
                bank::MARKER
            ),
        ));
    }
    let files = read_files(dir)?;
    bank::parse(&files).map_err(|e| match e {
        AtlasError::InvalidInput { location, message } => {
            AtlasError::InvalidInput { location: dir.join(location).display().to_string(), message }
        }
        other => other,
    })
}

impl Atlas {
    /// Writes the space's beliefs as a markdown bank in `dir` (`atlas bank write`).
    pub async fn bank_write(&self, dir: &Path) -> Result<BankWritten> {
        write(&self.parts, dir).await
    }

    /// Applies a person's edits of the bank in `dir` to the space, then writes the bank again:
    /// an edited line becomes a new version superseding the old (provenance `origin: bank`), a
    /// removed line's memory is forgotten softly, a new line is a new fact or core entry. A
    /// malformed page fails the sync before anything is changed.
    pub async fn bank_sync(&self, dir: &Path) -> Result<BankSynced> {
        let Some(consolidator) = self.parts.consolidator.clone() else {
            return Err(AtlasError::Config("this store keeps no history, so a bank cannot be synced into it".into()));
        };
        let _lock = lock(dir, false).await?;
        let owned = dir.to_owned();
        let parsed = tokio::task::spawn_blocking(move || read_bank(&owned))
            .await
            .map_err(|e| AtlasError::Storage(format!("bank read task: {e}")))??;
        let items = snapshot(&self.parts).await?;
        let current: Vec<Memory> =
            items.into_iter().map(|s| s.memory).filter(|m| m.validity.valid_until.is_none()).collect();
        let at = now();
        let plan = bank::plan_sync(&parsed, &current, at)?;
        let SyncPlan { edited, removed, added } = plan;
        let mut synced =
            BankSynced { edited: edited.len(), added: added.len(), forgotten: removed.len(), ..Default::default() };
        if !edited.is_empty() || !added.is_empty() {
            let mut batch = Consolidation {
                report: serde_json::json!({"bank_sync": {"edited": edited.len(), "added": added.len(), "forgotten": removed.len()}}),
                ..Consolidation::empty(at)
            };
            let link = |src: usize, dst: atlas_domain::MemoryId, kind: EdgeKind| NewEdge {
                src: MemoryRef::New(src),
                dst: MemoryRef::Stored(dst),
                kind,
                weight: 1.0,
                validity: Validity::from(at),
                recorded_at: at,
            };
            let entities = self.parts.store.edges_of_many(edited.iter().map(|(id, _)| *id).collect()).await?;
            for (old, memory) in edited {
                let index = batch.memories.len();
                batch.memories.push(memory);
                batch.edges.push(link(index, old, EdgeKind::Supersedes));
                for e in entities.get(&old).into_iter().flatten() {
                    if e.kind == EdgeKind::Entity && e.src == old {
                        batch.edges.push(link(index, e.dst, EdgeKind::Entity));
                    }
                }
                batch.revisions.push(Revision { id: old, valid_from: None, valid_until: Some(at), confidence: None });
            }
            for (memory, entity) in added {
                let index = batch.memories.len();
                let is_fact = matches!(memory.body, Body::Fact { .. });
                batch.memories.push(memory);
                if let Some(entity) = entity.filter(|_| is_fact) {
                    batch.edges.push(link(index, entity, EdgeKind::Entity));
                }
            }
            consolidator.apply(batch).await?;
        }
        if !removed.is_empty() {
            let mut updates = Vec::new();
            for memory in self.parts.store.get_many(removed).await? {
                if !memory.lifecycle.is_deleted() {
                    updates.push(Update {
                        id: memory.id,
                        lifecycle: Lifecycle { deleted_at: Some(at), ..memory.lifecycle },
                        body: None,
                    });
                }
            }
            self.parts.store.update(updates).await?;
        }
        self.background.wake();
        synced.written = write_locked(&self.parts, dir).await?;
        Ok(synced)
    }

    /// Recreates a space's beliefs from the bank in `dir` (`atlas bank rebuild`): every fact
    /// with its history, entities, core memory and agent memories, under their own ids, with
    /// the edges between them. The space must hold no memory yet; the episodes the facts came
    /// from are not in a bank, so those links are left out. Vectors are computed afterwards,
    /// like any restore's.
    pub async fn bank_rebuild(&self, dir: &Path) -> Result<usize> {
        let _lock = lock(dir, false).await?;
        let owned: PathBuf = dir.to_owned();
        let parsed = tokio::task::spawn_blocking(move || read_bank(&owned))
            .await
            .map_err(|e| AtlasError::Storage(format!("bank read task: {e}")))??;
        let stats = self.parts.store.stats().await?;
        if stats.memories() > 0 {
            return Err(AtlasError::invalid(
                self.config.db.display().to_string(),
                format!("holds {} memories; a bank is rebuilt into a new, empty space", stats.memories()),
            ));
        }
        let ids: HashSet<_> = parsed.records.iter().map(|r| r.memory.id).collect();
        let records: Vec<StoredMemory> = parsed
            .records
            .into_iter()
            .map(|mut r| {
                r.edges.retain(|e| ids.contains(&e.src) && ids.contains(&e.dst));
                r
            })
            .collect();
        let count = records.len();
        self.parts.replica.restore(records).await?;
        self.background.wake();
        Ok(count)
    }
}
