//! ATLAS domain: memory types, pure policies and the ports adapters implement. No I/O lives here.
//!
//! Everything in this crate is deterministic given its inputs: no clock, no filesystem, no
//! database, no network. Adapters (`atlas-store-*`, embedders, LLM clients) implement the traits
//! in [`ports`]; `atlas-runtime` composes them.

pub mod access;
pub mod cypher;
pub mod edge;
pub mod error;
pub mod filter;
pub mod id;
pub mod jsonl;
pub mod memory;
pub mod policy;
pub mod ports;
pub mod scope;
pub mod strict_json;
pub mod time;
pub mod trajectory;

pub use edge::{Edge, EdgeKind};
pub use error::{AtlasError, Result};
pub use filter::RecallFilter;
pub use id::{MemoryId, decode_id_runs, encode_id_runs};
pub use memory::{Body, ConceptDetail, ConceptSource, Lifecycle, Memory, MemoryKind, NewMemory, Outcome, Validity};
pub use scope::Scope;
pub use time::Timestamp;
pub use trajectory::Trajectory;
