//! Runs the storage conformance suite against a real Qdrant server, each case in a fresh
//! collection that is deleted afterwards. The cases are ignored (nextest lists them as skipped)
//! unless run with `--run-ignored`, which `cargo xtask ci` does against a server it started (or
//! `QDRANT_URL`), then against a three-node cluster (`QDRANT_URL` listing the nodes, with
//! `ATLAS_QDRANT_SHARDS` and `ATLAS_QDRANT_REPLICATION_FACTOR` set); without a server,
//! `cargo xtask ci` prints that they were skipped and why.

use atlas_store_qdrant::{QdrantOptions, QdrantStore};
use atlas_testing::Subject;

mod server;

/// Deletes the case's collections when the case ends.
struct DropCollection {
    options: QdrantOptions,
    name: String,
    runtime: tokio::runtime::Runtime,
}

impl Drop for DropCollection {
    fn drop(&mut self) {
        server::delete_space(&self.runtime, &self.options, &self.name);
    }
}

fn fresh() -> Subject<QdrantStore> {
    let options = server::options("atlas_conformance");
    let dir = tempfile::tempdir().unwrap();
    // The client's connections live on this runtime, kept alive for the whole case.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let store = runtime.block_on(QdrantStore::open(&dir.path().join("space.db"), options.clone())).unwrap();
    let cleanup = DropCollection { options, name: store.collection().to_string(), runtime };
    Subject::new(store, (cleanup, dir))
}

atlas_testing::store_conformance!(
    qdrant,
    fresh,
    #[test]
    #[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
);

atlas_testing::consolidator_conformance!(
    qdrant_consolidator,
    fresh,
    #[test]
    #[ignore = "needs a Qdrant server: set QDRANT_URL (cargo xtask ci then runs these)"]
);
