//! The `atlas._native` Python module: one class, `Space`, an open memory space whose methods
//! translate Python calls into runtime calls with the GIL released, answering in the JSON
//! shapes of the CLI's `--json` (as dicts and lists); ATLAS's errors as Python exceptions; and
//! `cli`, the `atlas` command line for the package's console script. The Python package
//! (`python/atlas/`) builds the mem0-compatible and typed APIs on top.

mod errors;
mod process;

use atlas_domain::access::Caller;
use atlas_domain::{AtlasError as Error, MemoryId, MemoryKind, RecallFilter, Scope};
use atlas_runtime::in_process::OpenOptions;
use atlas_runtime::{Atlas, ImportOptions};
use atlas_server::Op;
use errors::{api_err, atlas_err, invalid, to_json};
use process::{runtime, wait};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(pythonize::pythonize(py, value)?.unbind())
}

/// The operation a Python name calls: its name in the route table (the MCP tool's name; `_many`
/// for a batch).
fn op(name: &str) -> PyResult<Op> {
    atlas_server::json_op(name).ok_or_else(|| invalid("name", format!("no operation {name:?}")))
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
    /// The process that opened it: a child after `fork()` shares its file descriptors but not
    /// its threads, so the space is closed there (the child opens its own).
    pid: u32,
}

impl Space {
    fn atlas(&self) -> PyResult<Arc<Atlas>> {
        if self.pid != std::process::id() {
            return Err(errors::closed(format!(
                "{} was opened in process {} and this is a child it forked: open the space again here \
                 (a space's threads and connections do not survive fork())",
                self.label, self.pid
            )));
        }
        let guard = self.atlas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.clone().ok_or_else(|| errors::closed(format!("{} is closed", self.label)))
    }

    /// Runs `work` on the runtime with the GIL released; Ctrl-C cancels it ([`wait`]).
    fn run<T, F>(&self, py: Python<'_>, work: impl FnOnce(Arc<Atlas>) -> F + Send) -> PyResult<T>
    where
        F: std::future::Future<Output = PyResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let atlas = self.atlas()?;
        wait(py, work(atlas))
    }
}

impl Drop for Space {
    /// In a forked child the space's threads do not exist: dropping it would wait for them.
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            let inherited = self.atlas.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            std::mem::forget(inherited);
        }
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
            Some(c) if c.is_instance_of::<PyDict>() => (None, Some(to_json("config", c)?)),
            Some(c) => (Some(c.extract::<PathBuf>()?), None),
            None => (None, None),
        };
        let options = OpenOptions { db, url, space, config_file, mem0, embedder };
        let settings = options.config(|k| std::env::var(k).ok()).map_err(atlas_err)?;
        let label = atlas_runtime::in_process::label(&settings);
        let atlas = wait(py, async move {
            let atlas = Atlas::open(settings).await.map_err(atlas_err)?;
            // Awaited, not left running: a task still writing the cache files beside the
            // database after `close()` raced the caller removing its folder.
            let _ = atlas.keep_search_current().await;
            if sleep_cycle {
                atlas.start_sleep_cycle();
            }
            Ok(atlas)
        })?;
        Ok(Space { atlas: Mutex::new(Some(Arc::new(atlas))), label, pid: std::process::id() })
    }

    fn __repr__(&self) -> String {
        format!("Space({})", self.label)
    }

    /// One operation with its arguments as the HTTP API and MCP tools take them
    /// (docs/SERVER.md), answered in the same shape.
    fn call(&self, py: Python<'_>, name: &str, arguments: &Bound<'_, PyDict>) -> PyResult<Py<PyAny>> {
        let op = op(name)?;
        let arguments = to_json("", arguments.as_any())?;
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
            Ok(memories.iter().map(atlas_runtime::wire::record_value).collect::<Vec<_>>())
        })?;
        to_py(py, &Value::Array(lines))
    }

    /// Records `text` as the new version of memory `id` (which it supersedes), with `meta`
    /// instead of the old version's metadata when given: `{"id", "previous"}`.
    #[pyo3(signature = (id, text, *, meta=None))]
    fn revise(&self, py: Python<'_>, id: i64, text: String, meta: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyAny>> {
        let id = memory_id(id)?;
        let meta = match meta {
            Some(m) => match to_json("meta", m.as_any())? {
                Value::Object(fields) => Some(fields),
                _ => unreachable!("a dict is a JSON object"),
            },
            None => None,
        };
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
        if self.pid != std::process::id() {
            // Inherited across fork(): its threads are the parent's.
            std::mem::forget(taken);
            return;
        }
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
    m.add_class::<Space>()?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(process::shutdown, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
