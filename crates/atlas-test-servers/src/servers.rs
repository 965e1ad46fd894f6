//! Real servers for tests: llama.cpp's `llama-server` with a model of
//! `models/manifest.toml`, or the server `ATLAS_LLM_URL` names; Qdrant, one server or a cluster
//! of several nodes, from the binary beside the repository, or the server `QDRANT_URL` names.
//! Servers are started on free loopback ports (Qdrant with a temporary storage folder) and
//! stopped on drop. When none is available, the caller is told to skip, and says so loudly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running OpenAI-compatible server; a process it started is killed on drop.
pub struct LlmServer {
    /// The base URL that `/chat/completions` is appended to.
    pub url: String,
    pub model: String,
    child: Option<Child>,
}

impl Drop for LlmServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The cache folder outside the repository: `ATLAS_CACHE_DIR`, else `$XDG_CACHE_HOME/atlas`, else
/// `~/.cache/atlas`.
pub fn cache_dir() -> PathBuf {
    // The same rule as the embedder's cache (atlas-embed-onnx's assets::cache_dir).
    if let Some(dir) = std::env::var_os("ATLAS_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("atlas");
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/atlas")
}

/// Says loudly that a test did not run, and why.
pub fn skipped(test: &str, why: &str) {
    let bar = "!".repeat(78);
    eprintln!("{bar}\n!! SKIPPED: {test} did NOT run: {why}\n{bar}");
}

/// The sleep cycle's documented local model (models/manifest.toml, `qwen2.5-0.5b`): what the
/// tests of consolidation and of the conflict suite run.
pub const SLEEP_MODEL: (&str, &str) = ("qwen2.5-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
/// The smallest model (`smollm2-135m`): for the tests of the wire and of the embeddings route.
pub const SMALLEST_MODEL: (&str, &str) = ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf");

/// The server `ATLAS_LLM_URL` names, else `llama-server` (from `ATLAS_LLAMA_SERVER` or the
/// shared `bin/` beside the repository) on the sleep cycle's model that `cargo xtask models
/// fetch --all` cached. `Err` says why neither is available.
pub fn llm_server() -> Result<LlmServer, String> {
    external_llm_server().map_or_else(|| llama_server(SLEEP_MODEL, &[]), Ok)
}

/// As [`llm_server`], on the smallest model: a test of the wire, where the answer's quality
/// does not matter and time does.
pub fn smallest_llm_server() -> Result<LlmServer, String> {
    external_llm_server().map_or_else(|| llama_server(SMALLEST_MODEL, &[]), Ok)
}

fn external_llm_server() -> Option<LlmServer> {
    let url = std::env::var("ATLAS_LLM_URL").ok().filter(|u| !u.trim().is_empty())?;
    let model = std::env::var("ATLAS_LLM_MODEL").unwrap_or_else(|_| "default".into());
    Some(LlmServer { url, model, child: None })
}

/// `llama-server` serving embeddings (`/v1/embeddings`, mean pooling) from the smallest model,
/// with a batch large enough for a long text (no `ATLAS_LLM_URL` here: a chat endpoint is not
/// an embeddings endpoint). `Err` says why there is none.
pub fn embeddings_llama_server() -> Result<LlmServer, String> {
    llama_server(SMALLEST_MODEL, &["--embeddings", "--pooling", "mean", "-c", "8192", "-b", "8192", "-ub", "8192"])
}

/// `llama-server` on `model` (its alias and file name in the cache's `llm/`), with `extra`
/// arguments; for the tests and for `cargo xtask eval --sleep`.
pub fn llama_server((alias, file): (&str, &str), extra: &[&str]) -> Result<LlmServer, String> {
    let binary = std::env::var_os("ATLAS_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bin/llama-server"));
    if !binary.exists() {
        return Err(format!("no ATLAS_LLM_URL and no llama-server at {}", binary.display()));
    }
    let model = cache_dir().join("llm").join(file);
    if !model.exists() {
        return Err(format!("{} is missing: run `cargo xtask models fetch --model {alias}`", model.display()));
    }
    let port = crate::http::free_port();
    // A context of 4,096 tokens: a cycle's call of 24 turns and its answer fit.
    let child = Command::new(&binary)
        .arg("-m")
        .arg(&model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-c", "4096", "-t", "2"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let server = LlmServer { url: format!("http://127.0.0.1:{port}/v1"), model: alias.into(), child: Some(child) };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if crate::http::wait_healthy(addr, "/health", Duration::from_secs(120)) {
        return Ok(server);
    }
    Err(format!("llama-server on port {port} was not healthy within 120 s"))
}

/// One Qdrant process this harness started: its ports and storage, kept across a restart.
struct QdrantNode {
    http: u16,
    grpc: u16,
    p2p: u16,
    storage: PathBuf,
    child: Option<Child>,
}

/// A Qdrant server or cluster: the one `QDRANT_URL` names, or nodes this harness started.
pub struct Qdrant {
    /// The gRPC addresses clients speak to, comma-separated (one per node).
    pub url: String,
    binary: PathBuf,
    nodes: Vec<QdrantNode>,
    /// Removed when dropped, after the processes were stopped.
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Qdrant {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }
}

impl QdrantNode {
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The Qdrant binary: `ATLAS_QDRANT_BIN`, else `bin/qdrant` of the shared folder beside the
/// repository. `Err` says why there is none.
pub fn qdrant_binary() -> Result<PathBuf, String> {
    let binary = std::env::var_os("ATLAS_QDRANT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bin/qdrant"));
    if binary.exists() { Ok(binary) } else { Err(format!("there is no Qdrant binary at {}", binary.display())) }
}

/// The server `QDRANT_URL` names, else one started from [`qdrant_binary`].
pub fn qdrant() -> Result<Qdrant, String> {
    if let Ok(url) = std::env::var("QDRANT_URL")
        && !url.trim().is_empty()
    {
        return Ok(Qdrant { url, binary: PathBuf::new(), nodes: Vec::new(), _dir: None });
    }
    qdrant_started(1)
}

/// A cluster of `nodes` Qdrant processes on loopback, started from [`qdrant_binary`] (never
/// `QDRANT_URL`: a cluster test stops and starts nodes), once every node sees all the others.
pub fn qdrant_cluster(nodes: usize) -> Result<Qdrant, String> {
    qdrant_started(nodes.max(2))
}

fn qdrant_started(count: usize) -> Result<Qdrant, String> {
    let binary = qdrant_binary()?;
    let guard = tempfile::Builder::new()
        .prefix("atlas-qdrant-")
        .tempdir_in(throwaway_storage_root())
        .map_err(|e| format!("no temporary folder: {e}"))?;
    let dir = guard.path().to_path_buf();
    let mut nodes = Vec::new();
    for i in 0..count {
        let storage = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&storage).map_err(|e| format!("create {}: {e}", storage.display()))?;
        let node = QdrantNode {
            http: crate::http::free_port(),
            grpc: crate::http::free_port(),
            p2p: crate::http::free_port(),
            storage,
            child: None,
        };
        nodes.push(node);
    }
    let url = nodes.iter().map(|n| format!("http://127.0.0.1:{}", n.grpc)).collect::<Vec<_>>().join(",");
    let mut server = Qdrant { url, binary, nodes, _dir: Some(guard) };
    for i in 0..count {
        // Peers join one at a time: a second joining while the first is still being added
        // to the consensus can be refused.
        server.start(i)?;
        server.wait_peers(i + 1)?;
    }
    Ok(server)
}

/// Where started servers keep their storage: `ATLAS_QDRANT_STORAGE`, else memory (`/dev/shm`)
/// where there is one, else the temporary folder. The storage lives as long as the servers, and
/// a process killed by a test keeps its files either way; on disk, every collection a case
/// creates fsyncs the files of its shards, and that was most of a cluster case's time (5.5 s
/// against 1.7 s in memory, three nodes, three shards, two replicas).
fn throwaway_storage_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("ATLAS_QDRANT_STORAGE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    let writable = shm.metadata().is_ok_and(|m| m.is_dir() && !m.permissions().readonly());
    if writable { shm.to_path_buf() } else { std::env::temp_dir() }
}

impl Qdrant {
    /// The gRPC address of each node, in order.
    pub fn node_urls(&self) -> Vec<String> {
        self.url.split(',').map(str::to_string).collect()
    }

    /// The HTTP (REST) address of a node this harness started.
    pub fn http_addr(&self, node: usize) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.nodes[node].http))
    }

    /// Kills a node at once (SIGKILL), its storage kept for [`Qdrant::start`].
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].stop();
    }

    /// Starts (or restarts) a node on its ports and storage, and waits until it answers.
    pub fn start(&mut self, node: usize) -> Result<(), String> {
        let cluster = self.nodes.len() > 1;
        let first_p2p = self.nodes[0].p2p;
        let n = &mut self.nodes[node];
        let mut command = Command::new(&self.binary);
        command
            .current_dir(&n.storage)
            .env("RUN_MODE", "production")
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", n.http.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", n.grpc.to_string())
            .env("QDRANT__STORAGE__STORAGE_PATH", n.storage.join("storage"))
            .env("QDRANT__STORAGE__SNAPSHOTS_PATH", n.storage.join("snapshots"))
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cluster {
            command
                .env("QDRANT__CLUSTER__ENABLED", "true")
                .env("QDRANT__CLUSTER__P2P__PORT", n.p2p.to_string())
                .args(["--uri", &format!("http://127.0.0.1:{}", n.p2p)]);
            if node > 0 {
                command.args(["--bootstrap", &format!("http://127.0.0.1:{first_p2p}")]);
            }
        }
        n.child = Some(command.spawn().map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], n.http));
        // `/readyz` answers once the node has joined the consensus and its shards are loaded.
        if crate::http::wait_healthy(addr, "/readyz", Duration::from_secs(60)) {
            return Ok(());
        }
        Err(format!("Qdrant node {node} (HTTP port {}) was not ready (/readyz) within 60 s", n.http))
    }

    /// Waits until the first node's cluster view counts `peers` peers.
    fn wait_peers(&self, peers: usize) -> Result<(), String> {
        if self.nodes.len() < 2 {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut client = crate::http::HttpClient::new(self.http_addr(0), None);
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(answer) = client.request("GET", "/cluster", None, &[])
                && answer.json()["result"]["peers"].as_object().is_some_and(|p| p.len() >= peers)
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("the Qdrant cluster did not count {peers} peers within 60 s"))
    }

    /// Waits until every replica of `collection`'s shards is active again, as node `node`
    /// sees it (after a node came back and caught up).
    pub fn wait_replicas_active(&self, node: usize, collection: &str, within: Duration) -> Result<(), String> {
        let started = std::time::Instant::now();
        let mut client = crate::http::HttpClient::new(self.http_addr(node), None);
        let mut last = String::new();
        while started.elapsed() < within {
            if let Ok(answer) = client.request("GET", &format!("/collections/{collection}/cluster"), None, &[]) {
                let body = answer.json();
                let result = &body["result"];
                let states: Vec<String> = ["local_shards", "remote_shards"]
                    .iter()
                    .flat_map(|k| result[*k].as_array().cloned().unwrap_or_default())
                    .map(|s| s["state"].as_str().unwrap_or("?").to_string())
                    .collect();
                if !states.is_empty() && states.iter().all(|s| s == "Active") {
                    return Ok(());
                }
                last = states.join(",");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!("replicas of {collection} not all active within {within:?} (last seen: {last})"))
    }
}
