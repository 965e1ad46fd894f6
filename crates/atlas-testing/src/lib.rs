//! Test support shared by every ATLAS crate: fakes, a deterministic embedder, proptest
//! strategies and the conformance suite each storage adapter must pass.

pub mod conflicts;
pub mod conformance;
pub mod consolidation_conformance;
pub mod embedder;
pub mod embedder_conformance;
pub mod fake;
pub mod llm;
pub mod scale;
pub mod strategies;

pub use atlas_test_servers::{embeddings, http, servers};
pub use embedder::HashEmbedder;
pub use embedder_conformance::{Prefixes, embedder_conformance};
pub use fake::FakeStore;
pub use llm::ScriptedLlm;
pub use scale::{cases, proptest_config, size};

use std::any::Any;
use std::sync::Arc;

/// A store under test, with whatever must outlive it (a temporary directory, a server handle).
pub struct Subject<S> {
    pub store: Arc<S>,
    _keep_alive: Box<dyn Any + Send + Sync>,
}

impl<S> Subject<S> {
    pub fn new(store: S, keep_alive: impl Any + Send + Sync) -> Self {
        Subject { store: Arc::new(store), _keep_alive: Box::new(keep_alive) }
    }
}

/// A single-threaded runtime with I/O and time, for tests that drive async code synchronously
/// (proptest bodies cannot be async).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}
