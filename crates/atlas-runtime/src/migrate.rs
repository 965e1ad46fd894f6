//! Copying a memory space between stores (SQLite ⇄ Qdrant) with ids preserved, resumable from a
//! checkpoint, and verified afterwards: counts per kind, a sample of vectors, and the overlap of
//! top-10 recall for a sample of queries on both sides.

use crate::Parts;
use crate::config::RecallConfig;
use crate::recall::{RecallRequest, recall};
use atlas_domain::ports::StoredMemory;
use atlas_domain::{AtlasError, MemoryId, Result, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where an interrupted copy resumes: written after every batch the target confirmed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub source: String,
    pub target: String,
    pub last_id: i64,
    pub copied: u64,
}

impl Checkpoint {
    pub fn load(path: &Path) -> Result<Option<Checkpoint>> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| AtlasError::invalid(format!("checkpoint {}", path.display()), e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(AtlasError::Storage(format!("cannot read checkpoint {}: {e}", path.display()))),
        }
    }

    /// Replaces the file atomically (write, fsync, rename), so a kill never leaves half a checkpoint.
    pub fn save(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            let mut f = atlas_files::create(&tmp)?;
            std::io::Write::write_all(&mut f, serde_json::to_string_pretty(self).expect("serialises").as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| AtlasError::Storage(format!("cannot write checkpoint {}: {e}", path.display())))
    }
}

/// How to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Memories per batch (one export and one restore each).
    pub batch: usize,
    /// Resume from and record progress in this file; `None` starts from the first memory.
    pub checkpoint: Option<PathBuf>,
    /// How the two ends are named in the checkpoint (a checkpoint of another pair is refused).
    pub source_name: String,
    pub target_name: String,
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopyOutcome {
    pub copied: u64,
    /// The id after which this run started (`None`: from the beginning).
    pub resumed_after: Option<i64>,
    pub batches: u64,
}

/// Copies every memory of `source` (with vector and edges) into `target`, in id order. The target
/// is bound to the source's embedding model first. Never writes to the source.
pub async fn copy(
    source: &Parts,
    target: &Parts,
    options: &CopyOptions,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<CopyOutcome> {
    let mut checkpoint = match &options.checkpoint {
        Some(path) => Checkpoint::load(path)?,
        None => None,
    };
    if let Some(c) = &checkpoint
        && (c.source != options.source_name || c.target != options.target_name)
    {
        return Err(AtlasError::invalid(
            format!("checkpoint {}", options.checkpoint.as_ref().map_or(String::new(), |p| p.display().to_string())),
            format!(
                "belongs to a copy from {} to {}, not from {} to {}; delete it to start over",
                c.source, c.target, options.source_name, options.target_name
            ),
        ));
    }
    if let Some(model) = source.store.stats().await?.embedding_model {
        target.vectors.bind_model(model).await?;
    }
    let resumed_after = checkpoint.as_ref().map(|c| c.last_id);
    let mut after = resumed_after.map(MemoryId);
    let mut copied = checkpoint.as_ref().map_or(0, |c| c.copied);
    let mut batches = 0;
    progress(copied);
    loop {
        let batch: Vec<StoredMemory> = source.replica.export_batch(after, options.batch.max(1)).await?;
        let Some(last) = batch.last().map(|m| m.memory.id) else { break };
        let n = batch.len() as u64;
        target.replica.restore(batch).await?;
        copied += n;
        batches += 1;
        after = Some(last);
        if let Some(path) = &options.checkpoint {
            let c = Checkpoint {
                source: options.source_name.clone(),
                target: options.target_name.clone(),
                last_id: last.0,
                copied,
            };
            c.save(path)?;
            checkpoint = Some(c);
        }
        progress(copied);
    }
    // The ledger of cycles goes with the memories (rows the target holds are not added twice).
    target.replica.restore_cycles(source.replica.export_cycles().await?).await?;
    drop(checkpoint);
    Ok(CopyOutcome { copied, resumed_after, batches })
}

/// The verification report (`--report FILE.json`). Field names are a contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub memories_source: u64,
    pub memories_target: u64,
    pub by_kind_source: BTreeMap<String, u64>,
    pub by_kind_target: BTreeMap<String, u64>,
    pub edges_source: u64,
    pub edges_target: u64,
    pub vectors_source: u64,
    pub vectors_target: u64,
    /// Sampled memories whose vectors were compared on both sides.
    pub vectors_compared: u64,
    /// Largest absolute difference of one coordinate over the compared vectors.
    pub max_vector_diff: f64,
    /// Sampled memories whose record differs (or is missing) on the target.
    pub records_differing: u64,
    pub queries_compared: u64,
    /// Mean share of the source's top-10 recall found in the target's top 10.
    pub top10_overlap: f64,
    /// Whether vectors took part in the compared recalls (needs an embedder of the store's model).
    pub recall_used_vectors: bool,
    /// Counts equal, every sampled record and vector equal within `VECTOR_TOLERANCE`.
    pub ok: bool,
}

/// Vectors may differ by float rounding (Qdrant re-normalises for cosine).
pub const VECTOR_TOLERANCE: f64 = 1e-6;

/// Samples `sample` memories spread evenly over the source (deterministic), compares records and
/// vectors, and recalls each sampled text on both sides.
pub async fn verify(source: &Parts, target: &Parts, recall_config: &RecallConfig, sample: usize) -> Result<Report> {
    let (s, t) = (source.store.stats().await?, target.store.stats().await?);
    let kinds = |stats: &atlas_domain::ports::StoreStats| -> BTreeMap<String, u64> {
        stats.memories_by_kind.iter().map(|(k, n)| (k.as_str().to_string(), *n)).collect()
    };
    let ids = sample_ids(source, s.memories(), sample).await?;
    let mut vectors_compared = 0u64;
    let mut max_vector_diff = 0f64;
    let mut records_differing = 0u64;
    let mut queries = Vec::new();
    for id in &ids {
        let from = source.replica.export_batch(Some(MemoryId(id.0 - 1)), 1).await?;
        let to = target.replica.export_batch(Some(MemoryId(id.0 - 1)), 1).await?;
        let (Some(a), b) = (from.into_iter().next(), to.into_iter().next()) else { continue };
        match b.filter(|b| b.memory.id == a.memory.id) {
            Some(b) => {
                if a.memory != b.memory {
                    records_differing += 1;
                }
                match (&a.vector, &b.vector) {
                    (Some(x), Some(y)) if x.len() == y.len() => {
                        vectors_compared += 1;
                        let diff = x.iter().zip(y).map(|(p, q)| f64::from((p - q).abs())).fold(0.0, f64::max);
                        max_vector_diff = max_vector_diff.max(diff);
                    }
                    (None, None) => {}
                    _ => {
                        vectors_compared += 1;
                        max_vector_diff = f64::INFINITY;
                    }
                }
            }
            None => records_differing += 1,
        }
        queries.push(a.memory.text);
    }
    let recall_used_vectors = source.embedder.is_some() && target.embedder.is_some();
    let now = Timestamp(i64::MAX / 2);
    let mut overlap_sum = 0f64;
    for query in &queries {
        let request =
            |q: &str| RecallRequest { query: q.to_string(), k: 10, as_of: Some(now), ..RecallRequest::default() };
        let a = recall(source, recall_config, request(query), now).await?;
        let b = recall(target, recall_config, request(query), now).await?;
        let top_a: Vec<MemoryId> = a.hits.iter().map(|h| h.memory.id).collect();
        let top_b: Vec<MemoryId> = b.hits.iter().map(|h| h.memory.id).collect();
        overlap_sum += if top_a.is_empty() {
            if top_b.is_empty() { 1.0 } else { 0.0 }
        } else {
            top_a.iter().filter(|id| top_b.contains(id)).count() as f64 / top_a.len() as f64
        };
    }
    let top10_overlap = if queries.is_empty() { 1.0 } else { overlap_sum / queries.len() as f64 };
    let ok = s.memories_by_kind == t.memories_by_kind
        && s.edges == t.edges
        && s.vectors == t.vectors
        && records_differing == 0
        && max_vector_diff <= VECTOR_TOLERANCE;
    Ok(Report {
        memories_source: s.memories(),
        memories_target: t.memories(),
        by_kind_source: kinds(&s),
        by_kind_target: kinds(&t),
        edges_source: s.edges,
        edges_target: t.edges,
        vectors_source: s.vectors,
        vectors_target: t.vectors,
        vectors_compared,
        max_vector_diff,
        records_differing,
        queries_compared: queries.len() as u64,
        top10_overlap,
        recall_used_vectors,
        ok,
    })
}

/// Up to `sample` ids spread evenly through the source in id order (every n-th memory).
async fn sample_ids(source: &Parts, total: u64, sample: usize) -> Result<Vec<MemoryId>> {
    if sample == 0 || total == 0 {
        return Ok(Vec::new());
    }
    let stride = (total / sample as u64).max(1);
    let mut ids = Vec::new();
    let mut after = None;
    let mut seen = 0u64;
    loop {
        let batch = source.store.scan(after, 1000).await?;
        let Some(last) = batch.last().map(|m| m.id) else { break };
        for m in &batch {
            if seen.is_multiple_of(stride) && ids.len() < sample {
                ids.push(m.id);
            }
            seen += 1;
        }
        after = Some(last);
    }
    Ok(ids)
}
