//! `cargo xtask bench`: ingest figures, each beside a floor measured in the same run.
//!
//! `ingest` measures `remember` latency on stores already holding N episodes and `import`
//! throughput of N episodes into a fresh store. The floors are what raw rusqlite does with the
//! same rows, pragmas and commit pattern but without ATLAS (no writer thread, no FTS, no edges,
//! no queue), so a ratio shows what ATLAS's own work costs.

use crate::measure::percentile;
use crate::peak_rss;
use crate::rng::Xorshift;
use anyhow::{Context, Result};
use atlas_domain::{NewMemory, Scope, Timestamp};
use atlas_runtime::config::EmbedderKind;
use atlas_runtime::{Atlas, Config, Remember};
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Subcommand)]
pub enum Which {
    /// Hybrid recall latency per stage at growing store sizes, beside a plain f32 scan.
    Recall {
        /// Store sizes, in memories (10k uses real vectors, larger ones random unit vectors;
        /// 0: no synthetic store).
        #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
        sizes: Vec<usize>,
        /// BEAM dev chat sizes (e.g. 500K,1M) whose recalls are profiled stage by stage, as the
        /// shared harness drives the CLI, plain and after the sleep cycle.
        #[arg(long, value_delimiter = ',')]
        beam: Vec<String>,
        /// The folder holding beam_recall.py and beam-dev/.
        #[arg(long, default_value = "../shared/eval")]
        beam_data: std::path::PathBuf,
        /// `qdrant`: also copies each store to a Qdrant server and measures it in the same run,
        /// row beside row (needs --qdrant-url or QDRANT_URL).
        #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "qdrant"])]
        store: String,
        #[arg(long, value_name = "URL", env = "QDRANT_URL")]
        qdrant_url: Option<String>,
        /// Memories of the vector-accuracy store (real MiniLM vectors of English-like turns,
        /// embedded once and cached); 0 skips it.
        #[arg(long, default_value_t = 100_000)]
        ann_size: usize,
        /// The embedding model of the synthetic stores (a model of models/manifest.toml, an
        /// alias such as `nomic`, or models side by side joined by `+`); default: the default
        /// model. BEAM's and the accuracy store's runs keep the default.
        #[arg(long)]
        model: Option<String>,
    },
    /// (Internal) the child process of `bench recall` that measures a user's process memory.
    #[command(hide = true)]
    RecallProcess {
        #[arg(long)]
        db: std::path::PathBuf,
        /// One query per line.
        #[arg(long)]
        queries: std::path::PathBuf,
    },
    /// Embedding latency, throughput and memory, Rust beside Python's onnxruntime on the same files.
    Embed {
        /// Texts embedded by each process of the memory measurement: the real turns below,
        /// long and empty ones included, repeated to this many.
        #[arg(long, default_value_t = 10_000)]
        rss_sentences: usize,
        /// Real turns (LoCoMo dev, BEAM dev) whose vectors are compared across batchings and
        /// against the float-kernel model (0: skip).
        #[arg(long, default_value_t = 4_000)]
        turns: usize,
        /// The folder holding locomo-dev/ and beam-dev/.
        #[arg(long, default_value = "../shared/eval")]
        data: std::path::PathBuf,
    },
    /// `atlas serve` under load: writers and readers over HTTP on a benchmark space, beside
    /// recall in process on the same space.
    Serve {
        /// Memories in the space.
        #[arg(long, default_value_t = 100_000)]
        size: usize,
        /// How long the load runs, in seconds.
        #[arg(long, default_value_t = 60)]
        secs: u64,
        #[arg(long, default_value_t = 8)]
        writers: usize,
        #[arg(long, default_value_t = 32)]
        readers: usize,
    },
    /// The Python package against Rust in the same run: recall p50, 8 threads against one,
    /// `add` against the CLI's `remember` (builds the wheel).
    Python {
        /// Memories in the benchmark space.
        #[arg(long, default_value_t = 100_000)]
        size: usize,
    },
    /// The Node package against Rust in the same run: search and add p50 from Node against the
    /// same operations inside Rust, 8 concurrent searches against 1 (builds the package).
    Node {
        /// Memories in the benchmark space.
        #[arg(long, default_value_t = 100_000)]
        size: usize,
    },
    /// The inspector's first paint of every view in headless Chromium, on a synthetic space of
    /// `size` memories with the demo fixtures consolidated into it, or on `--db` as it is.
    Inspector {
        #[arg(long, default_value_t = 100_000)]
        size: usize,
        /// A populated space to measure instead (read only: the views are opened, nothing changed).
        #[arg(long)]
        db: Option<std::path::PathBuf>,
    },
    /// `remember` latency and `import` throughput (embedding deferred: no embedder).
    Ingest {
        /// Store sizes, in episodes.
        #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
        sizes: Vec<usize>,
        /// How many `remember` calls are timed at each size.
        #[arg(long, default_value_t = 2000)]
        remembers: usize,
        /// Turns `atlas import` stores and embeds, beside `atlas embed` of the very texts it
        /// embeds (0: skip).
        #[arg(long, default_value_t = 100_000)]
        embedded: usize,
        /// Lines of the files whose import and export peak memory is measured, embedding
        /// deferred (0: skip).
        #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
        rss_lines: Vec<usize>,
    },
}

pub fn run(which: Which) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match which {
        Which::Ingest { sizes, remembers, embedded, rss_lines } => {
            rt.block_on(ingest(&sizes, remembers))?;
            let rss_lines: Vec<usize> = rss_lines.into_iter().filter(|n| *n > 0).collect();
            if !rss_lines.is_empty() {
                ingest_memory(&rss_lines)?;
            }
            if embedded > 0 { ingest_embedded(embedded) } else { Ok(()) }
        }
        Which::Embed { rss_sentences, turns, data } => crate::bench_embed::run(rss_sentences, turns, &data),
        Which::Serve { size, secs, writers, readers } => crate::bench_serve::run(size, secs, writers, readers),
        Which::Python { size } => crate::bench_python::run(size),
        Which::Node { size } => crate::bench_node::run(size),
        Which::Inspector { size, db } => inspector(db, size),
        Which::RecallProcess { db, queries } => crate::bench_recall::recall_process(&db, &queries),
        Which::Recall { sizes, beam, beam_data, store, qdrant_url, ann_size, model } => {
            let sizes: Vec<usize> = sizes.into_iter().filter(|n| *n > 0).collect();
            let qdrant = match (store.as_str(), qdrant_url) {
                ("qdrant", Some(url)) => Some(url),
                ("qdrant", None) => anyhow::bail!("--store qdrant needs --qdrant-url URL (or QDRANT_URL)"),
                _ => None,
            };
            if !sizes.is_empty() {
                crate::bench_recall::run(&sizes, qdrant.as_deref(), model.as_deref())?;
            }
            if !beam.is_empty() {
                crate::bench_recall_beam::run(&beam, &beam_data)?;
            }
            if ann_size > 0 {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?
                    .block_on(crate::bench_ann::run(ann_size))?;
            }
            Ok(())
        }
    }
}

/// Deterministic synthetic conversation text: 8–30 words from a 4,000-word vocabulary.
struct Corpus {
    rng: Xorshift,
    vocabulary: Vec<String>,
}

impl Corpus {
    fn new() -> Self {
        let vocabulary = Xorshift::invented_words(4000);
        Corpus { rng: Xorshift::new(0x9E37_79B9_7F4A_7C15), vocabulary }
    }

    fn sentence(&mut self) -> String {
        let n = 8 + self.rng.below(23);
        let picks: Vec<usize> = (0..n).map(|_| self.rng.below(self.vocabulary.len())).collect();
        picks.iter().map(|&i| self.vocabulary[i].as_str()).collect::<Vec<_>>().join(" ")
    }

    fn episodes(&mut self, n: usize, t0: i64) -> Vec<(String, NewMemory)> {
        (0..n)
            .map(|i| {
                let scope = Scope { session: Some(format!("bench/session_{}", i / 20)), ..Scope::default() };
                let speaker = Some(if i % 2 == 0 { "Ada" } else { "Brook" }.to_owned());
                let t = Timestamp(t0 + i as i64 * 30_000);
                (format!("bench:{i}"), NewMemory::episode(self.sentence(), scope, speaker, t, t))
            })
            .collect()
    }
}

async fn ingest(sizes: &[usize], remembers: usize) -> Result<()> {
    println!(
        "| episodes | import (eps/s) | floor: raw insert (eps/s) | import / floor | remember p50 (ms) | remember p95 (ms) | floor: raw insert+commit p50 (ms) | p50 / floor |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let mut corpus = Corpus::new();
        let batch = corpus.episodes(n, 1_700_000_000_000);
        let dir = tempfile::tempdir()?;

        let floor_import = floor_import(&dir.path().join("floor.db"), &batch)?;
        // Embedding deferred: the hot path and bulk path as measured without any model work.
        let config = Config { db: dir.path().join("atlas.db"), embedder: EmbedderKind::None, ..Config::default() };
        let atlas = Atlas::open(config).await?;
        let started = Instant::now();
        atlas.import(batch, None).await?;
        let import_rate = n as f64 / started.elapsed().as_secs_f64();

        let mut latencies = Vec::with_capacity(remembers);
        for i in 0..remembers {
            let input = Remember {
                text: corpus.sentence(),
                speaker: Some("Ada".into()),
                scope: Scope { session: Some(format!("live/{}", i / 20)), ..Scope::default() },
                ..Remember::default()
            };
            let started = Instant::now();
            atlas.remember(input).await?;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
        }
        latencies.sort_by(f64::total_cmp);
        let floor_p50 = floor_remember(&dir.path().join("floor.db"), &mut corpus, remembers)?;
        let p50 = percentile(&latencies, 0.5);
        println!(
            "| {n} | {import_rate:.0} | {floor_import:.0} | {:.2} | {p50:.3} | {:.3} | {floor_p50:.3} | {:.2} |",
            import_rate / floor_import,
            percentile(&latencies, 0.95),
            p50 / floor_p50
        );
    }
    Ok(())
}

/// `atlas import` of `n` turns with embedding, as a user runs it, against `atlas embed` of the
/// texts that import embedded (each memory's embedding text, read back from an export) and of
/// the turns' own texts, in the same run; with each process's peak RSS.
/// Peak resident memory of `atlas import` of files of `lines` turns (read a piece at a time,
/// so it should not grow with the file), of `atlas export` of the space it made and of the
/// import of that export into a new space (a restore), beside
/// `atlas stats` on the same space: what a process holding that space takes before it does
/// anything (the floor of the same run). Embedding is deferred (`ATLAS_EMBEDDER=none`): its
/// memory is measured by `--embedded`.
fn ingest_memory(lines: &[usize]) -> Result<()> {
    use std::io::Write;
    use std::process::Stdio;
    let atlas = crate::atlas_binary()?;
    let dir = tempfile::tempdir()?;
    println!();
    println!(
        "| lines | file (MB) | import: peak RSS (MB) | export: peak RSS (MB) | restore of the export: peak RSS (MB) | floor: atlas stats on the space (MB) | import / floor | import (lines/s) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in lines {
        let turns = dir.path().join(format!("turns-{n}.jsonl"));
        {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&turns)?);
            let mut corpus = Corpus::new();
            for i in 0..n {
                let t = Timestamp(1_700_000_000_000 + i as i64 * 30_000);
                let line = serde_json::json!({"session": format!("bench/session_{}", i / 20),
                    "speaker": if i % 2 == 0 { "Ada" } else { "Brook" }, "text": corpus.sentence(), "time": t.to_rfc3339()});
                writeln!(out, "{line}")?;
            }
            out.flush()?;
        }
        let db = dir.path().join(format!("rss-{n}.db"));
        let atlas_at = || {
            let mut c = peak_rss::command(&atlas);
            c.arg("--db").arg(&db).env("ATLAS_EMBEDDER", "none").stdout(Stdio::null());
            c
        };
        let exported = dir.path().join("export.jsonl");
        let import = peak_rss::run(atlas_at().args(["import", "--json"]).arg(&turns))?;
        let export = peak_rss::run(atlas_at().args(["export", "--out"]).arg(&exported))?;
        let floor = peak_rss::run(atlas_at().args(["stats", "--json"]))?;
        let restored = dir.path().join(format!("restored-{n}.db"));
        let mut restore_command = peak_rss::command(&atlas);
        restore_command.arg("--db").arg(&restored).env("ATLAS_EMBEDDER", "none").stdout(Stdio::null());
        let restore = peak_rss::run(restore_command.args(["import", "--json"]).arg(&exported))?;
        let file_mb = std::fs::metadata(&turns)?.len() as f64 / (1024.0 * 1024.0);
        println!(
            "| {n} | {file_mb:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} |",
            import.peak_rss_mb,
            export.peak_rss_mb,
            restore.peak_rss_mb,
            floor.peak_rss_mb,
            import.peak_rss_mb / floor.peak_rss_mb,
            n as f64 / import.secs
        );
        std::fs::remove_file(&turns)?;
        std::fs::remove_file(&exported)?;
        std::fs::remove_file(&db)?;
        std::fs::remove_file(&restored)?;
    }
    Ok(())
}

fn ingest_embedded(n: usize) -> Result<()> {
    use atlas_domain::policy::embedding::embedding_text;
    use std::process::{Command, Stdio};
    let atlas = crate::atlas_binary()?;
    crate::fetch_default_model()?;
    let dir = tempfile::tempdir()?;
    let turns = dir.path().join("turns.jsonl");
    let mut lines = String::new();
    let mut own_texts = String::new();
    for (i, (_, m)) in Corpus::new().episodes(n, 1_700_000_000_000).into_iter().enumerate() {
        let line = serde_json::json!({"session": m.scope.session, "speaker": m.body.speaker(), "text": m.text,
            "time": m.event_time.to_rfc3339()});
        lines.push_str(&format!("{line}\n"));
        own_texts.push_str(&format!("{}\n", serde_json::json!({"id": i, "text": m.text})));
    }
    std::fs::write(&turns, lines)?;
    let db = dir.path().join("ingest.db");
    let timed = |command: &mut Command| -> Result<(f64, f64, String)> {
        let run = peak_rss::run(command.env("ATLAS_EMBED_THREADS", "2"))?;
        Ok((run.secs, run.peak_rss_mb, run.stderr))
    };
    let time_atlas = || peak_rss::command(&atlas);
    let (_, import_rss, stderr) =
        timed(time_atlas().arg("--db").arg(&db).args(["import", "--json"]).arg(&turns).stdout(Stdio::null()))?;
    // `embedded N memories in S s`: the embedding phase alone, after the commit.
    let embed_secs: f64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("embedded {n} memories in ")).and_then(|r| r.trim_end_matches(" s").parse().ok())
        })
        .ok_or_else(|| anyhow::anyhow!("import did not say it embedded {n} memories: {stderr}"))?;
    let export = dir.path().join("export.jsonl");
    let status = Command::new(&atlas).arg("--db").arg(&db).args(["export", "--out"]).arg(&export).status()?;
    anyhow::ensure!(status.success(), "export failed");
    let mut embedded_texts = String::new();
    for line in std::fs::read_to_string(&export)?.lines() {
        if let Ok(stored) = atlas_domain::jsonl::parse_stored_line(line, Timestamp(0)) {
            let text = embedding_text(&stored.memory);
            embedded_texts.push_str(&format!("{}\n", serde_json::json!({"id": stored.memory.id.0, "text": text})));
        }
    }
    let same = dir.path().join("embedded.jsonl");
    std::fs::write(&same, embedded_texts)?;
    let own = dir.path().join("own.jsonl");
    std::fs::write(&own, own_texts)?;
    let embed = |file: &std::path::Path| {
        timed(
            time_atlas()
                .args(["--db", "/nonexistent/unused.db", "embed", "--json", "--batch"])
                .arg(file)
                .stdout(Stdio::null()),
        )
    };
    let (same_secs, same_rss, _) = embed(&same)?;
    let (own_secs, _, _) = embed(&own)?;
    let rate = |secs: f64| n as f64 / secs;
    println!();
    println!(
        "| turns | import: embedding phase (texts/s) | atlas embed, the same texts (texts/s) | import / embed | atlas embed, the turns' own texts (texts/s) | peak RSS import (MB) | peak RSS embed (MB) |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {n} | {:.0} | {:.0} | {:.2} | {:.0} | {import_rss:.0} | {same_rss:.0} |",
        rate(embed_secs),
        rate(same_secs),
        same_secs / embed_secs,
        rate(own_secs)
    );
    Ok(())
}

fn floor_connection(path: &std::path::Path) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         CREATE TABLE IF NOT EXISTS plain (id INTEGER PRIMARY KEY, kind TEXT, text TEXT, speaker TEXT, \
         scope_session TEXT, event_time INTEGER, recorded_at INTEGER, valid_from INTEGER, meta TEXT, body TEXT);",
    )?;
    Ok(conn)
}

const FLOOR_INSERT: &str = "INSERT INTO plain (kind, text, speaker, scope_session, event_time, recorded_at, valid_from, meta, body) \
                            VALUES ('episode', ?, ?, ?, ?, ?, ?, '{}', '{}')";

fn floor_import(path: &std::path::Path, batch: &[(String, NewMemory)]) -> Result<f64> {
    let mut conn = floor_connection(path)?;
    let started = Instant::now();
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare(FLOOR_INSERT)?;
        for (_, m) in batch {
            let t = m.event_time.millis();
            stmt.execute(rusqlite::params![m.text, m.body.speaker(), m.scope.session, t, t, t])?;
        }
    }
    tx.commit()?;
    Ok(batch.len() as f64 / started.elapsed().as_secs_f64())
}

fn floor_remember(path: &std::path::Path, corpus: &mut Corpus, n: usize) -> Result<f64> {
    let conn = floor_connection(path)?;
    let mut stmt = conn.prepare(FLOOR_INSERT)?;
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let text = corpus.sentence();
        let started = Instant::now();
        stmt.execute(rusqlite::params![text, "Ada", format!("live/{}", i / 20), 1, 1, 1])?;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    Ok(percentile(&latencies, 0.5))
}

/// First paint of every view on `db` (a populated space; a synthetic one of `size` memories
/// when none is given), measured in the browser by `cargo xtask inspector-paint`.
fn inspector(db: Option<PathBuf>, size: usize) -> Result<()> {
    crate::fetch_default_model()?;
    let dir = tempfile::tempdir()?;
    let (db, seed) = match db {
        Some(db) => (db, "0"),
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let space = rt.block_on(crate::bench_recall::populate(dir.path(), size))?;
            (space.db, "1")
        }
    };
    let db = db.to_str().context("the database's path is UTF-8")?;
    crate::xtask(&["inspector-paint", "--db", db, "--seed", seed]).map(drop)
}
