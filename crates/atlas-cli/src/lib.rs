//! The `atlas` command line: a thin shell over `atlas-runtime` with human and `--json` output.
//! A library so that every way in runs the same commands: the `atlas` binary, and the console
//! script of the Python package (atlas-py).

mod agent_memory;
mod embed;
mod files;
mod keys;
mod output;
mod serve;

use anyhow::{Context, Result, anyhow};
use atlas_domain::{MemoryId, MemoryKind, Scope, Timestamp};
use atlas_runtime::{Atlas, Config, ImportOptions, RecallRequest, Remember};
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
    /// With --store qdrant: the memory space's name on the server, shared by every process of
    /// every host that names it (no local file; --db is then not used). Overrides qdrant.space
    /// and ATLAS_QDRANT_SPACE.
    #[arg(long, global = true, value_name = "NAME")]
    space: Option<String>,
    /// An embedding model folder of one's own (model.onnx, tokenizer.json and the pooling and
    /// prompt configs sentence-transformers exports; see docs/CONFIG.md). Overrides
    /// onnx.model_dir and ATLAS_ONNX_MODEL_DIR.
    #[arg(long, global = true, value_name = "DIR")]
    model_dir: Option<PathBuf>,
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
    /// Import a JSON Lines file of memories (or restore a full export), all or nothing; the
    /// same content is imported once per space. `-` reads standard input.
    Import {
        file: PathBuf,
        /// Import a second copy even though this content was imported before.
        #[arg(long)]
        again: bool,
    },
    /// Store one episode on the hot path and print its id.
    Remember(RememberArgs),
    /// Find the memories that answer a query (or every query of a --batch file).
    Recall(RecallArgs),
    /// Show one memory and its edges.
    Get { id: MemoryId },
    /// Forget one memory: soft by default (recall stops returning it; `recover` brings it
    /// back); with --hard, remove it from every table, index, vector, edge and archive file.
    Forget {
        id: MemoryId,
        #[arg(long)]
        hard: bool,
    },
    /// Bring back a memory that was forgotten softly, decayed, or archived.
    Recover { id: MemoryId },
    /// Tell ATLAS whether a recalled memory was useful: it resets its decay clock (and for a
    /// fact is an SM-2 review); irrelevant shortens a fact's review interval.
    Feedback {
        id: MemoryId,
        #[arg(long, conflicts_with = "irrelevant", required_unless_present = "irrelevant")]
        useful: bool,
        #[arg(long)]
        irrelevant: bool,
    },
    /// Run the decay pass now: memories whose strength fell below 0.30 are soft-deleted.
    Decay,
    /// Move old soft-deleted memories (and, if asked, old episodes) to archive/*.jsonl.gz
    /// beside the database; `archive restore [ID…]` brings them back.
    Archive {
        #[command(subcommand)]
        action: Option<ArchiveAction>,
        /// Archive memories soft-deleted at least this many days ago (default from config: 30).
        #[arg(long, value_name = "DAYS")]
        deleted_older_than: Option<f64>,
        /// Also archive episodes learned at least this many days ago.
        #[arg(long, value_name = "DAYS")]
        episodes_older_than: Option<f64>,
    },
    /// Counts and sizes of the memory space.
    Stats,
    /// Print the vectors of the texts in a JSON Lines file of {"id", "text"}.
    Embed {
        #[arg(long, value_name = "FILE")]
        batch: PathBuf,
    },
    /// Re-embed every memory with the configured model (after a model change); resumable.
    Reembed {
        /// Also with the same model: queue every memory again (after an upgrade changes what a
        /// memory is embedded as; docs/EVAL.md). Interrupted, a plain `reembed` finishes it.
        #[arg(long)]
        all: bool,
    },
    /// Write a full export (ids, edges, context) that `import` restores exactly, or with
    /// `--format cypher` the graph as Cypher statements (docs/FILES.md).
    Export {
        /// Write here instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Include every memory's vector, so that a restore need not re-embed (jsonl only).
        #[arg(long)]
        vectors: bool,
        #[arg(long, value_enum, default_value_t)]
        format: files::ExportFormat,
    },
    /// The markdown bank: what the space believes, as files a person reads, edits and versions
    /// (docs/FILES.md).
    Bank {
        #[command(subcommand)]
        action: files::BankAction,
    },
    /// A folder of markdown documents, kept searchable as sections of kind `doc`.
    Docs {
        #[command(subcommand)]
        action: files::DocsAction,
    },
    /// Embed every memory still waiting for a vector, with a progress bar.
    EmbedPending,
    /// Run one sleep cycle now: episodes become facts (with history) and linked entities.
    Consolidate {
        /// Close every session now: each gets its summary, however recently it was spoken in.
        #[arg(long)]
        end_sessions: bool,
    },
    /// The Experience memory: past tasks with their outcome and feedback.
    Experience {
        #[command(subcommand)]
        action: ExperienceAction,
    },
    /// The Strategy bank: situations and what to do in them, with success statistics.
    Strategy {
        #[command(subcommand)]
        action: StrategyAction,
    },
    /// The Concept library: reusable code patterns, learned from trajectories or added.
    Concept {
        #[command(subcommand)]
        action: ConceptAction,
    },
    /// The context for a task, packed into a token budget: persona, core memory, the goal,
    /// retrieved memories, then the session's recent history.
    Context {
        task: String,
        /// Tokens in all (estimated: characters / 4), split 500:500:500:4000:2000.
        #[arg(long, default_value_t = 7500)]
        budget: usize,
        /// The session whose history ends the context.
        #[arg(long)]
        session: Option<String>,
        /// user:ID or agent:ID (repeatable).
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Serve the HTTP API (docs/SERVER.md): JSON under /v1, /healthz, /metrics. Runs until
    /// interrupted; the caches stay warm, embedding and the sleep cycle run in the background.
    Serve {
        /// Address to listen on; anything but loopback needs a token.
        #[arg(long, default_value = atlas_server::DEFAULT_LISTEN)]
        listen: String,
        /// A file holding the bearer token clients must send (else ATLAS_TOKEN).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Requests in flight beyond this are answered 503 with Retry-After (at least 1).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
        max_in_flight: u64,
        /// Reading a request (headers and body) and answering a read take at most this many
        /// ms, else 503 (a write that has begun always finishes and says how).
        #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
        timeout_ms: u64,
        /// Largest request body, in bytes.
        #[arg(long, default_value_t = 8 << 20)]
        max_body_bytes: usize,
        /// Largest body of POST /v1/import, in bytes (it streams in; one transaction).
        #[arg(long, default_value_t = 1 << 30)]
        max_import_bytes: usize,
        /// A host name clients may reach the server by, besides the loopback names (the Host
        /// header is checked against DNS rebinding); repeat for more.
        #[arg(long, value_name = "HOST")]
        allowed_host: Vec<String>,
        /// A web origin (scheme://host[:port]) whose pages may call the API, besides the
        /// server's own; repeat for more.
        #[arg(long, value_name = "ORIGIN")]
        allowed_origin: Vec<String>,
    },
    /// The memory inspector (docs/INSPECTOR.md): serves the API and its web page on a loopback
    /// port and prints the page's address. `atlas serve` serves the same page at `/`.
    Ui {
        /// Loopback address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Also open the page in the desktop's browser.
        #[arg(long)]
        open: bool,
    },
    /// Access keys of a served space: `keys add --user U [--agent A] --role read|write|admin`,
    /// `keys list`, `keys revoke ID` (docs/SERVER.md).
    Keys {
        #[command(subcommand)]
        action: keys::KeysAction,
    },
    /// Serve MCP over stdin and stdout (docs/SERVER.md): the tools remember, recall, get,
    /// forget, stats, context and the agent memories, for Claude, Cursor, Zed and any MCP client.
    Mcp,
    /// Where a memory came from and what became of it: sources, versions it replaced, what
    /// replaced it, the entities it names.
    Explain { id: MemoryId },
}

#[derive(Subcommand)]
pub(crate) enum ExperienceAction {
    /// Store the trajectories of a JSON Lines file ({"id", "task", "steps", "output",
    /// "feedback", "success", "time", "tags"}), each at most once.
    Store {
        file: PathBuf,
        /// user:ID or agent:ID (repeatable).
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// The experiences most worth reading for a task: what worked first.
    Search {
        task: String,
        #[arg(long, default_value_t = 4)]
        k: usize,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Fold near-duplicates (provenance kept), count uninformative failures, show clusters.
    Refine {
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Forget (softly) the experiences that meet every criterion given.
    Prune {
        #[arg(long, value_name = "DAYS")]
        older_than: Option<f64>,
        /// Only failures.
        #[arg(long)]
        failures: bool,
        /// Only experiences never used.
        #[arg(long)]
        unused: bool,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum StrategyAction {
    /// Add a strategy (success rate 0.5 until used); prints its id.
    Add {
        #[arg(long)]
        situation: String,
        #[arg(long)]
        suggestion: String,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Record one use of a strategy and whether it worked.
    Update {
        id: MemoryId,
        #[arg(long, action = clap::ArgAction::Set, value_name = "true|false")]
        success: bool,
    },
    /// The strategies for a task, ranked by relevance × (0.5 + success rate).
    Read {
        task: String,
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Rank by the success rate's upper confidence bound: try rarely used strategies.
        #[arg(long)]
        explore: bool,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Abstract the trajectories of a JSON Lines file into strategies (near-duplicates update
    /// the existing strategy's statistics).
    Write {
        file: PathBuf,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum ConceptAction {
    /// Learn concepts from what recurs across the trajectories of a JSON Lines file.
    Compress {
        file: PathBuf,
        /// Most concepts to learn.
        #[arg(long, default_value_t = 5)]
        max: usize,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Add a concept (a primitive).
    Add {
        #[arg(long)]
        name: String,
        #[arg(long)]
        code: String,
        #[arg(long, default_value = "")]
        description: String,
        /// A parameter, in order (repeatable).
        #[arg(long = "param")]
        params: Vec<String>,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// The concepts for a query, ranked by relevance × (0.5 + success rate).
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        k: usize,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// One concept.
    Get { id: MemoryId },
    /// A new concept running the given ones in order.
    Compose {
        #[arg(required = true, num_args = 2..)]
        ids: Vec<MemoryId>,
        #[arg(long, value_name = "KEY:VALUE")]
        scope: Vec<String>,
    },
    /// Record one use of a concept and whether it worked.
    Update {
        id: MemoryId,
        #[arg(long, action = clap::ArgAction::Set, value_name = "true|false")]
        success: bool,
    },
}

#[derive(Subcommand)]
enum ArchiveAction {
    /// Restore archived memories (all, or the given ids) under their own ids.
    Restore { ids: Vec<MemoryId> },
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
    /// An idempotency key: running the same command again with it stores nothing twice.
    #[arg(long)]
    key: Option<String>,
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

/// `atlas serve`: refuses an open address without a token, then serves until interrupted.
/// Runs the command line `args` (the program's name first) to its end and returns its exit
/// status: 0 on success, 1 on an error (reported on standard error, or as JSON with `--json`),
/// 2 for a command line clap refuses (after printing why; `--help` and `--version` exit 0).
/// Call it from a thread with no tokio runtime: it builds its own.
pub fn run_command_line<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // SAFETY: a program calls this first, from its only thread (the binary's main; the Python
    // console script before any thread of ours exists), so nothing reads the environment or
    // handles signals concurrently.
    unsafe {
        // Like every Unix filter: a reader that goes away (`| head`) ends us quietly, no panic.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        atlas_runtime::quiet_onnx_runtime();
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    // A server answers many clients at once: every core; a one-shot command needs one thread.
    let runtime = match cli.command {
        Command::Serve { .. } | Command::Ui { .. } | Command::Mcp => {
            tokio::runtime::Builder::new_multi_thread().enable_all().build()
        }
        _ => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    };
    match runtime {
        Ok(runtime) => runtime.block_on(cli_main(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            1
        }
    }
}

async fn cli_main(cli: Cli) -> u8 {
    // Another host of this library (a Python process) may have set a subscriber first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ATLAS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in a log file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => 0,
        Err(e) => {
            if json {
                println!("{}", output::error_json(&e));
            } else {
                eprintln!("error: {e:#}");
            }
            1
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
    if let Some(space) = cli.space {
        config.qdrant.space = Some(space);
    }
    if let Some(db) = cli.db {
        config.db = db;
    }
    if let Some(dir) = cli.model_dir {
        config.onnx.model_dir = Some(dir);
    }
    let json = cli.json;
    // Only commands that write may create the memory space: a mistyped path is an error.
    config.create = matches!(
        cli.command,
        Command::Import { .. }
            | Command::Remember(_)
            | Command::Experience { action: ExperienceAction::Store { .. } }
            | Command::Strategy { action: StrategyAction::Add { .. } | StrategyAction::Write { .. } }
            | Command::Concept { action: ConceptAction::Compress { .. } | ConceptAction::Add { .. } }
            | Command::Bank { action: files::BankAction::Rebuild { .. } }
            | Command::Docs { .. }
    );
    match &cli.command {
        Command::Embed { batch } => return embed::embed(&config, batch, json).await,
        Command::Reembed { all } => return reembed(config, *all, json).await,
        _ => {}
    }
    if matches!(
        cli.command,
        Command::Remember(_)
            | Command::Get { .. }
            | Command::Forget { .. }
            | Command::Recover { .. }
            | Command::Feedback { .. }
            | Command::Decay
            | Command::Archive { .. }
            | Command::Stats
            | Command::Export { .. }
            | Command::Explain { .. }
            | Command::Keys { .. }
    ) {
        // These never embed: the model is not loaded (its vectors come from a later recall,
        // import, embed-pending or a long-lived process).
        config.embedder = atlas_runtime::config::EmbedderKind::None;
    }
    let atlas = Atlas::open(config).await?;
    match cli.command {
        Command::Embed { .. } | Command::Reembed { .. } => unreachable!("handled before opening the store"),
        Command::Import { file, again } => import(&atlas, &file, again, json).await,
        Command::Explain { id } => {
            let explanation = atlas.explain(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?;
            output::print_explanation(&explanation, json);
            Ok(())
        }
        Command::Consolidate { end_sessions } => {
            let report =
                if end_sessions { atlas.consolidate_ending_sessions().await? } else { atlas.consolidate().await? };
            output::print_cycle(&report, json);
            Ok(())
        }
        Command::EmbedPending => {
            let started = Instant::now();
            let embedded = embed_all(&atlas, json).await?;
            let left = atlas.pending_vectors().await?;
            let secs = started.elapsed().as_secs_f64();
            output::print_line(
                json,
                serde_json::json!({"embedded": embedded, "pending_vectors": left, "took_ms": secs * 1e3}),
                || embedded_message(embedded, left, secs),
            );
            Ok(())
        }
        Command::Remember(args) => remember(&atlas, args, json).await,
        Command::Recall(args) => recall(&atlas, args, json).await,
        Command::Get { id } => {
            let detail = atlas.get(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?;
            output::print_detail(&detail, json);
            Ok(())
        }
        Command::Experience { action } => agent_memory::experience(&atlas, action, json).await,
        Command::Strategy { action } => agent_memory::strategy(&atlas, action, json).await,
        Command::Concept { action } => agent_memory::concept(&atlas, action, json).await,
        Command::Mcp => {
            let atlas = Arc::new(atlas);
            atlas.start_sleep_cycle();
            atlas_server::mcp::serve_stdio(Arc::clone(&atlas)).await.context("atlas mcp")?;
            atlas.end_session();
            Ok(())
        }
        Command::Keys { action } => keys::run(&atlas, action, json).await,
        Command::Serve {
            listen,
            token_file,
            max_in_flight,
            timeout_ms,
            max_body_bytes,
            max_import_bytes,
            allowed_host,
            allowed_origin,
        } => {
            let token = match token_file {
                Some(path) => Some(
                    std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read the token file {}", path.display()))?
                        .trim()
                        .to_owned(),
                ),
                None => std::env::var("ATLAS_TOKEN").ok(),
            }
            .filter(|t| !t.is_empty());
            let options = atlas_server::ServerOptions {
                token,
                max_body_bytes,
                max_import_bytes,
                timeout: std::time::Duration::from_millis(timeout_ms),
                max_in_flight: max_in_flight as usize,
                allowed_hosts: allowed_host,
                allowed_origins: allowed_origin,
                ..atlas_server::ServerOptions::default()
            };
            serve::serve(atlas, &listen, options, None).await
        }
        Command::Ui { listen, open } => {
            let addr: std::net::SocketAddr =
                listen.parse().map_err(|e| anyhow!("--listen: {listen:?} is not an address like 127.0.0.1:0 ({e})"))?;
            if !atlas_server::is_loopback(&addr) {
                return Err(anyhow!("--listen: `atlas ui` listens on loopback only; use `atlas serve` with a token"));
            }
            let token = std::env::var("ATLAS_TOKEN").ok().filter(|t| !t.is_empty());
            let options = atlas_server::ServerOptions { token, ..atlas_server::ServerOptions::default() };
            serve::serve(atlas, &listen, options, Some(open)).await
        }
        Command::Context { task, budget, session, scope } => {
            let mut scope = parse_scope(&scope)?;
            scope.session = session.or(scope.session);
            let context = atlas.context(&task, budget, scope).await?;
            if json {
                println!("{}", atlas_runtime::wire::context_value(&context));
            } else {
                println!("{}", context.text());
                eprintln!("({} of {} tokens)", context.tokens, context.budget);
            }
            Ok(())
        }
        Command::Forget { id, hard: false } => {
            if !atlas.forget(id).await? {
                return Err(atlas_domain::AtlasError::NotFound(id).into());
            }
            output::print_line(json, serde_json::json!({"forgotten": id.0, "hard": false}), || {
                format!("forgot memory {id} (soft: `atlas recover {id}` brings it back; --hard removes it for good)")
            });
            Ok(())
        }
        Command::Forget { id, hard: true } => {
            let done = atlas.forget_hard(id).await?;
            if !done.from_store && done.archive_files == 0 {
                return Err(atlas_domain::AtlasError::NotFound(id).into());
            }
            output::print_line(
                json,
                serde_json::json!({"forgotten": id.0, "hard": true, "archive_files": done.archive_files}),
                || format!("removed memory {id} for good (and from {} archive files)", done.archive_files),
            );
            Ok(())
        }
        Command::Recover { id } => {
            let how = atlas.recover(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?;
            output::print_line(json, atlas_runtime::wire::recovered_value(id, how), || match how {
                atlas_runtime::forgetting::Recovered::Undeleted => format!("recovered memory {id}"),
                atlas_runtime::forgetting::Recovered::FromArchive => format!("restored memory {id} from the archive"),
                atlas_runtime::forgetting::Recovered::AlreadyLive => format!("memory {id} was not forgotten"),
            });
            Ok(())
        }
        Command::Feedback { id, useful, .. } => {
            let m = atlas.feedback(id, useful).await?;
            let value = atlas_runtime::wire::feedback_value(&m, useful);
            output::print_line(json, value, || {
                let verdict = if useful { "useful" } else { "irrelevant" };
                format!("memory {id} marked {verdict} ({} uses)", m.lifecycle.uses)
            });
            Ok(())
        }
        Command::Decay => {
            let r = atlas.decay().await?;
            output::print_line(json, serde_json::to_value(&r).expect("a report serialises"), || {
                format!(
                    "decay: {} memories examined, {} decaying, {} soft-deleted",
                    r.examined,
                    r.decaying,
                    r.ids.len()
                )
            });
            Ok(())
        }
        Command::Archive { action: Some(ArchiveAction::Restore { ids }), .. } => {
            let only: std::collections::HashSet<MemoryId> = ids.into_iter().collect();
            let r = atlas.restore_archive((!only.is_empty()).then_some(&only)).await?;
            output::print_line(json, serde_json::to_value(&r).expect("a report serialises"), || {
                format!("restored {} memories from the archive", r.restored.len())
            });
            Ok(())
        }
        Command::Archive { action: None, deleted_older_than, episodes_older_than } => {
            let defaults = &atlas.config().forgetting;
            let policy = atlas_runtime::forgetting::ArchivePolicy {
                deleted_days: deleted_older_than.unwrap_or(defaults.archive_deleted_after_days),
                episode_days: episodes_older_than.or(defaults.archive_episodes_after_days),
            };
            let r = atlas.archive(policy).await?;
            output::print_line(json, serde_json::to_value(&r).expect("a report serialises"), || match &r.file {
                Some(file) => format!(
                    "archived {} memories ({} soft-deleted, {} episodes) to {}",
                    r.archived,
                    r.soft_deleted,
                    r.episodes,
                    file.display()
                ),
                None => "nothing to archive".into(),
            });
            Ok(())
        }
        Command::Stats => {
            let stats = atlas.stats().await?;
            output::print_stats(atlas.config(), &stats, json);
            Ok(())
        }
        Command::Export { out, format: files::ExportFormat::Cypher, vectors } => {
            if vectors {
                return Err(anyhow!("--vectors: a Cypher export carries no vectors (use --format jsonl)"));
            }
            files::export_cypher(&atlas, out).await
        }
        Command::Bank { action } => files::bank(&atlas, action, json).await,
        Command::Docs { action } => files::docs(&atlas, action, json).await,
        Command::Export { out, vectors, format: files::ExportFormat::Jsonl } => {
            let count = match &out {
                Some(path) => {
                    let file =
                        atlas_files::create(path).with_context(|| format!("cannot create {}", path.display()))?;
                    let mut writer = std::io::BufWriter::new(file);
                    atlas.export(&mut writer, vectors).await?
                }
                None => atlas.export(&mut std::io::BufWriter::new(std::io::stdout().lock()), vectors).await?,
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

async fn import(atlas: &Atlas, file: &std::path::Path, again: bool, json: bool) -> Result<()> {
    let started = Instant::now();
    let shown = if file.as_os_str() == "-" { "stdin".to_owned() } else { file.display().to_string() };
    let bar = progress_bar(0);
    bar.set_message("storing");
    let stored_bar = bar.clone();
    let progress: atlas_domain::ports::ProgressFn = Arc::new(move |n| stored_bar.set_position(n as u64));
    let options = ImportOptions { again, ..ImportOptions::default() };
    let imported = if file.as_os_str() == "-" {
        atlas.import_reader(std::io::stdin(), "stdin", options, Some(progress)).await?
    } else {
        atlas.import_file(file, options, Some(progress)).await?
    };
    bar.finish_and_clear();
    // Acknowledged: committed. Said at once, before any embedding, so that a kill from here on
    // never leaves a stored import unacknowledged.
    let (n, secs) = (imported.ids.len(), started.elapsed().as_secs_f64());
    let ids = atlas_domain::encode_id_runs(&imported.ids);
    output::print_line(
        json,
        serde_json::json!({
            "imported": if imported.replayed { 0 } else { n }, "stored": n, "file": shown, "took_ms": secs * 1e3,
            "first_id": imported.ids.first().map(|i| i.0), "last_id": imported.ids.last().map(|i| i.0),
            "replayed": imported.replayed, "restored": imported.restored, "renumbered": imported.renumbered,
            "vectors_restored": imported.vectors, "recorded_at": imported.recorded_at.to_rfc3339(),
        }),
        || {
            if imported.replayed {
                format!(
                    "already imported: this content of {shown} was stored on {} as {n} memories (ids {ids}); \
                     nothing stored again (--again imports a second copy)",
                    imported.recorded_at.to_rfc3339()
                )
            } else if imported.restored {
                let how = if imported.renumbered { "under new ids, every reference mapped" } else { "with their ids" };
                format!("stored {n} memories from {shown} ({how}: {ids}) in {secs:.2} s")
            } else {
                format!("stored {n} memories from {shown} (ids {ids}) in {secs:.2} s")
            }
        },
    );
    std::io::stdout().flush()?;
    let started = Instant::now();
    let embedded = embed_all(atlas, json).await?;
    let left = atlas.pending_vectors().await?;
    if embedded > 0 || left > 0 {
        // Under --json the acknowledgment above stays the one document on standard output.
        let line = if atlas.embedder().is_none() {
            // Nothing here embeds: say so, not that another process claimed them.
            format!(
                "{left} memories wait for a vector: this configuration has no embedder (embedder = \"none\"); a process with one embeds them (`atlas embed-pending`)"
            )
        } else {
            embedded_message(embedded, left, started.elapsed().as_secs_f64())
        };
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}

/// Embeds the backlog with a progress bar on standard error; interruptible at any point
/// without loss (the queue is durable). An embedding failure is reported, not fatal: what was
/// stored stays stored and queued.
async fn embed_all(atlas: &Atlas, json: bool) -> Result<usize> {
    if atlas.embedder().is_none() {
        return Ok(0);
    }
    let total = atlas.pending_vectors().await?;
    let bar = if json { ProgressBar::hidden() } else { progress_bar(total) };
    bar.set_message("embedding");
    let embedded_bar = bar.clone();
    let result = atlas.flush_vectors(Some(Arc::new(move |n| embedded_bar.set_position(n as u64)))).await;
    bar.finish_and_clear();
    if let Err(e) = result {
        eprintln!(
            "warning: embedding failed ({e}); the memories stay stored and queued (`atlas embed-pending` retries)"
        );
    }
    // Counted from the queue: this process's background task may have embedded some of them.
    Ok(total.saturating_sub(atlas.pending_vectors().await?) as usize)
}

fn embedded_message(embedded: usize, left: u64, secs: f64) -> String {
    let mut line = format!("embedded {embedded} memories in {secs:.2} s");
    if left > 0 {
        line.push_str(&format!("; {left} still wait for a vector (claimed by another process, or failed)"));
    }
    line
}

async fn reembed(config: Config, all: bool, json: bool) -> Result<()> {
    let started = Instant::now();
    let bar = progress_bar(0);
    bar.set_message("re-embedding");
    let progress_bar = bar.clone();
    let done = Atlas::reembed_all_or_pending(
        config,
        all,
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
    let input = Remember {
        text: args.text,
        speaker: args.speaker,
        scope,
        time: parse_time("--time", args.time)?,
        meta,
        key: args.key,
    };
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
    // Every query is read and checked before any is answered: a bad line names itself and
    // nothing half-printed is left to undo.
    let queries = match (args.query, args.batch) {
        (Some(query), None) => vec![(None, query)],
        (None, Some(batch)) => {
            let shown = batch.display().to_string();
            let text = std::fs::read_to_string(&batch).with_context(|| format!("cannot read {shown}"))?;
            let lines = parse_lines(&text, &shown, ["id", "query"])?;
            lines.into_iter().map(|(at, [id, query])| (Some((at, id)), query)).collect()
        }
        _ => return Err(anyhow!("recall needs a QUERY or --batch FILE")),
    };
    for (at, query) in &queries {
        if query.trim().is_empty() {
            let location = at.as_ref().map_or("recall".to_owned(), |(at, _)| at.clone());
            return Err(atlas_domain::AtlasError::invalid(location, "field \"query\": empty").into());
        }
    }
    // A CLI process lives too briefly for the background embedder: embed what this process
    // (or another) just wrote, within a small budget, then answer whatever is left waiting.
    atlas.catch_up().await;
    let batch = queries.len() > 1 || queries.first().is_some_and(|(at, _)| at.is_some());
    for (at, query) in queries {
        let result = atlas.recall(RecallRequest { query: query.clone(), ..template.clone() }).await?;
        let label = at.as_ref().map(|(_, id)| (id.as_str(), query.as_str()));
        output::print_recall(label.filter(|_| batch), &result, json, args.explain);
        if !json && result.pending_vectors > 0 && !batch {
            eprintln!(
                "note: {} memories still wait for a vector and were searched by full text only \
                 (`atlas embed-pending` embeds them)",
                result.pending_vectors
            );
        }
    }
    std::io::stdout().lock().flush()?;
    Ok(())
}

/// Lines of JSON objects with string `fields` (`id` may be a number), each with where it
/// stands (`file:line`); errors name the file, line and field. A UTF-8 byte-order mark is read
/// as the start of the file, not as part of its first line.
fn parse_lines<const N: usize>(text: &str, origin: &str, fields: [&str; N]) -> Result<Vec<(String, [String; N])>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{origin}:{}", i + 1);
        if let Some(row) = parse_line(line, &at, fields)? {
            out.push((at, row));
        }
    }
    Ok(out)
}

/// One JSON line's string `fields` (`id` may be a number); `None` for a blank line. Errors name
/// `at` (`file:line`) and the field.
pub(crate) fn parse_line<const N: usize>(line: &str, at: &str, fields: [&str; N]) -> Result<Option<[String; N]>> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
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
    Ok(Some(row))
}

pub(crate) fn parse_scope(pairs: &[String]) -> Result<Scope> {
    let mut scope = Scope::default();
    for pair in pairs {
        scope.set_from_pair(pair).map_err(|m| anyhow!("--scope: {m}"))?;
    }
    Ok(scope)
}

fn parse_time(flag: &str, value: Option<String>) -> Result<Option<Timestamp>> {
    value.map(|v| Timestamp::parse(&v).map_err(|m| anyhow!("{flag}: {m}"))).transpose()
}
