//! Forgetting on purpose: soft deletion and recovery, use feedback (reinforcement and SM-2
//! reviews), the decay pass, the archive of old memories beside the database, and the hard
//! forget that removes a memory from the store and every archive file.
//!
//! Nothing here loses data silently: decay only soft-deletes, the archive writes (and syncs)
//! its file before it removes anything from the store, and only [`Atlas::forget_hard`] deletes.

use crate::{Atlas, now};
use atlas_domain::jsonl::{self, ExportHeader};
use atlas_domain::policy::decay::{aging_of, fades, review, strength_at};
use atlas_domain::ports::{MemoryStore, StoredMemory, Update};
use atlas_domain::{AtlasError, Body, Lifecycle, Memory, MemoryId, MemoryKind, Result, Timestamp};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

const DAY_MS: i64 = 86_400_000;

/// Memories read per page by the passes that walk the whole space.
const PAGE: usize = 1000;

/// What a decay pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DecayReport {
    /// Memories looked at (soft-deleted ones are skipped).
    pub examined: u64,
    /// Of those, the ones that age at all (not episodes, entities, core memory, world facts).
    pub decaying: u64,
    /// Soft-deleted now because their strength fell below the threshold, by kind.
    pub soft_deleted: BTreeMap<MemoryKind, u64>,
    /// Their ids (recoverable with `atlas recover`).
    pub ids: Vec<MemoryId>,
}

/// Which memories an archive pass moves out of the store.
#[derive(Debug, Clone, Copy)]
pub struct ArchivePolicy {
    /// Soft-deleted for at least this many days.
    pub deleted_days: f64,
    /// Episodes learned at least this many days ago; `None` keeps every episode in the store.
    pub episode_days: Option<f64>,
}

/// What an archive pass wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ArchiveReport {
    /// The file written, when anything was archived.
    pub file: Option<PathBuf>,
    pub archived: u64,
    pub soft_deleted: u64,
    pub episodes: u64,
}

/// What a restore from the archive brought back.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    pub restored: Vec<MemoryId>,
    /// Archive files emptied and removed.
    pub files_removed: u64,
}

/// How a memory came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovered {
    /// It was soft-deleted and is live again.
    Undeleted,
    /// It was in the archive and is back in the store.
    FromArchive,
    /// It was never deleted.
    AlreadyLive,
}

/// What a forget did ([`Atlas::forget_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgotten {
    /// Out of recall; `recover` brings it back.
    Soft,
    /// Gone from the store and from this many archive files.
    Hard { archive_files: u64 },
}

/// What a hard forget removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HardForget {
    pub from_store: bool,
    /// Archive files rewritten (or removed) without it.
    pub archive_files: u64,
}

impl Atlas {
    /// Soft-deletes a memory: recall stops returning it; `get`, `explain`, exports and
    /// [`Atlas::recover`] still see it. A memory only the archive holds is already out of
    /// recall; its archive copy records the forget. Returns whether it exists anywhere.
    pub async fn forget(&self, id: MemoryId) -> Result<bool> {
        let at = now();
        let Some(m) = self.parts.store.get(id).await? else {
            for file in self.archive_files()? {
                if mark_forgotten(&file, id, at)? {
                    return Ok(true);
                }
            }
            return Ok(false);
        };
        if !m.lifecycle.is_deleted() {
            let lifecycle = Lifecycle { deleted_at: Some(at), ..m.lifecycle };
            self.parts.store.update(vec![Update { id, lifecycle, body: None }]).await?;
        }
        Ok(true)
    }

    /// The archive's copy of a memory the store no longer holds, if any archive file has it.
    pub fn archived_memory(&self, id: MemoryId) -> Result<Option<Memory>> {
        for file in self.archive_files()? {
            if let Some(item) = read_archive(&file)?.into_iter().find(|s| s.memory.id == id) {
                return Ok(Some(item.memory));
            }
        }
        Ok(None)
    }

    /// Removes a memory for good: from every table, index, vector table and edge of the store,
    /// and from every archive file. The only physical delete.
    pub async fn forget_hard(&self, id: MemoryId) -> Result<HardForget> {
        let from_store = self.parts.store.forget(id).await?;
        let archive_files = self
            .archive_files()?
            .into_iter()
            .try_fold(0, |n, file| Ok::<_, AtlasError>(n + u64::from(rewrite_without(&file, &HashSet::from([id]))?)))?;
        Ok(HardForget { from_store, archive_files })
    }

    /// Forgets `id` softly or, with `hard`, for good: what every door's `forget` does.
    /// `NotFound` when neither the store nor the archive held it.
    pub async fn forget_as(&self, id: MemoryId, hard: bool) -> Result<Forgotten> {
        if hard {
            let done = self.forget_hard(id).await?;
            if !done.from_store && done.archive_files == 0 {
                return Err(AtlasError::NotFound(id));
            }
            Ok(Forgotten::Hard { archive_files: done.archive_files })
        } else if self.forget(id).await? {
            Ok(Forgotten::Soft)
        } else {
            Err(AtlasError::NotFound(id))
        }
    }

    /// Brings a soft-deleted or archived memory back; `None` when it is nowhere.
    pub async fn recover(&self, id: MemoryId) -> Result<Option<Recovered>> {
        if let Some(m) = self.parts.store.get(id).await? {
            if !m.lifecycle.is_deleted() {
                return Ok(Some(Recovered::AlreadyLive));
            }
            let lifecycle = Lifecycle { deleted_at: None, ..m.lifecycle };
            self.parts.store.update(vec![Update { id, lifecycle, body: None }]).await?;
            return Ok(Some(Recovered::Undeleted));
        }
        let report = self.restore_archive(Some(&HashSet::from([id]))).await?;
        Ok((!report.restored.is_empty()).then_some(Recovered::FromArchive))
    }

    /// Records an agent's judgement of a recalled memory: `useful` resets its decay clock and
    /// counts a use; for a fact it is also an SM-2 review (quality 5 when useful, 1 when judged
    /// irrelevant, which restarts its schedule and so speeds its decay).
    pub async fn feedback(&self, id: MemoryId, useful: bool) -> Result<Memory> {
        self.feedback_at(id, useful, now()).await
    }

    /// [`Atlas::feedback`] given at `at`.
    pub async fn feedback_at(&self, id: MemoryId, useful: bool, at: Timestamp) -> Result<Memory> {
        let mut m = self.parts.store.get(id).await?.ok_or(AtlasError::NotFound(id))?;
        if useful {
            m.lifecycle.last_used = Some(at);
            m.lifecycle.uses = m.lifecycle.uses.saturating_add(1);
        }
        if matches!(m.body, Body::Fact { .. }) {
            m.lifecycle.review = Some(review(m.lifecycle.review.unwrap_or_default(), if useful { 5 } else { 1 }));
        }
        self.parts.store.update(vec![Update { id, lifecycle: m.lifecycle, body: None }]).await?;
        Ok(m)
    }

    /// The decay pass at the current time.
    pub async fn decay(&self) -> Result<DecayReport> {
        self.decay_at(now()).await
    }

    /// [`decay_pass`] at `at`.
    pub async fn decay_at(&self, at: Timestamp) -> Result<DecayReport> {
        decay_pass(self.parts.store.as_ref(), at).await
    }

    /// The archive pass at the current time, by the configured policy.
    pub async fn archive(&self, policy: ArchivePolicy) -> Result<ArchiveReport> {
        self.archive_at(now(), policy).await
    }

    /// Moves old soft-deleted memories (and, if the policy says so, old episodes) into a new
    /// gzipped JSON Lines file under `archive/` beside the database, with every edge that
    /// touches them. The file is complete and synced before anything leaves the store; a crash
    /// between the two leaves a memory in both, which a restore or a later pass tolerates.
    pub async fn archive_at(&self, at: Timestamp, policy: ArchivePolicy) -> Result<ArchiveReport> {
        let days = |d: f64| (d * DAY_MS as f64) as i64;
        let mut report = ArchiveReport::default();
        // Written as the pages are read: only the chosen ids are held, whatever the space's size.
        let mut archive: Option<ArchiveWriter> = None;
        let mut chosen: Vec<MemoryId> = Vec::new();
        let mut after = None;
        loop {
            let page = self.parts.store.scan(after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            for m in page {
                let deleted_long_ago =
                    m.lifecycle.deleted_at.is_some_and(|d| at.millis() - d.millis() >= days(policy.deleted_days));
                let old_episode = m.kind() == MemoryKind::Episode
                    && policy.episode_days.is_some_and(|e| at.millis() - m.recorded_at.millis() >= days(e));
                if !(deleted_long_ago || old_episode) {
                    continue;
                }
                if deleted_long_ago {
                    report.soft_deleted += 1;
                } else {
                    report.episodes += 1;
                }
                let edges = self.parts.store.edges_of(m.id).await?;
                let writer = match archive.as_mut() {
                    Some(writer) => writer,
                    None => archive.insert(ArchiveWriter::create(self.new_archive_file(at)?)?),
                };
                chosen.push(m.id);
                writer.push(&StoredMemory { memory: m, vector: None, edges, consolidated_at: None })?;
            }
        }
        let Some(archive) = archive else { return Ok(report) };
        let file = archive.finish()?;
        for id in &chosen {
            self.parts.store.forget(*id).await?;
        }
        report.archived = chosen.len() as u64;
        report.file = Some(file);
        Ok(report)
    }

    /// A new archive file's path: named by the pass's time in ms (sortable); a second pass in
    /// the same ms takes the next.
    fn new_archive_file(&self, at: Timestamp) -> Result<PathBuf> {
        let dir = self.archive_dir();
        atlas_files::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let mut stamp = at.millis();
        loop {
            let file = dir.join(format!("{}-{stamp:015}.jsonl.gz", self.archive_stem()));
            if !file.exists() {
                return Ok(file);
            }
            stamp += 1;
        }
    }

    /// Restores archived memories (all of them, or those in `only`) under their own ids, live
    /// again, with the edges whose other end exists; removes them from their files.
    pub async fn restore_archive(&self, only: Option<&HashSet<MemoryId>>) -> Result<RestoreReport> {
        let mut report = RestoreReport::default();
        for file in self.archive_files()? {
            let items: Vec<StoredMemory> =
                read_archive(&file)?.into_iter().filter(|s| only.is_none_or(|o| o.contains(&s.memory.id))).collect();
            if items.is_empty() {
                continue;
            }
            let restoring: HashSet<MemoryId> = items.iter().map(|s| s.memory.id).collect();
            let mut ends: HashSet<MemoryId> =
                items.iter().flat_map(|s| s.edges.iter().flat_map(|e| [e.src, e.dst])).collect();
            ends.retain(|id| !restoring.contains(id));
            let present: HashSet<MemoryId> =
                self.parts.store.get_many(ends.into_iter().collect()).await?.into_iter().map(|m| m.id).collect();
            // Each edge once, carried by its later end among the restored (a restore in id order
            // then always finds both ends), and only when its other end exists.
            let mut edges: Vec<atlas_domain::Edge> = items.iter().flat_map(|s| s.edges.iter().cloned()).collect();
            edges.sort_by_key(|e| (e.src, e.dst, e.kind));
            edges.dedup_by_key(|e| (e.src, e.dst, e.kind));
            edges.retain(|e| [e.src, e.dst].iter().all(|end| restoring.contains(end) || present.contains(end)));
            let mut batch: Vec<StoredMemory> = items
                .into_iter()
                .map(|mut item| {
                    item.memory.lifecycle.deleted_at = None;
                    item.edges.clear();
                    item
                })
                .collect();
            batch.sort_by_key(|s| s.memory.id);
            for e in edges {
                let carrier = if restoring.contains(&e.src.max(e.dst)) { e.src.max(e.dst) } else { e.src.min(e.dst) };
                if let Ok(i) = batch.binary_search_by_key(&carrier, |s| s.memory.id) {
                    batch[i].edges.push(e);
                }
            }
            report.restored.extend(batch.iter().map(|s| s.memory.id));
            self.parts.replica.restore(batch).await?;
            if rewrite_without(&file, &restoring)? && !file.exists() {
                report.files_removed += 1;
            }
        }
        Ok(report)
    }

    /// The archive files of this memory space, oldest first.
    pub fn archive_files(&self) -> Result<Vec<PathBuf>> {
        let dir = self.archive_dir();
        let prefix = format!("{}-", self.archive_stem());
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&dir, e)),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let stamp = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix(&prefix));
                stamp
                    .and_then(|rest| rest.strip_suffix(".jsonl.gz"))
                    .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        files.sort();
        Ok(files)
    }

    fn archive_dir(&self) -> PathBuf {
        self.config.db.parent().map_or_else(|| PathBuf::from("archive"), |p| p.join("archive"))
    }

    fn archive_stem(&self) -> String {
        // A space named on the server archives under its name (it has no file).
        if let (crate::config::StorageKind::Qdrant, Some(space)) = (self.config.storage, &self.config.qdrant.space) {
            return space.clone();
        }
        self.config.db.file_stem().map_or_else(|| "atlas".into(), |s| s.to_string_lossy().into_owned())
    }
}

/// Soft-deletes every memory whose strength at `at` has fallen below the threshold
/// ([`atlas_domain::policy::decay`]). Nothing is removed.
pub async fn decay_pass(store: &dyn MemoryStore, at: Timestamp) -> Result<DecayReport> {
    let mut report = DecayReport::default();
    let mut after = None;
    loop {
        let page = store.scan(after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        let mut updates = Vec::new();
        for m in page.iter().filter(|m| !m.lifecycle.is_deleted()) {
            report.examined += 1;
            let aging = aging_of(m);
            if aging == atlas_domain::policy::decay::Aging::Never {
                continue;
            }
            report.decaying += 1;
            if fades(strength_at(m, at), aging) {
                *report.soft_deleted.entry(m.kind()).or_default() += 1;
                report.ids.push(m.id);
                let lifecycle = Lifecycle { deleted_at: Some(at), ..m.lifecycle };
                updates.push(Update { id: m.id, lifecycle, body: None });
            }
        }
        if !updates.is_empty() {
            store.update(updates).await?;
        }
    }
    Ok(report)
}

fn io_error(path: &Path, e: std::io::Error) -> AtlasError {
    AtlasError::Storage(format!("{}: {e}", path.display()))
}

/// Writes `items` as a full export (header, lines, trailer), gzipped, to a temporary file that
/// is synced and then renamed into place, so that a file under its final name is complete.
/// An archive file being written: a header, memories as they come, and at `finish` the trailer
/// with their count, synced and renamed into place (until then it is a `.gz.tmp`, removed if
/// the writer is dropped unfinished).
struct ArchiveWriter {
    path: PathBuf,
    tmp: PathBuf,
    gz: Option<flate2::write::GzEncoder<std::io::BufWriter<std::fs::File>>>,
    count: u64,
}

impl ArchiveWriter {
    fn create(path: PathBuf) -> Result<Self> {
        let tmp = path.with_extension("gz.tmp");
        let file = atlas_files::create(&tmp).map_err(|e| io_error(&path, e))?;
        let gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::default());
        let mut writer = ArchiveWriter { path, tmp, gz: Some(gz), count: 0 };
        let header = jsonl::header_line(&ExportHeader { embedding_model: None });
        writer.line(&header.to_string())?;
        Ok(writer)
    }

    fn line(&mut self, line: &str) -> Result<()> {
        let gz = self.gz.as_mut().expect("an archive is written until it is finished");
        writeln!(gz, "{line}").map_err(|e| io_error(&self.path, e))
    }

    fn push(&mut self, item: &StoredMemory) -> Result<()> {
        self.line(&jsonl::stored_to_line(item, false).to_string())?;
        self.count += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<PathBuf> {
        self.line(&jsonl::trailer_line(self.count).to_string())?;
        let gz = self.gz.take().expect("an archive is finished once");
        let done = (|| -> std::io::Result<()> {
            let file = gz.finish()?.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            std::fs::rename(&self.tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        done.map_err(|e| io_error(&self.path, e))?;
        Ok(self.path.clone())
    }
}

impl Drop for ArchiveWriter {
    fn drop(&mut self) {
        // Unfinished, or failed before its rename: no half-written file is left behind.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Reads an archive file back; a line that does not parse is an error naming file and line.
pub(crate) fn read_archive(path: &Path) -> Result<Vec<StoredMemory>> {
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
    let mut items = Vec::new();
    let mut trailer = None;
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| io_error(path, e))?;
        let location = format!("{}:{}", path.display(), i + 1);
        let bad = |e: jsonl::LineError| AtlasError::invalid(&location, e.to_string());
        if line.trim().is_empty() || i == 0 && jsonl::parse_header(&line).map_err(bad)?.is_some() {
            continue;
        }
        if let Some(count) = jsonl::parse_trailer(&line).map_err(bad)? {
            trailer = Some(count);
            continue;
        }
        items.push(jsonl::parse_stored_line(&line, now()).map_err(bad)?);
    }
    match trailer {
        Some(n) if n == items.len() as u64 => {}
        Some(n) => {
            return Err(AtlasError::invalid(
                path.display().to_string(),
                format!("archive file holds {} memories, its trailer says {n}", items.len()),
            ));
        }
        None => {
            return Err(AtlasError::invalid(path.display().to_string(), "archive file is cut short (no trailer line)"));
        }
    }
    Ok(items)
}

/// Rewrites an archive file without the memories `ids` and without edges to them (removing
/// the file when nothing is left). Returns whether the file changed.
fn rewrite_without(path: &Path, ids: &HashSet<MemoryId>) -> Result<bool> {
    let items = read_archive(path)?;
    let mentions = |s: &StoredMemory| {
        ids.contains(&s.memory.id) || s.edges.iter().any(|e| ids.contains(&e.src) || ids.contains(&e.dst))
    };
    if !items.iter().any(mentions) {
        return Ok(false);
    }
    let kept: Vec<StoredMemory> = items
        .into_iter()
        .filter(|s| !ids.contains(&s.memory.id))
        .map(|mut s| {
            s.edges.retain(|e| !ids.contains(&e.src) && !ids.contains(&e.dst));
            s
        })
        .collect();
    if kept.is_empty() {
        std::fs::remove_file(path).map_err(|e| io_error(path, e))?;
    } else {
        write_archive(path, &kept)?;
    }
    Ok(true)
}

/// Records a soft forget at `at` on the archive's copy of `id` in `path` (a no-op when it was
/// already forgotten). Returns whether the file holds `id`.
fn mark_forgotten(path: &Path, id: MemoryId, at: Timestamp) -> Result<bool> {
    let mut items = read_archive(path)?;
    let Some(item) = items.iter_mut().find(|s| s.memory.id == id) else { return Ok(false) };
    if item.memory.lifecycle.deleted_at.is_none() {
        item.memory.lifecycle.deleted_at = Some(at);
        write_archive(path, &items)?;
    }
    Ok(true)
}

/// Replaces an archive file with `items`, complete and synced before the rename.
fn write_archive(path: &Path, items: &[StoredMemory]) -> Result<()> {
    let mut rewritten = ArchiveWriter::create(path.to_owned())?;
    for item in items {
        rewritten.push(item)?;
    }
    rewritten.finish()?;
    Ok(())
}
