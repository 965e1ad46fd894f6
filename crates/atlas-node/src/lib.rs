//! The Node.js package's native module: `open` resolves to a `Space`, an open memory space whose
//! methods translate JavaScript calls into runtime calls, each a Promise run on napi-rs's one
//! tokio runtime of the process (never on the JavaScript thread), answering in the JSON shapes of
//! the CLI's `--json`. Arguments are checked where HTTP, MCP and Python have them checked
//! (`atlas_server`'s operations); an error rejects with the server's error body as its message,
//! which the JavaScript layer (`lib/errors.cjs`) raises as the `AtlasError` of its code.

use atlas_domain::access::Caller;
use atlas_domain::{AtlasError as Error, MemoryId, RecallFilter, Scope};
use atlas_runtime::in_process::OpenOptions;
use atlas_runtime::{Atlas, ImportOptions};
use atlas_server::Op;
use atlas_server::ops::ApiError;
use napi::Status;
use napi_derive::napi;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// The error body (`{"code", "message", "field", "location", "index"}`) as the rejection's
/// message, for the JavaScript layer to read back.
fn rejection(e: ApiError) -> napi::Error {
    napi::Error::new(Status::GenericFailure, e.body["error"].to_string())
}

fn atlas_err(e: Error) -> napi::Error {
    rejection(ApiError::from(e))
}

fn invalid(location: &str, message: String) -> napi::Error {
    atlas_err(Error::InvalidInput { location: location.into(), message })
}

fn memory_id(id: i64) -> napi::Result<MemoryId> {
    atlas_server::args::memory_id(id).map_err(rejection)
}

/// How to open a space (every field optional): a SQLite file, or a named space on a Qdrant
/// server; a TOML configuration file or mem0's configuration object; the embedder.
#[napi(object)]
pub struct OpenArgs {
    /// The SQLite file (created when missing; `ATLAS_DB` or `atlas.db` otherwise).
    pub db: Option<String>,
    /// A Qdrant server's URL: the space lives there instead of in a file.
    pub url: Option<String>,
    /// The space's name on that server.
    pub space: Option<String>,
    /// A TOML configuration file (docs/CONFIG.md).
    pub config_file: Option<String>,
    /// mem0's configuration object (its `embedder` section is mapped).
    pub mem0: Option<Value>,
    /// `onnx`, `http` or `none`.
    pub embedder: Option<String>,
    /// Runs the sleep cycle in the background (default true).
    pub sleep_cycle: Option<bool>,
}

/// Opens (creating it if missing) a memory space; `ATLAS_*` variables apply as for the CLI. The
/// model is fetched and verified on first use, like the CLI's and the wheel's.
#[napi]
pub async fn open(args: OpenArgs) -> napi::Result<Space> {
    let options = OpenOptions {
        db: args.db.map(PathBuf::from),
        url: args.url,
        space: args.space,
        config_file: args.config_file.map(PathBuf::from),
        mem0: args.mem0,
        embedder: args.embedder,
    };
    let settings = options.config(|k| std::env::var(k).ok()).map_err(atlas_err)?;
    let label = atlas_runtime::in_process::label(&settings);
    let atlas = Atlas::open(settings).await.map_err(atlas_err)?;
    // Awaited, not left running: a task still writing the cache files beside the database
    // after `close()` raced the caller removing its folder.
    let _ = atlas.keep_search_current().await;
    if args.sleep_cycle.unwrap_or(true) {
        atlas.start_sleep_cycle();
    }
    Ok(Space { atlas: Mutex::new(Some(Arc::new(atlas))), label })
}

/// The scope and kinds of [`Space::latest`].
#[napi(object)]
pub struct LatestArgs {
    pub user: Option<String>,
    pub agent: Option<String>,
    pub session: Option<String>,
    /// Memory kinds (`episode`, `fact`, ...); every kind when empty.
    pub kind: Option<Vec<String>>,
    /// At most this many (default 100).
    pub limit: Option<u32>,
    /// Only versions current now (none a later version replaced).
    pub current: Option<bool>,
}

/// An open memory space. One serves every concurrent call of the process.
#[napi]
pub struct Space {
    atlas: Mutex<Option<Arc<Atlas>>>,
    label: String,
}

impl Space {
    fn atlas(&self) -> napi::Result<Arc<Atlas>> {
        let guard = self.atlas.lock().unwrap_or_else(PoisonError::into_inner);
        guard.clone().ok_or_else(|| {
            let body = json!({"code": "closed", "message": format!("{} is closed", self.label)});
            napi::Error::new(Status::GenericFailure, body.to_string())
        })
    }
}

#[napi]
impl Space {
    /// The file, or the named space and its server.
    #[napi(getter)]
    pub fn label(&self) -> String {
        self.label.clone()
    }

    /// One operation with its arguments as the HTTP API and MCP tools take them
    /// (docs/SERVER.md), answered in the same shape.
    #[napi]
    pub async fn call(&self, name: String, args: Value) -> napi::Result<Value> {
        let (atlas, op) = (self.atlas()?, op(&name)?);
        run_op(&atlas, op, args).await
    }

    /// Up to `limit` live memories of the scope (and of these kinds), newest first, as records.
    #[napi]
    pub async fn latest(&self, args: LatestArgs) -> napi::Result<Vec<Value>> {
        let kinds = atlas_server::args::kinds(&args.kind.unwrap_or_default()).map_err(rejection)?;
        let scope = Scope { user: args.user, agent: args.agent, session: args.session };
        let valid_at = args.current.unwrap_or(false).then(atlas_runtime::now);
        let filter = RecallFilter { scope, kinds, valid_at, ..RecallFilter::default() };
        let atlas = self.atlas()?;
        let memories = atlas.latest(filter, args.limit.unwrap_or(100) as usize).await.map_err(atlas_err)?;
        Ok(memories.iter().map(atlas_runtime::wire::record_value).collect())
    }

    /// Records `text` as the new version of memory `id` (which it supersedes), with `meta`
    /// instead of the old version's metadata when given: `{ id, previous }`.
    #[napi]
    pub async fn revise(&self, id: i64, text: String, meta: Option<Value>) -> napi::Result<Value> {
        let id = memory_id(id)?;
        let meta = match meta {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => return Err(invalid("meta", "expected an object or null".into())),
        };
        let revised = self.atlas()?.revise(id, text, meta).await.map_err(atlas_err)?;
        Ok(json!({"id": revised.id.0, "previous": revised.previous.0}))
    }

    /// Forgets for good every memory of the scope (all of them when it is empty); how many. The
    /// scope is read strictly: a key that is not `user`, `agent` or `session` (`userId`, a
    /// typo) is refused, since read loosely it would leave the scope empty and delete every
    /// user's memories.
    #[napi]
    pub async fn forget_scope(&self, scope: Value) -> napi::Result<u32> {
        let Value::Object(fields) = scope else {
            return Err(invalid("forgetScope", "field \"scope\": expected an object { user, agent, session }".into()));
        };
        let mut parsed = Scope::default();
        for (key, value) in fields {
            let slot = match key.as_str() {
                "user" => &mut parsed.user,
                "agent" => &mut parsed.agent,
                "session" => &mut parsed.session,
                _ => {
                    let why = format!("field \"scope.{key}\": not a field of a scope (user, agent, session)");
                    return Err(invalid("forgetScope", why));
                }
            };
            *slot = match value {
                Value::Null => None,
                Value::String(s) => Some(s),
                other => {
                    return Err(invalid(
                        "forgetScope",
                        format!("field \"scope.{key}\": expected a string, got {other}"),
                    ));
                }
            };
        }
        let scope = parsed;
        let count = self.atlas()?.forget_scope(&scope).await.map_err(atlas_err)?;
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// Brings back a memory forgotten softly, decayed or archived: `{ recovered, how }`.
    #[napi]
    pub async fn recover(&self, id: i64) -> napi::Result<Value> {
        let id = memory_id(id)?;
        let how = self.atlas()?.recover(id).await.map_err(atlas_err)?.ok_or_else(|| atlas_err(Error::NotFound(id)))?;
        Ok(atlas_runtime::wire::recovered_value(id, how))
    }

    /// Whether a recalled memory was useful (resets its decay; for a fact, an SM-2 review).
    #[napi]
    pub async fn feedback(&self, id: i64, useful: bool) -> napi::Result<Value> {
        let id = memory_id(id)?;
        let memory = self.atlas()?.feedback(id, useful).await.map_err(atlas_err)?;
        Ok(atlas_runtime::wire::feedback_value(&memory, useful))
    }

    /// Imports a JSON Lines file (memories, or a full export) all or nothing, once per content
    /// unless `again`.
    #[napi]
    pub async fn import_file(&self, path: String, again: Option<bool>) -> napi::Result<Value> {
        let options = ImportOptions { again: again.unwrap_or(false), caller: Caller::All };
        let imported = self.atlas()?.import_file(path.as_ref(), options, None).await.map_err(atlas_err)?;
        Ok(atlas_runtime::wire::imported_value(&imported))
    }

    /// Writes a full export (ids, edges, context; with `vectors`, every vector) to `path`,
    /// through a temporary file renamed at the end; how many memories it holds.
    #[napi]
    pub async fn export_file(&self, path: String, vectors: Option<bool>) -> napi::Result<f64> {
        let count = self.atlas()?.export_file(path.as_ref(), vectors.unwrap_or(false)).await.map_err(atlas_err)?;
        Ok(count as f64)
    }

    /// Embeds every memory still waiting for a vector now; how many.
    #[napi]
    pub async fn flush_vectors(&self) -> napi::Result<u32> {
        let count = self.atlas()?.flush_vectors(None).await.map_err(atlas_err)?;
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    /// Tells the sleep cycle that the conversation paused: it may summarise sessions now.
    #[napi]
    pub fn end_session(&self) -> napi::Result<()> {
        self.atlas()?.end_session();
        Ok(())
    }

    /// Closes the space: later calls reject; calls under way finish first. Memories still
    /// waiting for their vector are embedded at the next open (the queue is durable).
    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        let taken = self.atlas.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(atlas) = taken {
            atlas.end_session();
            // The last reference stops the background work, inside the runtime.
            drop(atlas);
        }
        Ok(())
    }

    /// The benchmark's baseline (`cargo xtask bench node`): the wall time in milliseconds of
    /// operation `name` run in Rust once per arguments of `args`, with no JavaScript between
    /// calls.
    #[napi]
    pub async fn op_timings(&self, name: String, args: Vec<Value>) -> napi::Result<Vec<f64>> {
        let (atlas, op) = (self.atlas()?, op(&name)?);
        let mut timings = Vec::with_capacity(args.len());
        for arguments in args {
            let started = std::time::Instant::now();
            run_op(&atlas, op, arguments).await?;
            timings.push(started.elapsed().as_secs_f64() * 1e3);
        }
        Ok(timings)
    }
}

/// The operation a name calls: its name in the route table (the MCP tool's name; `_many` for a
/// batch).
fn op(name: &str) -> napi::Result<Op> {
    atlas_server::json_op(name).ok_or_else(|| invalid("name", format!("no operation {name:?}")))
}

async fn run_op(atlas: &Atlas, op: Op, args: Value) -> napi::Result<Value> {
    if matches!(op, Op::Recall | Op::RecallMany | Op::Context) {
        // What this process just wrote is searched by its vectors too (within
        // recall.embed_budget_ms), as the CLI and Python do.
        atlas.catch_up().await;
    }
    atlas_server::ops::call(atlas, op, args, None, &Caller::All).await.map_err(rejection)
}

/// The version of the native module (the crate's).
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
