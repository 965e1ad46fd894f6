//! The ONNX embedder: the embedder port on ONNX Runtime (`ort`, loaded at run time) and the
//! HF `tokenizers` crate, with model files fetched and verified from `models/manifest.toml`.
//!
//! Tokenise with truncation, sort a batch by length and cut it into sub-batches padded to their
//! longest text (so short texts do not pay for long ones), run the model, pool over the
//! attention mask (mean, first or last token) and L2-normalise. A model is one of the manifest's,
//! or a folder of one's own ([`folder`]) with its pooling and query/document prefixes. Inference runs on the blocking pool, never on the async
//! executor.

pub mod assets;
mod embedder;
pub mod folder;
pub mod manifest;
pub mod pooling;
mod session;

pub use embedder::{OnnxEmbedder, OnnxOptions};
