//! The accuracy of the vector stage on real vectors, part of `cargo xtask bench recall`: a
//! store of `size` English-like turns (`english.rs`) embedded by the real MiniLM, and held-out
//! queries; the store's vector search (sign-bit shortlist, rescored) against exact float
//! search over the same vectors: recall@10 and recall@100 and the time of each, for each
//! shortlist size tried, beside the one-thread exact scan measured in the same run.
//!
//! The vectors are embedded once and cached outside the repository
//! (`~/.cache/atlas/bench/english-N-MODEL.f32`), checked by size and rebuilt when they do not fit.

use crate::english::EnglishTurns;
use crate::measure::{percentile, sorted};
use anyhow::{Context, Result};
use atlas_domain::ports::{EmbeddingModel, MemoryStore, VectorIndex};
use atlas_domain::{NewMemory, RecallFilter, Scope, Timestamp};
use atlas_runtime::Config;
use atlas_runtime::config::EmbedderKind;
use atlas_store_sqlite::{Precision, SqliteOptions, SqliteStore};
use std::io::{Read, Write};
use std::time::Instant;

/// Held-out queries.
const QUERIES: usize = 200;
/// Shortlist sizes tried, in candidates per result wanted.
const SHORTLISTS: [usize; 5] = [4, 8, 16, 32, 64];

/// `n` turns and their vectors (`n × dim` floats), from the cache or embedded now.
async fn real_vectors(n: usize) -> Result<(Vec<String>, Vec<f32>, EmbeddingModel)> {
    let mut turns = EnglishTurns::new(0xE61_1515);
    let texts: Vec<String> = (0..n).map(|_| turns.turn()).collect();
    let config = Config { embedder: EmbedderKind::Onnx, ..Config::default() };
    let embedder = atlas_runtime::open_embedder(&config).await?.context("the ONNX embedder")?;
    let model = embedder.model();
    let dir = atlas_embed_onnx::assets::cache_dir().join("bench");
    let file = dir.join(format!("english-{n}-{}.f32", model.name));
    let want = n * model.dimension * 4;
    if let Ok(mut f) = std::fs::File::open(&file) {
        let mut bytes = Vec::with_capacity(want);
        f.read_to_end(&mut bytes)?;
        if bytes.len() == want {
            let vectors = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            println!("real vectors: {} (cached)", file.display());
            return Ok((texts, vectors, model));
        }
        println!("real vectors: {} has {} bytes, not {want}: embedding again", file.display(), bytes.len());
    }
    println!("embedding {n} English-like turns with {} (once; cached in {})…", model.name, file.display());
    let started = Instant::now();
    let mut vectors = Vec::with_capacity(n * model.dimension);
    for (i, chunk) in texts.chunks(2048).enumerate() {
        for v in embedder.embed(chunk.to_vec()).await? {
            vectors.extend(v);
        }
        if i % 10 == 9 {
            println!(
                "  {} of {n} ({:.0} a second)",
                (i + 1) * 2048,
                ((i + 1) * 2048) as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    std::fs::create_dir_all(&dir)?;
    // Written whole, then renamed: a crash leaves the old file or none, never a torn one.
    let partial = file.with_extension("partial");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    for x in &vectors {
        out.write_all(&x.to_le_bytes())?;
    }
    out.into_inner()?.sync_all()?;
    std::fs::rename(&partial, &file)?;
    Ok((texts, vectors, model))
}

/// The exact top `k` (indices) of `query` over `vectors`, by float dot product on one thread.
fn exact_top(vectors: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<u32> {
    let mut scores: Vec<(f32, u32)> = vectors
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (v.iter().zip(query).map(|(a, b)| a * b).sum::<f32>(), i as u32))
        .collect();
    let k = k.min(scores.len());
    scores.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scores.truncate(k);
    scores.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scores.into_iter().map(|(_, i)| i).collect()
}

pub async fn run(size: usize) -> Result<()> {
    let (texts, vectors, model) = real_vectors(size + QUERIES).await?;
    let dim = model.dimension;
    let (stored, queries) = vectors.split_at(size * dim);
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("ann.db");
    {
        let store = SqliteStore::open(&db, &SqliteOptions::default())?;
        let batch: Vec<NewMemory> = texts[..size]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let time = Timestamp(1_700_000_000_000 + i as i64 * 60_000);
                NewMemory::episode(t.clone(), Scope::default(), Some("Ada".into()), time, time)
            })
            .collect();
        let ids = store.insert(batch, None).await?;
        store.bind_model(model.clone()).await?;
        for (chunk, ids) in stored.chunks(10_000 * dim).zip(ids.chunks(10_000)) {
            store.put_vectors(ids.iter().copied().zip(chunk.chunks_exact(dim).map(<[f32]>::to_vec)).collect()).await?;
        }
    }
    // Exact answers and the one-thread exact scan, the baseline of this run.
    let mut exact = Vec::with_capacity(QUERIES);
    let mut scan_ms = Vec::with_capacity(QUERIES);
    for q in queries.chunks_exact(dim) {
        let started = Instant::now();
        exact.push(exact_top(stored, dim, q, 100));
        scan_ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let scan_p50 = percentile(&sorted(scan_ms), 0.5);
    println!();
    println!(
        "Vector stage accuracy: {size} real {} vectors ({dim} dimensions), {QUERIES} held-out queries, 100 asked (as recall asks):",
        model.name
    );
    println!();
    println!(
        "| vector cache | shortlist per result | shortlist at k = 100 | recall@10 | recall@100 | vector search p50 (ms) | exact one-thread scan p50 (ms) | search / scan |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let by_size = if size >= atlas_store_sqlite::INT8_FROM_VECTORS { Precision::Int8 } else { Precision::F32 };
    for (precision, per_result) in
        [Precision::F32, Precision::Int8].into_iter().flat_map(|p| SHORTLISTS.map(|s| (p, s)))
    {
        let options = SqliteOptions {
            vector_shortlist: per_result,
            vector_precision: Some(precision),
            cache_files: false,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open(&db, &options)?;
        // The first search loads the cache.
        store.search_vector(queries[..dim].to_vec(), RecallFilter::default(), 100).await?;
        let (mut at10, mut at100, mut ms) = (0.0, 0.0, Vec::with_capacity(QUERIES));
        for (q, truth) in queries.chunks_exact(dim).zip(&exact) {
            let started = Instant::now();
            let hits = store.search_vector(q.to_vec(), RecallFilter::default(), 100).await?;
            ms.push(started.elapsed().as_secs_f64() * 1e3);
            let found: Vec<u32> = hits.iter().map(|h| (h.id.0 - 1) as u32).collect();
            let overlap = |n: usize| found.iter().take(n).filter(|i| truth[..n].contains(i)).count() as f64 / n as f64;
            at10 += overlap(10);
            at100 += overlap(100);
        }
        let p50 = percentile(&sorted(ms), 0.5);
        let default = if per_result == atlas_store_sqlite::DEFAULT_VECTOR_SHORTLIST && precision == by_size {
            " (default)"
        } else {
            ""
        };
        println!(
            "| {precision:?} | {per_result}{default} | {} | {:.3} | {:.3} | {p50:.2} | {scan_p50:.2} | {:.2} |",
            (100 * per_result).max(256).min(size),
            at10 / QUERIES as f64,
            at100 / QUERIES as f64,
            p50 / scan_p50
        );
    }
    Ok(())
}
