//! The ONNX embedder: the embedder port on ONNX Runtime (`ort`, loaded at run time) and the
//! HF `tokenizers` crate, with model files fetched and verified from `models/manifest.toml`.
//!
//! Tokenise with truncation, sort a batch by length and cut it into sub-batches padded to their
//! longest text (so short texts do not pay for long ones), run the model, mean-pool over the
//! attention mask and L2-normalise. Inference runs on the blocking pool, never on the async
//! executor.

pub mod assets;
mod embedder;
pub mod manifest;

pub use embedder::{OnnxEmbedder, OnnxOptions};
