//! `atlas docs sync DIR`: a folder of markdown documents kept as memories of kind `doc`, one per
//! level-2 section ([`atlas_domain::policy::documents`]), by content hash: an unchanged section
//! is left as it is, a changed one is replaced by a new version that supersedes it (history
//! kept), a removed one is forgotten softly, a moved one (same text under another path) is a
//! new version of where it was. Recall finds them with `--kind doc`.
//!
//! Each folder's sections are its own (`meta.folder`, the folder's resolved path): syncing one
//! folder never forgets another's. A sync that would forget all of a folder's sections, or
//! more than half of them, is refused unless the removals are allowed: an empty or wrong folder
//! is far more often a mistake than an intent. Sections synced before folders were told apart
//! (no `meta.folder`) are taken over by the first folder that holds them and never forgotten by
//! another.

use crate::markdown_files::{resolve_dir, sha256_hex};
use crate::{Atlas, now};
use atlas_domain::policy::documents::sections;
use atlas_domain::policy::limits::validate;
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision, Update};
use atlas_domain::{
    AtlasError, Body, EdgeKind, Lifecycle, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Scope, Validity,
};
use std::collections::HashMap;
use std::path::Path;

/// Most documents' sections one space keeps (a sync reads them all to compare).
const MAX_SECTIONS: usize = 1_000_000;
/// The `meta` key naming the folder a section was synced from.
const FOLDER: &str = "folder";

/// What a docs sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocsSynced {
    pub files: usize,
    pub added: usize,
    pub changed: usize,
    pub unchanged: usize,
    pub removed: usize,
    /// Sections found unchanged under another path (a renamed or moved file): new versions of
    /// the old ones, whose history they keep.
    pub moved: usize,
}

/// A section as read from a file: where it is and what it says.
struct Found {
    path: String,
    heading: String,
    occurrence: u32,
    line: usize,
    text: String,
    hash: String,
}

fn read_sections(dir: &Path) -> Result<(usize, Vec<Found>)> {
    let files = crate::markdown_files::read(dir)?;
    let mut found = Vec::new();
    for file in &files {
        for s in sections(&file.text) {
            let hash = sha256_hex(s.text.as_bytes());
            found.push(Found {
                path: file.path.clone(),
                heading: s.heading,
                occurrence: s.occurrence,
                line: s.line,
                text: s.text,
                hash,
            });
        }
    }
    Ok((files.len(), found))
}

/// A section of the space: its id and hash, and whether it predates folders.
struct Stored {
    id: MemoryId,
    hash: String,
    legacy: bool,
}

impl Atlas {
    /// Syncs the markdown documents below `dir` into the space as sections of kind `doc` (see
    /// the module's comment). Every file is read and every section checked before anything is
    /// written; the additions and new versions land in one transaction. `allow_removals` lets
    /// a sync forget all of the folder's sections, or more than half.
    pub async fn docs_sync(&self, dir: &Path, allow_removals: bool) -> Result<DocsSynced> {
        let Some(consolidator) = self.parts.consolidator.clone() else {
            return Err(AtlasError::Config(
                "this store keeps no history, so documents cannot be synced into it".into(),
            ));
        };
        let owned = dir.to_owned();
        let (folder, files, found) = tokio::task::spawn_blocking(move || {
            let folder = resolve_dir(&owned)?;
            let (files, found) = read_sections(&folder)?;
            Ok::<_, AtlasError>((folder, files, found))
        })
        .await
        .map_err(|e| AtlasError::Storage(format!("docs read task: {e}")))??;
        let folder_name = folder.display().to_string();
        let at = now();
        let filter = RecallFilter { kinds: vec![MemoryKind::Doc], valid_at: Some(at), ..RecallFilter::default() };
        let stored = self.parts.store.latest(filter, MAX_SECTIONS).await?;
        let mut current: HashMap<(String, String, u32), Stored> = HashMap::new();
        for m in stored {
            let legacy = match m.meta.get(FOLDER).and_then(|v| v.as_str()) {
                Some(f) if f == folder_name => false,
                Some(_) => continue,
                None => true,
            };
            if let Body::Doc { path, heading, occurrence, hash } = &m.body {
                let key = (path.clone(), heading.clone(), *occurrence);
                // This folder's own section wins over one from before folders were told apart.
                if current.get(&key).is_none_or(|s| s.legacy) {
                    current.insert(key, Stored { id: m.id, hash: hash.clone(), legacy });
                }
            }
        }
        let ours = current.values().filter(|s| !s.legacy).count();
        let mut synced = DocsSynced { files, ..DocsSynced::default() };
        let mut batch = Consolidation::empty(at);
        let mut added: Vec<(usize, String)> = Vec::new();
        for f in found {
            let key = (f.path.clone(), f.heading.clone(), f.occurrence);
            let previous = current.remove(&key);
            if previous.as_ref().is_some_and(|s| s.hash == f.hash && !s.legacy) {
                synced.unchanged += 1;
                continue;
            }
            let mut meta = serde_json::Map::new();
            meta.insert("origin".into(), "docs".into());
            meta.insert(FOLDER.into(), folder_name.clone().into());
            meta.insert("line".into(), f.line.into());
            let memory = NewMemory {
                scope: Scope::default(),
                text: f.text,
                event_time: at,
                recorded_at: at,
                validity: Validity::from(at),
                meta,
                body: Body::Doc {
                    path: f.path.clone(),
                    heading: f.heading,
                    occurrence: f.occurrence,
                    hash: f.hash.clone(),
                },
            };
            validate(&memory, self.config.max_text_bytes, &format!("{}:{}", folder.join(&f.path).display(), f.line))?;
            let index = batch.memories.len();
            batch.memories.push(memory);
            match previous {
                Some(old) => {
                    if old.hash == f.hash {
                        synced.unchanged += 1;
                    } else {
                        synced.changed += 1;
                    }
                    supersede(&mut batch, index, old.id, at);
                }
                None => added.push((index, f.hash)),
            }
        }
        // A section gone from one path and found, unchanged, under another moved with its file.
        for (index, hash) in added {
            let moved = current
                .iter()
                .filter(|(_, s)| s.hash == hash && !s.legacy)
                .map(|(key, s)| (key.clone(), s.id))
                .min_by_key(|(_, id)| *id);
            match moved {
                Some((key, old)) => {
                    current.remove(&key);
                    synced.moved += 1;
                    supersede(&mut batch, index, old, at);
                }
                None => synced.added += 1,
            }
        }
        // Sections from before folders were told apart belong to some other folder, maybe.
        let mut removed: Vec<MemoryId> = current.into_values().filter(|s| !s.legacy).map(|s| s.id).collect();
        removed.sort();
        synced.removed = removed.len();
        if !allow_removals && synced.removed > 0 && (synced.removed == ours || synced.removed * 2 > ours) {
            return Err(AtlasError::invalid(
                folder_name,
                format!(
                    "would forget {} of the folder's {ours} sections: a sync forgets all of them, or more than half, \
                     only with --allow-removals (is it the right folder?)",
                    synced.removed
                ),
            ));
        }
        batch.report = serde_json::json!({"docs_sync": {"added": synced.added, "changed": synced.changed, "moved": synced.moved, "removed": synced.removed}});
        if !batch.memories.is_empty() {
            consolidator.apply(batch).await?;
        }
        if !removed.is_empty() {
            let updates = self
                .parts
                .store
                .get_many(removed)
                .await?
                .into_iter()
                .filter(|m| !m.lifecycle.is_deleted())
                .map(|m| Update { id: m.id, lifecycle: Lifecycle { deleted_at: Some(at), ..m.lifecycle }, body: None })
                .collect();
            self.parts.store.update(updates).await?;
        }
        self.background.wake();
        Ok(synced)
    }
}

/// New memory `index` of `batch` replaces stored section `old`.
fn supersede(batch: &mut Consolidation, index: usize, old: MemoryId, at: atlas_domain::Timestamp) {
    batch.edges.push(NewEdge {
        src: MemoryRef::New(index),
        dst: MemoryRef::Stored(old),
        kind: EdgeKind::Supersedes,
        weight: 1.0,
        validity: Validity::from(at),
        recorded_at: at,
    });
    batch.revisions.push(Revision { id: old, valid_from: None, valid_until: Some(at), confidence: None });
}
