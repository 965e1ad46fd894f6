//! The `atlas` command line: a thin shell over `atlas-runtime` with human and `--json` output.
//! A library so that every way in runs the same commands: the `atlas` binary, and the console
//! script of the Python package (atlas-py).

mod agent_memory;
mod args;
mod embed;
mod files;
mod import;
mod keys;
mod output;
mod serve;

use anyhow::{Context, Result, anyhow};
use args::{ArchiveAction, Cli, Command, ConceptAction, ExperienceAction, RecallArgs, RememberArgs, StrategyAction};
use atlas_domain::{MemoryId, Scope, Timestamp};
use atlas_runtime::{Atlas, Config, RecallRequest, Remember};
use clap::Parser;
use import::{embed_all, embedded_message, prepare_search, progress_bar};
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// Whether `args` (the program's name first) is a command line the binary accepts, without
/// running it: clap's words when it is not. The docs' examples are held to it (tests/docs.rs).
pub fn check_command_line<I, T>(args: I) -> std::result::Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args).map(drop).map_err(|e| e.to_string())
}

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
            // A team's first step before its server starts: a key for the space it will serve.
            | Command::Keys { action: keys::KeysAction::Add { .. } }
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
        Command::Import { file, again } => import::import(&atlas, &file, again, json).await,
        Command::Explain { id } => {
            let explanation = atlas.explain(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?;
            output::print_explanation(&explanation, json);
            Ok(())
        }
        Command::Consolidate { end_sessions } => {
            let report =
                if end_sessions { atlas.consolidate_ending_sessions().await? } else { atlas.consolidate().await? };
            // What the cycle wrote (facts, entities, summaries) is embedded and indexed before
            // this process ends, as an import's memories are: a recall right after must not pay.
            embed_all(&atlas, json).await?;
            prepare_search(&atlas).await;
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
            atlas.keep_search_current();
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
        Command::Forget { id, hard } => {
            let forgotten = atlas.forget_as(id, hard).await?;
            output::print_line(json, atlas_runtime::wire::forgotten_value(id, forgotten), || match forgotten {
                atlas_runtime::forgetting::Forgotten::Soft => {
                    format!(
                        "forgot memory {id} (soft: `atlas recover {id}` brings it back; --hard removes it for good)"
                    )
                }
                atlas_runtime::forgetting::Forgotten::Hard { archive_files } => {
                    format!("removed memory {id} for good (and from {archive_files} archive files)")
                }
            });
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
            let file = std::fs::File::open(&batch).with_context(|| format!("cannot read {shown}"))?;
            let lines =
                json_lines(std::io::BufReader::new(file), &shown, ["id", "query"]).collect::<Result<Vec<_>>>()?;
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

/// The rows of a JSON Lines stream, read a line at a time by the runtime's one reader
/// ([`atlas_runtime::JsonLines`]: BOM, blank lines, `file:line`): each line's string `fields`
/// (`id` may be a number) with where it stands; errors name the file, line and field.
pub(crate) fn json_lines<const N: usize>(
    reader: impl std::io::BufRead,
    origin: &str,
    fields: [&'static str; N],
) -> impl Iterator<Item = Result<(String, [String; N])>> {
    atlas_runtime::JsonLines::new(reader, origin, usize::MAX).map(move |line| {
        let (at, line) = line?;
        let row = parse_line(&line, &at, fields)?;
        Ok((at, row))
    })
}

/// One JSON line's string `fields` (`id` may be a number). Errors name `at` (`file:line`) and
/// the field; a key given twice is refused, as everywhere.
fn parse_line<const N: usize>(line: &str, at: &str, fields: [&str; N]) -> Result<[String; N]> {
    let value = atlas_domain::strict_json::from_str(line).map_err(|e| match &e.field {
        Some(field) => anyhow!("{at}: field \"{field}\": {e}"),
        None => anyhow!("{at}: not valid JSON ({e})"),
    })?;
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
    Ok(row)
}

pub(crate) fn parse_scope(pairs: &[String]) -> Result<Scope> {
    let mut scope = Scope::default();
    for pair in pairs {
        // Named as every door names it (`scope.user`), so that one rule reads the same everywhere.
        let key = pair.split(':').next().unwrap_or_default().trim();
        scope.set_from_pair(pair).map_err(|m| anyhow!("--scope: field \"scope.{key}\": {m}"))?;
    }
    // The rule every door applies to a scope id it is given (never blank, a name's length).
    for (field, value) in
        [("scope.user", &scope.user), ("scope.agent", &scope.agent), ("scope.session", &scope.session)]
    {
        if let Some(value) = value {
            atlas_domain::policy::limits::check_scope_id(value, field, "--scope")?;
        }
    }
    Ok(scope)
}

fn parse_time(flag: &str, value: Option<String>) -> Result<Option<Timestamp>> {
    value.map(|v| Timestamp::parse(&v).map_err(|m| anyhow!("{flag}: {m}"))).transpose()
}
