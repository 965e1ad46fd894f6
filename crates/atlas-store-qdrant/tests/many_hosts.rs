//! Many hosts, simulated: processes in separate temporary directories, sharing no file, write
//! to one named space at once (remembers and imports, two of them under one key) while another
//! recalls; one writer is killed with SIGKILL in the middle of an import. Afterwards every
//! acknowledged write is there exactly once, no id repeats, nothing of the killed import is
//! visible (and, once its lease has run out, nothing of it is left), and each session's
//! temporal edges are a chain. Needs a Qdrant server, like the conformance suite.
//!
//! The processes are this test binary again, run as `child` with its role in the environment.

use atlas_domain::ports::{MemoryStore, Replica, TextIndex};
use atlas_domain::{EdgeKind, MemoryId, NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_qdrant::{QdrantOptions, QdrantStore};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod server;

const ROLE: &str = "ATLAS_MANY_HOSTS_ROLE";
const SPACE: &str = "ATLAS_MANY_HOSTS_SPACE";
/// Turns each remembering process writes, one per call, in its own session.
const TURNS: i64 = 40;
/// Memories in each import.
const IMPORT: i64 = 300;
/// Memories in the import that is killed (large enough to be under way when the kill comes).
const KILLED_IMPORT: i64 = 20_000;

fn options(space: &str) -> QdrantOptions {
    let mut options = server::options("atlas_hosts");
    options.space = Some(space.to_owned());
    options.batch = 100;
    // Short, so that the killed import is abandoned within the test.
    options.write_lease = Duration::from_secs(3);
    options
}

fn turn(text: String, session: &str, t: i64) -> NewMemory {
    let scope = Scope { session: Some(session.to_owned()), ..Scope::default() };
    NewMemory::episode(text, scope, Some("Tester".into()), Timestamp(t), Timestamp(t))
}

/// What a child does, by its role: `remember:N`, `import:KEY`, `killed`, `recall`. Each
/// acknowledged id is printed as `ACK <session> <event time> <id>`.
#[test]
#[ignore = "run by many_processes_share_one_space"]
fn child() {
    let (Ok(role), Ok(space)) = (std::env::var(ROLE), std::env::var(SPACE)) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = QdrantStore::open(std::path::Path::new("unused.db"), options(&space)).await.unwrap();
        let ack = |session: &str, t: i64, id: MemoryId| println!("ACK {session} {t} {id}");
        match role.split_once(':').unwrap_or((role.as_str(), "")) {
            ("remember", n) => {
                let session = format!("talk-{n}");
                for t in 0..TURNS {
                    let ids = store.insert(vec![turn(format!("turn {t} of {session}"), &session, t)], None).await;
                    ack(&session, t, ids.unwrap()[0]);
                }
            }
            ("import", key) => {
                let session = format!("import-{key}");
                let batch = (0..IMPORT).map(|t| turn(format!("imported {t} of {key}"), &session, t)).collect();
                let receipt = store.insert_once(key.to_owned(), batch, None).await.unwrap();
                for (t, id) in receipt.ids.iter().enumerate() {
                    ack(&session, t as i64, *id);
                }
            }
            ("killed", _) => {
                let batch = (0..KILLED_IMPORT).map(|t| turn(format!("doomed {t}"), "killed-import", t)).collect();
                println!("STARTED");
                store.insert(batch, None).await.unwrap();
                println!("FINISHED");
            }
            ("recall", _) => {
                let until = Instant::now() + Duration::from_secs(4);
                let (mut ok, mut failed) = (0, 0);
                while Instant::now() < until {
                    match store.search_text(vec!["turn".into()], RecallFilter::default(), 10).await {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            failed += 1;
                            eprintln!("recall failed: {e}");
                        }
                    }
                }
                println!("RECALLS {ok} {failed}");
            }
            (other, _) => panic!("unknown role {other}"),
        }
    });
}

fn spawn(role: &str, space: &str) -> (Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(ROLE, role)
        .env(SPACE, space)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (child, dir)
}

fn lines_of(child: Child) -> Vec<String> {
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "a writer failed: {output:?}");
    String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect()
}

#[test]
#[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
fn many_processes_share_one_space() {
    let space = format!("hosts-{}", std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // The space and its collections exist before the writers race to them.
    let collection = runtime.block_on(async {
        let store = QdrantStore::open(std::path::Path::new("unused.db"), options(&space)).await.unwrap();
        store.insert(vec![turn("the first memory".into(), "setup", 0)], None).await.unwrap();
        store.collection().to_owned()
    });
    server::cleaning_up(&runtime, &options(&space), &collection, || {
        // The doomed import starts first, and is killed once it is well under way.
        let (mut killed, _killed_dir) = spawn("killed", &space);
        let mut stdout = BufReader::new(killed.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("STARTED") {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "the doomed import never started");
        }
        let writers: Vec<_> = ["remember:1", "remember:2", "import:a", "import:shared", "import:shared", "recall"]
            .iter()
            .map(|role| spawn(role, &space))
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        // SIGKILL: no destructor, no rollback; whatever it wrote stays as it was.
        killed.kill().unwrap();
        let status = killed.wait().unwrap();
        assert!(!status.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        assert!(!rest.contains("FINISHED"), "the import finished before the kill: make it larger");

        let mut acked: Vec<(String, i64, MemoryId)> = Vec::new();
        let mut recalls = None;
        for (child, _dir) in writers {
            for line in lines_of(child) {
                // The test harness may print "test child ... " ahead of the first line.
                let at = ["ACK ", "RECALLS "].iter().filter_map(|m| line.find(m)).min().unwrap_or(line.len());
                let parts: Vec<&str> = line[at..].split_whitespace().collect();
                match parts.as_slice() {
                    ["ACK", session, t, id] => {
                        acked.push((session.to_string(), t.parse().unwrap(), MemoryId(id.parse().unwrap())))
                    }
                    ["RECALLS", ok, failed] => {
                        recalls = Some((ok.parse::<u32>().unwrap(), failed.parse::<u32>().unwrap()))
                    }
                    _ => {}
                }
            }
        }
        let (ok, failed) = recalls.expect("the reader reported");
        assert!(ok > 0 && failed == 0, "recalls while writing: {ok} ok, {failed} failed");

        runtime.block_on(async {
            let store = QdrantStore::open(std::path::Path::new("unused.db"), options(&space)).await.unwrap();
            // Two imports under one key: one write, the same ids to both.
            let shared: Vec<MemoryId> = acked.iter().filter(|(s, ..)| s == "import-shared").map(|a| a.2).collect();
            assert_eq!(shared.len() as i64, 2 * IMPORT);
            assert_eq!(shared[..IMPORT as usize], shared[IMPORT as usize..], "one receipt for one key");
            let mut unique: HashMap<MemoryId, (String, i64)> = HashMap::new();
            for (session, t, id) in &acked {
                if let Some(earlier) = unique.insert(*id, (session.clone(), *t)) {
                    assert_eq!(earlier, (session.clone(), *t), "id {id} acknowledged for two memories");
                }
            }
            assert_eq!(unique.len() as i64, 2 * TURNS + 2 * IMPORT);
            // Every acknowledged write is there, once; nothing of the killed import is visible.
            let mut everything = Vec::new();
            let mut after = None;
            loop {
                let page = store.export_batch(after, 1000).await.unwrap();
                let Some(last) = page.last() else { break };
                after = Some(last.memory.id);
                everything.extend(page);
            }
            let ids: Vec<MemoryId> = everything.iter().map(|s| s.memory.id).collect();
            assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len(), "no id twice");
            for (id, (session, _)) in &unique {
                let found = everything.iter().find(|s| s.memory.id == *id);
                assert!(found.is_some_and(|s| s.memory.scope.session.as_deref() == Some(session)), "{id} missing");
            }
            assert!(!everything.iter().any(|s| s.memory.scope.session.as_deref() == Some("killed-import")));
            assert_eq!(everything.len(), unique.len() + 1, "nothing else either (the setup memory)");
            // Each session's temporal edges are a chain, in the order its turns were said.
            let mut sessions: BTreeMap<&str, Vec<(i64, MemoryId)>> = BTreeMap::new();
            for (id, (session, t)) in &unique {
                sessions.entry(session.as_str()).or_default().push((*t, *id));
            }
            for (session, mut turns) in sessions {
                turns.sort();
                for pair in turns.windows(2) {
                    let edges = store.edges_of(pair[1].1).await.unwrap();
                    let before: Vec<MemoryId> = edges
                        .iter()
                        .filter(|e| e.kind == EdgeKind::Temporal && e.dst == pair[1].1)
                        .map(|e| e.src)
                        .collect();
                    assert_eq!(before, [pair[0].1], "{session}: the turn before {:?}", pair[1]);
                }
            }
        });
        // Once its lease has run out, any process's open removes what the killed import left.
        std::thread::sleep(Duration::from_secs(4));
        runtime.block_on(async {
            QdrantStore::open(std::path::Path::new("unused.db"), options(&space)).await.unwrap();
        });
        let all = server::points(&runtime, &options(&space), &collection);
        assert_eq!(all, (2 * TURNS + 2 * IMPORT + 1) as u64, "points left by the killed import");
    });
}
