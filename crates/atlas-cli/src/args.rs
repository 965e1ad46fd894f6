//! The command line's shape: every command, flag and argument `atlas` takes (clap), with the
//! help text a person reads. Parsing only: what each command does is in `lib.rs` and the
//! command modules.

use crate::{files, keys};
use atlas_domain::{MemoryId, MemoryKind};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// ATLAS: local-first memory for LLM agents, in one SQLite file.
#[derive(Parser)]
#[command(name = "atlas", version, about)]
pub(crate) struct Cli {
    /// The memory space (SQLite file). Overrides ATLAS_DB and the config file.
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) db: Option<PathBuf>,
    /// Where memories live: sqlite (the default) or qdrant (with --qdrant-url; --db then names
    /// the space's sidecar file). Overrides `storage` and ATLAS_STORAGE.
    #[arg(long, global = true, value_name = "STORE", value_parser = ["sqlite", "qdrant"])]
    pub(crate) store: Option<String>,
    /// The Qdrant server's gRPC address (e.g. http://localhost:6334). Overrides qdrant.url.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) qdrant_url: Option<String>,
    /// With --store qdrant: the memory space's name on the server, shared by every process of
    /// every host that names it (no local file; --db is then not used). Overrides qdrant.space
    /// and ATLAS_QDRANT_SPACE.
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) space: Option<String>,
    /// An embedding model folder of one's own (model.onnx, tokenizer.json and the pooling and
    /// prompt configs sentence-transformers exports; see docs/CONFIG.md). Overrides
    /// onnx.model_dir and ATLAS_ONNX_MODEL_DIR.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) model_dir: Option<PathBuf>,
    /// A TOML configuration file (see docs/CONFIG.md).
    #[arg(long, global = true, value_name = "FILE", env = "ATLAS_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Machine-readable output: one JSON document (or one per line for batches).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        #[arg(long, default_value_t = atlas_domain::policy::context::DEFAULT_BUDGET)]
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
pub(crate) enum ArchiveAction {
    /// Restore archived memories (all, or the given ids) under their own ids.
    Restore { ids: Vec<MemoryId> },
}

#[derive(Args)]
pub(crate) struct RememberArgs {
    pub(crate) text: String,
    #[arg(long)]
    pub(crate) speaker: Option<String>,
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// user:ID or agent:ID (repeatable).
    #[arg(long, value_name = "KEY:VALUE")]
    pub(crate) scope: Vec<String>,
    /// When it was said (RFC 3339); defaults to now.
    #[arg(long)]
    pub(crate) time: Option<String>,
    /// A JSON object kept with the memory.
    #[arg(long)]
    pub(crate) meta: Option<String>,
    /// An idempotency key: running the same command again with it stores nothing twice.
    #[arg(long)]
    pub(crate) key: Option<String>,
}

#[derive(Args)]
pub(crate) struct RecallArgs {
    /// The query; omit it with --batch.
    pub(crate) query: Option<String>,
    /// A JSON Lines file of {"id", "query"}; prints one JSON line per query.
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    pub(crate) batch: Option<PathBuf>,
    /// How many memories to return.
    #[arg(long, short, default_value_t = 10)]
    pub(crate) k: usize,
    /// Only this scope: user:ID, agent:ID or session:ID (repeatable).
    #[arg(long, value_name = "KEY:VALUE")]
    pub(crate) scope: Vec<String>,
    /// Only these kinds (repeatable): episode, fact, entity, core, experience, concept, strategy.
    #[arg(long)]
    pub(crate) kind: Vec<MemoryKind>,
    /// Only memories whose event time is at or after this (RFC 3339).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Only memories whose event time is before this (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<String>,
    /// Recall what was valid at this time instead of now (RFC 3339).
    #[arg(long)]
    pub(crate) as_of: Option<String>,
    /// Show, for every hit, each signal's rank, raw score and contribution to the fused score.
    #[arg(long)]
    pub(crate) explain: bool,
}
