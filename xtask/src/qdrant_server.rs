//! A Qdrant server for the conformance suite: the one `QDRANT_URL` names, else the binary
//! beside the repository (`../shared/bin/qdrant`, or `ATLAS_QDRANT_BIN`) started on free
//! loopback ports with a temporary storage folder, and stopped when dropped.

use anyhow::{Context, Result, bail};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct QdrantServer {
    /// The gRPC address the client speaks to.
    pub url: String,
    child: Option<Child>,
    _storage: Option<tempfile::TempDir>,
}

impl Drop for QdrantServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `None` with the reason when no server can be had.
pub fn qdrant() -> Result<std::result::Result<QdrantServer, String>> {
    if let Ok(url) = std::env::var("QDRANT_URL")
        && !url.trim().is_empty()
    {
        return Ok(Ok(QdrantServer { url, child: None, _storage: None }));
    }
    let binary = std::env::var_os("ATLAS_QDRANT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::root().join("../shared/bin/qdrant"));
    if !binary.exists() {
        return Ok(Err(format!("QDRANT_URL is not set and there is no Qdrant binary at {}", binary.display())));
    }
    let storage = tempfile::tempdir()?;
    let (http, grpc) = (free_port()?, free_port()?);
    let child = Command::new(&binary)
        .current_dir(storage.path())
        .env("RUN_MODE", "production")
        .env("QDRANT__SERVICE__HOST", "127.0.0.1")
        .env("QDRANT__SERVICE__HTTP_PORT", http.to_string())
        .env("QDRANT__SERVICE__GRPC_PORT", grpc.to_string())
        .env("QDRANT__STORAGE__STORAGE_PATH", storage.path().join("storage"))
        .env("QDRANT__STORAGE__SNAPSHOTS_PATH", storage.path().join("snapshots"))
        .env("QDRANT__TELEMETRY_DISABLED", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {}", binary.display()))?;
    let server = QdrantServer { url: format!("http://127.0.0.1:{grpc}"), child: Some(child), _storage: Some(storage) };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if healthy(http) {
            println!("Qdrant started from {} (gRPC {})", binary.display(), server.url);
            return Ok(Ok(server));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("Qdrant from {} did not answer /healthz within 60 s", binary.display())
}

fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}
