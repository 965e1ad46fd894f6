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

    /// The caller may not do this ([`crate::access`]): its role is too low, or it named a scope
    /// outside its tenant; `location` says where (file:line, field).
    #[error("{location}: {message}")]
    Forbidden { location: String, message: String },

    /// A retried write that does not match the first: the same idempotency key with another
    /// payload. Nothing was written.
    #[error("{0}")]
    Conflict(String),

    /// The database was written by a newer ATLAS; refusing protects it.
    #[error(
        "database {path} has schema version {found}, newer than this atlas understands (up to {known}); upgrade atlas"
    )]
    SchemaTooNew { path: String, found: i64, known: i64 },

    /// Vectors in the store were made by another embedding model.
    #[error(
        "database vectors were made by {stored_model} ({stored_dim} dimensions) but the configured embedder is {configured_model} ({configured_dim} dimensions); run `atlas reembed` to re-embed every memory with the configured model, or configure `onnx.model = \"{stored_model}\"` to keep using the store's"
    )]
    ModelMismatch { stored_model: String, stored_dim: usize, configured_model: String, configured_dim: usize },

    /// Another process holds the write lock longer than we are willing to wait.
    #[error("{0}")]
    Busy(String),

    /// The file is not an ATLAS database; it was refused before anything was written to it.
    #[error("{path} is not an ATLAS database ({reason}); it was left untouched")]
    NotAtlas { path: String, reason: String },

    #[error("storage error: {0}")]
    Storage(String),

    #[error("embedding error: {0}")]
    Embedding(String),

    /// The embedder answered, but not with a usable vector for these inputs: it refused them
    /// (a content policy, a text past its window) or its vector is not finite, of another
    /// dimension or of no length. Another try of the same text fails the same way, unlike an
    /// outage (`Embedding`): the background embedder sets such a memory aside and goes on.
    #[error("embedding refused: {0}")]
    EmbeddingRefused(String),

    #[error("llm error: {0}")]
    Llm(String),

    #[error("configuration error: {0}")]
    Config(String),
}

impl AtlasError {
    /// A stable, machine-readable name of the error's kind (the `code` of a JSON error).
    pub fn code(&self) -> &'static str {
        match self {
            AtlasError::InvalidInput { .. } => "invalid_input",
            AtlasError::NotFound(_) => "not_found",
            AtlasError::Forbidden { .. } => "forbidden",
            AtlasError::Conflict(_) => "conflict",
            AtlasError::SchemaTooNew { .. } => "schema_too_new",
            AtlasError::ModelMismatch { .. } => "model_mismatch",
            AtlasError::Busy(_) => "busy",
            AtlasError::NotAtlas { .. } => "not_atlas",
            AtlasError::Storage(_) => "storage",
            AtlasError::Embedding(_) => "embedding",
            AtlasError::EmbeddingRefused(_) => "embedding_refused",
            AtlasError::Llm(_) => "llm",
            AtlasError::Config(_) => "config",
        }
    }

    /// Where invalid input was found (`file:line`, a flag) and the field named in it, if any.
    pub fn location(&self) -> Option<(&str, Option<&str>)> {
        match self {
            AtlasError::InvalidInput { location, message } | AtlasError::Forbidden { location, message } => {
                let field = message.strip_prefix("field \"").and_then(|rest| rest.split_once('"')).map(|(f, _)| f);
                Some((location, field))
            }
            _ => None,
        }
    }

    pub fn invalid(location: impl Into<String>, message: impl Into<String>) -> Self {
        AtlasError::InvalidInput { location: location.into(), message: message.into() }
    }
}
