//! The `atlas` command line: a thin shell over `atlas-runtime` with human and `--json` output.

mod output;

use anyhow::{Context, Result, anyhow};
use atlas_domain::{MemoryId, MemoryKind, Scope, Timestamp};
use atlas_runtime::{Atlas, Config, ImportProgress, RecallRequest, Remember};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// ATLAS: local-first memory for LLM agents, in one SQLite file.
#[derive(Parser)]
#[command(name = "atlas", version, about)]
struct Cli {
    /// The memory space (SQLite file). Overrides ATLAS_DB and the config file.
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Where memories live: sqlite (the default) or qdrant (with --qdrant-url; --db then names
    /// the space's sidecar file). Overrides `storage` and ATLAS_STORAGE.
    #[arg(long, global = true, value_name = "STORE", value_parser = ["sqlite", "qdrant"])]
    store: Option<String>,
    /// The Qdrant server's gRPC address (e.g. http://localhost:6334). Overrides qdrant.url.
    #[arg(long, global = true, value_name = "URL")]
    qdrant_url: Option<String>,
    /// A TOML configuration file (see docs/CONFIG.md).
    #[arg(long, global = true, value_name = "FILE", env = "ATLAS_CONFIG")]
    config: Option<PathBuf>,
    /// Machine-readable output: one JSON document (or one per line for batches).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import a JSON Lines file of memories, all or nothing.
    Import { file: PathBuf },
    /// Store one episode on the hot path and print its id.
    Remember(RememberArgs),
    /// Find the memories that answer a query (or every query of a --batch file).
    Recall(RecallArgs),
    /// Show one memory and its edges.
    Get { id: MemoryId },
    /// Delete one memory with its edges and vector.
    Forget { id: MemoryId },
    /// Counts and sizes of the memory space.
    Stats,
    /// Print the vectors of the texts in a JSON Lines file of {"id", "text"}.
    Embed {
        #[arg(long, value_name = "FILE")]
        batch: PathBuf,
    },
    /// Re-embed every memory with the configured model (after a model change); resumable.
    Reembed,
    /// Write every memory as JSON Lines that `import` reads back.
    Export {
        /// Write here instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Args)]
struct RememberArgs {
    text: String,
    #[arg(long)]
    speaker: Option<String>,
    #[arg(long)]
    session: Option<String>,
    /// user:ID or agent:ID (repeatable).
    #[arg(long, value_name = "KEY:VALUE")]
    scope: Vec<String>,
    /// When it was said (RFC 3339); defaults to now.
    #[arg(long)]
    time: Option<String>,
    /// A JSON object kept with the memory.
    #[arg(long)]
    meta: Option<String>,
}

#[derive(Args)]
struct RecallArgs {
    /// The query; omit it with --batch.
    query: Option<String>,
    /// A JSON Lines file of {"id", "query"}; prints one JSON line per query.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    batch: Option<PathBuf>,
    /// How many memories to return.
    #[arg(long, short, default_value_t = 10)]
    k: usize,
    /// Only this scope: user:ID, agent:ID or session:ID (repeatable).
    #[arg(long, value_name = "KEY:VALUE")]
    scope: Vec<String>,
    /// Only these kinds (repeatable): episode, fact, entity, core, experience, concept, strategy.
    #[arg(long)]
    kind: Vec<MemoryKind>,
    /// Only memories whose event time is at or after this (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Only memories whose event time is before this (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// Recall what was valid at this time instead of now (RFC 3339).
    #[arg(long)]
    as_of: Option<String>,
    /// Show, for every hit, each signal's rank, raw score and contribution to the fused score.
    #[arg(long)]
    explain: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ATLAS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let mut config = Config::load(cli.config.as_deref(), |k| std::env::var(k).ok())?;
    if let Some(store) = &cli.store {
        config.storage = atlas_runtime::config::StorageKind::parse(store).map_err(|e| anyhow!("--store: {e}"))?;
    }
    if let Some(url) = cli.qdrant_url {
        config.qdrant.url = Some(url);
    }
    if let Some(db) = cli.db {
        config.db = db;
    }
    let json = cli.json;
    match &cli.command {
        Command::Embed { batch } => return embed(&config, batch, json).await,
        Command::Reembed => return reembed(config, json).await,
        _ => {}
    }
    if matches!(cli.command, Command::Get { .. } | Command::Forget { .. } | Command::Export { .. }) {
        // These never touch vectors: skip loading the model.
        config.embedder = atlas_runtime::config::EmbedderKind::None;
    }
    let atlas = Atlas::open(config).await?;
    match cli.command {
        Command::Embed { .. } | Command::Reembed => unreachable!("handled before opening the store"),
        Command::Import { file } => import(&atlas, &file, json).await,
        Command::Remember(args) => remember(&atlas, args, json).await,
        Command::Recall(args) => recall(&atlas, args, json).await,
        Command::Get { id } => {
            let detail = atlas.get(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?;
            output::print_detail(&detail, json);
            Ok(())
        }
        Command::Forget { id } => {
            if !atlas.forget(id).await? {
                return Err(atlas_domain::AtlasError::NotFound(id).into());
            }
            output::print_line(json, serde_json::json!({"forgotten": id.0}), || format!("forgot memory {id}"));
            Ok(())
        }
        Command::Stats => {
            let stats = atlas.stats().await?;
            output::print_stats(&atlas.config().db, &stats, json);
            Ok(())
        }
        Command::Export { out } => {
            let count = match &out {
                Some(path) => {
                    let file =
                        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
                    let mut writer = std::io::BufWriter::new(file);
                    atlas.export(&mut writer).await?
                }
                None => atlas.export(&mut std::io::BufWriter::new(std::io::stdout().lock())).await?,
            };
            let target = out.map_or("standard output".to_owned(), |p| p.display().to_string());
            eprintln!("exported {count} memories to {target}");
            Ok(())
        }
    }
}

fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {pos}/{len} [{bar:30}] {per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

async fn import(atlas: &Atlas, file: &std::path::Path, json: bool) -> Result<()> {
    let started = Instant::now();
    let shown = file.display().to_string();
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {shown}"))?;
    let batch = atlas_runtime::parse_jsonl(&bytes, &shown, atlas_runtime::now())?;
    let bar = progress_bar(batch.len() as u64);
    bar.set_message("storing");
    let (stored_bar, embedded_bar) = (bar.clone(), bar.clone());
    let progress = ImportProgress {
        stored: Some(Arc::new(move |n| stored_bar.set_position(n as u64))),
        embedded: Some(Arc::new(move |n| {
            embedded_bar.set_message("embedding");
            embedded_bar.set_position(n as u64);
        })),
    };
    let ids = atlas.import(batch, progress).await?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    output::print_line(
        json,
        serde_json::json!({
            "imported": ids.len(), "file": shown, "took_ms": secs * 1e3,
            "first_id": ids.first().map(|i| i.0), "last_id": ids.last().map(|i| i.0),
        }),
        || format!("imported {} memories from {shown} in {secs:.2} s", ids.len()),
    );
    Ok(())
}

async fn embed(config: &Config, batch: &std::path::Path, json: bool) -> Result<()> {
    let shown = batch.display().to_string();
    let embedder = atlas_runtime::open_embedder(config)
        .await?
        .ok_or_else(|| anyhow!("embed needs an embedder; this configuration has embedder = \"none\""))?;
    let text = std::fs::read_to_string(batch).with_context(|| format!("cannot read {shown}"))?;
    let items = parse_lines(&text, &shown, ["id", "text"])?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for chunk in items.chunks(256) {
        let vectors = embedder.embed(chunk.iter().map(|[_, text]| text.clone()).collect()).await?;
        for ([id, _], vector) in chunk.iter().zip(vectors) {
            if json {
                writeln!(out, "{}", serde_json::json!({"id": id, "vector": vector}))?;
            } else {
                let head: Vec<String> = vector.iter().take(4).map(|x| format!("{x:.4}")).collect();
                writeln!(out, "{id}: [{}, …] ({} dimensions)", head.join(", "), vector.len())?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

async fn reembed(config: Config, json: bool) -> Result<()> {
    let started = Instant::now();
    let bar = progress_bar(0);
    bar.set_message("re-embedding");
    let progress_bar = bar.clone();
    let done = Atlas::reembed(
        config,
        Some(Arc::new(move |done, total| {
            progress_bar.set_length(total as u64);
            progress_bar.set_position(done as u64);
        })),
    )
    .await?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    output::print_line(json, serde_json::json!({"reembedded": done, "took_ms": secs * 1e3}), || {
        format!("re-embedded {done} memories in {secs:.2} s")
    });
    Ok(())
}

async fn remember(atlas: &Atlas, args: RememberArgs, json: bool) -> Result<()> {
    let mut scope = parse_scope(&args.scope)?;
    if let Some(session) = args.session {
        scope.set("session", &session).map_err(|m| anyhow!("--session: {m}"))?;
    }
    let meta = match args.meta {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err(anyhow!("--meta: expected a JSON object")),
            Err(e) => return Err(anyhow!("--meta: not valid JSON ({e})")),
        },
    };
    let input =
        Remember { text: args.text, speaker: args.speaker, scope, time: parse_time("--time", args.time)?, meta };
    let id = atlas.remember(input).await?;
    output::print_line(json, serde_json::json!({"id": id.0}), || format!("remembered memory {id}"));
    Ok(())
}

async fn recall(atlas: &Atlas, args: RecallArgs, json: bool) -> Result<()> {
    let template = RecallRequest {
        query: String::new(),
        k: args.k,
        scope: parse_scope(&args.scope)?,
        kinds: args.kind,
        since: parse_time("--since", args.since)?,
        until: parse_time("--until", args.until)?,
        as_of: parse_time("--as-of", args.as_of)?,
    };
    // A CLI process lives too briefly for the background embedder: catch up first, so that a
    // `remember` followed by a `recall` always searches the new memory's vector too.
    atlas.flush_vectors(None).await?;
    match (args.query, args.batch) {
        (Some(query), None) => {
            let result = atlas.recall(RecallRequest { query, ..template }).await?;
            output::print_recall(None, &result, json, args.explain);
            Ok(())
        }
        (None, Some(batch)) => {
            let shown = batch.display().to_string();
            let text = std::fs::read_to_string(&batch).with_context(|| format!("cannot read {shown}"))?;
            let queries = parse_lines(&text, &shown, ["id", "query"])?;
            let stdout = std::io::stdout();
            for [id, query] in queries {
                let result = atlas.recall(RecallRequest { query: query.clone(), ..template.clone() }).await?;
                output::print_recall(Some((&id, &query)), &result, json, args.explain);
            }
            stdout.lock().flush()?;
            Ok(())
        }
        _ => Err(anyhow!("recall needs a QUERY or --batch FILE")),
    }
}

/// Lines of JSON objects with string `fields` (`id` may be a number); errors name the file,
/// line and field.
fn parse_lines<const N: usize>(text: &str, origin: &str, fields: [&str; N]) -> Result<Vec<[String; N]>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("{origin}:{}", i + 1);
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| anyhow!("{at}: not valid JSON ({e})"))?;
        let field = |name: &str| -> Result<String> {
            match value.get(name) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(serde_json::Value::Number(n)) if name == "id" => Ok(n.to_string()),
                Some(_) => Err(anyhow!("{at}: field \"{name}\": expected a string")),
                None => Err(anyhow!("{at}: field \"{name}\": missing")),
            }
        };
        let mut row: [String; N] = std::array::from_fn(|_| String::new());
        for (slot, name) in row.iter_mut().zip(fields) {
            *slot = field(name)?;
        }
        out.push(row);
    }
    Ok(out)
}

fn parse_scope(pairs: &[String]) -> Result<Scope> {
    let mut scope = Scope::default();
    for pair in pairs {
        scope.set_from_pair(pair).map_err(|m| anyhow!("--scope: {m}"))?;
    }
    Ok(scope)
}

fn parse_time(flag: &str, value: Option<String>) -> Result<Option<Timestamp>> {
    value.map(|v| Timestamp::parse(&v).map_err(|m| anyhow!("{flag}: {m}"))).transpose()
}
