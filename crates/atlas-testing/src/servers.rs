//! Real servers for tests: llama.cpp's `llama-server` with the small model of
//! `models/manifest.toml`, started on a free loopback port, or the server `ATLAS_LLM_URL` names.
//! When neither is available, the caller is told to skip, and says so loudly.

use std::path::PathBuf;
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

fn cache_dir() -> PathBuf {
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

/// The server `ATLAS_LLM_URL` names, else `llama-server` (from `ATLAS_LLAMA_SERVER` or the
/// shared `bin/` beside the repository) on the model `cargo xtask models fetch` cached. `Err`
/// says why neither is available.
pub fn llm_server() -> Result<LlmServer, String> {
    if let Ok(url) = std::env::var("ATLAS_LLM_URL")
        && !url.trim().is_empty()
    {
        let model = std::env::var("ATLAS_LLM_MODEL").unwrap_or_else(|_| "default".into());
        return Ok(LlmServer { url, model, child: None });
    }
    let binary = std::env::var_os("ATLAS_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bin/llama-server"));
    if !binary.exists() {
        return Err(format!("no ATLAS_LLM_URL and no llama-server at {}", binary.display()));
    }
    let model = cache_dir().join("llm/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        return Err(format!("{} is missing: run `cargo xtask models fetch`", model.display()));
    }
    let port = crate::http::free_port();
    let child = Command::new(&binary)
        .arg("-m")
        .arg(&model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-c", "2048", "-t", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let server = LlmServer { url: format!("http://127.0.0.1:{port}/v1"), model: "smollm2".into(), child: Some(child) };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    if crate::http::wait_healthy(addr, "/health", Duration::from_secs(90)) {
        return Ok(server);
    }
    Err(format!("llama-server on port {port} was not healthy within 90 s"))
}
