//! Real servers for tests and CI, and the client that talks to them: Qdrant (one node or a
//! cluster) and llama.cpp's `llama-server` started on free loopback ports (`servers`), an
//! embeddings endpoint that injects faults (`embeddings`), and a minimal blocking HTTP/1.1
//! client (`http`). Only std, tempfile and serde_json below it, so
//! that xtask can boot a Qdrant cluster while the workspace compiles.

pub mod embeddings;
pub mod http;
pub mod servers;
