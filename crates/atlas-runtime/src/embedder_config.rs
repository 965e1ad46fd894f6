//! The embedder's settings: which embedder (`embedder`), the ONNX model's (`[onnx]`) and the
//! embeddings endpoint's (`[http]`), and their `ATLAS_*` environment overrides.

use atlas_domain::{AtlasError, Result};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderKind {
    /// No vectors: recall runs on full text and says so.
    None,
    /// The ONNX embedder (feature `embed-onnx`, on by default).
    Onnx,
    /// An OpenAI-compatible embeddings endpoint, the `[http]` section (feature `embed-http`).
    Http,
}

impl EmbedderKind {
    /// ONNX when this build has it, else none.
    pub fn default_for_build() -> Self {
        if cfg!(feature = "embed-onnx") { EmbedderKind::Onnx } else { EmbedderKind::None }
    }
}

/// Settings of the ONNX embedder.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OnnxConfig {
    /// A model named in models/manifest.toml. Unset: the model the store was embedded with
    /// when it is one of the manifest's, else the manifest's default.
    pub model: Option<String>,
    /// A model folder of one's own instead (what Optimum or sentence-transformers export:
    /// `model.onnx`, `tokenizer.json`, their pooling and prompt configs; `atlas-model.toml`
    /// states or overrides pooling, prefixes and window). `model` is then not used.
    /// `ATLAS_ONNX_MODEL_DIR`, `--model-dir`.
    pub model_dir: Option<PathBuf>,
    /// Tokens per text; defaults to the manifest's (256 for MiniLM).
    pub max_length: Option<usize>,
    /// A Matryoshka model's vectors cut to this width (nomic: 768, 512, 256, 128 or 64); a model
    /// not trained to be cut refuses it, and among models side by side it cuts those that
    /// were. Unset: the full width, or the width the store was embedded at.
    /// `ATLAS_ONNX_DIMENSIONS`.
    pub dimensions: Option<usize>,
    /// Intra-op threads; defaults to the available cores, at most 4 (ATLAS_EMBED_THREADS).
    pub threads: Option<usize>,
    /// Texts per model call.
    pub batch_size: usize,
    /// Busy-wait between ops: a little faster when idle, far slower under CPU contention.
    pub spinning: bool,
    /// Use the CUDA execution provider when the build has `embed-cuda` and a GPU is present.
    pub cuda: bool,
}

impl Default for OnnxConfig {
    fn default() -> Self {
        OnnxConfig {
            model: None,
            model_dir: None,
            max_length: None,
            dimensions: None,
            threads: None,
            batch_size: 32,
            spinning: false,
            cuda: cfg!(feature = "embed-cuda"),
        }
    }
}

/// A key that a `Debug` print (a log line, an error) shows only as `(secret)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(secret)")
    }
}

/// Settings of the embeddings endpoint (`embedder = "http"`): OpenAI's `/v1/embeddings` wire,
/// which Ollama, llama.cpp's server, vLLM, Hugging Face TEI, LM Studio and OpenAI serve.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// The API's base (`http://127.0.0.1:11434/v1` for Ollama, `https://api.openai.com/v1`), or
    /// the embeddings route itself. `ATLAS_HTTP_URL`.
    pub url: Option<String>,
    /// The model the endpoint serves (`nomic-embed-text`, `text-embedding-3-small`). `ATLAS_HTTP_MODEL`.
    pub model: Option<String>,
    /// The vectors' length. Unset, the endpoint is asked at start (and must answer then); set,
    /// ATLAS starts while the endpoint is away. `ATLAS_HTTP_DIMENSIONS`.
    pub dimensions: Option<usize>,
    /// The environment variable holding the API key (sent as a bearer token; never stored in
    /// a file, never logged).
    pub api_key_env: Option<String>,
    /// The key itself, given by a program in process (mem0's config shape carries one); never
    /// read from a file, never written, never logged.
    #[serde(skip)]
    pub api_key: Option<Secret>,
    /// Put before a recall's query (e.g. `search_query: ` for nomic-embed-text).
    pub query_prefix: String,
    /// Put before every memory's text (e.g. `search_document: `).
    pub document_prefix: String,
    /// For one request, connection included.
    pub timeout_ms: u64,
    /// Retries of a request after a 429, a 5xx, a timeout or a broken connection.
    pub max_retries: u32,
    /// Texts per request.
    pub batch_size: usize,
    /// About this many bytes of text per request.
    pub batch_bytes: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Longer texts are cut to this many characters before they are sent.
    pub max_input_chars: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            url: None,
            model: None,
            dimensions: None,
            api_key_env: None,
            api_key: None,
            query_prefix: String::new(),
            document_prefix: String::new(),
            timeout_ms: 30_000,
            max_retries: 4,
            batch_size: 32,
            batch_bytes: 128 * 1024,
            concurrency: 2,
            max_input_chars: 8_000,
        }
    }
}

/// `ATLAS_EMBEDDER` (`onnx` | `http` | `none`), `ATLAS_ONNX_MODEL` (a model or alias of the
/// manifest, e.g. `quality`), `ATLAS_ONNX_MODEL_DIR`, `ATLAS_ONNX_DIMENSIONS`, `ATLAS_EMBED_THREADS`,
/// `ATLAS_HTTP_URL`, `ATLAS_HTTP_MODEL`, `ATLAS_HTTP_DIMENSIONS`.
pub(crate) fn apply_env(config: &mut crate::Config, env: &impl Fn(&str) -> Option<String>) -> Result<()> {
    if let Some(v) = env("ATLAS_EMBEDDER") {
        config.embedder = match v.trim() {
            "onnx" => EmbedderKind::Onnx,
            "http" => EmbedderKind::Http,
            "none" => EmbedderKind::None,
            other => {
                return Err(AtlasError::Config(format!("ATLAS_EMBEDDER: expected onnx, http or none, got {other:?}")));
            }
        };
    }
    if let Some(model) = env("ATLAS_ONNX_MODEL").filter(|m| !m.trim().is_empty()) {
        config.onnx.model = Some(model.trim().to_owned());
    }
    if let Some(dir) = env("ATLAS_ONNX_MODEL_DIR").filter(|d| !d.trim().is_empty()) {
        config.onnx.model_dir = Some(PathBuf::from(dir));
    }
    let positive = |key: &str, v: String| -> Result<usize> {
        v.trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| AtlasError::Config(format!("{key}: expected a positive number, got {v:?}")))
    };
    if let Some(v) = env("ATLAS_ONNX_DIMENSIONS") {
        config.onnx.dimensions = Some(positive("ATLAS_ONNX_DIMENSIONS", v)?);
    }
    if let Some(v) = env("ATLAS_EMBED_THREADS") {
        config.onnx.threads = Some(positive("ATLAS_EMBED_THREADS", v)?);
    }
    if let Some(url) = env("ATLAS_HTTP_URL").filter(|u| !u.trim().is_empty()) {
        config.http.url = Some(url);
    }
    if let Some(model) = env("ATLAS_HTTP_MODEL").filter(|m| !m.trim().is_empty()) {
        config.http.model = Some(model);
    }
    if let Some(v) = env("ATLAS_HTTP_DIMENSIONS") {
        config.http.dimensions = Some(positive("ATLAS_HTTP_DIMENSIONS", v)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn an_endpoint_is_configured_by_file_or_environment() {
        let text = "embedder = \"http\"\n[http]\nurl = \"http://127.0.0.1:11434/v1\"\nmodel = \"nomic-embed-text\"\n\
                    query_prefix = \"search_query: \"\ndocument_prefix = \"search_document: \"\napi_key_env = \"KEY\"\n";
        let config = Config::from_toml(text, "atlas.toml").unwrap();
        assert_eq!(config.embedder, super::EmbedderKind::Http);
        assert_eq!(config.http.model.as_deref(), Some("nomic-embed-text"));
        assert_eq!(config.http.query_prefix, "search_query: ");
        let mut config = Config::default();
        let env = |k: &str| match k {
            "ATLAS_EMBEDDER" => Some("http".to_owned()),
            "ATLAS_HTTP_URL" => Some("http://h/v1".to_owned()),
            "ATLAS_HTTP_DIMENSIONS" => Some("768".to_owned()),
            _ => None,
        };
        config.apply_env(env).unwrap();
        assert_eq!(
            (config.embedder, config.http.url.as_deref(), config.http.dimensions),
            (super::EmbedderKind::Http, Some("http://h/v1"), Some(768))
        );
        let mut config = Config::default();
        config.apply_env(|k| (k == "ATLAS_ONNX_MODEL").then(|| " quality ".into())).unwrap();
        assert_eq!(config.onnx.model.as_deref(), Some("quality"));
        let mut config = Config::default();
        config.apply_env(|k| (k == "ATLAS_ONNX_DIMENSIONS").then(|| "256".into())).unwrap();
        assert_eq!(config.onnx.dimensions, Some(256));
        let err = Config::default().apply_env(|k| (k == "ATLAS_ONNX_DIMENSIONS").then(|| "wide".into())).unwrap_err();
        assert!(err.to_string().contains("ATLAS_ONNX_DIMENSIONS"), "{err}");
        let config = Config::from_toml("[onnx]\nmodel = \"nomic\"\ndimensions = 512\n", "atlas.toml").unwrap();
        assert_eq!(config.onnx.dimensions, Some(512));
        let err = Config::default().apply_env(|k| (k == "ATLAS_HTTP_DIMENSIONS").then(|| "wide".into())).unwrap_err();
        assert!(err.to_string().contains("ATLAS_HTTP_DIMENSIONS"), "{err}");
        let err = Config::from_toml("[http]\nurl = 3\n", "atlas.toml").unwrap_err().to_string();
        assert!(err.contains("atlas.toml") && err.contains("url"), "{err}");
    }
}
