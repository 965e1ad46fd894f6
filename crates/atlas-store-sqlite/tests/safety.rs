//! Data safety of the SQLite store: files that are not ATLAS's are refused byte for byte
//! untouched, read-only opens never create a file, many processes' first opens of one new file
//! all succeed, and claims on queued vector work keep two stores from embedding the same memory.

use atlas_domain::ports::{MemoryStore, VectorIndex};
use atlas_domain::{AtlasError, NewMemory, Scope, Timestamp};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

fn read_only() -> SqliteOptions {
    SqliteOptions { create: false, ..SqliteOptions::default() }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Another program's database, in each shape that once got modified or misreported.
fn foreign_files(dir: &Path) -> Vec<(std::path::PathBuf, &'static str)> {
    let cases = [
        ("app.db", "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ann');"),
        ("versioned.db", "CREATE TABLE t (x); PRAGMA user_version = 7;"),
        ("clash.db", "CREATE TABLE memories (id INTEGER PRIMARY KEY, note TEXT); PRAGMA user_version = 1;"),
        ("other-app.db", "PRAGMA application_id = 1234; CREATE TABLE t (x);"),
        (
            "mixed.db",
            "CREATE TABLE memories (id INTEGER PRIMARY KEY, body TEXT, meta TEXT, recorded_at INTEGER); CREATE TABLE edges (x); CREATE TABLE invoices (n); PRAGMA user_version = 3;",
        ),
    ];
    cases
        .into_iter()
        .map(|(name, sql)| {
            let path = dir.join(name);
            rusqlite::Connection::open(&path).unwrap().execute_batch(sql).unwrap();
            (path, name)
        })
        .collect()
}

#[test]
fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut garbage = dir.path().join("notes.txt");
    std::fs::write(&garbage, "these are my notes, not a database at all\n".repeat(200)).unwrap();
    let mut files = foreign_files(dir.path());
    files.push((std::mem::take(&mut garbage), "notes.txt"));
    let before = files_in(dir.path());
    for (path, name) in &files {
        let bytes = std::fs::read(path).unwrap();
        for options in [SqliteOptions::default(), read_only()] {
            match SqliteStore::open(path, &options) {
                Err(e @ AtlasError::NotAtlas { .. }) => {
                    let message = e.to_string();
                    assert!(message.contains("not an ATLAS database") && message.contains(name), "{message}");
                    assert!(!message.contains("CREATE"), "no SQL in the message: {message}");
                }
                Err(other) => panic!("{name}: expected NotAtlas, got {other}"),
                Ok(_) => panic!("{name}: opened another program's database"),
            }
            assert_eq!(std::fs::read(path).unwrap(), bytes, "{name} changed");
        }
    }
    assert_eq!(files_in(dir.path()), before, "no -wal or -shm file was left behind");
}

#[test]
fn a_read_only_open_of_a_missing_or_empty_file_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("mistyped.db");
    let err = SqliteStore::open(&missing, &read_only()).err().expect("a missing file is an error");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(files_in(dir.path()).is_empty(), "nothing created: {:?}", files_in(dir.path()));
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = SqliteStore::open(&empty, &read_only()).err().expect("an empty file is not a database yet");
    assert!(err.to_string().contains("not an ATLAS database yet"), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    // A command that writes makes it one, marked as ATLAS's.
    drop(SqliteStore::open(&empty, &SqliteOptions::default()).unwrap());
    let conn = rusqlite::Connection::open(&empty).unwrap();
    let mark: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).unwrap();
    assert_eq!(mark, atlas_store_sqlite::ownership::APPLICATION_ID);
    drop(SqliteStore::open(&empty, &read_only()).unwrap());
}

#[test]
fn many_first_opens_of_one_new_file_all_succeed() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("new-{round}.db"));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path, &SqliteOptions::default()).map(drop)
                })
            })
            .collect();
        for h in handles {
            if let Err(e) = h.join().unwrap() {
                panic!("round {round}: a concurrent first open failed: {e}");
            }
        }
    }
}

#[test]
fn a_busy_open_says_how_long_it_waited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.db");
    drop(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;").unwrap();
    let options = SqliteOptions { busy_timeout: Duration::from_millis(300), ..SqliteOptions::default() };
    let started = std::time::Instant::now();
    let err = SqliteStore::open(&path, &options).err().expect("locked");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let message = err.to_string();
    assert!(matches!(err, AtlasError::Busy(_)), "{message}");
    assert!(message.contains("waited") && message.contains("ms") && !message.contains("5 s"), "{message}");
    assert!(message.contains("held.db"), "{message}");
}

fn turns(n: usize) -> Vec<NewMemory> {
    (0..n)
        .map(|i| NewMemory::episode(format!("turn {i}"), Scope::default(), None, Timestamp(i as i64), Timestamp(0)))
        .collect()
}

#[tokio::test]
async fn two_stores_never_claim_the_same_queued_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let b = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let model = atlas_domain::ports::EmbeddingModel { name: "m".into(), dimension: 4 };
    a.bind_model(model.clone()).await.unwrap();
    b.bind_model(model).await.unwrap();
    a.insert(turns(10), None).await.unwrap();
    let first: HashSet<_> = a.pending_vectors(6).await.unwrap().into_iter().map(|m| m.id).collect();
    let second: HashSet<_> = b.pending_vectors(10).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!((first.len(), second.len()), (6, 4));
    assert!(first.is_disjoint(&second), "{first:?} and {second:?} overlap");
    assert!(b.pending_vectors(10).await.unwrap().len() == 4, "b renews its own claims only");
    // What one store embeds leaves the queue for both.
    b.put_vectors(second.iter().map(|id| (*id, vec![0.5; 4])).collect()).await.unwrap();
    assert!(b.pending_vectors(10).await.unwrap().is_empty());
    assert_eq!(a.stats().await.unwrap().pending_vectors, 6);
    // A claim that expired (its process died) is taken over.
    rusqlite::Connection::open(&path).unwrap().execute("UPDATE vector_queue SET claimed_until = 0", []).unwrap();
    assert_eq!(b.pending_vectors(10).await.unwrap().len(), 6);
}

/// A process killed while embedding leaves claims behind; on the same machine they are
/// released at once (its pid no longer runs), elsewhere they wait for expiry.
#[tokio::test]
async fn claims_of_a_dead_process_are_taken_over_at_once() {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        eprintln!("SKIPPED: no /proc/sys/kernel/random/boot_id on this system; dead claims only expire here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    store.bind_model(atlas_domain::ports::EmbeddingModel { name: "m".into(), dimension: 4 }).await.unwrap();
    store.insert(turns(3), None).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let claim = |owner: &str| {
        conn.execute(
            "UPDATE vector_queue SET claimed_by = ?1, claimed_until = 9000000000000",
            rusqlite::params![owner],
        )
        .unwrap();
    };
    claim("00000000-another-machine/1-1");
    assert!(store.pending_vectors(10).await.unwrap().is_empty(), "a claim from another machine is respected");
    claim(&format!("{}/{}-1", boot.trim(), std::process::id()));
    // This process's pid, another instance: alive, so respected too.
    assert!(store.pending_vectors(10).await.unwrap().is_empty());
    claim(&format!("{}/3999999-1", boot.trim()));
    assert_eq!(store.pending_vectors(10).await.unwrap().len(), 3, "a dead process's claims are taken over");
}
