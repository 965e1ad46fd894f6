//! The cache files beside the database: a new process's first search reads them and answers as
//! a rebuild from SQL would; a file a few logged writes behind is caught up; a file truncated,
//! corrupted, made for another model or another history, or behind a model switch is detected,
//! the cache rebuilt from SQL, and the file written again.

use atlas_domain::ports::{Embedder, MemoryStore, TextIndex, VectorIndex};
use atlas_domain::{MemoryId, NewMemory, RecallFilter, Scope, Timestamp};
use atlas_store_sqlite::{CacheLoads, SqliteOptions, SqliteStore};
use atlas_testing::HashEmbedder;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WORDS: &[&str] = &["lake", "tram", "pottery", "Paris", "sketch", "blue", "river", "violin", "garden", "chess"];

fn turn(i: usize) -> NewMemory {
    let text: Vec<&str> = (0..3 + i % 5).map(|j| WORDS[(i * 7 + j * 3) % WORDS.len()]).collect();
    NewMemory::episode(text.join(" "), Scope::default(), Some("Ann".into()), Timestamp(i as i64), Timestamp(i as i64))
}

fn files(db: &Path) -> [PathBuf; 2] {
    ["text", "vectors"]
        .map(|kind| db.with_file_name(format!("{}.{kind}.cache", db.file_name().unwrap().to_string_lossy())))
}

/// What searches answer: text and vector rankings for a few queries.
async fn answers(store: &SqliteStore, embedder: &HashEmbedder) -> Vec<Vec<(MemoryId, String)>> {
    let mut out = Vec::new();
    for query in ["lake tram", "violin", "garden chess blue"] {
        let terms: Vec<String> = query.split(' ').map(str::to_string).collect();
        let text = store.search_text(terms, RecallFilter::default(), 20).await.unwrap();
        out.push(text.iter().map(|h| (h.id, format!("{:.9}", h.score))).collect());
        let vectors = store.search_vector(embedder.embed_one(query), RecallFilter::default(), 20).await.unwrap();
        out.push(vectors.iter().map(|h| (h.id, format!("{:.6}", h.score))).collect());
    }
    out
}

async fn populated(db: &Path, embedder: &HashEmbedder, n: usize) -> SqliteStore {
    let store = SqliteStore::open(db, &SqliteOptions::default()).unwrap();
    store.bind_model(embedder.model()).await.unwrap();
    let ids = store.insert((0..n).map(turn).collect(), None).await.unwrap();
    let vectors = ids.iter().enumerate().map(|(i, id)| (*id, embedder.embed_one(&turn(i).text))).collect();
    store.put_vectors(vectors).await.unwrap();
    store
}

/// Opens the store again until a search loaded both caches from their files (they are written
/// in the background after a rebuild).
async fn reopened_from_files(db: &Path, embedder: &HashEmbedder) -> (SqliteStore, Vec<Vec<(MemoryId, String)>>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let store = SqliteStore::open(db, &SqliteOptions::default()).unwrap();
        let found = answers(&store, embedder).await;
        let loads = store.cache_loads();
        if loads.text_from_file == 1 && loads.vectors_from_file == 1 {
            return (store, found);
        }
        assert!(Instant::now() < deadline, "caches never came from their files: {loads:?}");
        drop(store);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_reads_the_files_and_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    let store = populated(&db, &embedder, 400).await;
    let built = answers(&store, &embedder).await;
    assert_eq!(store.cache_loads(), CacheLoads { text_rebuilt: 1, vectors_rebuilt: 1, ..CacheLoads::default() });
    drop(store);
    let (reopened, found) = reopened_from_files(&db, &embedder).await;
    assert_eq!(found, built);
    assert_eq!(reopened.cache_loads().text_rebuilt + reopened.cache_loads().vectors_rebuilt, 0);
    // Writes of this process keep its caches in step, whatever they were loaded from.
    let text = "lighthouse keeper";
    let fresh = NewMemory::episode(text, Scope::default(), None, Timestamp(5), Timestamp(5));
    let id = reopened.insert(vec![fresh], None).await.unwrap()[0];
    reopened.put_vectors(vec![(id, embedder.embed_one(text))]).await.unwrap();
    let hits = reopened.search_text(vec!["lighthouse".into()], RecallFilter::default(), 5).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![id]);
    let near = reopened.search_vector(embedder.embed_one(text), RecallFilter::default(), 1).await.unwrap();
    assert_eq!(near[0].id, id);
}

/// What a store that rebuilds both caches from SQL answers on the database at `db`.
async fn rebuilt_answers(db: &Path, embedder: &HashEmbedder) -> Vec<Vec<(MemoryId, String)>> {
    let options = SqliteOptions { cache_files: false, ..SqliteOptions::default() };
    answers(&SqliteStore::open(db, &options).unwrap(), embedder).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_few_writes_behind_are_caught_up_and_answer_as_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    drop(populated(&db, &embedder, 300).await);
    drop(reopened_from_files(&db, &embedder).await);
    // Other processes write (and search nothing), as `atlas remember` does: new memories, a
    // vector for some of them, memories and vectors replaced by a restore, one forgotten.
    {
        let writer = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        let text = "violin violin garden lighthouse";
        let id =
            writer.insert(vec![NewMemory::episode(text, Scope::default(), None, Timestamp(9), Timestamp(9))], None);
        let id = id.await.unwrap()[0];
        writer.put_vectors(vec![(id, embedder.embed_one(text))]).await.unwrap();
        let unembedded =
            NewMemory::episode("lighthouse chess", Scope::default(), Some("Bo".into()), Timestamp(10), Timestamp(10));
        writer.insert(vec![unembedded], None).await.unwrap();
    }
    {
        use atlas_domain::ports::Replica;
        let writer = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        // Two memories come back from an export with other text and vectors, in place.
        let mut changed = writer.export_batch(Some(MemoryId(40)), 2).await.unwrap();
        for (i, item) in changed.iter_mut().enumerate() {
            item.memory.text = format!("lighthouse tram number {i}");
            item.vector = Some(embedder.embed_one(&item.memory.text));
        }
        writer.restore(changed).await.unwrap();
    }
    let expected = rebuilt_answers(&db, &embedder).await;
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    let found = answers(&store, &embedder).await;
    assert_eq!(store.cache_loads(), CacheLoads { text_caught_up: 1, vectors_caught_up: 1, ..CacheLoads::default() });
    assert_eq!(found, expected);
    let hits = store.search_text(vec!["lighthouse".into()], RecallFilter::default(), 10).await.unwrap();
    assert_eq!(hits.len(), 4, "the new, the unembedded and the two restored memories: {hits:?}");
    drop(store);
    // The caught-up caches were written again: the next process reads them as they are.
    let (_, found) = reopened_from_files(&db, &embedder).await;
    assert_eq!(found, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_switch_leaves_no_vector_file_to_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    drop(populated(&db, &embedder, 100).await);
    drop(reopened_from_files(&db, &embedder).await);
    let vector_file = files(&db)[1].clone();
    let old_file = dir.path().join("old.vectors.cache");
    std::fs::copy(&vector_file, &old_file).unwrap();
    {
        // Switched to another model and back: every vector changed, none logged one by one.
        let writer = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        let mut other = embedder.model();
        other.name.push_str("-other");
        writer.rebind_model(other).await.unwrap();
        writer.rebind_model(embedder.model()).await.unwrap();
        let ids: Vec<MemoryId> = (1..=10).map(MemoryId).collect();
        let vectors = ids.iter().map(|id| (*id, embedder.embed_one(&format!("new vector {id}")))).collect();
        writer.put_vectors(vectors).await.unwrap();
    }
    std::fs::copy(&old_file, &vector_file).unwrap();
    let expected = rebuilt_answers(&db, &embedder).await;
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.cache_loads().vectors_rebuilt, 1, "{:?}", store.cache_loads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_corrupted_and_foreign_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    let store = populated(&db, &embedder, 300).await;
    let expected = answers(&store, &embedder).await;
    drop(store);
    drop(reopened_from_files(&db, &embedder).await);
    // The same memories under another model's name, for a vector file made for another model.
    let other_db = dir.path().join("other.db");
    let other = SqliteStore::open(&other_db, &SqliteOptions::default()).unwrap();
    let mut other_model = embedder.model();
    other_model.name.push_str("-other");
    other.bind_model(other_model).await.unwrap();
    let ids = other.insert((0..300).map(turn).collect(), None).await.unwrap();
    let vectors = ids.iter().enumerate().map(|(i, id)| (*id, embedder.embed_one(&turn(i).text))).collect();
    other.put_vectors(vectors).await.unwrap();
    answers(&other, &embedder).await;
    drop(other);
    let foreign = reopened_from_files(&other_db, &embedder).await;
    drop(foreign);

    let [text_file, vector_file] = files(&db);
    let [_, other_vectors] = files(&other_db);
    type Damage = Box<dyn Fn(&Path)>;
    let damages: Vec<(&str, Damage)> = vec![
        (
            "truncated",
            Box::new(|p: &Path| {
                let bytes = std::fs::read(p).unwrap();
                std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap();
            }),
        ),
        (
            "corrupted",
            Box::new(|p: &Path| {
                let mut bytes = std::fs::read(p).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x10;
                std::fs::write(p, bytes).unwrap();
            }),
        ),
        ("empty", Box::new(|p: &Path| std::fs::write(p, b"").unwrap())),
    ];
    for (name, damage) in &damages {
        damage(&text_file);
        damage(&vector_file);
        let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        assert_eq!(answers(&store, &embedder).await, expected, "{name}");
        assert_eq!(store.cache_loads(), CacheLoads { text_rebuilt: 1, vectors_rebuilt: 1, ..Default::default() });
        drop(store);
        // Written again whole.
        let (_, found) = reopened_from_files(&db, &embedder).await;
        assert_eq!(found, expected, "{name}, from the rewritten files");
    }
    // Another model's vectors (same dimension, same database state count): not used.
    std::fs::copy(&other_vectors, &vector_file).unwrap();
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.cache_loads().vectors_rebuilt, 1, "another model's file was read");
    // A text file under the vectors' name: refused too.
    drop(store);
    std::fs::copy(&text_file, &vector_file).unwrap();
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.cache_loads().vectors_rebuilt, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cache_files_nothing_is_written_beside_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    drop(populated(&db, &embedder, 50).await);
    let options = SqliteOptions { cache_files: false, ..SqliteOptions::default() };
    let store = SqliteStore::open(&db, &options).unwrap();
    answers(&store, &embedder).await;
    drop(store);
    std::thread::sleep(Duration::from_millis(300));
    assert!(files(&db).iter().all(|f| !f.exists()));
}

/// The child of [`a_kill_while_the_files_are_written_leaves_old_whole_or_no_files`]: rebuilds
/// the caches of the database `ATLAS_CACHE_CHILD_DB` names (so their files are written in the
/// background), says so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_kill_while_the_files_are_written_leaves_old_whole_or_no_files as its child"]
async fn child_rebuilding_the_caches() {
    let db = PathBuf::from(std::env::var("ATLAS_CACHE_CHILD_DB").expect("ATLAS_CACHE_CHILD_DB"));
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    answers(&store, &HashEmbedder::new(EMBED_DIM)).await;
    println!("rebuilt");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

const EMBED_DIM: usize = 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_the_files_are_written_leaves_old_whole_or_no_files() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(EMBED_DIM);
    // Files of some tens of megabytes: long enough to be killed while they are written.
    let store = populated(&db, &embedder, atlas_testing::size(30_000)).await;
    drop(store);
    let reference = {
        let options = SqliteOptions { cache_files: false, ..SqliteOptions::default() };
        answers(&SqliteStore::open(&db, &options).unwrap(), &embedder).await
    };
    let (mut from_file, mut rebuilt) = (0, 0);
    for delay_ms in [0u64, 5, 15, 30, 60, 100, 150, 250] {
        for file in files(&db) {
            let _ = std::fs::remove_file(file);
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_rebuilding_the_caches", "--ignored", "--nocapture"])
            .env("ATLAS_CACHE_CHILD_DB", &db)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(lines.any(|l| l.is_ok_and(|l| l.contains("rebuilt"))), "the child did not rebuild");
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
        assert_eq!(answers(&store, &embedder).await, reference, "after a kill {delay_ms} ms into the write");
        let loads = store.cache_loads();
        from_file += loads.text_from_file + loads.vectors_from_file;
        rebuilt += loads.text_rebuilt + loads.vectors_rebuilt;
        drop(store);
        // A later write sweeps what the killed process left under temporary names (this
        // process's own writes may still be under way).
        let killed = format!(".{}-", child.id());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n.contains(&killed))
            .collect();
        assert!(left.is_empty(), "temporary files of the killed process left: {left:?}");
    }
    eprintln!("after 8 kills: {from_file} caches read from a whole file, {rebuilt} rebuilt");
    assert!(rebuilt > 0, "no kill landed before the files were in place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_replaced_by_another_with_as_many_writes_does_not_use_the_old_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    drop(populated(&db, &embedder, 300).await);
    drop(reopened_from_files(&db, &embedder).await);
    // Another database in its place, made by the same three writes, with other memories.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("space.db{suffix}")));
    }
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    store.bind_model(embedder.model()).await.unwrap();
    let texts: Vec<String> = (0..40).map(|i| format!("violin lesson {i} in the lighthouse")).collect();
    let batch = texts.iter().map(|t| NewMemory::episode(t.clone(), Scope::default(), None, Timestamp(1), Timestamp(1)));
    let ids = store.insert(batch.collect(), None).await.unwrap();
    store.put_vectors(ids.iter().zip(&texts).map(|(id, t)| (*id, embedder.embed_one(t))).collect()).await.unwrap();
    drop(store);
    let expected = {
        let options = SqliteOptions { cache_files: false, ..SqliteOptions::default() };
        answers(&SqliteStore::open(&db, &options).unwrap(), &embedder).await
    };
    let store = SqliteStore::open(&db, &SqliteOptions::default()).unwrap();
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.cache_loads(), CacheLoads { text_rebuilt: 1, vectors_rebuilt: 1, ..CacheLoads::default() });
}

/// An int8 vector cache leaves its codes in its file and reads them per candidate: answers are
/// the same as a rebuild's through the process's own writes (new vectors, a forgotten memory
/// whose position another takes), and a file changed in place under the process (here cut
/// short) is detected on the next search, which rebuilds the cache and answers all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int8_codes_read_from_their_file_and_a_file_cut_under_the_process() {
    use atlas_store_sqlite::Precision;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let embedder = HashEmbedder::new(32);
    let int8 =
        SqliteOptions { vector_precision: Some(Precision::Int8), codes_in_file_from: 0, ..SqliteOptions::default() };
    let rebuilt = || async {
        let options = SqliteOptions { cache_files: false, ..int8.clone() };
        answers(&SqliteStore::open(&db, &options).unwrap(), &embedder).await
    };
    let store = SqliteStore::open(&db, &int8).unwrap();
    store.bind_model(embedder.model()).await.unwrap();
    let ids = store.insert((0..400).map(turn).collect(), None).await.unwrap();
    store
        .put_vectors(ids.iter().enumerate().map(|(i, id)| (*id, embedder.embed_one(&turn(i).text))).collect())
        .await
        .unwrap();
    let built = answers(&store, &embedder).await;
    drop(store);
    let store = SqliteStore::open(&db, &int8).unwrap();
    assert_eq!(answers(&store, &embedder).await, built);
    assert_eq!(store.cache_loads().vectors_from_file, 1);
    // This process's writes: a new vector, one replaced.
    let text = "violin lighthouse";
    let fresh = NewMemory::episode(text, Scope::default(), None, Timestamp(5), Timestamp(5));
    let id = store.insert(vec![fresh], None).await.unwrap()[0];
    store
        .put_vectors(vec![(id, embedder.embed_one(text)), (ids[3], embedder.embed_one("chess garden"))])
        .await
        .unwrap();
    let expected = rebuilt().await;
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.search_vector(embedder.embed_one(text), RecallFilter::default(), 1).await.unwrap()[0].id, id);
    // The file is cut short in place: the next search finds out, rebuilds, and answers.
    let [_, vectors] = files(&db);
    let file = std::fs::OpenOptions::new().write(true).open(&vectors).unwrap();
    file.set_len(file.metadata().unwrap().len() / 2).unwrap();
    assert_eq!(answers(&store, &embedder).await, expected);
    assert_eq!(store.cache_loads().vectors_rebuilt, 1, "{:?}", store.cache_loads());
    // A forgotten memory: its file goes (the process keeps reading the one it holds open), and
    // the last position moves into its place.
    store.forget(ids[10]).await.unwrap();
    assert_eq!(answers(&store, &embedder).await, rebuilt().await);
}
