//! Import and export of JSON Lines files: plain files of new memories, and full exports that
//! restore a space exactly (ids, typed edges, context, optionally vectors).
//!
//! An import is acknowledged when its one transaction commits, and happens at most once per
//! file content and space: a receipt keyed by the file's sha256 is written in that same
//! transaction, so a retry after a crash, a kill or a lost answer stores nothing twice.

use crate::import_pieces::{self, CheckedExport, LineRule, Lines, Scanned, Source};
use crate::{Atlas, now};
use atlas_domain::access::Caller;
use atlas_domain::jsonl::{self, ExportHeader};
use atlas_domain::policy::limits::validate;
use atlas_domain::policy::references::{ids_needed, plan, renumber};
use atlas_domain::ports::{ProgressFn, StoredMemory, StoredPieces};
use atlas_domain::{AtlasError, MemoryId, NewMemory, Result, Scope, Timestamp};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

/// How an import treats a file it has seen before, and whose it may be.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Import a second copy even if this file's content was imported into this space before.
    pub again: bool,
    /// Who imports: a tenant's records take its user and agent where they name none, a record
    /// naming another is refused (forbidden, naming its line), its replays are its own, and a
    /// restored export may only refer to the tenant's own memories.
    pub caller: Caller,
}

/// What an import stored (or, `replayed`, what the earlier import of the same content stored).
#[derive(Debug, Clone)]
pub struct Imported {
    pub ids: Vec<MemoryId>,
    /// This content had been imported before: nothing was stored now.
    pub replayed: bool,
    /// When the import that stored them committed.
    pub recorded_at: Timestamp,
    /// The file was a full export, restored with its ids, edges and context.
    pub restored: bool,
    /// Restored under new ids, every reference mapped (the space already held memories).
    pub renumbered: bool,
    /// Vectors restored from the file (the rest wait to be embedded).
    pub vectors: usize,
}

/// The idempotency key of an import: the content, not the file name, decides.
pub fn import_key(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    key_of_digest(&digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The idempotency key of content whose sha256 is `hex`.
fn key_of_digest(hex: &str) -> String {
    format!("import:sha256:{hex}")
}

/// The lines of bytes already in memory with their 1-based numbers (see [`Lines`]).
fn lines<'a>(bytes: &'a [u8], origin: &'a str) -> impl Iterator<Item = Result<(String, String)>> + 'a {
    Lines::new(bytes, origin, usize::MAX)
}

/// Parses a trajectory file (one trajectory per line); the first bad line fails it, named
/// `origin:line` with its field, like an import.
pub fn parse_trajectories(bytes: &[u8], origin: &str, now: Timestamp) -> Result<Vec<atlas_domain::Trajectory>> {
    lines(bytes, origin)
        .map(|line| {
            let (location, line) = line?;
            jsonl::parse_trajectory_line(&line, now).map_err(|e| AtlasError::invalid(&location, e.to_string()))
        })
        .collect()
}

impl Atlas {
    /// Stores a batch atomically after validating every record (`location` names each in
    /// errors, e.g. `file.jsonl:12`) and returns the new ids once committed. Vectors come later:
    /// from the background task, a recall's bounded catch-up or [`Atlas::flush_vectors`].
    pub async fn import(&self, batch: Vec<(String, NewMemory)>, progress: Option<ProgressFn>) -> Result<Vec<MemoryId>> {
        for (location, memory) in &batch {
            validate(memory, self.config.max_text_bytes, location)?;
        }
        let memories = batch.into_iter().map(|(_, m)| m).collect();
        let ids = self.parts.store.insert(memories, progress).await?;
        self.background.wake();
        self.sleeper.written(ids.len(), self.config.consolidation.every);
        Ok(ids)
    }

    /// Imports a JSON Lines file in one transaction: a plain file of memories, or a full
    /// export, which restores ids, edges and context (see [`atlas_domain::jsonl`]). A bad line
    /// fails the whole file with its line number and field, and nothing of it is stored. The
    /// same content imported into the same space again stores nothing (`replayed`), unless
    /// `options.again`. A plain file is read a piece at a time, twice (checked, then stored:
    /// [`crate::import_pieces`]), so its size does not decide the memory it takes.
    pub async fn import_file(
        &self,
        path: &Path,
        options: ImportOptions,
        progress: Option<ProgressFn>,
    ) -> Result<Imported> {
        self.import_file_named(path, &path.display().to_string(), options, progress).await
    }

    /// [`Atlas::import_file`] of a file that errors call `origin` (a spooled request body).
    pub async fn import_file_named(
        &self,
        path: &Path,
        origin: &str,
        options: ImportOptions,
        progress: Option<ProgressFn>,
    ) -> Result<Imported> {
        self.import_source(Source::File(path.to_owned()), origin, options, progress).await
    }

    /// [`Atlas::import_file`] of bytes already read; `origin` names them in errors.
    pub async fn import_bytes(
        &self,
        bytes: &[u8],
        origin: &str,
        options: ImportOptions,
        progress: Option<ProgressFn>,
    ) -> Result<Imported> {
        self.import_source(Source::Bytes(bytes.into()), origin, options, progress).await
    }

    /// [`Atlas::import_file`] of a stream read once (standard input, a request body): it is
    /// copied to a temporary file first, then imported from there a piece at a time.
    pub async fn import_reader(
        &self,
        reader: impl std::io::Read + Send + 'static,
        origin: &str,
        options: ImportOptions,
        progress: Option<ProgressFn>,
    ) -> Result<Imported> {
        let shown = origin.to_owned();
        let spooled = tokio::task::spawn_blocking(move || import_pieces::spool(reader, &shown))
            .await
            .map_err(|e| AtlasError::Storage(format!("{origin}: reading failed: {e}")))??;
        self.import_file_named(spooled.path(), origin, options, progress).await
    }

    async fn import_source(
        &self,
        source: Source,
        origin: &str,
        options: ImportOptions,
        progress: Option<ProgressFn>,
    ) -> Result<Imported> {
        let rule = LineRule { now: now(), caller: options.caller.clone(), max_text_bytes: self.config.max_text_bytes };
        let scanned = {
            let (source, shown, rule) = (source.clone(), origin.to_owned(), rule.clone());
            tokio::task::spawn_blocking(move || import_pieces::scan(&source, &shown, &rule))
                .await
                .map_err(|e| AtlasError::Storage(format!("{origin}: reading failed: {e}")))??
        };
        // A tenant's imports are its own: the same content imported by another is not a replay.
        let keyed = |key: String| {
            (!options.again).then(|| match &options.caller {
                Caller::All => key,
                Caller::Tenant { tenant, .. } => format!("{key}@{}", tenant_label(tenant)),
            })
        };
        let digest = match scanned {
            Scanned::Plain { digest } => digest,
            Scanned::FullExport => {
                let (read, shown, checking) = (source.clone(), origin.to_owned(), rule.clone());
                let checked = tokio::task::spawn_blocking(move || {
                    let checked = import_pieces::check_export_source(&read, &shown, &checking, false)?;
                    // Out of id order (not as `export` writes it): restored from memory, sorted.
                    if checked.in_order {
                        Ok(checked)
                    } else {
                        import_pieces::check_export_source(&read, &shown, &checking, true)
                    }
                })
                .await
                .map_err(|e| AtlasError::Storage(format!("{origin}: reading failed: {e}")))??;
                let key = keyed(key_of_digest(&checked.digest));
                return self.restore_export(checked, &source, origin, rule, key, &options.caller).await;
            }
        };
        let key = keyed(key_of_digest(&digest));
        let pieces = import_pieces::pieces(&source, origin, rule.clone(), digest)?;
        let receipt = self.parts.store.insert_pieces(key, Box::new(pieces), progress).await?;
        self.background.wake();
        if !receipt.replayed {
            self.sleeper.written(receipt.ids.len(), self.config.consolidation.every);
        }
        Ok(Imported {
            ids: receipt.ids,
            replayed: receipt.replayed,
            recorded_at: receipt.recorded_at,
            restored: false,
            renumbered: false,
            vectors: 0,
        })
    }

    /// Restores a full export: under its own ids into a space that never held a memory, else
    /// under ids reserved for it with every reference mapped; a reference to a memory neither
    /// in the file nor in the space is refused before anything is written. The memories are
    /// read again from `source` a piece at a time (or come from `checked`, when it kept them).
    async fn restore_export(
        &self,
        checked: CheckedExport,
        source: &Source,
        origin: &str,
        rule: LineRule,
        key: Option<String>,
        caller: &Caller,
    ) -> Result<Imported> {
        // Vectors are kept only when they were made by the model this space is bound to.
        let bound = self.parts.store.stats().await?;
        let same_model =
            checked.header.embedding_model.is_some() && checked.header.embedding_model == bound.embedding_model;
        let vectors = if same_model { checked.vectors } else { 0 };
        let keep_layout = bound.memories() == 0;
        let in_space: HashSet<MemoryId> = if keep_layout || checked.outside.is_empty() {
            HashSet::new()
        } else {
            // Only the caller's own memories can be referred to: a tenant cannot link into another's.
            let found = self.parts.store.get_many(checked.outside.keys().copied().collect()).await?;
            found.into_iter().filter(|m| caller.sees(&m.scope)).map(|m| m.id).collect()
        };
        // Checked before ids are reserved: a refused file leaves the space as it was.
        if let Some(dangling) = checked.outside.values().find(|d| !in_space.contains(&d.target)) {
            return Err(AtlasError::invalid("import", dangling.to_string()));
        }
        let first = if checked.ids.is_empty() {
            MemoryId(1)
        } else {
            self.parts.replica.reserve_ids(ids_needed(&checked.ids, keep_layout)).await?
        };
        let map = plan(&checked.ids, first, keep_layout);
        let renumbered = map.iter().any(|(old, new)| old != new);
        let pieces: StoredPieces = match checked.items {
            None => {
                Box::new(import_pieces::export_pieces(source, origin, rule, checked.digest, same_model, map, in_space)?)
            }
            Some(items) => {
                let mut batch: Vec<StoredMemory> = items.into_iter().map(|(_, item)| item).collect();
                if !same_model {
                    batch.iter_mut().for_each(|item| item.vector = None);
                }
                renumber(&mut batch, &map, &in_space).map_err(|d| AtlasError::invalid("import", d.to_string()))?;
                batch.sort_by_key(|item| item.memory.id);
                Box::new(std::iter::once(Ok(batch)))
            }
        };
        let receipt = self.parts.replica.restore_pieces(key, pieces).await?;
        // After the memories, and again on a replay: a crash in between leaves no row out,
        // and a row already held is not added twice. The ledger is the space's, not a tenant's.
        if *caller == Caller::All && !checked.cycles.is_empty() {
            self.parts.replica.restore_cycles(checked.cycles).await?;
        }
        self.background.wake();
        Ok(Imported {
            ids: receipt.ids,
            replayed: receipt.replayed,
            recorded_at: receipt.recorded_at,
            restored: true,
            renumbered: renumbered && !receipt.replayed,
            vectors: if receipt.replayed { 0 } else { vectors },
        })
    }

    /// Writes a full export that [`Atlas::import_file`] restores exactly: a header, every
    /// memory with its id, context, the edges it carries and, for an episode, when a sleep
    /// cycle consumed it (and its vector with `with_vectors`), the ledger of cycles, and a
    /// trailer with the count. Returns how many memories.
    pub async fn export(&self, out: &mut dyn Write, with_vectors: bool) -> Result<u64> {
        self.export_to(&mut BlockingWriter(out), with_vectors).await
    }

    /// [`Atlas::export`] into an async writer, a page of 1,000 memories at a time (a server
    /// streams it to its client). A reader of a cut export sees no trailer, and the import
    /// refuses it.
    pub async fn export_to<W: tokio::io::AsyncWrite + Unpin>(&self, out: &mut W, with_vectors: bool) -> Result<u64> {
        self.export_for(out, with_vectors, &Caller::All).await
    }

    /// [`Atlas::export_to`] into the file `path`, written beside it under a temporary name,
    /// synced and renamed at the end, so that `path` holds a whole export or what it held
    /// before. Returns how many memories.
    pub async fn export_file(&self, path: &std::path::Path, with_vectors: bool) -> Result<u64> {
        let io = |e: std::io::Error| AtlasError::Storage(format!("{}: {e}", path.display()));
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let staged = tempfile::Builder::new().prefix(".atlas-export-").tempfile_in(dir).map_err(io)?;
        let mut out = tokio::io::BufWriter::new(tokio::fs::File::from_std(staged.reopen().map_err(io)?));
        let count = self.export_to(&mut out, with_vectors).await?;
        tokio::io::AsyncWriteExt::flush(&mut out).await.map_err(io)?;
        out.into_inner().sync_all().await.map_err(io)?;
        staged.persist(path).map_err(|e| io(e.error))?;
        Ok(count)
    }

    /// [`Atlas::export_to`] of what `caller` sees: its memories, and the edges between them. It
    /// restores like any export (into the same space, under new ids).
    pub async fn export_for<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        out: &mut W,
        with_vectors: bool,
        caller: &Caller,
    ) -> Result<u64> {
        use tokio::io::AsyncWriteExt;
        // An edge travels with its later end, so its other end was decided before it.
        let mut exported = HashSet::new();
        let io = |e: std::io::Error| AtlasError::Storage(format!("export: {e}"));
        let model = if with_vectors { self.parts.store.stats().await?.embedding_model } else { None };
        let header = jsonl::header_line(&ExportHeader { embedding_model: model });
        out.write_all(format!("{header}\n").as_bytes()).await.map_err(io)?;
        let mut after = None;
        let mut count = 0;
        loop {
            let page = self.parts.replica.export_batch(after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.memory.id);
            let mut chunk = String::new();
            for item in &page {
                if !caller.sees(&item.memory.scope) {
                    continue;
                }
                let item = if *caller == Caller::All {
                    std::borrow::Cow::Borrowed(item)
                } else {
                    exported.insert(item.memory.id);
                    let mut own = item.clone();
                    own.edges.retain(|e| exported.contains(&e.src) && exported.contains(&e.dst));
                    std::borrow::Cow::Owned(own)
                };
                chunk.push_str(&jsonl::stored_to_line(&item, with_vectors).to_string());
                chunk.push('\n');
                count += 1;
            }
            out.write_all(chunk.as_bytes()).await.map_err(io)?;
        }
        // The ledger of cycles holds every tenant's judgments: only a whole space's export has it.
        if *caller == Caller::All {
            let mut chunk = String::new();
            for cycle in self.parts.replica.export_cycles().await? {
                chunk.push_str(&jsonl::cycle_line(&cycle).to_string());
                chunk.push('\n');
            }
            out.write_all(chunk.as_bytes()).await.map_err(io)?;
        }
        out.write_all(format!("{}\n", jsonl::trailer_line(count)).as_bytes()).await.map_err(io)?;
        out.flush().await.map_err(io)?;
        Ok(count)
    }
}

/// A tenant as text that cannot be mistaken for another's (JSON escapes every separator).
pub fn tenant_label(tenant: &Scope) -> String {
    serde_json::json!([tenant.user, tenant.agent]).to_string()
}

/// A blocking writer (a file, stdout) seen as an async one: each write completes at once.
struct BlockingWriter<'a>(&'a mut dyn Write);

impl tokio::io::AsyncWrite for BlockingWriter<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(self.0.write(buf))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(self.0.flush())
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}
