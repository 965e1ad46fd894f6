//! What the tests against a real server share: its address and the collection settings from
//! the environment (`QDRANT_URL`, one node or a cluster's nodes separated by commas;
//! `QDRANT_API_KEY`; `ATLAS_QDRANT_SHARDS`, `ATLAS_QDRANT_REPLICATION_FACTOR`), and a plain
//! client for checking what is on the server and for removing a test's space.

#![allow(dead_code)] // each test binary uses its own part

use atlas_store_qdrant::QdrantOptions;

/// Options for a test's space, collections named with `prefix`.
pub fn options(prefix: &str) -> QdrantOptions {
    let url = std::env::var("QDRANT_URL")
        .expect("QDRANT_URL must name a Qdrant server (gRPC, e.g. http://localhost:6334) for these tests");
    let mut options = QdrantOptions::new(url);
    options.api_key = std::env::var("QDRANT_API_KEY").ok();
    options.collection_prefix = prefix.into();
    let setting =
        |name: &str| std::env::var(name).ok().map(|v| v.parse::<u32>().unwrap_or_else(|_| panic!("{name}={v:?}")));
    options.shards = setting("ATLAS_QDRANT_SHARDS");
    options.replication_factor = setting("ATLAS_QDRANT_REPLICATION_FACTOR");
    options
}

/// A client of the first node `options` names.
pub fn client(options: &QdrantOptions) -> qdrant_client::Qdrant {
    let first = options.url.split(',').next().unwrap_or_default();
    qdrant_client::Qdrant::from_url(first)
        .api_key(options.api_key.clone())
        .skip_compatibility_check()
        .build()
        .expect("a client of the test server")
}

/// Removes a space's collections (best effort: a test's cleanup).
pub fn delete_space(runtime: &tokio::runtime::Runtime, options: &QdrantOptions, collection: &str) {
    let client = client(options);
    for name in [collection.to_owned(), format!("{collection}_meta")] {
        let _ = runtime.block_on(client.delete_collection(name));
    }
}

/// Runs `test`, then removes the space's collections, whether it passed or not.
pub fn cleaning_up(runtime: &tokio::runtime::Runtime, options: &QdrantOptions, collection: &str, test: impl FnOnce()) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
    delete_space(runtime, options, collection);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Points in a collection, pending or not (an exact count).
pub fn points(runtime: &tokio::runtime::Runtime, options: &QdrantOptions, collection: &str) -> u64 {
    runtime.block_on(count(options, collection))
}

/// [`points`] from within a runtime.
pub async fn count(options: &QdrantOptions, collection: &str) -> u64 {
    let request = qdrant_client::qdrant::CountPointsBuilder::new(collection).exact(true);
    client(options).count(request).await.expect("count points").result.expect("a count").count
}
