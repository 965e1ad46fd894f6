//! `atlas import`, and what every command that writes does before it ends: embedding what it
//! stored (with a progress bar) and bringing the search indexes up to date for the next recall.

use anyhow::Result;
use atlas_runtime::{Atlas, ImportOptions};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use crate::output;

pub(crate) fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {pos}/{len} [{bar:30}] {per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

pub(crate) async fn import(atlas: &Atlas, file: &std::path::Path, again: bool, json: bool) -> Result<()> {
    let started = Instant::now();
    let shown = if file.as_os_str() == "-" { "stdin".to_owned() } else { file.display().to_string() };
    let bar = progress_bar(0);
    bar.set_message("storing");
    let stored_bar = bar.clone();
    let progress: atlas_domain::ports::ProgressFn = Arc::new(move |n| stored_bar.set_position(n as u64));
    let options = ImportOptions { again, ..ImportOptions::default() };
    let imported = if file.as_os_str() == "-" {
        atlas.import_reader(std::io::stdin(), "stdin", options, Some(progress)).await?
    } else {
        atlas.import_file(file, options, Some(progress)).await?
    };
    bar.finish_and_clear();
    // Acknowledged: committed. Said at once, before any embedding, so that a kill from here on
    // never leaves a stored import unacknowledged.
    let (n, secs) = (imported.ids.len(), started.elapsed().as_secs_f64());
    let ids = atlas_domain::encode_id_runs(&imported.ids);
    output::print_line(json, atlas_runtime::wire::imported_value(&imported), || {
        if imported.replayed {
            format!(
                "already imported: this content of {shown} was stored on {} as {n} memories (ids {ids}); \
                     nothing stored again (--again imports a second copy)",
                imported.recorded_at.to_rfc3339()
            )
        } else if imported.restored {
            let how = if imported.renumbered { "under new ids, every reference mapped" } else { "with their ids" };
            format!("stored {n} memories from {shown} ({how}: {ids}) in {secs:.2} s")
        } else {
            format!("stored {n} memories from {shown} (ids {ids}) in {secs:.2} s")
        }
    });
    std::io::stdout().flush()?;
    let started = Instant::now();
    let embedded = embed_all(atlas, json).await?;
    let left = atlas.pending_vectors().await?;
    if embedded > 0 || left > 0 {
        // Under --json the acknowledgment above stays the one document on standard output.
        let line = if atlas.embedder().is_none() {
            // Nothing here embeds: say so, not that another process claimed them.
            format!(
                "{left} memories wait for a vector: this configuration has no embedder (embedder = \"none\"); a process with one embeds them (`atlas embed-pending`)"
            )
        } else {
            embedded_message(embedded, left, started.elapsed().as_secs_f64())
        };
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    if !imported.replayed {
        prepare_search(atlas).await;
    }
    Ok(())
}

/// The search indexes brought up to date with what this process wrote, and their files written
/// for the next process, before it ends. A failure costs the next recall time, nothing else:
/// the write is acknowledged already.
pub(crate) async fn prepare_search(atlas: &Atlas) {
    if let Err(e) = atlas.prepare_search().await {
        eprintln!("warning: the search indexes were not prepared ({e}); the next recall builds them");
    }
}

/// Embeds the backlog with a progress bar on standard error; interruptible at any point
/// without loss (the queue is durable). An embedding failure is reported, not fatal: what was
/// stored stays stored and queued.
pub(crate) async fn embed_all(atlas: &Atlas, json: bool) -> Result<usize> {
    if atlas.embedder().is_none() {
        return Ok(0);
    }
    let total = atlas.pending_vectors().await?;
    let bar = if json { ProgressBar::hidden() } else { progress_bar(total) };
    bar.set_message("embedding");
    let embedded_bar = bar.clone();
    let result = atlas.flush_vectors(Some(Arc::new(move |n| embedded_bar.set_position(n as u64)))).await;
    bar.finish_and_clear();
    if let Err(e) = result {
        eprintln!(
            "warning: embedding failed ({e}); the memories stay stored and queued (`atlas embed-pending` retries)"
        );
    }
    // Counted from the queue: this process's background task may have embedded some of them.
    Ok(total.saturating_sub(atlas.pending_vectors().await?) as usize)
}

pub(crate) fn embedded_message(embedded: usize, left: u64, secs: f64) -> String {
    let mut line = format!("embedded {embedded} memories in {secs:.2} s");
    if left > 0 {
        line.push_str(&format!("; {left} still wait for a vector (claimed by another process, or failed)"));
    }
    line
}
