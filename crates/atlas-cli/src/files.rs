//! Memory as files: `atlas bank write|sync|rebuild` (the markdown bank), `atlas docs sync` (a
//! folder of documents as sections of kind `doc`) and `atlas export --format cypher`.

use anyhow::{Context, Result};
use atlas_runtime::Atlas;
use clap::{Subcommand, ValueEnum};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub(crate) enum BankAction {
    /// Write what the space believes into DIR as markdown: one page per entity (its current
    /// facts, then every version with its validity and the episodes it came from), core memory
    /// and the agent memories. An unchanged space rewrites no byte.
    Write { dir: PathBuf },
    /// Apply a person's edits of DIR's "Now" lines (edited: a new version; removed: forgotten
    /// softly; a line without ^id: a new fact), then write DIR again. A malformed page changes
    /// nothing and is named with its line.
    Sync { dir: PathBuf },
    /// Recreate a new, empty space's beliefs (facts with their history, core memory, agent
    /// memories) from the bank in DIR alone.
    Rebuild { dir: PathBuf },
}

#[derive(Subcommand)]
pub(crate) enum DocsAction {
    /// Split the markdown files below DIR at their level-2 headings into sections of kind
    /// `doc`, by content hash: unchanged sections are left alone, changed ones replaced (history
    /// kept), removed ones forgotten softly, moved ones (same text, another path) new versions
    /// of where they were. Each folder's sections are its own. Recall finds them with `--kind doc`.
    Sync {
        dir: PathBuf,
        /// Let the sync forget all of the folder's sections, or more than half of them
        /// (refused otherwise: an empty or wrong folder is more often a mistake).
        #[arg(long)]
        allow_removals: bool,
    },
}

/// The formats of `atlas export`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportFormat {
    /// The full export that `atlas import` restores exactly.
    #[default]
    Jsonl,
    /// Nodes and typed edges as Cypher statements for Neo4j, Memgraph and other graph engines.
    Cypher,
}

pub(crate) async fn bank(atlas: &Atlas, action: BankAction, json: bool) -> Result<()> {
    match action {
        BankAction::Write { dir } => {
            let written = atlas.bank_write(&dir).await?;
            print_written(&dir, &written, json);
        }
        BankAction::Sync { dir } => {
            let synced = atlas.bank_sync(&dir).await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"edited": synced.edited, "added": synced.added, "forgotten": synced.forgotten,
                        "pages": synced.written.pages, "changed": synced.written.changed, "removed": synced.written.removed,
                        "skipped": skipped_json(&synced.written)})
                );
            } else {
                println!(
                    "synced {}: {} edited (new versions), {} added, {} forgotten",
                    dir.display(),
                    synced.edited,
                    synced.added,
                    synced.forgotten
                );
                print_written(&dir, &synced.written, false);
            }
        }
        BankAction::Rebuild { dir } => {
            let count = atlas.bank_rebuild(&dir).await?;
            if json {
                println!("{}", serde_json::json!({"memories": count}));
            } else {
                println!(
                    "rebuilt {count} memories from {} (vectors follow in the background or with embed-pending)",
                    dir.display()
                );
            }
        }
    }
    Ok(())
}

/// The files a write left alone, as the JSON answer lists them.
fn skipped_json(written: &atlas_runtime::bank::BankWritten) -> serde_json::Value {
    written.skipped.iter().map(|s| serde_json::json!({"path": s.path, "reason": s.reason})).collect()
}

fn print_written(dir: &Path, written: &atlas_runtime::bank::BankWritten, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"pages": written.pages, "changed": written.changed, "removed": written.removed,
                "skipped": skipped_json(written)})
        );
    } else {
        println!(
            "bank {}: {} pages, {} written, {} removed",
            dir.display(),
            written.pages,
            written.changed,
            written.removed
        );
        for s in &written.skipped {
            println!("skipped {}: {}", s.path, s.reason);
        }
    }
}

pub(crate) async fn docs(atlas: &Atlas, action: DocsAction, json: bool) -> Result<()> {
    match action {
        DocsAction::Sync { dir, allow_removals } => {
            let s = atlas.docs_sync(&dir, allow_removals).await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"files": s.files, "added": s.added, "changed": s.changed, "unchanged": s.unchanged, "removed": s.removed, "moved": s.moved})
                );
            } else {
                println!(
                    "docs {}: {} files; sections {} added, {} changed, {} unchanged, {} removed, {} moved",
                    dir.display(),
                    s.files,
                    s.added,
                    s.changed,
                    s.unchanged,
                    s.removed,
                    s.moved
                );
            }
        }
    }
    Ok(())
}

/// `atlas export --format cypher`.
pub(crate) async fn export_cypher(atlas: &Atlas, out: Option<PathBuf>) -> Result<()> {
    let exported = match &out {
        Some(path) => {
            let file = atlas_files::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            atlas.export_cypher(&mut std::io::BufWriter::new(file)).await?
        }
        None => atlas.export_cypher(&mut std::io::BufWriter::new(std::io::stdout().lock())).await?,
    };
    let target = out.map_or("standard output".to_owned(), |p| p.display().to_string());
    eprintln!("exported {} nodes and {} edges as Cypher to {target}", exported.nodes, exported.edges);
    Ok(())
}
