//! `cargo xtask bench node`: the Node package against Rust in the same run, on the same
//! benchmark space: `recall` and `search` p50 from Node against Rust's recall operation timed
//! inside the same process (the native module times its own calls, interleaved query by query),
//! `add` against Rust's `remember_many` of one memory the same way, and 8 concurrent searches
//! against 1 beside 8 tokio tasks against 1 in a Rust process (what the machine allows).

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

pub fn run(size: usize) -> Result<()> {
    crate::fetch_default_model()?;
    let dir = tempfile::tempdir()?;
    let (space, rust_one, rust_eight) = crate::bench_python::space_and_rust_throughput(dir.path(), size)?;

    // The package is xtask's to build (one way); its tarball is the last line it prints. It is
    // installed into a folder of its own, as a user would.
    let built = crate::xtask(&["npm"])?;
    let stdout = String::from_utf8_lossy(&built.stdout);
    let tarball = PathBuf::from(stdout.lines().last().context("cargo xtask npm printed no tarball")?.trim());
    let folder = dir.path().join("node");
    std::fs::create_dir_all(&folder)?;
    std::fs::write(folder.join("package.json"), "{\"private\": true, \"type\": \"module\"}\n")?;
    let status = Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund", "--offline", "--no-package-lock"])
        .arg(&tarball)
        .current_dir(&folder)
        .status()
        .context("run npm install")?;
    anyhow::ensure!(status.success(), "npm install of {} failed ({status})", tarball.display());
    let script = folder.join("bench.mjs");
    std::fs::copy(crate::root().join("crates").join("atlas-node").join("bench").join("bench.mjs"), &script)?;
    let queries = dir.path().join("queries.txt");
    std::fs::write(&queries, space.queries.join("\n"))?;
    println!("$ node bench.mjs (a space of {size} memories)");
    let output = Command::new("node")
        .arg(&script)
        .arg(&space.db)
        .arg(&queries)
        .arg(dir.path())
        .env("ATLAS_LOG", "warn")
        .current_dir(&folder)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run the Node benchmark")?;
    if !output.status.success() {
        bail!("the Node benchmark failed ({})", output.status);
    }
    let node: serde_json::Value = serde_json::from_slice(&output.stdout).context("the Node benchmark's JSON")?;
    let figure = |k: &str| node[k].as_f64().with_context(|| format!("the Node benchmark gave no {k}"));

    let (rust, recall, search) = (figure("rust_recall_p50_ms")?, figure("recall_p50_ms")?, figure("search_p50_ms")?);
    let (rust_add, add) = (figure("rust_add_p50_ms")?, figure("add_p50_ms")?);
    let (one, eight) = (figure("one_qps")?, figure("eight_qps")?);
    println!("| {size} memories | baseline (Rust, same process) | Node | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| recall p50 (ms): `memory.recall` against the recall operation in Rust | {rust:.2} | {recall:.2} | {:.2}× (goal ≤ 1.2) |",
        recall / rust
    );
    println!(
        "| search p50 (ms): `memory.search` (mem0 shapes) against the same | {rust:.2} | {search:.2} | {:.2}× (goal ≤ 1.2) |",
        search / rust
    );
    println!(
        "| add p50 (ms): `memory.add` of one message against `remember_many` of one in Rust | {rust_add:.2} | {add:.2} | {:.2}× |",
        add / rust_add
    );
    println!("| searches per second: 8 concurrent Promises against 1 | {one:.1} | {eight:.1} | {:.2}× |", eight / one);
    println!(
        "| recalls per second: 8 tokio tasks against 1, a Rust process (the machine's ceiling) | {rust_one:.1} | {rust_eight:.1} | {:.2}× |",
        rust_eight / rust_one
    );
    Ok(())
}
