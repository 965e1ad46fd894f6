//! What the tests of memory as files share: spaces on SQLite and the fake, the demo space, a
//! folder read as (path, text) pairs.
#![allow(dead_code)]

use atlas_runtime::{Atlas, Config, ImportOptions, Parts};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/demo").join(name)
}

/// How many lines of an export are memories (they have an id).
pub fn ids_kept(lines: &[&str]) -> usize {
    lines.iter().filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.get("id").is_some())).count()
}

pub async fn sqlite(db: &Path, config: Config) -> Atlas {
    let store = Arc::new(SqliteStore::open(db, &SqliteOptions::default()).unwrap());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    Atlas::from_parts(parts, Config { db: db.to_owned(), ..config }).await.unwrap()
}

pub async fn fake(dir: &Path) -> Atlas {
    let store = Arc::new(atlas_testing::FakeStore::default());
    let parts = Parts::from_store(Arc::clone(&store), None).with_consolidator(store);
    Atlas::from_parts(parts, Config { db: dir.join("fake.db"), ..Config::default() }).await.unwrap()
}

/// The demo's changes of mind, imported and consolidated: entities, facts with history, summaries.
pub async fn demo(atlas: &Atlas) {
    atlas.import_file(&fixture("changes.jsonl"), ImportOptions::default(), None).await.unwrap();
    atlas.consolidate_ending_sessions().await.unwrap();
}

pub fn read_tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap().to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

pub fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
