//! Data safety of the `atlas` binary, as a hostile but realistic user meets it: other
//! programs' files, mistyped paths, killed and retried imports, backlogs, concurrent processes,
//! pipes, byte-order marks, and what ATLAS writes outside its own files.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn command(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atlas"));
    command.arg("--db").arg(db).args(args);
    for var in ["ATLAS_DB", "ATLAS_CONFIG", "ATLAS_EMBEDDER", "ATLAS_BUSY_TIMEOUT_MS", "ATLAS_RECALL_EMBED_BUDGET_MS"] {
        command.env_remove(var);
    }
    command
}

fn text_only(db: &Path, args: &[&str]) -> Output {
    command(db, args).env("ATLAS_EMBEDDER", "none").output().expect("run atlas")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "atlas failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn failed(out: Output) -> String {
    assert!(!out.status.success(), "atlas should have failed; stdout: {}", String::from_utf8_lossy(&out.stdout));
    assert_ne!(out.status.code(), Some(101), "a panic: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stderr).unwrap()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.lines().next().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
    path
}

fn turns(n: usize, session: &str) -> String {
    (0..n)
        .map(|i| format!("{{\"session\": \"{session}\", \"speaker\": \"Ann\", \"text\": \"turn {i} of {session} about lighthouse number {}\"}}\n", i * 13))
        .collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("someapp.db");
    let script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n\
                  c.executescript('CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, \"ann\");')\n\
                  c.close()\n";
    assert!(Command::new("python3").args(["-c", script, app.to_str().unwrap()]).status().unwrap().success());
    let bytes = std::fs::read(&app).unwrap();
    let listing = files_in(dir.path());
    let input = write(dir.path(), "in.jsonl", b"{\"text\": \"x\"}\n");
    for args in [vec!["stats"], vec!["remember", "x"], vec!["import", input.to_str().unwrap()], vec!["recall", "x"]] {
        let err = failed(text_only(&app, &args));
        assert!(err.contains("not an ATLAS database") && err.contains("someapp.db"), "{args:?}: {err}");
        assert_eq!(std::fs::read(&app).unwrap(), bytes, "{args:?} changed the file");
    }
    let mut after = files_in(dir.path());
    after.retain(|f| f != "in.jsonl");
    assert_eq!(after, listing, "no -wal or -shm left beside it");
}

#[test]
fn read_only_commands_on_a_mistyped_path_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("memroy.db");
    for args in [
        vec!["stats"],
        vec!["export"],
        vec!["get", "1"],
        vec!["forget", "1"],
        vec!["recall", "x"],
        vec!["embed-pending"],
    ] {
        let err = failed(text_only(&missing, &args));
        assert!(err.contains("memroy.db") && err.contains("does not exist"), "{args:?}: {err}");
        assert!(files_in(dir.path()).is_empty(), "{args:?} left {:?}", files_in(dir.path()));
    }
}

#[test]
fn an_import_is_acknowledged_once_and_a_retry_stores_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let file = write(dir.path(), "turns.jsonl", turns(3, "s").as_bytes());
    let first = json(&ok(text_only(&db, &["import", file.to_str().unwrap(), "--json"])));
    assert_eq!((first["imported"].as_u64(), first["replayed"].as_bool()), (Some(3), Some(false)));
    // The same content under another name is the same import.
    let renamed = write(dir.path(), "copy.jsonl", turns(3, "s").as_bytes());
    let again = json(&ok(text_only(&db, &["import", renamed.to_str().unwrap(), "--json"])));
    assert_eq!((again["imported"].as_u64(), again["replayed"].as_bool()), (Some(0), Some(true)));
    assert_eq!(again["ids"], first["ids"], "a replay answers with the ids of the import it repeats");
    let human = ok(text_only(&db, &["import", file.to_str().unwrap()]));
    assert!(human.contains("already imported") && human.contains("--again"), "{human}");
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 3);
    ok(text_only(&db, &["import", file.to_str().unwrap(), "--again"]));
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 6, "--again stores a second copy");
}

#[test]
fn an_import_killed_while_embedding_is_acknowledged_and_its_retry_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let file = write(dir.path(), "big.jsonl", turns(1_500, "s").as_bytes());
    let mut child = command(&db, &["import", file.to_str().unwrap(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ack = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut ack).unwrap();
    // Killed as soon as it said "stored", while it embeds.
    child.kill().unwrap();
    child.wait().unwrap();
    let ack = json(&ack);
    assert_eq!(ack["imported"], 1_500, "acknowledged before embedding: {ack}");
    let stats = json(&ok(text_only(&db, &["stats", "--json"])));
    assert_eq!(stats["memories"], 1_500);
    assert!(stats["pending_vectors"].as_u64().unwrap() > 0, "the kill landed during embedding: {stats}");
    let retry = json(&ok(text_only(&db, &["import", file.to_str().unwrap(), "--json"])));
    assert_eq!(retry["replayed"], true);
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 1_500, "nothing stored twice");
    let drained = json(&ok(command(&db, &["embed-pending", "--json"]).output().unwrap()));
    assert_eq!(drained["pending_vectors"], 0, "{drained}");
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["vectors"], 1_500);
}

#[test]
fn recall_answers_without_waiting_for_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let file = write(dir.path(), "big.jsonl", turns(2_000, "s").as_bytes());
    ok(text_only(&db, &["import", file.to_str().unwrap()]));
    let none = json(&ok(command(&db, &["recall", "lighthouse 26", "--json"])
        .env("ATLAS_RECALL_EMBED_BUDGET_MS", "0")
        .output()
        .unwrap()));
    assert_eq!(none["pending_vectors"], 2_000, "{none}");
    assert!(!none["hits"].as_array().unwrap().is_empty(), "full text answers meanwhile");
    let some = json(&ok(command(&db, &["recall", "lighthouse 26", "--json"])
        .env("ATLAS_RECALL_EMBED_BUDGET_MS", "100")
        .output()
        .unwrap()));
    let left = some["pending_vectors"].as_u64().unwrap();
    assert!(left > 0 && left < 2_000, "a bounded share of the backlog was embedded: {left} left");
}

#[test]
fn commands_that_never_embed_never_load_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let no_runtime = dir.path().join("no/libonnxruntime.so");
    let run =
        |args: &[&str]| command(&db, args).env("ORT_DYLIB_PATH", &no_runtime).env("ATLAS_FETCH", "0").output().unwrap();
    let id = json(&ok(run(&["remember", "--json", "hello"])))["id"].as_i64().unwrap().to_string();
    ok(run(&["get", &id]));
    ok(run(&["stats"]));
    ok(run(&["export"]));
    ok(run(&["forget", &id]));
    // The same setting breaks a command that does embed: the check above can fail.
    failed(run(&["recall", "hello"]));
}

#[test]
fn parallel_bulk_imports_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let children: Vec<_> = (0..7)
        .map(|p| {
            let file = write(dir.path(), &format!("p{p}.jsonl"), turns(5_000, &format!("p{p}")).as_bytes());
            command(&db, &["import", file.to_str().unwrap()])
                .env("ATLAS_EMBEDDER", "none")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        ok(child.wait_with_output().unwrap());
    }
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 35_000);
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let file = write(dir.path(), "big.jsonl", turns(3_000, "s").as_bytes());
    ok(text_only(&db, &["import", file.to_str().unwrap()]));
    let mut child = command(&db, &["export"])
        .env("ATLAS_EMBEDDER", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.as_mut().unwrap().read_exact(&mut head).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_byte_order_mark_is_the_start_of_a_file_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let file = write(dir.path(), "bom.jsonl", format!("\u{feff}{}", turns(2, "s")).as_bytes());
    ok(text_only(&db, &["import", file.to_str().unwrap()]));
    let queries = write(dir.path(), "q.jsonl", "\u{feff}{\"id\": \"a\", \"query\": \"lighthouse\"}\n".as_bytes());
    let out = ok(text_only(&db, &["recall", "--batch", queries.to_str().unwrap(), "--json"]));
    assert_eq!(json(&out)["id"], "a");
}

#[test]
fn recall_mistakes_are_named_before_anything_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    ok(text_only(&db, &["remember", "the harbour lights"]));
    let queries =
        write(dir.path(), "q.jsonl", b"{\"id\": \"a\", \"query\": \"harbour\"}\n{\"id\": \"b\", \"query\": \"  \"}\n");
    let out = text_only(&db, &["recall", "--batch", queries.to_str().unwrap(), "--json"]);
    assert!(out.stdout.is_empty() || String::from_utf8_lossy(&out.stdout).contains("\"error\""), "nothing answered");
    let err = json(&String::from_utf8(out.stdout.clone()).unwrap());
    assert_eq!(err["error"]["location"], format!("{}:2", queries.display()));
    assert_eq!(err["error"]["field"], "query");
    let err = failed(text_only(&db, &["recall", "harbour", "--k", "0"]));
    assert!(err.contains("\"k\"") && err.contains("at least 1"), "{err}");
    let err = failed(text_only(
        &db,
        &["recall", "harbour", "--since", "2024-02-01T00:00:00Z", "--until", "2024-01-01T00:00:00Z"],
    ));
    assert!(err.contains("since") && err.contains("no memory can match"), "{err}");
}

#[test]
fn errors_are_json_under_json() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.db");
    let out = text_only(&missing, &["stats", "--json"]);
    assert!(!out.status.success());
    let err = json(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(err["error"]["code"], "invalid_input");
    assert!(err["error"]["message"].as_str().unwrap().contains("does not exist"), "{err}");
    let db = dir.path().join("m.db");
    let bad = write(dir.path(), "bad.jsonl", b"{\"text\": \"fine\"}\n{\"text\": 42}\n");
    let out = text_only(&db, &["import", bad.to_str().unwrap(), "--json"]);
    let err = json(&String::from_utf8(out.stdout).unwrap());
    assert_eq!((err["error"]["code"].as_str(), err["error"]["field"].as_str()), (Some("invalid_input"), Some("text")));
    assert_eq!(err["error"]["location"], format!("{}:2", bad.display()));
}

#[test]
fn remember_with_a_key_stores_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let first = json(&ok(text_only(&db, &["remember", "--key", "turn-17", "--json", "I moved to Lisbon"])));
    let retry = json(&ok(text_only(&db, &["remember", "--key", "turn-17", "--json", "I moved to Lisbon"])));
    assert_eq!(first["id"], retry["id"]);
    ok(text_only(&db, &["remember", "--key", "turn-18", "I moved to Lisbon"]));
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 2);
}

#[test]
fn onnx_runtime_writes_nothing_outside_atlas_files() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let db = dir.path().join("m.db");
    let cache = std::env::var_os("ATLAS_CACHE_DIR")
        .map_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/atlas"), PathBuf::from);
    let run = |args: &[&str]| {
        command(&db, args)
            .env("HOME", &home)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("ORT_DISABLE_TELEMETRY")
            .env("ATLAS_CACHE_DIR", &cache)
            .output()
            .unwrap()
    };
    ok(run(&["remember", "the harbour lights"]));
    ok(run(&["recall", "harbour"]));
    let written: Vec<_> = walk(&home);
    assert!(written.is_empty(), "written under $HOME: {written:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// Runs as an unprivileged user when the tests run as root (root ignores directory modes).
#[test]
fn a_database_in_a_read_only_directory_can_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let shelf = dir.path().join("shelf");
    std::fs::create_dir(&shelf).unwrap();
    let db = shelf.join("m.db");
    ok(text_only(&db, &["remember", "the harbour lights"]));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&shelf, std::fs::Permissions::from_mode(0o555)).unwrap();
    let root = unsafe { libc_geteuid() } == 0;
    let run = |args: &[&str]| {
        let mut c = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_atlas")]);
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_atlas"))
        };
        c.arg("--db")
            .arg(&db)
            .args(args)
            .env("ATLAS_EMBEDDER", "none")
            .env_remove("ATLAS_DB")
            .env_remove("ATLAS_CONFIG");
        c.output().unwrap()
    };
    let found = ok(run(&["recall", "harbour", "--json"]));
    assert_eq!(json(&found)["hits"][0]["text"], "the harbour lights");
    ok(run(&["stats"]));
    let err = failed(run(&["remember", "more"]));
    assert!(err.contains("m.db"), "{err}");
    std::fs::set_permissions(&shelf, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 1, "nothing was written");
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Reproduced before the fix: two imports of a 2-line file into one new path failed 23 times in
/// 60 ("database is locked by another writer (waited 5 s)" after a few ms).
#[test]
fn many_processes_opening_one_new_database_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "small.jsonl", b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
    for (round, processes) in [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8, 8, 8].into_iter().enumerate() {
        let db = dir.path().join(format!("new-{round}.db"));
        let children: Vec<_> = (0..processes)
            .map(|_| {
                command(&db, &["import", file.to_str().unwrap(), "--again"])
                    .env("ATLAS_EMBEDDER", "none")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(json(&ok(text_only(&db, &["stats", "--json"])))["memories"], 2 * processes);
    }
}

/// Under the usual umask (022), every file and folder a space's commands create is its owner's
/// alone: the database and its WAL and SHM, the caches, the archive, an export, the bank.
#[cfg(unix)]
#[test]
fn the_files_of_a_new_space_are_owner_only_under_umask_022() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space");
    std::fs::create_dir(&space).unwrap();
    let db = space.join("t.db");
    let run = |args: &[&str]| -> String {
        let inner = command(&db, args);
        let mut outer = Command::new("sh");
        outer.arg("-c").arg("umask 022; exec \"$@\"").arg("sh").arg(inner.get_program()).args(inner.get_args());
        for (key, value) in inner.get_envs() {
            match value {
                Some(value) => outer.env(key, value),
                None => outer.env_remove(key),
            };
        }
        ok(outer.output().expect("run atlas"))
    };
    let turns = write(
        dir.path(),
        "t.jsonl",
        b"{\"text\": \"BOBSECRET lives in Oslo\", \"speaker\": \"bob\", \"scope\": {\"user\": \"bob\"}}\n\
          {\"text\": \"- W: Bob works at Initech\", \"speaker\": \"bob\", \"scope\": {\"user\": \"bob\"}}\n",
    );
    run(&["import", turns.to_str().unwrap()]);
    run(&["consolidate"]);
    run(&["recall", "where does Bob live"]);
    run(&["forget", "1"]);
    run(&["archive", "--deleted-older-than", "0"]);
    let export = space.join("export.jsonl");
    run(&["export", "--out", export.to_str().unwrap()]);
    run(&["bank", "write", space.join("bank").to_str().unwrap()]);
    let mut seen = Vec::new();
    let mut stack = vec![space.clone()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            let mode = std::fs::symlink_metadata(&path).unwrap().permissions().mode() & 0o777;
            if path.is_dir() {
                stack.push(path.clone());
            }
            seen.push((path.strip_prefix(&space).unwrap().display().to_string(), mode));
        }
    }
    seen.sort();
    let names: Vec<&str> = seen.iter().map(|(name, _)| name.as_str()).collect();
    for wanted in ["t.db", "export.jsonl", "archive", "bank"] {
        assert!(names.contains(&wanted), "{wanted} was written: {seen:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("archive/") && n.ends_with(".jsonl.gz")), "{seen:?}");
    let open: Vec<&(String, u32)> = seen.iter().filter(|(_, mode)| mode & 0o077 != 0).collect();
    assert!(open.is_empty(), "readable by others: {open:?} (all: {seen:?})");
}

/// `atlas ui` on another loopback address answers its own page at the address it printed
/// (the Host a browser sends for it), and still refuses a name it was not given.
#[test]
fn the_inspector_answers_at_the_address_it_listens_on() {
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ui.db");
    ok(text_only(&db, &["remember", "hello"]));
    let mut child = command(&db, &["ui", "--listen", "127.0.0.2:0"])
        .env("ATLAS_EMBEDDER", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let authority = url.trim().trim_start_matches("http://").trim_end_matches('/').to_owned();
    assert!(authority.starts_with("127.0.0.2:"), "{url:?}");
    let get = |host: &str| -> String {
        let mut stream = TcpStream::connect(&authority).unwrap();
        write!(stream, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    };
    let own = get(&authority);
    let other = get("evil.example");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(own.contains(" 200 "), "its own page: {own}");
    assert!(other.contains(" 403 "), "another name: {other}");
}
