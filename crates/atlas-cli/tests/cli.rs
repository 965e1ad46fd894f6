//! The `atlas` binary end to end: the CLI contract of the LoCoMo harness, errors and crashes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `atlas` as built: SQLite and the ONNX embedder.
fn atlas(db: &Path, args: &[&str]) -> Output {
    command(db, args).output().expect("run atlas")
}

/// `atlas` with `ATLAS_EMBEDDER=none`, for tests about storage that write many thousands of rows.
fn atlas_text_only(db: &Path, args: &[&str]) -> Output {
    command(db, args).env("ATLAS_EMBEDDER", "none").output().expect("run atlas")
}

fn command(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atlas"));
    command
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("ATLAS_DB")
        .env_remove("ATLAS_CONFIG")
        .env_remove("ATLAS_EMBEDDER");
    command
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "atlas failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn failed(out: Output) -> String {
    assert!(!out.status.success(), "atlas should have failed; stdout: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
    path
}

const TURNS: &str = r#"{"session": "c/session_1", "speaker": "Caroline", "text": "I went to an LGBTQ support group yesterday.", "time": "2023-05-08T13:56:00Z", "meta": {"dia_id": "D1:1"}}
{"session": "c/session_1", "speaker": "Melanie", "text": "That sounds powerful! I painted a sunrise last week.", "time": "2023-05-08T13:56:30Z", "meta": {"dia_id": "D1:2"}}
{"session": "c/session_2", "speaker": "Caroline", "text": "I'm researching adoption agencies now.", "time": "2023-05-25T13:14:00Z", "meta": {"dia_id": "D2:1"}}
"#;

#[test]
fn harness_contract_import_then_batch_recall_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let turns = write(dir.path(), "episodes.jsonl", TURNS);
    let imported: serde_json::Value =
        serde_json::from_str(&ok(atlas(&db, &["import", turns.to_str().unwrap(), "--json"]))).unwrap();
    assert_eq!(imported["imported"], 3);
    let queries = write(
        dir.path(),
        "queries.jsonl",
        "{\"id\": \"q0\", \"query\": \"What did Melanie paint?\"}\n{\"id\": \"q1\", \"query\": \"adoption (agencies\"}\n",
    );
    let out = ok(atlas(&db, &["recall", "--batch", queries.to_str().unwrap(), "--k", "2", "--json"]));
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["id"], "q0");
    assert!(lines[0]["took_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(lines[0]["hits"][0]["meta"]["dia_id"], "D1:2");
    assert_eq!(lines[1]["hits"][0]["meta"]["dia_id"], "D2:1");
    assert!(lines[0]["hits"].as_array().unwrap().len() <= 2);
    assert_eq!(lines[0]["signals"]["vector"]["used"], true);
    assert!(lines[0]["hits"][0]["ranks"]["vector"].as_u64().is_some(), "{}", lines[0]);
}

/// An import leaves the search indexes' files current, so that the next process's first recall
/// reads them as they are: it neither rebuilds nor rewrites them (a rewrite would change their
/// modification time), whatever the import wrote. So does a sleep cycle.
#[test]
fn an_import_leaves_the_search_files_current_for_the_next_recall() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let turns = write(dir.path(), "episodes.jsonl", TURNS);
    let files = ["memory.db.text.cache", "memory.db.vectors.cache"].map(|f| dir.path().join(f));
    let written = |files: &[PathBuf; 2]| {
        files.clone().map(|f| {
            std::fs::metadata(&f).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
    };
    for step in [&["import", turns.to_str().unwrap()][..], &["consolidate"][..]] {
        ok(atlas(&db, step));
        let before = written(&files);
        std::thread::sleep(std::time::Duration::from_millis(20));
        ok(atlas(&db, &["recall", "What did Melanie paint?", "--k", "2"]));
        assert_eq!(
            written(&files),
            before,
            "after {step:?}, the first recall of a new process reads the files as they are"
        );
    }
}

#[test]
fn remember_get_forget_stats_export() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let first: serde_json::Value = serde_json::from_str(&ok(atlas(
        &db,
        &["remember", "--json", "--session", "s", "--scope", "user:ann", "hello there"],
    )))
    .unwrap();
    let id = first["id"].as_i64().unwrap().to_string();
    ok(atlas(&db, &["remember", "--session", "s", "--speaker", "Ann", "--meta", "{\"k\": 1}", "general kenobi"]));
    ok(atlas(&db, &["remember", "--session", "s", "--scope", "user:ann", "see you soon"]));
    let got: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["get", &id, "--json"]))).unwrap();
    assert_eq!(got["text"], "hello there");
    assert_eq!(got["scope"]["user"], "ann");
    assert_eq!(got["edges"][0]["kind"], "temporal", "linked to ann's next turn, not to the other user's");
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["stats", "--json"]))).unwrap();
    assert_eq!((stats["memories"].as_u64(), stats["edges"].as_u64()), (Some(3), Some(1)));
    let human = ok(atlas(&db, &["recall", "kenobi"]));
    assert!(human.contains("general kenobi"), "{human}");
    let scoped = ok(atlas(&db, &["recall", "--json", "--explain", "--scope", "user:ann", "kenobi"]));
    assert!(!scoped.contains("kenobi") && scoped.contains("hello there"), "only ann's memory: {scoped}");
    let scoped: serde_json::Value = serde_json::from_str(&scoped).unwrap();
    assert_eq!(
        scoped["signals"]["vector"]["note"],
        serde_json::Value::Null,
        "recall embedded what remember left pending"
    );
    let explain = &scoped["hits"][0]["explain"]["vector"];
    assert_eq!(explain["rank"], 1);
    assert!(explain["score"].as_f64().is_some() && explain["contribution"].as_f64().unwrap() > 0.0, "{explain}");
    // Soft by default: recall stops returning it, recover brings it back.
    let soft: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "forget", &id]))).unwrap();
    assert_eq!((soft["forgotten"].as_i64(), soft["hard"].as_bool()), (id.parse().ok(), Some(false)));
    let gone = ok(atlas(&db, &["recall", "--json", "--scope", "user:ann", "kenobi"]));
    assert!(!gone.contains("hello there"), "{gone}");
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "stats"]))).unwrap();
    assert_eq!(stats["soft_deleted"], 1);
    let back: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "recover", &id]))).unwrap();
    assert_eq!(back["how"], "undeleted");
    assert!(ok(atlas(&db, &["recall", "--json", "--scope", "user:ann", "kenobi"])).contains("hello there"));
    let useful: serde_json::Value =
        serde_json::from_str(&ok(atlas(&db, &["--json", "feedback", &id, "--useful"]))).unwrap();
    assert_eq!(useful["lifecycle"]["uses"], 1);
    let decay: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "decay"]))).unwrap();
    assert_eq!(decay["ids"], serde_json::json!([]), "nothing fades on its first day: {decay}");
    let archive: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "archive"]))).unwrap();
    assert_eq!(archive["archived"], 0);
    let restore: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "archive", "restore"]))).unwrap();
    assert_eq!(restore["restored"], serde_json::json!([]));
    // Hard: gone for good.
    let hard: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["--json", "forget", &id, "--hard"]))).unwrap();
    assert_eq!(hard["hard"], true);
    let err = failed(atlas(&db, &["forget", &id, "--hard"]));
    assert!(err.contains(&format!("no memory with id {id}")), "{err}");
    let err = failed(atlas(&db, &["recover", &id]));
    assert!(err.contains(&format!("no memory with id {id}")), "{err}");
    let export = ok(atlas(&db, &["export"]));
    assert_eq!(export.lines().count(), 4, "header, the two memories left, trailer");
    assert!(export.contains("general kenobi"));
}

#[test]
fn bad_input_is_named_and_nothing_is_half_imported() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let bad = write(dir.path(), "bad.jsonl", &format!("{TURNS}{{\"text\": 42}}\n"));
    let err = failed(atlas(&db, &["import", bad.to_str().unwrap()]));
    assert!(err.contains("bad.jsonl:4") && err.contains("field \"text\""), "{err}");
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["stats", "--json"]))).unwrap();
    assert_eq!(stats["memories"], 0);
    let err = failed(atlas(&db, &["recall", "--scope", "team:red", "x"]));
    assert!(err.contains("unknown scope \"team\""), "{err}");
    let err = failed(atlas(&dir.path().join("missing/dir/x.db"), &["stats"]));
    assert!(err.contains("missing/dir") && err.contains("does not exist"), "{err}");
    let err = failed(atlas(&db, &["remember", "--time", "last tuesday", "x"]));
    assert!(err.contains("--time") && err.contains("last tuesday"), "{err}");
    let queries = write(dir.path(), "q.jsonl", "{\"id\": \"a\"}\n");
    let err = failed(atlas(&db, &["recall", "--batch", queries.to_str().unwrap()]));
    assert!(err.contains("q.jsonl:1") && err.contains("field \"query\""), "{err}");
    let err = failed(atlas(&db, &["recall", "--k", "10001", "x"]));
    assert!(err.contains("field \"k\": at most 10000"), "{err}");
    // The one JSON Lines reader: a BOM and blank lines are skipped, lines keep their numbers,
    // and a key given twice is refused naming it.
    let queries = write(
        dir.path(),
        "q2.jsonl",
        "\u{feff}{\"id\": \"a\", \"query\": \"x\"}\n\n{\"id\": \"b\", \"query\": \"x\", \"query\": \"y\"}\n",
    );
    let err = failed(atlas(&db, &["recall", "--batch", queries.to_str().unwrap()]));
    assert!(err.contains("q2.jsonl:3") && err.contains("field \"query\"") && err.contains("twice"), "{err}");
    let not_db = write(dir.path(), "notes.txt", &"this is not a database\n".repeat(200));
    let err = failed(atlas(&not_db, &["stats"]));
    assert!(err.contains("not") && err.contains("database"), "{err}");
}

/// Kills `atlas import` at several points mid-way: acknowledged writes survive, the file is
/// never corrupt, and the import is either wholly there or wholly absent.
#[test]
fn a_killed_import_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    for i in 0..5 {
        ok(atlas_text_only(&db, &["remember", "--session", "acked", &format!("acknowledged turn {i}")]));
    }
    let lines = atlas_testing::size(60_000);
    let mut big = String::new();
    for i in 0..lines {
        big.push_str(&format!("{{\"session\": \"bulk\", \"text\": \"bulk line {i} with some words to index\"}}\n"));
    }
    let big = write(dir.path(), "big.jsonl", &big);
    for delay_ms in [30u64, 120, 400] {
        let mut child = command(&db, &["import", big.to_str().unwrap()])
            .env("ATLAS_EMBEDDER", "none")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        let stats: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(&db, &["stats", "--json"]))).unwrap();
        let memories = stats["memories"].as_u64().unwrap();
        assert_eq!((memories - 5) % lines as u64, 0, "an import is all or nothing, found {memories} memories");
        let recall = ok(atlas_text_only(&db, &["recall", "--json", "--k", "10", "acknowledged"]));
        assert_eq!(recall.matches("acknowledged turn").count(), 5, "every acknowledged turn is still there");
    }
}

/// Two processes importing into one file at once: the second waits for the first's write lock;
/// both land, nothing is lost or corrupted.
#[test]
fn two_writer_processes_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    // Both processes open the brand-new file at once: the first open waits like any write.
    let db = dir.path().join("shared.db");
    let per_process = atlas_testing::size(20_000);
    let files: Vec<PathBuf> = (0..2)
        .map(|p| {
            let lines: String = (0..per_process)
                .map(|i| format!("{{\"session\": \"p{p}\", \"text\": \"process {p} line {i}\"}}\n"))
                .collect();
            write(dir.path(), &format!("p{p}.jsonl"), &lines)
        })
        .collect();
    let children: Vec<_> = files
        .iter()
        .map(|f| {
            command(&db, &["import", f.to_str().unwrap()])
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
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(&db, &["stats", "--json"]))).unwrap();
    assert_eq!(stats["memories"], 2 * per_process);
    assert_eq!(stats["edges"], 39_998, "each process's session is one linked chain");
}

/// A process that holds the write lock longer than the busy timeout makes a writer fail with
/// a clear message, and the database stays intact.
#[test]
fn a_writer_blocked_too_long_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("locked.db");
    ok(atlas_text_only(&db, &["remember", "before the lock"]));
    let holder = python_lock_holder(&db);
    let err = failed(
        command(&db, &["remember", "during the lock"])
            .env("ATLAS_EMBEDDER", "none")
            .env("ATLAS_BUSY_TIMEOUT_MS", "700")
            .output()
            .unwrap(),
    );
    assert!(err.contains("locked by another process") && err.contains("waited"), "{err}");
    assert!(err.contains("locked.db") && !err.contains("5 s"), "names the file and the real wait: {err}");
    drop(holder);
    ok(atlas_text_only(&db, &["remember", "after the lock"]));
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(&db, &["stats", "--json"]))).unwrap();
    assert_eq!(stats["memories"], 2);
}

/// Holds the write lock from another process: python3's sqlite3, which every CI machine has.
struct LockHolder(std::process::Child);

fn python_lock_holder(db: &Path) -> LockHolder {
    let script = "import sqlite3, sys, time\n\
                  c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                  c.execute('BEGIN IMMEDIATE')\n\
                  print('locked', flush=True)\n\
                  time.sleep(30)\n";
    let mut child = Command::new("python3")
        .args(["-c", script, db.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    LockHolder(child)
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn embed_prints_one_unit_vector_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(
        dir.path(),
        "texts.jsonl",
        "{\"id\": \"a\", \"text\": \"The cat sits on the mat\"}\n{\"id\": 7, \"text\": \"\"}\n",
    );
    let out = ok(atlas(&dir.path().join("unused.db"), &["embed", "--batch", input.to_str().unwrap(), "--json"]));
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines[0]["id"].as_str(), lines[1]["id"].as_str()), (Some("a"), Some("7")));
    for line in &lines {
        let v: Vec<f64> = line["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(v.len(), 384);
        assert!((v.iter().map(|x| x * x).sum::<f64>().sqrt() - 1.0).abs() < 1e-4);
    }
    assert!(!dir.path().join("unused.db").exists(), "embed opens no database");
    let bad = write(dir.path(), "bad.jsonl", "{\"id\": \"a\"}\n");
    let err = failed(atlas(&dir.path().join("x.db"), &["embed", "--batch", bad.to_str().unwrap()]));
    assert!(err.contains("bad.jsonl:1") && err.contains("field \"text\""), "{err}");
    // The file is read a piece at a time, but every line is checked before a vector is written.
    let mut late = "\u{feff}".to_owned();
    late.extend((0..300).map(|i| format!("{{\"id\": {i}, \"text\": \"turn {i}\"}}\n")));
    late.push_str("{\"id\": 300, \"text\": 5}\n");
    let late = write(dir.path(), "late.jsonl", &late);
    let out = atlas(&dir.path().join("x.db"), &["embed", "--batch", late.to_str().unwrap()]);
    assert!(!out.status.success() && out.stdout.is_empty(), "nothing written before the bad line is found");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("late.jsonl:301") && err.contains("expected a string"), "{err}");
}

/// A stand-in ONNX Runtime library built here with the C compiler: it answers the version
/// query with `version`, as an old or foreign build would.
fn fake_onnxruntime(dir: &Path, version: &str) -> PathBuf {
    let source = write(
        dir,
        "fake_ort.c",
        &format!(
            "typedef struct {{ const void *(*GetApi)(unsigned); const char *(*GetVersionString)(void); }} OrtApiBase;\n\
             static const void *get_api(unsigned v) {{ (void)v; return 0; }}\n\
             static const char *version(void) {{ return \"{version}\"; }}\n\
             static const OrtApiBase base = {{ get_api, version }};\n\
             const OrtApiBase *OrtGetApiBase(void) {{ return &base; }}\n"
        ),
    );
    shared_library(&source, &dir.join("libonnxruntime.so.fake"))
}

/// Compiles one C file into a shared library with the machine's C compiler.
fn shared_library(source: &Path, lib: &Path) -> PathBuf {
    let status = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(lib).arg(source).status().expect("cc");
    assert!(status.success(), "cc failed on {}", source.display());
    lib.to_path_buf()
}

/// `atlas embed` on one text with `ORT_DYLIB_PATH` pointing at `library`; returns stderr.
fn embed_with_library(dir: &Path, library: &Path) -> String {
    let input = write(dir, "t.jsonl", "{\"id\": \"a\", \"text\": \"hello\"}\n");
    let out = command(&dir.join("x.db"), &["embed", "--batch", input.to_str().unwrap()])
        .env("ORT_DYLIB_PATH", library)
        .output()
        .unwrap();
    failed(out)
}

#[test]
fn a_wrong_onnx_runtime_library_is_a_clear_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let old = fake_onnxruntime(dir.path(), "1.20.0");
    let err = embed_with_library(dir.path(), &old);
    assert!(err.contains("1.20.0") && err.contains("1.31"), "{err}");
    let not_ort = write(dir.path(), "empty.c", "int nothing_here(void) { return 0; }\n");
    let lib = shared_library(&not_ort, &dir.path().join("libnot_ort.so"));
    let err = embed_with_library(dir.path(), &lib);
    assert!(err.contains("OrtGetApiBase") && err.contains("libnot_ort.so"), "{err}");
}

#[test]
fn reembed_all_embeds_every_memory_again_with_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let turns = write(dir.path(), "episodes.jsonl", TURNS);
    ok(atlas(&db, &["import", turns.to_str().unwrap()]));
    let out: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["reembed", "--all", "--json"]))).unwrap();
    assert_eq!(out["reembedded"], 3);
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["stats", "--json"]))).unwrap();
    assert_eq!((stats["vectors"].as_u64(), stats["pending_vectors"].as_u64()), (Some(3), Some(0)));
    let found: serde_json::Value =
        serde_json::from_str(&ok(atlas(&db, &["recall", "adoption agencies", "--json"]))).unwrap();
    assert!(found["hits"].as_array().is_some_and(|h| !h.is_empty()), "{found}");
}

#[test]
fn reembed_after_import_is_a_no_op_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let turns = write(dir.path(), "episodes.jsonl", TURNS);
    ok(atlas(&db, &["import", turns.to_str().unwrap()]));
    let out: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["reembed", "--json"]))).unwrap();
    assert_eq!(out["reembedded"], 0);
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas(&db, &["stats", "--json"]))).unwrap();
    assert_eq!((stats["vectors"].as_u64(), stats["pending_vectors"].as_u64()), (Some(3), Some(0)));
}

#[test]
fn consolidate_then_recall_facts_now_and_as_of() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("facts.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo/changes.jsonl");
    ok(atlas_text_only(&db, &["import", fixture.to_str().unwrap()]));
    let report: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["consolidate", "--json"]))).unwrap();
    assert_eq!((report["episodes_seen"].as_u64(), report["skipped_phatic"].as_u64()), (Some(10), Some(3)));
    assert_eq!(report["facts_superseded"], 2);
    assert_eq!((report["llm_calls"].as_u64(), report["input_tokens"].as_u64()), (Some(0), Some(0)));
    let now: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &["recall", "what does checkout run on", "--kind", "fact", "--k", "3", "--json"],
    )))
    .unwrap();
    let hit = &now["hits"][0];
    assert_eq!(hit["text"], "checkout-service is now: rolled back to Python after the latency spike");
    assert_eq!(
        (hit["valid_from"].as_str(), hit["valid_until"].clone()),
        (Some("2024-05-07T16:26:00Z"), serde_json::Value::Null)
    );
    assert!(hit["confidence"].as_f64().is_some(), "{hit}");
    assert_eq!(hit["sources"][0]["session"], "ops/s3", "the episode it came from, with its meta: {hit}");
    let id = hit["id"].as_i64().unwrap().to_string();
    let history: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["explain", &id, "--json"]))).unwrap();
    let replaced: Vec<&str> =
        history["replaced"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(
        replaced,
        ["checkout-service is now: migrated to Rust", "checkout-service is now: running on Python 3.11"],
        "the versions it replaced, newest first"
    );
    assert_eq!(history["sources"].as_array().unwrap().len(), 1);
    assert_eq!(history["entities"][0]["text"], "checkout-service");
    let queries = write(dir.path(), "q.jsonl", "{\"id\": \"april\", \"query\": \"what does checkout run on\"}\n");
    let then: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &[
            "recall",
            "--batch",
            queries.to_str().unwrap(),
            "--kind",
            "fact",
            "--as-of",
            "2024-04-20T00:00:00Z",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(then["id"], "april");
    assert_eq!(then["hits"][0]["text"], "checkout-service is now: migrated to Rust");
    assert_eq!(then["hits"][0]["valid_until"], "2024-05-07T16:26:00Z", "history says when it stopped holding");
}

/// The agent memories' contract: experience store / search and strategy add / update / read,
/// with the JSON fields scripts read, and bad trajectory lines named by file, line and field.
#[test]
fn experiences_and_strategies_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/agents/trajectories.jsonl");
    let stored: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["--json", "experience", "store", fixture.to_str().unwrap()])))
            .unwrap();
    assert_eq!(stored["stored"], 8);
    let search: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &["experience", "search", "fill the enclosed region", "--k", "4", "--json"],
    )))
    .unwrap();
    let first = &search["hits"][0];
    assert_eq!((first["id"].as_str(), first["success"].as_bool()), (Some("t04"), Some(true)), "{search}");
    assert!(first["task"].is_string() && first["score"].is_f64() && first.get("feedback").is_some());

    let added: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &[
            "strategy",
            "add",
            "--situation",
            "symmetric grid puzzles",
            "--suggestion",
            "reflect then duplicate",
            "--json",
        ],
    )))
    .unwrap();
    let id = added["id"].as_i64().expect("the new strategy's id").to_string();
    ok(atlas_text_only(&db, &["strategy", "update", &id, "--success", "true"]));
    ok(atlas_text_only(&db, &["strategy", "update", &id, "--success", "false"]));
    ok(atlas_text_only(&db, &["strategy", "update", &id, "--success", "true"]));
    let read: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &["strategy", "read", "a symmetric grid puzzle", "--k", "5", "--json"],
    )))
    .unwrap();
    let s = &read["hits"][0];
    assert_eq!(s["id"].as_i64().map(|i| i.to_string()), Some(id.clone()));
    assert_eq!((s["usage_count"].as_u64(), s["success_rate"].as_f64()), (Some(3), Some(0.6)));
    assert_eq!(s["situation"], "symmetric grid puzzles");
    assert_eq!(s["suggestion"], "reflect then duplicate");

    let bad = write(
        dir.path(),
        "bad.jsonl",
        "{\"id\": \"x\", \"task\": \"t\", \"steps\": [], \"success\": true}\n{\"id\": \"y\", \"task\": \"t\", \"steps\": \"oops\", \"success\": true}\n",
    );
    let err = failed(atlas_text_only(&db, &["experience", "store", bad.to_str().unwrap()]));
    assert!(err.contains("bad.jsonl:2") && err.contains("steps"), "{err}");
    let not_strategy = failed(atlas_text_only(&db, &["strategy", "update", "1", "--success", "true"]));
    assert!(not_strategy.contains("not a strategy"), "{not_strategy}");
}

#[test]
fn the_concept_library_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("concepts.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/agents/trajectories.jsonl");
    let learned: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["concept", "compress", fixture.to_str().unwrap(), "--json"])))
            .unwrap();
    let concepts = learned["concepts"].as_array().expect("the learned concepts");
    assert!(!concepts.is_empty());
    for c in concepts {
        assert!(c["name"].is_string() && c["code"].is_string() && c["params"].is_array(), "{c}");
        assert!(c["occurrences"].as_u64().unwrap() >= 2, "{c}");
    }
    let mirror =
        concepts.iter().find(|c| c["code"] == "m = flip_horizontal(g)\nout = hstack(g, m)").expect("{learned}");
    assert_eq!((mirror["params"].clone(), mirror["occurrences"].as_u64()), (serde_json::json!([]), Some(2)));
    let add = |name: &str, code: &str| -> i64 {
        let out =
            ok(atlas_text_only(&db, &["concept", "add", "--name", name, "--code", code, "--param", "grid", "--json"]));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"].as_i64().unwrap()
    };
    let (a, b) = (
        add("mirror", "out = hstack(grid, flip_horizontal(grid))"),
        add("recolor_all", "out = recolor(grid, green, yellow)"),
    );
    let composed: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &["concept", "compose", &a.to_string(), &b.to_string(), "--json"],
    )))
    .unwrap();
    assert_eq!(composed["params"], serde_json::json!(["grid", "grid_2"]));
    let got: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["concept", "get", &composed["id"].to_string(), "--json"])))
            .unwrap();
    assert_eq!(got["name"], "mirror_then_recolor_all");
    let found: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["concept", "search", "recolor", "--k", "2", "--json"])))
            .unwrap();
    assert!(found["concepts"].as_array().unwrap().iter().any(|c| c["id"] == b), "{found}");
    let err = failed(atlas_text_only(&db, &["concept", "compose", &a.to_string()]));
    assert!(err.contains("ids") || err.contains("2"), "{err}");
}

#[test]
fn context_prints_its_sections_and_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("context.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/agents/trajectories.jsonl");
    ok(atlas_text_only(&db, &["experience", "store", fixture.to_str().unwrap()]));
    let context: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(
        &db,
        &["context", "fill the enclosed region", "--budget", "8000", "--json"],
    )))
    .unwrap();
    let sections = context["sections"].as_array().unwrap();
    let names: Vec<&str> = sections.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["persona", "core", "goal", "retrieved", "history"]);
    for s in sections {
        assert!(s["tokens"].as_u64().unwrap() <= s["budget"].as_u64().unwrap(), "{s}");
    }
    assert!(context["tokens"].as_u64().unwrap() <= 8000);
    assert!(context["text"].as_str().unwrap().contains("Task: fill the enclosed region"));
    let human = ok(atlas_text_only(&db, &["context", "fill the enclosed region", "--budget", "8000"]));
    assert!(human.starts_with("## goal") && human.contains("## retrieved"), "{human}");
}

/// `atlas serve` refuses an open address without a token, and serves on loopback.
#[test]
fn serve_refuses_an_open_address_without_a_token_and_answers_on_loopback() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db");
    // Neither serve nor mcp creates a missing space (a mistyped path), nor leaves a file.
    for args in [&["serve", "--listen", "127.0.0.1:0"][..], &["mcp"][..]] {
        let err = failed(command(&db, args).env("ATLAS_EMBEDDER", "none").output().unwrap());
        assert!(err.contains("does not exist"), "{args:?}: {err}");
        assert!(!db.exists(), "{args:?} left a file");
    }
    let err = failed(command(&db, &["serve", "--max-in-flight", "0"]).output().unwrap());
    assert!(err.contains("--max-in-flight"), "{err}");
    assert!(
        command(&db, &["remember", "--", "a first memory"]).env("ATLAS_EMBEDDER", "none").status().unwrap().success()
    );
    let err = failed(
        command(&db, &["serve", "--listen", "0.0.0.0:0"])
            .env("ATLAS_EMBEDDER", "none")
            .env_remove("ATLAS_TOKEN")
            .output()
            .unwrap(),
    );
    assert!(err.contains("without a token") && err.contains("ATLAS_TOKEN"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = command(&db, &["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("ATLAS_EMBEDDER", "none")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut answer = String::new();
    for _ in 0..100 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
            stream.read_to_string(&mut answer).unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"ok\""), "{answer}");
}

/// `atlas keys add` prints the token once, as its last line (with --json, in the object); only
/// its hash is stored; `keys list` never shows a token; `keys revoke` needs a live id.
#[test]
fn keys_are_added_listed_and_revoked_and_tokens_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keys.db");
    let none = |args: &[&str]| command(&db, args).env("ATLAS_EMBEDDER", "none").output().unwrap();
    let err = failed(none(&["keys", "list"]));
    assert!(err.contains("does not exist"), "keys does not create a space: {err}");
    ok(none(&["remember", "--", "a first memory"]));
    let text = ok(none(&["keys", "add", "--user", "ann", "--role", "write"]));
    let token = text.lines().last().unwrap().trim().to_owned();
    assert!(token.starts_with("atlas_") && token.len() > 60, "{text}");
    let made: serde_json::Value = serde_json::from_str(&ok(none(&[
        "--json", "keys", "add", "--user", "bob", "--agent", "helper", "--role", "read",
    ])))
    .unwrap();
    for field in ["id", "token", "user", "agent", "role", "created_at"] {
        assert!(!made[field].is_null(), "{field} in {made}");
    }
    let err = failed(none(&["keys", "add", "--role", "read"]));
    assert!(err.contains("--user"), "a read key needs a tenant: {err}");
    ok(none(&["keys", "add", "--role", "admin"]));
    let listed: serde_json::Value = serde_json::from_str(&ok(none(&["--json", "keys", "list"]))).unwrap();
    assert_eq!(listed["keys"].as_array().unwrap().len(), 3, "{listed}");
    let shown = listed.to_string();
    assert!(!shown.contains(&token) && !shown.contains(made["token"].as_str().unwrap()), "no token listed: {shown}");
    let file = std::fs::read(&db).unwrap();
    let needle = token.as_bytes();
    assert!(!file.windows(needle.len()).any(|w| w == needle), "the token itself is never in the database");
    let id = made["id"].as_str().unwrap();
    ok(none(&["keys", "revoke", id]));
    let err = failed(none(&["keys", "revoke", id]));
    assert!(err.contains("no live key"), "{err}");
    let listed: serde_json::Value = serde_json::from_str(&ok(none(&["--json", "keys", "list"]))).unwrap();
    let revoked: Vec<&serde_json::Value> =
        listed["keys"].as_array().unwrap().iter().filter(|k| !k["revoked_at"].is_null()).collect();
    assert_eq!(revoked.len(), 1, "{listed}");
}

/// Log lines written to a file or a pipe carry no colour codes.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("log.db");
    let out = command(&db, &["remember", "--", "hello"])
        .env("ATLAS_EMBEDDER", "none")
        .env("ATLAS_LOG", "debug")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.is_empty(), "debug logging wrote something");
    assert!(!err.contains('\u{1b}'), "no escape codes: {err:.300}");
}

/// `atlas import -` reads standard input: stored once, named `stdin` in errors, and the same
/// content piped again is a replay, as a file's would be.
#[test]
fn import_reads_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stdin.db");
    let piped = |text: &str| {
        let mut child = command(&db, &["import", "--json", "-"])
            .env("ATLAS_EMBEDDER", "none")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let first: serde_json::Value = serde_json::from_str(&ok(piped(TURNS))).unwrap();
    assert_eq!((first["imported"].as_u64(), first["ids"].as_array().map(Vec::len)), (Some(3), Some(3)));
    let again: serde_json::Value = serde_json::from_str(&ok(piped(TURNS))).unwrap();
    assert_eq!((again["imported"].as_u64(), again["replayed"].as_bool()), (Some(0), Some(true)));
    let out = piped(&format!("{TURNS}{{\"text\": 42}}\n"));
    assert!(!out.status.success());
    // Under --json the error is the document on standard output.
    let err = String::from_utf8_lossy(&out.stdout);
    assert!(err.contains("stdin:4") && err.contains("field"), "{err}");
    let stats: serde_json::Value = serde_json::from_str(&ok(atlas_text_only(&db, &["stats", "--json"]))).unwrap();
    assert_eq!(stats["memories"], 3);
}

#[test]
fn an_import_without_an_embedder_says_why_its_memories_wait_for_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("text-only.db");
    let file = write(dir.path(), "turns.jsonl", TURNS);
    let said = ok(atlas_text_only(&db, &["import", file.to_str().unwrap()]));
    assert!(said.contains("3 memories wait for a vector") && said.contains("no embedder"), "{said}");
    assert!(!said.contains("claimed by another process"), "{said}");
}

/// The commands of docs/FILES.md through the binary: a bank written, edited, synced (a bad line
/// named with its file and line in the JSON error), rebuilt into a new file; documents synced;
/// the graph as Cypher.
#[test]
fn bank_docs_and_cypher_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let changes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo/changes.jsonl");
    ok(atlas_text_only(&db, &["import", changes.to_str().unwrap()]));
    ok(atlas_text_only(&db, &["consolidate", "--end-sessions"]));
    let bank = dir.path().join("bank");
    let bank_arg = bank.to_str().unwrap();
    let first: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["--json", "bank", "write", bank_arg]))).unwrap();
    assert!(first["changed"].as_u64().unwrap() > 3, "{first}");
    let again: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["--json", "bank", "write", bank_arg]))).unwrap();
    assert_eq!(again["changed"], 0);

    let page = bank.join("user-ann/entities/checkout-service.md");
    let text = std::fs::read_to_string(&page).unwrap();
    std::fs::write(&page, text.replace("## Now\n\n", "## Now\n\n- owner\n")).unwrap();
    let out = atlas_text_only(&db, &["--json", "bank", "sync", bank_arg]);
    assert!(!out.status.success());
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let location = error["error"]["location"].as_str().unwrap_or_default().to_owned();
    let line = text.lines().position(|l| l == "## Now").unwrap() + 3;
    assert!(location.ends_with(&format!("user-ann/entities/checkout-service.md:{line}")), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("expected \"label: value\""), "{error}");
    std::fs::write(&page, text.replace("## Now\n\n", "## Now\n\n- owner: the payments team\n")).unwrap();
    let synced: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["--json", "bank", "sync", bank_arg]))).unwrap();
    assert_eq!(synced["added"], 1, "{synced}");

    let rebuilt = dir.path().join("rebuilt.db");
    let out = ok(atlas_text_only(&rebuilt, &["bank", "rebuild", bank_arg]));
    assert!(out.contains("rebuilt"), "{out}");
    let owner = |db: &Path| {
        let out = ok(atlas_text_only(
            db,
            &["--json", "recall", "who owns the checkout service", "--kind", "fact", "--k", "1"],
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (v["hits"][0]["id"].clone(), v["hits"][0]["text"].clone())
    };
    assert_eq!(owner(&rebuilt), owner(&db));

    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("runbook.md"), "# Runbook\n\n## Paging\n\nPage the payments team first.\n").unwrap();
    let s: serde_json::Value =
        serde_json::from_str(&ok(atlas_text_only(&db, &["--json", "docs", "sync", docs.to_str().unwrap()]))).unwrap();
    assert_eq!((s["files"].as_u64(), s["added"].as_u64()), (Some(1), Some(1)));
    let found = ok(atlas_text_only(&db, &["--json", "recall", "page the payments team", "--kind", "doc", "--k", "1"]));
    assert!(found.contains("## Paging"), "{found}");

    let cypher = dir.path().join("graph.cypher");
    let out = atlas_text_only(&db, &["export", "--format", "cypher", "--out", cypher.to_str().unwrap()]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&cypher).unwrap();
    assert!(text.contains("CREATE (:Fact {") && text.contains("[:SUPERSEDES {"));
    let refused = failed(atlas_text_only(&db, &["export", "--format", "cypher", "--vectors"]));
    assert!(refused.contains("--vectors"), "{refused}");
}
