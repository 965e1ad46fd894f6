//! The runtime's integration tests as one binary, a module per concern: one compile and one
//! link of the runtime and its adapters instead of one per file (most of CI's test build).

mod ablation;
mod agents;
mod backup;
mod conflicts;
mod consolidation;
mod editing;
#[cfg(feature = "embed-http")]
mod endpoint;
mod files;
mod files_hostile;
mod files_support;
mod forgetting;
mod inspect;
#[cfg(feature = "embed-onnx")]
mod matryoshka;
mod migrate;
mod question;
mod runtime;
mod search_caches;
mod untrusted_models;
