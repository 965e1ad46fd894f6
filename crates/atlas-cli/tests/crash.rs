//! `atlas serve` killed with SIGKILL in the middle of a write load, at several points: after a
//! restart every write that got a 2xx is there with its text, nothing is there twice, the
//! database passes SQLite's integrity check, and the restarted server answers.

use atlas_testing::http::{HttpClient, free_port, wait_healthy};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn serve(db: &Path, addr: SocketAddr) -> Child {
    if !db.exists() {
        // `serve` opens an existing space only: an empty import makes one.
        let empty = db.with_extension("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        let made = Command::new(env!("CARGO_BIN_EXE_atlas")).arg("--db").arg(db).arg("import").arg(&empty).output();
        assert!(made.unwrap().status.success(), "an empty import makes the space");
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_atlas"));
    command.arg("--db").arg(db).args(["serve", "--listen", &addr.to_string()]);
    for var in ["ATLAS_DB", "ATLAS_CONFIG", "ATLAS_EMBEDDER", "ATLAS_TOKEN"] {
        command.env_remove(var);
    }
    // The real embedder: the background task writes vectors while the writers write turns.
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start atlas serve");
    assert!(wait_healthy(addr, "/healthz", Duration::from_secs(120)), "atlas serve did not start");
    child
}

/// Writers that remember turns (single and batched, with idempotency keys) until told to stop,
/// keeping what each 2xx acknowledged.
fn writers(
    addr: SocketAddr,
    stop: &Arc<AtomicBool>,
    acked: &Arc<Mutex<BTreeMap<i64, String>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (stop, acked) = (Arc::clone(stop), Arc::clone(acked));
            std::thread::spawn(move || {
                let mut client = HttpClient::new(addr, None);
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let texts: Vec<String> = if i % 4 == 3 {
                        (0..8).map(|j| format!("writer {w} turn {i}.{j}: the lighthouse keeper logged ship {}", i * 8 + j)).collect()
                    } else {
                        vec![format!("writer {w} turn {i}: the lighthouse keeper logged ship {i}")]
                    };
                    let body = if texts.len() == 1 {
                        json!({"text": texts[0], "session": format!("w{w}"), "speaker": "keeper"})
                    } else {
                        json!({"memories": texts.iter().map(|t| json!({"text": t, "session": format!("w{w}")})).collect::<Vec<_>>()})
                    };
                    let key = format!("w{w}-{i}");
                    let Ok(answer) = client.request(
                        "POST",
                        "/v1/remember",
                        Some(&body.to_string()),
                        &[("content-type", "application/json"), ("idempotency-key", &key)],
                    ) else {
                        return; // the server is gone
                    };
                    assert!(answer.status == 201 || answer.status == 503, "{}: {}", answer.status, answer.text());
                    if answer.status != 201 {
                        continue;
                    }
                    let value = answer.json();
                    let ids: Vec<i64> = match value.get("ids") {
                        Some(ids) => ids.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect(),
                        None => vec![value["id"].as_i64().unwrap()],
                    };
                    let mut acked = acked.lock().unwrap();
                    for (id, text) in ids.into_iter().zip(texts) {
                        assert!(acked.insert(id, text).is_none(), "id {id} acknowledged twice");
                    }
                }
            })
        })
        .collect()
}

/// Every acknowledged write of `acked` is in the space at `db` with its text, once; SQLite's
/// integrity check passes; a restarted server answers. Returns how many memories are stored.
fn check_after_restart(db: &Path, addr: SocketAddr, acked: &BTreeMap<i64, String>, round: &str) -> usize {
    let check = rusqlite::Connection::open(db).unwrap();
    let integrity: String = check.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(integrity, "ok", "{round}");
    drop(check);

    let mut server = serve(db, addr);
    let mut client = HttpClient::new(addr, None);
    let export = client.request("GET", "/v1/export", None, &[]).unwrap();
    assert_eq!(export.status, 200);
    let mut stored: BTreeMap<i64, String> = BTreeMap::new();
    let mut texts = std::collections::HashSet::new();
    for line in export.text().lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        if let (Some(id), Some(text)) = (value["id"].as_i64(), value["text"].as_str()) {
            assert!(texts.insert(text.to_owned()), "{round}: {text:?} stored twice");
            stored.insert(id, text.to_owned());
        }
    }
    for (id, text) in acked {
        assert_eq!(stored.get(id), Some(text), "{round}: acknowledged memory {id} is missing or changed");
    }
    let stats = client.request("GET", "/v1/stats", None, &[]).unwrap().json();
    assert_eq!(stats["memories"].as_u64(), Some(stored.len() as u64), "{stats}");
    server.kill().unwrap();
    server.wait().unwrap();
    stored.len()
}

/// Starts a server on a fresh space, runs the writers for `after_ms`, then `stop_server`.
fn load_then(
    after_ms: u64,
    stop_server: impl FnOnce(&mut Child) -> std::process::ExitStatus,
) -> (tempfile::TempDir, SocketAddr, BTreeMap<i64, String>, std::process::ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut server = serve(&db, addr);
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let threads = writers(addr, &stop, &acked);
    std::thread::sleep(Duration::from_millis(after_ms));
    let status = stop_server(&mut server);
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().for_each(|t| t.join().unwrap());
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(!acked.is_empty(), "no write was acknowledged before the server stopped");
    (dir, addr, acked, status)
}

#[test]
fn every_acknowledged_write_survives_a_sigkill_of_the_server() {
    for kill_after_ms in [100u64, 350, 800, 1500] {
        let (dir, addr, acked, _) = load_then(kill_after_ms, |server| {
            server.kill().unwrap(); // SIGKILL: no shutdown, no flush
            server.wait().unwrap()
        });
        let round = format!("SIGKILL after {kill_after_ms} ms");
        let stored = check_after_restart(&dir.path().join("crash.db"), addr, &acked, &round);
        eprintln!("{round}: {} writes acknowledged; {stored} stored after the restart", acked.len());
    }
}

/// SIGTERM in the middle of the load: requests in flight finish, the server exits 0, and every
/// acknowledged write is there.
#[test]
fn sigterm_lets_requests_in_flight_finish_and_exits_cleanly() {
    let (dir, addr, acked, status) = load_then(500, |server| {
        let sent = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
        assert!(sent.success());
        server.wait().unwrap()
    });
    assert!(status.success(), "atlas serve should exit 0 on SIGTERM: {status}");
    let stored = check_after_restart(&dir.path().join("crash.db"), addr, &acked, "SIGTERM");
    eprintln!("SIGTERM: {} writes acknowledged; {stored} stored after the restart", acked.len());
}
