//! `cargo xtask bench recall`: hybrid recall latency on synthetic stores of growing size, with
//! each stage timed and the floor of a plain Rust scan over the same vectors, in one run.
//!
//! Text: synthetic, Zipf-distributed words (see `ZipfText`). 10k: vectors from the real
//! embedder. Larger stores: random unit vectors (labelled so) bound as the real model, so that
//! queries are embedded for real and searched through the same path.

use crate::measure::{percentile, sorted};
use crate::rng::Xorshift;
use crate::stage_profile::Timed;
use anyhow::Result;
use atlas_domain::ports::{EmbeddingModel, MemoryStore, VectorIndex};
use atlas_domain::{MemoryId, NewMemory, Scope, Timestamp};
use atlas_runtime::config::EmbedderKind;
use atlas_runtime::{Atlas, Config, Parts, RecallRequest};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use std::sync::Arc;
use std::time::Instant;

const QUERIES: usize = 200;

/// Synthetic text with a realistic word distribution: 40% common English words, the rest drawn
/// from 20,000 invented words by Zipf's law (rank r with weight 1/r), 8 to 30 words a text.
struct ZipfText {
    rng: Xorshift,
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl ZipfText {
    fn new(seed: u64) -> Self {
        let words = Xorshift::invented_words(20_000);
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|r| {
                total += 1.0 / r as f64;
                total
            })
            .collect();
        ZipfText { rng: Xorshift::new(seed), words, cumulative }
    }

    fn text(&mut self, min: usize, max: usize) -> String {
        const COMMON: &[&str] = &[
            "the", "a", "we", "I", "you", "and", "to", "of", "it", "was", "with", "for", "on", "my", "that", "is",
            "at", "so", "but", "really",
        ];
        let len = min + self.rng.below(max - min + 1);
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            if self.rng.uniform() < 0.4 {
                out.push(COMMON[self.rng.below(COMMON.len())].to_owned());
            } else {
                let target = self.rng.uniform() * self.cumulative[self.cumulative.len() - 1];
                let rank = self.cumulative.partition_point(|c| *c < target).min(self.words.len() - 1);
                out.push(self.words[rank].clone());
            }
        }
        out.join(" ")
    }
}

fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:")
}

/// A size field of /proc/self/status (`VmHWM:` the peak resident set, `VmRSS:` the current), in MB.
fn status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The floor: one thread scanning every vector in the precision the store's cache keeps (f32,
/// or int8 codes with a scale each, as `vector_cache = "auto"` chooses), top 100 by partial
/// selection.
enum Floor {
    F32(Vec<f32>),
    Int8 { codes: Vec<i8>, scales: Vec<f32> },
}

impl Floor {
    fn for_size(n: usize) -> Self {
        if n >= atlas_store_sqlite::INT8_FROM_VECTORS {
            Floor::Int8 { codes: Vec::new(), scales: Vec::new() }
        } else {
            Floor::F32(Vec::new())
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Floor::F32(_) => "f32",
            Floor::Int8 { .. } => "int8",
        }
    }

    fn push(&mut self, v: &[f32]) {
        match self {
            Floor::F32(all) => all.extend_from_slice(v),
            Floor::Int8 { codes, scales } => {
                let (c, scale) = atlas_store_sqlite::quantize(v);
                codes.extend(c);
                scales.push(scale);
            }
        }
    }

    fn scan(&self, dim: usize, query: &[f32]) -> f64 {
        let started = Instant::now();
        let mut scores: Vec<(f32, u32)> = match self {
            Floor::F32(all) => all
                .chunks_exact(dim)
                .enumerate()
                .map(|(i, v)| (v.iter().zip(query).map(|(a, b)| a * b).sum::<f32>(), i as u32))
                .collect(),
            Floor::Int8 { codes, scales } => {
                let (q, q_scale) = atlas_store_sqlite::quantize(query);
                codes
                    .chunks_exact(dim)
                    .zip(scales)
                    .enumerate()
                    .map(|(i, (c, s))| (s * q_scale * atlas_store_sqlite::int8_dot(c, &q) as f32, i as u32))
                    .collect()
            }
        };
        let k = 100.min(scores.len());
        scores.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
        std::hint::black_box(&scores[..k]);
        started.elapsed().as_secs_f64() * 1e3
    }
}

pub fn run(sizes: &[usize], qdrant_url: Option<&str>, model: Option<&str>) -> Result<()> {
    match model {
        Some(model) => crate::fetch_models_named(&[model.to_owned()])?,
        None => crate::fetch_default_model()?,
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        println!("| store | memories | vectors | recall p50 (ms) | recall p95 (ms) | retrieval p50 (ms) | retrieval p95 (ms) | query embedding p50 | text p50 | vector p50 | fusion+fetch p50 | floor scan p50 (precision) | vector / floor | first query (cache load, ms) | peak RSS (MB) |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut profiles = Vec::new();
        for &n in sizes {
            profiles.extend(bench_size(n, qdrant_url, model).await?);
        }
        for (title, recalls) in &profiles {
            crate::stage_profile::print(title, recalls);
        }
        Ok(())
    })
}

/// A benchmark space of `n` synthetic memories in `dir`, with its vectors (real for 10k and
/// less, random unit vectors bound as the real model above), the floor scan over the same
/// vectors, and the queries to ask it.
pub struct Space {
    pub db: std::path::PathBuf,
    pub config: Config,
    pub queries: Vec<String>,
    floor: Floor,
    dim: usize,
    real: bool,
}

pub async fn populate(dir: &std::path::Path, n: usize) -> Result<Space> {
    populate_with(dir, n, None).await
}

/// [`populate`] embedded with `model` (the default when `None`).
pub async fn populate_with(dir: &std::path::Path, n: usize, model: Option<&str>) -> Result<Space> {
    let db = dir.join("bench.db");
    let mut generator = ZipfText::new(0x5EED_0000 + n as u64);
    let texts: Vec<String> = (0..n).map(|_| generator.text(8, 30)).collect();
    let real = n <= 10_000;
    let batch: Vec<(String, NewMemory)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let scope =
                Scope { session: Some(format!("bench/{}", i / 20)), user: Some(format!("u{}", i % 5)), agent: None };
            let time = Timestamp(1_700_000_000_000 + i as i64 * 60_000);
            (
                format!("bench:{i}"),
                NewMemory::episode(t.clone(), scope, Some(["Ada", "Brook"][i % 2].into()), time, time),
            )
        })
        .collect();
    let mut onnx = Config { db: db.clone(), embedder: EmbedderKind::Onnx, ..Config::default() };
    onnx.onnx.model = model.map(str::to_owned);
    let mut floor = Floor::for_size(n);
    let dim;
    if real {
        let atlas = Atlas::open(onnx.clone()).await?;
        atlas.import(batch, None).await?;
        atlas.flush_vectors(None).await?;
        dim = atlas.stats().await?.store.embedding_model.map_or(384, |m| m.dimension);
        let store = SqliteStore::open(&db, &SqliteOptions::default())?;
        let mut after = None;
        loop {
            let page = store.scan(after, 10_000).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            let embedder = atlas.embedder().expect("onnx");
            let vectors =
                embedder.embed(page.iter().map(atlas_domain::policy::embedding::embedding_text).collect()).await?;
            vectors.iter().for_each(|v| floor.push(v));
        }
    } else {
        let store = SqliteStore::open(&db, &SqliteOptions::default())?;
        let text_only = Config { db: db.clone(), embedder: EmbedderKind::None, ..Config::default() };
        let atlas = Atlas::from_parts(Parts::from_store(Arc::new(store), None), text_only).await?;
        let ids = atlas.import(batch, None).await?;
        drop(atlas);
        let model = atlas_runtime::open_embedder(&onnx).await?.expect("onnx").model();
        dim = model.dimension;
        let store = SqliteStore::open(&db, &SqliteOptions::default())?;
        store.bind_model(EmbeddingModel { name: model.name.clone(), dimension: dim }).await?;
        let mut rng = Xorshift::new(0x1234_5678_9ABC_DEF1);
        for chunk in ids.chunks(10_000) {
            let vectors: Vec<(MemoryId, Vec<f32>)> = chunk.iter().map(|id| (*id, rng.unit_vector(dim))).collect();
            vectors.iter().for_each(|(_, v)| floor.push(v));
            store.put_vectors(vectors).await?;
        }
    }
    let queries: Vec<String> = (0..QUERIES).map(|_| generator.text(6, 10)).collect();
    Ok(Space { db, config: onnx, queries, floor, dim, real })
}

/// Measures one size; returns each store's stage profile, titled.
async fn bench_size(n: usize, qdrant_url: Option<&str>, model: Option<&str>) -> Result<Vec<(String, Vec<Timed>)>> {
    let dir = tempfile::tempdir()?;
    let Space { db, config: onnx, queries, floor, dim, real } = populate_with(dir.path(), n, model).await?;
    let default_model = atlas_embed_onnx::OnnxOptions::default().model;
    // The default run's rows read as they always have; another model's say whose queries they are.
    let label = match (real, model) {
        (true, _) => onnx.onnx.model.clone().unwrap_or(default_model),
        (false, None) => "random unit".to_owned(),
        (false, Some(model)) => format!("random unit, queries by {model}"),
    };
    let label = label.as_str();
    let (rebuilt_ms, sqlite_profile) =
        measure("sqlite", Atlas::open(onnx.clone()).await?, n, label, &queries, &floor, dim).await?;
    let mut profiles = vec![(format!("sqlite, {n} memories ({label} vectors): stage profile"), sqlite_profile)];
    wait_for_cache_files(&db)?;
    let (process_rss, from_files_ms) = process_peak_rss(&db, &queries, dir.path())?;
    println!(
        "|  |  | a new atlas process answering the {QUERIES} queries: first recall {from_files_ms:.0} ms with the \
         cache files ({:.2}× the {rebuilt_ms:.0} ms of the rebuild above); peak RSS {process_rss:.0} MB |",
        from_files_ms / rebuilt_ms
    );
    // A one-shot writer in between (an agent's `atlas remember`): the files are now behind the
    // database, and the next process catches them up.
    wait_for_cache_files(&db)?;
    let atlas = crate::atlas_binary()?;
    let status = std::process::Command::new(&atlas)
        .arg("--db")
        .arg(&db)
        .args(["remember", "the lighthouse keeper moved the meeting to Friday"])
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "atlas remember failed ({status})");
    let (_, caught_up_ms) = process_peak_rss(&db, &queries, dir.path())?;
    println!(
        "|  |  | after an `atlas remember` by another process: the next process's first recall {caught_up_ms:.0} ms \
         (files caught up; {:.2}× the rebuild) |",
        caught_up_ms / rebuilt_ms
    );
    if let Some(url) = qdrant_url {
        // The same memories, vectors and edges, copied into a fresh Qdrant space.
        let space = dir.path().join("bench.qdrant.db");
        let mut qdrant = Config { db: space, storage: atlas_runtime::config::StorageKind::Qdrant, ..onnx.clone() };
        qdrant.qdrant.url = Some(url.to_string());
        qdrant.qdrant.collection_prefix = "atlas_bench".into();
        let source = Parts::open_store(&onnx).await?;
        let target = Parts::open_store(&qdrant).await?;
        let options = atlas_runtime::migrate::CopyOptions {
            batch: 1000,
            checkpoint: None,
            source_name: "bench.db".into(),
            target_name: url.to_string(),
        };
        atlas_runtime::migrate::copy(&source, &target, &options, &|_| {}).await?;
        drop((source, target));
        let (_, qdrant_profile) =
            measure("qdrant", Atlas::open(qdrant).await?, n, label, &queries, &floor, dim).await?;
        profiles.push((format!("qdrant, {n} memories ({label} vectors): stage profile"), qdrant_profile));
    }
    Ok(profiles)
}

/// Peak RSS of a separate process that opens the store as `atlas` does (embedder included) and
/// answers every query once: the memory a user's process needs, without the benchmark's own
/// copies of the corpus and the floor; and that process's first recall (ms), which reads the
/// cache files the benchmark's own process left.
fn process_peak_rss(db: &std::path::Path, queries: &[String], dir: &std::path::Path) -> Result<(f64, f64)> {
    let file = dir.join("queries.txt");
    std::fs::write(&file, queries.join("\n"))?;
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", "recall-process", "--db"])
        .arg(db)
        .arg("--queries")
        .arg(&file)
        .output()?;
    anyhow::ensure!(out.status.success(), "recall process failed: {}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines().filter(|l| l.starts_with("first recall:") || l.starts_with("resident:")) {
        println!("|  |  | {line} |");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| -> Result<f64> {
        let found = text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse().ok());
        found.ok_or_else(|| anyhow::anyhow!("recall process printed no {key}: {text}"))
    };
    Ok((value("peak_rss_mb ")?, value("first_query_ms ")?))
}

/// The body of [`process_peak_rss`]'s child: prints `first_query_ms N` and `peak_rss_mb N`.
pub fn recall_process(db: &std::path::Path, queries: &std::path::Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let atlas =
            Atlas::open(Config { db: db.to_path_buf(), embedder: EmbedderKind::Onnx, ..Config::default() }).await?;
        let opened = status_mb("VmRSS:");
        let mut first_ms = None;
        for q in std::fs::read_to_string(queries)?.lines() {
            let started = Instant::now();
            let answer = atlas.recall(RecallRequest { query: q.to_owned(), k: 10, ..RecallRequest::default() }).await?;
            if first_ms.is_none() {
                let s = &answer.stages;
                eprintln!(
                    "first recall: query embedding {:.1} ms, text {:.1} ms, vector {:.1} ms",
                    s.query_embedding_ms, s.text_ms, s.vector_ms
                );
                eprintln!(
                    "resident: {opened:.0} MB once open, {:.0} MB after the first recall (peak so far {:.0} MB)",
                    status_mb("VmRSS:"),
                    peak_rss_mb()
                );
            }
            first_ms.get_or_insert(started.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!("resident: {:.0} MB after every query", status_mb("VmRSS:"));
        println!("first_query_ms {:.1}", first_ms.unwrap_or_default());
        println!("peak_rss_mb {:.1}", peak_rss_mb());
        Ok(())
    })
}

/// The cache files are written in the background after a rebuild: waits until both are there
/// (at most a minute) so that the next process can read them.
fn wait_for_cache_files(db: &std::path::Path) -> Result<()> {
    let name = db.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let files = ["text", "vectors"].map(|kind| db.with_file_name(format!("{name}.{kind}.cache")));
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while !files.iter().all(|f| f.exists()) {
        anyhow::ensure!(Instant::now() < deadline, "no cache files beside {} after a minute", db.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// Times recall through `atlas` and prints one table row; returns the first query's time and
/// every other query's stages, serialising to the wire's JSON included.
async fn measure(
    store: &str,
    atlas: Atlas,
    n: usize,
    label: &str,
    queries: &[String],
    floor: &Floor,
    dim: usize,
) -> Result<(f64, Vec<Timed>)> {
    let first = Instant::now();
    atlas.recall(RecallRequest { query: queries[0].clone(), k: 10, ..RecallRequest::default() }).await?;
    let first_ms = first.elapsed().as_secs_f64() * 1e3;
    let (mut total, mut retrieval, mut embed, mut text, mut vector, mut fusion, mut floor_ms) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let floor_query = atlas.embedder().expect("onnx").embed(vec![queries[0].clone()]).await?.remove(0);
    let mut timed = Vec::with_capacity(queries.len());
    for q in queries {
        let r = atlas.recall(RecallRequest { query: q.clone(), k: 10, ..RecallRequest::default() }).await?;
        let serialising = Instant::now();
        let wire = atlas_runtime::wire::recall_value(&r, false);
        std::hint::black_box(wire.to_string());
        let serialising_ms = serialising.elapsed().as_secs_f64() * 1e3;
        timed.extend(Timed::from_wire(q.clone(), &wire, &[("serialising_ms", serialising_ms)]));
        total.push(r.took_ms);
        retrieval.push(r.took_ms - r.stages.query_embedding_ms);
        embed.push(r.stages.query_embedding_ms);
        text.push(r.stages.text_ms);
        vector.push(r.stages.vector_ms);
        fusion.push(r.stages.fusion_ms);
        floor_ms.push(floor.scan(dim, &floor_query));
    }
    let (total, retrieval, embed, text, vector, fusion, floor_ms) = (
        sorted(total),
        sorted(retrieval),
        sorted(embed),
        sorted(text),
        sorted(vector),
        sorted(fusion),
        sorted(floor_ms),
    );
    let p50 = |v: &[f64]| percentile(v, 0.5);
    println!(
        "| {store} | {n} | {label} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} ({}) | {:.2} | {first_ms:.0} | {:.0} |",
        p50(&total),
        percentile(&total, 0.95),
        p50(&retrieval),
        percentile(&retrieval, 0.95),
        p50(&embed),
        p50(&text),
        p50(&vector),
        p50(&fusion),
        p50(&floor_ms),
        floor.label(),
        p50(&vector) / p50(&floor_ms),
        peak_rss_mb()
    );
    Ok((first_ms, timed))
}
