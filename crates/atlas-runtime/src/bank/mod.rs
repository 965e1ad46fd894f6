//! The markdown bank on disk (`atlas bank write|sync|rebuild`, `[bank] dir`): a space's beliefs
//! read out of the store and written as pages ([`atlas_domain::policy::bank`]), a person's
//! edits applied back, and a space rebuilt from a bank alone. What may happen to the folder
//! itself (lock, manifest, staged writes) is [`disk`]'s.

mod disk;

use crate::{Atlas, Parts, now};
use atlas_domain::policy::bank::files::Skipped;
use atlas_domain::policy::bank::{self, SyncPlan};
use atlas_domain::policy::limits::validate;
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision, StoredMemory, Update};
use atlas_domain::{AtlasError, Body, EdgeKind, Lifecycle, Memory, Result, Validity};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

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
    /// Files the write left alone where it would have written or removed a page: a person's
    /// own file, or a page edited since the bank wrote it.
    pub skipped: Vec<Skipped>,
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
/// bytes differ and removing pages of the bank that are no longer produced; a person's files
/// are left alone and reported.
pub async fn write(parts: &Parts, dir: &Path) -> Result<BankWritten> {
    let owned = dir.to_owned();
    let bank = blocking("bank lock", move || disk::open(&owned, disk::Access::Write)).await?;
    write_locked(parts, &bank.dir, BTreeMap::new()).await
}

/// [`write`] by a caller that holds the bank's lock, after a sync consumed the pages `consumed`.
async fn write_locked(parts: &Parts, dir: &Path, consumed: BTreeMap<String, String>) -> Result<BankWritten> {
    let items = snapshot(parts).await?;
    let files = bank::render(&items);
    let dir = dir.to_owned();
    blocking("bank write", move || disk::write_files(&dir, &files, &consumed)).await
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(what: &str, work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| AtlasError::Storage(format!("{what} task: {e}")))?
}

/// An error about a page (`file:line` below the bank) as one naming the page's full path.
fn located(dir: &Path, e: AtlasError) -> AtlasError {
    match e {
        AtlasError::InvalidInput { location, message } if !location.is_empty() => {
            AtlasError::InvalidInput { location: dir.join(location).display().to_string(), message }
        }
        other => other,
    }
}

/// Reads and checks a bank folder: it must be one (a manifest, or `README.md` with the marker),
/// and every page must parse. Returns the bank and the pages it read with their hashes. With
/// `finish`, a write cut short is finished first; without (a rebuild, which writes nothing into
/// the folder), a journal waiting there is an error.
fn read_bank(dir: &Path, finish: bool) -> Result<(bank::Bank, BTreeMap<String, String>)> {
    if finish {
        disk::finish_staged(dir)?;
    } else if disk::has_journal(dir) {
        return Err(AtlasError::invalid(
            dir.display().to_string(),
            "holds a write cut short (.atlas-staging/JOURNAL): run `atlas bank write` on it with the space that \
             wrote it first, or remove .atlas-staging",
        ));
    }
    if !disk::is_bank(dir) {
        return Err(AtlasError::invalid(
            dir.display().to_string(),
            format!(
                "not an ATLAS bank (no {} and no {} beginning {}): run `atlas bank write` on it first",
                bank::files::MANIFEST_FILE,
                bank::MARKER_FILE,
                bank::MARKER
            ),
        ));
    }
    let files = crate::markdown_files::read(dir)?;
    let hashes: BTreeMap<String, String> = files.iter().map(|f| (f.path.clone(), f.hash.clone())).collect();
    let files: Vec<bank::BankFile> = files.into_iter().map(|f| bank::BankFile { path: f.path, text: f.text }).collect();
    let parsed = bank::parse(&files).map_err(|e| located(dir, e))?;
    let consumed = parsed.pages.iter().filter_map(|p| hashes.get(p).map(|h| (p.clone(), h.clone()))).collect();
    Ok((parsed, consumed))
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
    ///
    /// Running it again after it was cut short at any point (a crash after its commit, before
    /// the folder was written again) adds nothing: [`bank::plan_sync`] knows the lines the
    /// space has taken in already.
    pub async fn bank_sync(&self, dir: &Path) -> Result<BankSynced> {
        self.bank_sync_cut(dir, usize::MAX).await
    }

    /// [`Atlas::bank_sync`] stopped after its first `steps` changes to the space (0: none; 1:
    /// the new versions and facts committed; 2: the forgettings too), before the folder is
    /// written again: what a crash at that point leaves, for the tests that prove a sync run
    /// again after it gives the same space as one sync.
    #[doc(hidden)]
    pub async fn bank_sync_cut(&self, dir: &Path, steps: usize) -> Result<BankSynced> {
        let Some(consolidator) = self.parts.consolidator.clone() else {
            return Err(AtlasError::Config("this store keeps no history, so a bank cannot be synced into it".into()));
        };
        let owned = dir.to_owned();
        let (bank_dir, parsed, consumed) = blocking("bank read", move || {
            let bank = disk::open(&owned, disk::Access::Sync)?;
            let (parsed, consumed) = read_bank(&bank.dir, true)?;
            Ok((bank, parsed, consumed))
        })
        .await?;
        let items = snapshot(&self.parts).await?;
        let mut current: Vec<Memory> =
            items.iter().map(|s| s.memory.clone()).filter(|m| m.validity.valid_until.is_none()).collect();
        // The pages' entities as the store has them, whatever they are (a page may name any id).
        let known: HashSet<_> = items.iter().map(|s| s.memory.id).collect();
        let named: HashSet<_> =
            parsed.stated.iter().filter_map(|s| s.entity).filter(|id| !known.contains(id)).collect();
        if !named.is_empty() {
            current.extend(self.parts.store.get_many(named.into_iter().collect()).await?);
        }
        let live: HashSet<_> = current.iter().map(|m| m.id).collect();
        let replaced_by: HashMap<_, _> = items
            .iter()
            .flat_map(|s| &s.edges)
            .filter(|e| e.kind == EdgeKind::Supersedes && live.contains(&e.src))
            .map(|e| (e.dst, e.src))
            .collect();
        let at = now();
        let space = bank::SyncSpace {
            current: &current,
            replaced_by: &replaced_by,
            max_text_bytes: self.config.max_text_bytes,
        };
        let plan = bank::plan_sync(&parsed, space, at).map_err(|e| located(&bank_dir.dir, e))?;
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
            if steps == 0 {
                return Ok(synced);
            }
            consolidator.apply(batch).await?;
        }
        if steps <= 1 {
            return Ok(synced);
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
        if steps <= 2 {
            return Ok(synced);
        }
        synced.written = write_locked(&self.parts, &bank_dir.dir, consumed).await?;
        Ok(synced)
    }

    /// Recreates a space's beliefs from the bank in `dir` (`atlas bank rebuild`): every fact
    /// with its history, entities, core memory and agent memories, under their own ids, with
    /// the edges between them. The space must hold no memory yet; the episodes the facts came
    /// from are not in a bank, so those links are left out. Vectors are computed afterwards,
    /// like any restore's.
    pub async fn bank_rebuild(&self, dir: &Path) -> Result<usize> {
        let owned = dir.to_owned();
        let (bank_dir, parsed) = blocking("bank read", move || {
            let bank = disk::open(&owned, disk::Access::Read)?;
            let (parsed, _) = read_bank(&bank.dir, false)?;
            Ok((bank, parsed))
        })
        .await?;
        let stats = self.parts.store.stats().await?;
        if stats.memories() > 0 {
            return Err(AtlasError::invalid(
                self.config.db.display().to_string(),
                format!("holds {} memories; a bank is rebuilt into a new, empty space", stats.memories()),
            ));
        }
        for r in &parsed.records {
            let location = parsed.locations.get(&r.memory.id).map_or_else(String::new, |l| l.clone());
            validate(&r.memory.to_new(), self.config.max_text_bytes, &location)
                .map_err(|e| located(&bank_dir.dir, e))?;
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
