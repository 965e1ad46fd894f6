//! The one error type every port and the runtime return.

use thiserror::Error;

pub type Result<T, E = AtlasError> = std::result::Result<T, E>;

/// What went wrong, in terms a user can act on. Adapters map their own errors into these.
#[derive(Debug, Error)]
pub enum AtlasError {
    /// The caller's input is wrong; `location` says where (file:line, field, flag).
    #[error("{location}: {message}")]
    InvalidInput { location: String, message: String },

    #[error("no memory with id {0}")]
    NotFound(crate::MemoryId),

    /// The database was written by a newer ATLAS; refusing protects it.
    #[error(
        "database {path} has schema version {found}, newer than this atlas understands (up to {known}); upgrade atlas"
    )]
    SchemaTooNew { path: String, found: i64, known: i64 },

    /// Vectors in the store were made by another embedding model.
    #[error(
        "database vectors were made by {stored_model} ({stored_dim} dimensions) but the configured embedder is {configured_model} ({configured_dim} dimensions); run `atlas reembed` to re-embed every memory with the configured model"
    )]
    ModelMismatch { stored_model: String, stored_dim: usize, configured_model: String, configured_dim: usize },

    /// Another process holds the write lock longer than we are willing to wait.
    #[error("{0}")]
    Busy(String),

    #[error("storage error: {0}")]
    Storage(String),

    #[error("embedding error: {0}")]
    Embedding(String),

    #[error("llm error: {0}")]
    Llm(String),

    #[error("configuration error: {0}")]
    Config(String),
}

impl AtlasError {
    pub fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        AtlasError::InvalidInput { location: location.into(), message: message.into() }
    }
}
