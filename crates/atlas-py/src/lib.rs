//! The `atlas._native` Python module: one class, `Space`, an open memory space whose methods
//! translate Python calls into runtime calls with the GIL released, answering in the JSON
//! shapes of the CLI's `--json` (as dicts and lists); ATLAS's errors as Python exceptions; and
//! `cli`, the `atlas` command line for the package's console script. The Python package
//! (`python/atlas/`) builds the mem0-compatible and typed APIs on top.

use atlas_domain::access::Caller;
use atlas_domain::{AtlasError as Error, MemoryId, MemoryKind, RecallFilter, Scope};
use atlas_runtime::in_process::OpenOptions;
use atlas_runtime::{Atlas, ImportOptions};
use atlas_server::Op;
use atlas_server::ops::ApiError;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pyo3::create_exception!(
    atlas,
    AtlasError,
    PyException,
    "An error of ATLAS: `.code`, `.field` and `.location` say what and where."
);
pyo3::create_exception!(
    atlas,
    InvalidInput,
    AtlasError,
    "Input ATLAS refuses; `.field` names the field, `.location` where it was."
);
pyo3::create_exception!(atlas, NotFound, AtlasError, "No memory has this id (or it was forgotten for good).");
pyo3::create_exception!(atlas, Forbidden, AtlasError, "The caller may not do this.");
pyo3::create_exception!(atlas, Conflict, AtlasError, "An idempotency key used before for another payload.");
pyo3::create_exception!(atlas, Busy, AtlasError, "The store is busy (another writer); try again.");
pyo3::create_exception!(
    atlas,
    StorageError,
    AtlasError,
    "The store failed, or the file is not an ATLAS space, or is too new."
);
pyo3::create_exception!(atlas, EmbeddingError, AtlasError, "The embedding model could not be loaded or run.");
pyo3::create_exception!(atlas, ConfigError, AtlasError, "The configuration is wrong.");

/// The one async runtime of the process: every space's calls and background work run on it.
/// [`shutdown`] takes it at interpreter exit; a later call builds another.
static RUNTIME: Mutex<Option<tokio::runtime::Runtime>> = Mutex::new(None);

fn runtime() -> tokio::runtime::Handle {
    let mut runtime = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    runtime
        .get_or_insert_with(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("atlas")
                .enable_all()
                .build()
                .expect("a tokio runtime for the atlas module")
        })
        .handle()
        .clone()
}

/// Stops the runtime, waiting (up to 10 s) for work under way: a batch of vectors being
/// embedded finishes and is stored before the process's libraries are torn down. The package
/// registers it with `atexit`.
#[pyfunction]
fn shutdown(py: Python<'_>) {
    let taken = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(runtime) = taken {
        py.detach(move || runtime.shutdown_timeout(std::time::Duration::from_secs(10)));
    }
}

/// `{"error": {"code", "message", "field", "location"}}` as the exception of its code.
fn exception(body: &Value) -> PyErr {
    let error = &body["error"];
    let code = error["code"].as_str().unwrap_or("internal");
    let message = error["message"].as_str().unwrap_or("unknown error").to_owned();
    let err = match code {
        "invalid_input" => InvalidInput::new_err(message),
        "not_found" => NotFound::new_err(message),
        "forbidden" => Forbidden::new_err(message),
        "conflict" => Conflict::new_err(message),
        "busy" => Busy::new_err(message),
        "storage" | "not_atlas" | "schema_too_new" => StorageError::new_err(message),
        "embedding" | "model_mismatch" => EmbeddingError::new_err(message),
        "config" => ConfigError::new_err(message),
        _ => AtlasError::new_err(message),
    };
    Python::attach(|py| {
        let value = err.value(py);
        let text = |key: &str| error[key].as_str().map(str::to_owned);
        // Setting attributes on a fresh exception object cannot fail but for memory.
        let _ = value.setattr("code", code);
        let _ = value.setattr("field", text("field"));
        let _ = value.setattr("location", text("location"));
        let _ = value.setattr("index", error["index"].as_u64());
    });
    err
}

fn atlas_err(e: Error) -> PyErr {
    exception(&ApiError::from(e).body)
}

fn api_err(e: ApiError) -> PyErr {
    exception(&e.body)
}

fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(pythonize::pythonize(py, value)?.unbind())
}

/// The operation a Python name calls: its name in the route table (the MCP tool's name; `_many`
/// for a batch).
fn op(name: &str) -> PyResult<Op> {
    atlas_server::json_op(name).ok_or_else(|| InvalidInput::new_err(format!("no operation {name:?}")))
}

fn memory_id(id: i64) -> PyResult<MemoryId> {
    atlas_server::args::memory_id(id).map_err(api_err)
}

fn kinds(names: Vec<String>) -> PyResult<Vec<MemoryKind>> {
    atlas_server::args::kinds(&names).map_err(api_err)
}

/// An open memory space. Share one among threads: every method releases the GIL while ATLAS
/// works, and the space takes concurrent calls.
#[pyclass(frozen, module = "atlas._native")]
struct Space {
    atlas: Mutex<Option<Arc<Atlas>>>,
    /// The file or the named space, for `repr`.
    label: String,
}

impl Space {
    fn atlas(&self) -> PyResult<Arc<Atlas>> {
        let guard = self.atlas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.clone().ok_or_else(|| AtlasError::new_err(format!("{} is closed", self.label)))
    }

    /// Runs `work` on the runtime with the GIL released.
    fn run<T, F>(&self, py: Python<'_>, work: impl FnOnce(Arc<Atlas>) -> F + Send) -> PyResult<T>
    where
        F: std::future::Future<Output = PyResult<T>> + Send,
        T: Send,
    {
        let atlas = self.atlas()?;
        py.detach(move || runtime().block_on(work(atlas)))
    }
}

#[pymethods]
impl Space {
    /// Opens (creating it if missing) the space in SQLite file `db`, or the space `space` on the
    /// Qdrant server at `url`. `config` is a TOML file (docs/CONFIG.md), or mem0's config as a
    /// dict (its `embedder` section mapped); `ATLAS_*` variables apply as for the CLI; `embedder`
    /// is "onnx", "http" or "none".
    #[new]
    #[pyo3(signature = (db=None, *, url=None, space=None, config=None, embedder=None, sleep_cycle=true))]
    fn new(
        py: Python<'_>,
        db: Option<PathBuf>,
        url: Option<String>,
        space: Option<String>,
        config: Option<&Bound<'_, PyAny>>,
        embedder: Option<String>,
        sleep_cycle: bool,
    ) -> PyResult<Self> {
        // A TOML file's path, or mem0's config as a dict (the runtime maps it).
        let (config_file, mem0) = match config {
            Some(c) if c.is_instance_of::<PyDict>() => (None, Some(pythonize::depythonize::<Value>(c)?)),
            Some(c) => (Some(c.extract::<PathBuf>()?), None),
            None => (None, None),
        };
        let options = OpenOptions { db, url, space, config_file, mem0, embedder };
        let settings = options.config(|k| std::env::var(k).ok()).map_err(atlas_err)?;
        let label = atlas_runtime::in_process::label(&settings);
        let atlas = py.detach(|| {
            runtime().block_on(async move {
                let atlas = Atlas::open(settings).await?;
                if sleep_cycle {
                    atlas.start_sleep_cycle();
                }
                Ok::<_, Error>(atlas)
            })
        });
        Ok(Space { atlas: Mutex::new(Some(Arc::new(atlas.map_err(atlas_err)?))), label })
    }

    fn __repr__(&self) -> String {
        format!("Space({})", self.label)
    }

    /// One operation with its arguments as the HTTP API and MCP tools take them
    /// (docs/SERVER.md), answered in the same shape.
    fn call(&self, py: Python<'_>, name: &str, arguments: &Bound<'_, PyDict>) -> PyResult<Py<PyAny>> {
        let op = op(name)?;
        let arguments: Value = pythonize::depythonize(arguments.as_any())?;
        let answer = self.run(py, move |atlas| async move {
            if matches!(op, Op::Recall | Op::RecallMany | Op::Context) {
                // What this process just wrote is searched by its vectors too (within
                // recall.embed_budget_ms), as the CLI does.
                atlas.catch_up().await;
            }
            atlas_server::ops::call(&atlas, op, arguments, None, &Caller::All).await.map_err(api_err)
        })?;
        to_py(py, &answer)
    }

    /// Up to `limit` live memories of the scope (and of these kinds), newest first, as records;
    /// with `current`, only versions no later version replaced.
    #[pyo3(signature = (*, user=None, agent=None, session=None, kind=Vec::new(), limit=100, current=false))]
    #[allow(clippy::too_many_arguments)]
    fn latest(
        &self,
        py: Python<'_>,
        user: Option<String>,
        agent: Option<String>,
        session: Option<String>,
        kind: Vec<String>,
        limit: usize,
        current: bool,
    ) -> PyResult<Py<PyAny>> {
        let scope = Scope { user, agent, session };
        let valid_at = current.then(atlas_runtime::now);
        let filter = RecallFilter { scope, kinds: kinds(kind)?, valid_at, ..RecallFilter::default() };
        let lines = self.run(py, move |atlas| async move {
            let memories = atlas.latest(filter, limit).await.map_err(atlas_err)?;
            Ok(memories.iter().map(atlas_runtime::wire::memory_value).collect::<Vec<_>>())
        })?;
        to_py(py, &Value::Array(lines))
    }

    /// Records `text` as the new version of memory `id` (which it supersedes), with `meta`
    /// instead of the old version's metadata when given: `{"id", "previous"}`.
    #[pyo3(signature = (id, text, *, meta=None))]
    fn revise(&self, py: Python<'_>, id: i64, text: String, meta: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyAny>> {
        let id = memory_id(id)?;
        let meta: Option<serde_json::Map<String, Value>> =
            meta.map(|m| pythonize::depythonize(m.as_any())).transpose()?;
        let revised =
            self.run(py, move |atlas| async move { atlas.revise(id, text, meta).await.map_err(atlas_err) })?;
        to_py(py, &json!({"id": revised.id.0, "previous": revised.previous.0}))
    }

    /// Forgets for good every memory of the scope (all of them when it is empty); how many.
    #[pyo3(signature = (*, user=None, agent=None, session=None))]
    fn forget_scope(
        &self,
        py: Python<'_>,
        user: Option<String>,
        agent: Option<String>,
        session: Option<String>,
    ) -> PyResult<usize> {
        let scope = Scope { user, agent, session };
        self.run(py, move |atlas| async move { atlas.forget_scope(&scope).await.map_err(atlas_err) })
    }

    /// Brings back a memory forgotten softly, decayed or archived: `{"recovered", "how"}`.
    fn recover(&self, py: Python<'_>, id: i64) -> PyResult<Py<PyAny>> {
        let id = memory_id(id)?;
        let how = self.run(py, move |atlas| async move {
            atlas.recover(id).await.map_err(atlas_err)?.ok_or_else(|| atlas_err(Error::NotFound(id)))
        })?;
        to_py(py, &atlas_runtime::wire::recovered_value(id, how))
    }

    /// Whether a recalled memory was useful (resets its decay; for a fact, an SM-2 review).
    fn feedback(&self, py: Python<'_>, id: i64, useful: bool) -> PyResult<Py<PyAny>> {
        let id = memory_id(id)?;
        let memory = self.run(py, move |atlas| async move { atlas.feedback(id, useful).await.map_err(atlas_err) })?;
        to_py(py, &atlas_runtime::wire::feedback_value(&memory, useful))
    }

    /// Imports a JSON Lines file (memories, or a full export) all or nothing, once per content
    /// unless `again`.
    #[pyo3(signature = (path, *, again=false))]
    fn import_file(&self, py: Python<'_>, path: PathBuf, again: bool) -> PyResult<Py<PyAny>> {
        let imported = self.run(py, move |atlas| async move {
            let options = ImportOptions { again, caller: Caller::All };
            atlas.import_file(&path, options, None).await.map_err(atlas_err)
        })?;
        to_py(py, &atlas_runtime::wire::imported_value(&imported))
    }

    /// Writes a full export (ids, edges, context; with `vectors`, every vector) to `path`,
    /// through a temporary file renamed at the end; returns how many memories it holds.
    #[pyo3(signature = (path, *, vectors=false))]
    fn export_file(&self, py: Python<'_>, path: PathBuf, vectors: bool) -> PyResult<u64> {
        self.run(py, move |atlas| async move { atlas.export_file(&path, vectors).await.map_err(atlas_err) })
    }

    /// The benchmark's baseline (`cargo xtask bench python`): the wall time in milliseconds of
    /// each recall of `queries` (k hits) run in Rust, with no Python between calls.
    fn _recall_timings(&self, py: Python<'_>, queries: Vec<String>, k: usize) -> PyResult<Vec<f64>> {
        self.run(py, move |atlas| async move {
            let mut timings = Vec::with_capacity(queries.len());
            for query in queries {
                let request = atlas_runtime::RecallRequest { query, k, ..atlas_runtime::RecallRequest::default() };
                let started = std::time::Instant::now();
                atlas.recall(request).await.map_err(atlas_err)?;
                timings.push(started.elapsed().as_secs_f64() * 1e3);
            }
            Ok(timings)
        })
    }

    /// Embeds every memory still waiting for a vector now; how many.
    fn flush_vectors(&self, py: Python<'_>) -> PyResult<usize> {
        self.run(py, |atlas| async move { atlas.flush_vectors(None).await.map_err(atlas_err) })
    }

    /// Tells the sleep cycle that the conversation paused: it may summarise sessions now.
    fn end_session(&self) -> PyResult<()> {
        self.atlas()?.end_session();
        Ok(())
    }

    /// Closes the space: later calls raise; calls under way finish first.
    fn close(&self, py: Python<'_>) {
        let taken = self.atlas.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(atlas) = taken {
            atlas.end_session();
            // The last reference stops the background work inside the runtime.
            py.detach(move || runtime().block_on(async move { drop(atlas) }));
        }
    }
}

/// Runs the `atlas` command line with `argv` (the program's name first); its exit status.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    py.detach(move || atlas_cli::run_command_line(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Space>()?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add("AtlasError", py.get_type::<AtlasError>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("Forbidden", py.get_type::<Forbidden>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("Busy", py.get_type::<Busy>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add("EmbeddingError", py.get_type::<EmbeddingError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
