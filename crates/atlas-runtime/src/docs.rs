//! `atlas docs sync DIR`: a folder of markdown documents kept as memories of kind `doc`, one per
//! level-2 section ([`atlas_domain::policy::documents`]), by content hash: an unchanged section
//! is left as it is, a changed one is replaced by a new version that supersedes it (history
//! kept), a removed one is forgotten softly. Recall finds them with `--kind doc`.

use crate::{Atlas, now};
use atlas_domain::policy::documents::sections;
use atlas_domain::policy::limits::validate;
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision, Update};
use atlas_domain::{
    AtlasError, Body, EdgeKind, Lifecycle, MemoryId, MemoryKind, NewMemory, RecallFilter, Result, Scope, Validity,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// Most documents' sections one space keeps (a sync reads them all to compare).
const MAX_SECTIONS: usize = 1_000_000;

/// What a docs sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocsSynced {
    pub files: usize,
    pub added: usize,
    pub changed: usize,
    pub unchanged: usize,
    pub removed: usize,
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
            let hash = Sha256::digest(s.text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
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

impl Atlas {
    /// Syncs the markdown documents below `dir` into the space as sections of kind `doc` (see
    /// the module's comment). Every file is read and every section checked before anything is
    /// written; the additions and new versions land in one transaction.
    pub async fn docs_sync(&self, dir: &Path) -> Result<DocsSynced> {
        let Some(consolidator) = self.parts.consolidator.clone() else {
            return Err(AtlasError::Config(
                "this store keeps no history, so documents cannot be synced into it".into(),
            ));
        };
        let owned = dir.to_owned();
        let (files, found) = tokio::task::spawn_blocking(move || read_sections(&owned))
            .await
            .map_err(|e| AtlasError::Storage(format!("docs read task: {e}")))??;
        let at = now();
        let filter = RecallFilter { kinds: vec![MemoryKind::Doc], valid_at: Some(at), ..RecallFilter::default() };
        let stored = self.parts.store.latest(filter, MAX_SECTIONS).await?;
        let mut current: HashMap<(String, String, u32), (MemoryId, String)> = HashMap::new();
        for m in stored {
            if let Body::Doc { path, heading, occurrence, hash } = &m.body {
                current.insert((path.clone(), heading.clone(), *occurrence), (m.id, hash.clone()));
            }
        }
        let mut synced = DocsSynced { files, ..DocsSynced::default() };
        let mut batch = Consolidation::empty(at);
        for f in found {
            let key = (f.path.clone(), f.heading.clone(), f.occurrence);
            let previous = current.remove(&key);
            if previous.as_ref().is_some_and(|(_, hash)| *hash == f.hash) {
                synced.unchanged += 1;
                continue;
            }
            let mut meta = serde_json::Map::new();
            meta.insert("origin".into(), "docs".into());
            meta.insert("line".into(), f.line.into());
            let memory = NewMemory {
                scope: Scope::default(),
                text: f.text,
                event_time: at,
                recorded_at: at,
                validity: Validity::from(at),
                meta,
                body: Body::Doc { path: f.path.clone(), heading: f.heading, occurrence: f.occurrence, hash: f.hash },
            };
            validate(&memory, self.config.max_text_bytes, &format!("{}:{}", dir.join(&f.path).display(), f.line))?;
            let index = batch.memories.len();
            batch.memories.push(memory);
            match previous {
                Some((old, _)) => {
                    synced.changed += 1;
                    batch.edges.push(NewEdge {
                        src: MemoryRef::New(index),
                        dst: MemoryRef::Stored(old),
                        kind: EdgeKind::Supersedes,
                        weight: 1.0,
                        validity: Validity::from(at),
                        recorded_at: at,
                    });
                    batch.revisions.push(Revision {
                        id: old,
                        valid_from: None,
                        valid_until: Some(at),
                        confidence: None,
                    });
                }
                None => synced.added += 1,
            }
        }
        let mut removed: Vec<MemoryId> = current.into_values().map(|(id, _)| id).collect();
        removed.sort();
        synced.removed = removed.len();
        batch.report = serde_json::json!({"docs_sync": {"added": synced.added, "changed": synced.changed, "removed": synced.removed}});
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
