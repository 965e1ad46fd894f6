//! `cargo xtask migrate-to-qdrant` and `migrate-from-qdrant`: a memory space copied between a
//! SQLite file and a Qdrant server, both ways, resumable, verified, the source never written.

use anyhow::{Context, Result, bail};
use atlas_runtime::config::StorageKind;
use atlas_runtime::migrate::{Checkpoint, CopyOptions, copy, verify};
use atlas_runtime::{Config, Parts};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options shared by both directions.
#[derive(Args)]
pub struct Common {
    /// The space file of a Qdrant space opened by its file (it names the collection); to Qdrant
    /// without it or --space-name, the SQLite file's name with `.qdrant.db`.
    #[arg(long, value_name = "PATH", conflicts_with = "space_name")]
    space: Option<PathBuf>,
    /// The Qdrant space's name on the server, which any host opens by name (atlas `--space`).
    #[arg(long, value_name = "NAME")]
    space_name: Option<String>,
    /// API key of the Qdrant server.
    #[arg(long, env = "ATLAS_QDRANT_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A TOML config whose [qdrant] section sets collection settings (shards, replication, ...).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Memories per batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Memories sampled for the verification (records, vectors and top-10 recall).
    #[arg(long, default_value_t = 200)]
    sample: usize,
    /// Prints the plan and writes nothing.
    #[arg(long)]
    dry_run: bool,
    /// Writes the verification report as JSON.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
}

#[derive(Args)]
pub struct ToQdrant {
    /// The SQLite memory space to copy.
    #[arg(long, value_name = "atlas.db")]
    from: PathBuf,
    /// The Qdrant server's gRPC address, e.g. http://localhost:6334.
    #[arg(long, value_name = "URL")]
    to: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct FromQdrant {
    /// The Qdrant server's gRPC address.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The new SQLite memory space.
    #[arg(long, value_name = "new.db")]
    to: PathBuf,
    #[command(flatten)]
    common: Common,
}

fn base_config(common: &Common) -> Result<Config> {
    let mut config = Config::load(common.config.as_deref(), |k| std::env::var(k).ok())?;
    if common.api_key.is_some() {
        config.qdrant.api_key = common.api_key.clone();
    }
    Ok(config)
}

fn sqlite_config(base: &Config, db: &Path) -> Config {
    Config { storage: StorageKind::Sqlite, db: db.to_path_buf(), ..base.clone() }
}

/// A Qdrant space: named on the server, or by its space file.
enum Space {
    Named(String),
    File(PathBuf),
}

impl Space {
    fn shown(&self) -> String {
        match self {
            Space::Named(name) => format!("space {name}"),
            Space::File(path) => format!("space file {}", path.display()),
        }
    }
}

fn qdrant_config(base: &Config, url: &str, space: &Space) -> Config {
    let mut config = Config { storage: StorageKind::Qdrant, ..base.clone() };
    match space {
        Space::Named(name) => config.qdrant.space = Some(name.clone()),
        Space::File(path) => {
            config.db = path.clone();
            config.qdrant.space = None;
        }
    }
    config.qdrant.url = Some(url.to_string());
    config
}

/// Refuses a SQLite source that opening would migrate: the source is never written.
fn check_sqlite_source(db: &Path) -> Result<()> {
    if !db.is_file() {
        bail!("source {}: no such file", db.display());
    }
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("source {}", db.display()))?;
    let version =
        atlas_store_sqlite::migrations::current_version(&conn).with_context(|| format!("source {}", db.display()))?;
    let latest = atlas_store_sqlite::migrations::latest_version();
    if version != latest {
        bail!(
            "source {} has schema version {version}, this build writes {latest}; run `cargo xtask migrate up --db {}` first (a migration never changes its source)",
            db.display(),
            db.display()
        );
    }
    Ok(())
}

pub fn to_qdrant(args: ToQdrant) -> Result<()> {
    check_sqlite_source(&args.from)?;
    let (space, checkpoint) = match (&args.common.space_name, &args.common.space) {
        (Some(name), _) => (Space::Named(name.clone()), args.from.with_extension(format!("{name}.checkpoint"))),
        (None, file) => {
            let file = file.clone().unwrap_or_else(|| args.from.with_extension("qdrant.db"));
            let checkpoint = file.with_extension("checkpoint");
            (Space::File(file), checkpoint)
        }
    };
    let base = base_config(&args.common)?;
    run(
        sqlite_config(&base, &args.from),
        qdrant_config(&base, &args.to, &space),
        &args.common,
        format!("{} (SQLite)", args.from.display()),
        format!("{} (Qdrant, {})", args.to, space.shown()),
        checkpoint,
    )
}

pub fn from_qdrant(args: FromQdrant) -> Result<()> {
    let space = match (&args.common.space_name, &args.common.space) {
        (Some(name), _) => Space::Named(name.clone()),
        (None, Some(file)) if file.is_file() => Space::File(file.clone()),
        (None, Some(file)) => bail!("--space {}: no such file", file.display()),
        (None, None) => {
            bail!("--space-name NAME (or --space PATH, a space file) is required: which Qdrant space to copy")
        }
    };
    let base = base_config(&args.common)?;
    run(
        qdrant_config(&base, &args.from, &space),
        sqlite_config(&base, &args.to),
        &args.common,
        format!("{} (Qdrant, {})", args.from, space.shown()),
        format!("{} (SQLite)", args.to.display()),
        args.to.with_extension("checkpoint"),
    )
}

fn run(
    source_config: Config,
    target_config: Config,
    common: &Common,
    source_name: String,
    target_name: String,
    checkpoint: PathBuf,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let started = Instant::now();
        let mut source = Parts::open_store(&source_config).await.with_context(|| format!("source {source_name}"))?;
        let stats = source.store.stats().await?;
        let resume = Checkpoint::load(&checkpoint)?;
        println!("plan: copy {} memories from {source_name} to {target_name}", stats.memories());
        for (kind, n) in &stats.memories_by_kind {
            println!("  {kind}: {n}");
        }
        let model = stats
            .embedding_model
            .as_ref()
            .map_or("none".to_string(), |m| format!("{} ({} dimensions)", m.name, m.dimension));
        println!(
            "  edges: {}, vectors: {} (model {model}), awaiting a vector: {}",
            stats.edges, stats.vectors, stats.pending_vectors
        );
        println!("  batches of {} ({} batches)", common.batch, stats.memories().div_ceil(common.batch.max(1) as u64));
        match &resume {
            Some(c) => println!(
                "  resuming after memory {} ({} copied), checkpoint {}",
                c.last_id,
                c.copied,
                checkpoint.display()
            ),
            None => println!("  from the first memory; checkpoint {}", checkpoint.display()),
        }
        println!(
            "  then verify: counts per kind, {} sampled records and vectors, top-10 recall of their texts",
            common.sample
        );
        if common.dry_run {
            println!("dry run: nothing written");
            return Ok(());
        }
        let mut target = Parts::open_store(&target_config).await.with_context(|| format!("target {target_name}"))?;
        let bar = ProgressBar::new(stats.memories());
        bar.set_style(
            ProgressStyle::with_template("{spinner} copying {pos}/{len} [{bar:30}] {per_sec} eta {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        let options = CopyOptions {
            batch: common.batch,
            checkpoint: Some(checkpoint.clone()),
            source_name: source_name.clone(),
            target_name: target_name.clone(),
        };
        let progress_bar = bar.clone();
        let outcome = copy(&source, &target, &options, &move |n| progress_bar.set_position(n)).await?;
        bar.finish_and_clear();
        println!(
            "copied {} memories in {} batches ({:.1} s){}",
            outcome.copied,
            outcome.batches,
            started.elapsed().as_secs_f64(),
            outcome.resumed_after.map_or(String::new(), |id| format!(", resumed after memory {id}"))
        );
        // Recall on both sides with the configured embedder, when it made the source's vectors.
        let embedder = atlas_runtime::open_embedder(&source_config).await.ok().flatten();
        if let (Some(e), Some(m)) = (&embedder, &stats.embedding_model)
            && e.model() == *m
        {
            source.embedder = Some(e.clone());
            target.embedder = Some(e.clone());
        }
        let report = verify(&source, &target, &source_config.recall, common.sample).await?;
        std::fs::remove_file(&checkpoint).ok();
        let json = serde_json::json!({
            "source": source_name,
            "target": target_name,
            "copied": outcome.copied,
            "seconds": started.elapsed().as_secs_f64(),
            "memories_source": report.memories_source,
            "memories_target": report.memories_target,
            "by_kind_source": report.by_kind_source,
            "by_kind_target": report.by_kind_target,
            "edges_source": report.edges_source,
            "edges_target": report.edges_target,
            "vectors_source": report.vectors_source,
            "vectors_target": report.vectors_target,
            "vectors_compared": report.vectors_compared,
            "max_vector_diff": report.max_vector_diff,
            "records_differing": report.records_differing,
            "queries_compared": report.queries_compared,
            "top10_overlap": report.top10_overlap,
            "recall_used_vectors": report.recall_used_vectors,
            "ok": report.ok,
        });
        println!("verification: {}", serde_json::to_string_pretty(&json)?);
        if let Some(path) = &common.report {
            std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
                .with_context(|| format!("write report {}", path.display()))?;
        }
        if !report.ok {
            bail!("verification failed: the target differs from the source (see the report above)");
        }
        Ok(())
    })
}
