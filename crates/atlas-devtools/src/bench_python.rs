//! `cargo xtask bench python`: the Python package against Rust in the same run, on the same
//! benchmark space: `recall` and `search` p50 from Python against Rust recall p50 in the same
//! process (the native module times its own recalls, interleaved query by query); 8 Python
//! threads' recall throughput against one (the GIL released) beside 8 tokio tasks against one
//! in a Rust process (what the machine allows); `add` throughput against the CLI's `remember`
//! (a process per call, as a script would run it).

use anyhow::{Context, Result, bail};
use atlas_runtime::{Atlas, RecallRequest};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// How many `atlas remember` processes are timed.
const CLI_REMEMBERS: usize = 50;

fn ask(query: &str) -> RecallRequest {
    RecallRequest { query: query.to_owned(), k: 10, ..RecallRequest::default() }
}

/// Recalls per second when `tasks` tasks share `total` recalls of `queries`.
async fn recalls_per_second(atlas: &Arc<Atlas>, queries: &[String], tasks: usize, total: usize) -> Result<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut running = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (atlas, next, queries) = (Arc::clone(atlas), Arc::clone(&next), queries.to_vec());
        running.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(());
                }
                atlas.recall(ask(&queries[i % queries.len()])).await?;
            }
        }));
    }
    for task in running {
        task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// The benchmark space of `size` memories in `dir`, and a Rust process's recalls per second on
/// it with 1 task and with 8 (the machine's ceiling, which the Python and Node benchmarks are
/// put beside).
pub(crate) fn space_and_rust_throughput(
    dir: &std::path::Path,
    size: usize,
) -> Result<(crate::bench_recall::Space, f64, f64)> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let space = crate::bench_recall::populate(dir, size).await?;
        let atlas = Arc::new(Atlas::open(space.config.clone()).await?);
        atlas.recall(ask(&space.queries[0])).await?;
        let total = space.queries.len() * 2;
        let one = recalls_per_second(&atlas, &space.queries, 1, total).await?;
        let eight = recalls_per_second(&atlas, &space.queries, 8, total).await?;
        anyhow::Ok((space, one, eight))
    })
}

pub fn run(size: usize) -> Result<()> {
    crate::fetch_default_model()?;
    let dir = tempfile::tempdir()?;
    let (space, rust_one, rust_eight) = space_and_rust_throughput(dir.path(), size)?;

    // The wheel and its environment are xtask's (one way to build and install them); the
    // environment's Python is the last line it prints.
    let built = crate::xtask(&["wheel", "--venv", "python-bench"])?;
    let python = String::from_utf8_lossy(&built.stdout);
    let python = PathBuf::from(python.lines().last().context("cargo xtask wheel --venv printed no Python")?.trim());
    let queries = dir.path().join("queries.txt");
    std::fs::write(&queries, space.queries.join("\n"))?;
    let script = crate::root().join("crates").join("atlas-py").join("bench").join("bench.py");
    println!("$ {} {} (a space of {size} memories)", python.display(), script.display());
    let output = Command::new(&python)
        .arg(&script)
        .arg(&space.db)
        .arg(&queries)
        .arg(dir.path())
        .env("ATLAS_LOG", "warn")
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run the Python benchmark")?;
    if !output.status.success() {
        bail!("the Python benchmark failed ({})", output.status);
    }
    let py: serde_json::Value = serde_json::from_slice(&output.stdout).context("the Python benchmark's JSON")?;
    let figure = |k: &str| py[k].as_f64().with_context(|| format!("the Python benchmark gave no {k}"));

    let atlas = crate::atlas_binary()?;
    let cli_db = dir.path().join("cli.db");
    let started = Instant::now();
    for i in 0..CLI_REMEMBERS {
        let status = Command::new(&atlas)
            .arg("--db")
            .arg(&cli_db)
            .args(["remember", "--scope", "user:bench", &format!("{} ({i})", space.queries[i % space.queries.len()])])
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "atlas remember failed ({status})");
    }
    let cli_per_s = CLI_REMEMBERS as f64 / started.elapsed().as_secs_f64();

    let (rust, recall, search) = (figure("rust_p50_ms")?, figure("recall_p50_ms")?, figure("search_p50_ms")?);
    let (one, eight, adds) = (figure("one_thread_qps")?, figure("eight_threads_qps")?, figure("adds_per_s")?);
    println!("| {size} memories | baseline | Python | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| recall p50 (ms): `Memory.recall` against Rust's recall in the same process | {rust:.2} | {recall:.2} | {:.2}× (goal ≤ 1.10) |",
        recall / rust
    );
    println!(
        "| recall p50 (ms): `Memory.search` (mem0 shapes) against the same | {rust:.2} | {search:.2} | {:.2}× |",
        search / rust
    );
    println!(
        "| recalls per second: 8 Python threads against 1 | {one:.1} | {eight:.1} | {:.2}× (goal ≥ 1.7) |",
        eight / one
    );
    println!(
        "| recalls per second: 8 tokio tasks against 1, a Rust process (the machine's ceiling) | {rust_one:.1} | {rust_eight:.1} | {:.2}× |",
        rust_eight / rust_one
    );
    println!(
        "| writes per second: `Memory.add` against `atlas remember` (a process each) | {cli_per_s:.1} | {adds:.1} | {:.1}× |",
        adds / cli_per_s
    );
    Ok(())
}
