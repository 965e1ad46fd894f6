//! mem0's configuration shape, read into ATLAS's: what a program written for mem0 passes to
//! `Memory.from_config` / `Memory(config=…)` (`{"embedder": {"provider": …, "config": {…}}}`),
//! mapped once here so that every binding takes it the same way. Its other sections name mem0's
//! own machinery (a vector store, a history database), which ATLAS replaces: they are accepted
//! and left out, with a log line.

use crate::config::{Config, EmbedderKind, Secret};
use atlas_domain::{AtlasError, Result};
use serde_json::Value;
use std::path::PathBuf;

/// Sections of mem0's config that ATLAS does its own way.
const REPLACED: [&str; 11] = [
    "vector_store",
    "llm",
    "graph_store",
    "history_db_path",
    "version",
    "custom_fact_extraction_prompt",
    "reranker",
    "history_store",
    "disable_history",
    "enable_graph",
    "custom_prompt",
];

/// mem0's TypeScript spelling of a section (`vectorStore`) or of an embedder's key (`apiKey`)
/// as its Python one, so that a config written for `mem0ai/oss` reads the same.
fn python_spelling(key: &str, provider: &str) -> String {
    match key {
        "apiKey" => "api_key".into(),
        "embeddingDims" => "embedding_dims".into(),
        "modelProperties" => "model_kwargs".into(),
        "modelDir" => "model_dir".into(),
        // The TypeScript embedders take their server as `url` (Ollama) or `baseURL` (OpenAI).
        "url" | "baseURL" if provider != "onnx" => format!("{provider}_base_url"),
        _ => {
            let mut snake = String::with_capacity(key.len() + 4);
            for c in key.chars() {
                if c.is_ascii_uppercase() {
                    snake.push('_');
                    snake.push(c.to_ascii_lowercase());
                } else {
                    snake.push(c);
                }
            }
            snake
        }
    }
}

/// `config` with every section and embedder key in mem0's Python spelling.
fn in_python_spelling(config: &Value) -> Value {
    let Some(sections) = config.as_object() else { return config.clone() };
    let mut out = serde_json::Map::new();
    for (name, value) in sections {
        let name = python_spelling(name, "");
        let value = match (name.as_str(), value) {
            ("embedder", Value::Object(embedder)) => {
                let provider = embedder.get("provider").and_then(Value::as_str).unwrap_or_default().to_owned();
                let mut embedder = embedder.clone();
                if let Some(Value::Object(keys)) = embedder.get("config") {
                    let keys = keys.iter().map(|(k, v)| (python_spelling(k, &provider), v.clone())).collect();
                    embedder.insert("config".into(), Value::Object(keys));
                }
                Value::Object(embedder)
            }
            _ => value.clone(),
        };
        out.insert(name, value);
    }
    Value::Object(out)
}

/// Applies mem0's `config` (Python's spelling or TypeScript's) to `settings`; an unknown section, provider or key is an error
/// naming it (`config.embedder.provider`, …).
pub fn apply_mem0_config(settings: &mut Config, config: &Value) -> Result<()> {
    let config = &in_python_spelling(config);
    let invalid = |field: &str, why: String| AtlasError::Config(format!("config.{field}: {why}"));
    let sections = config.as_object().ok_or_else(|| invalid("", "expected a mapping of mem0's sections".into()))?;
    for (name, value) in sections {
        match name.as_str() {
            "embedder" => apply_embedder(settings, value)?,
            other if REPLACED.contains(&other) => {
                tracing::info!(section = other, "mem0's config section is ATLAS's own machinery; left out");
            }
            other => {
                return Err(invalid(
                    other,
                    format!("not a section of mem0's config (ATLAS reads embedder; accepts {})", REPLACED.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

fn apply_embedder(settings: &mut Config, embedder: &Value) -> Result<()> {
    let invalid = |field: &str, why: String| AtlasError::Config(format!("config.embedder.{field}: {why}"));
    let provider = embedder
        .get("provider")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("provider", "expected a provider name (openai, ollama, huggingface, onnx)".into()))?;
    let empty = Value::Object(Default::default());
    let c = embedder.get("config").unwrap_or(&empty);
    let keys = c.as_object().ok_or_else(|| invalid("config", "expected a mapping".into()))?;
    let text = |key: &str| -> Result<Option<String>> {
        match c.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(&format!("config.{key}"), format!("expected a string, got {other}"))),
        }
    };
    let known: &[&str] = match provider {
        "openai" => &["model", "api_key", "openai_base_url", "embedding_dims"],
        "ollama" => &["model", "ollama_base_url", "embedding_dims"],
        "huggingface" => &["model", "huggingface_base_url", "api_key", "embedding_dims", "model_kwargs"],
        "onnx" => &["model", "model_dir"],
        other => {
            return Err(invalid(
                "provider",
                format!(
                    "{other:?} is not one ATLAS maps (openai, ollama, huggingface with huggingface_base_url, onnx)"
                ),
            ));
        }
    };
    if let Some(unknown) = keys.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(
            &format!("config.{unknown}"),
            format!("not a key of the {provider} embedder ({})", known.join(", ")),
        ));
    }
    let dims = match c.get("embedding_dims") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|d| *d > 0)
                .ok_or_else(|| invalid("config.embedding_dims", format!("expected a positive integer, got {v}")))?
                as usize,
        ),
    };
    let mut endpoint = |url: String, model: String, key: Option<String>| {
        settings.embedder = EmbedderKind::Http;
        settings.http.url = Some(url);
        settings.http.model = Some(model);
        settings.http.dimensions = dims;
        settings.http.api_key = key.map(Secret);
    };
    match provider {
        "openai" => {
            let url = text("openai_base_url")?.unwrap_or_else(|| "https://api.openai.com/v1".into());
            let model = text("model")?.unwrap_or_else(|| "text-embedding-3-small".into());
            let key = text("api_key")?;
            // As mem0 does: without a key in the config, the one in OPENAI_API_KEY.
            let no_key = key.is_none();
            endpoint(url, model, key);
            if no_key {
                settings.http.api_key_env = Some("OPENAI_API_KEY".into());
            }
        }
        "ollama" => {
            let base = text("ollama_base_url")?.unwrap_or_else(|| "http://localhost:11434".into());
            let model = text("model")?.unwrap_or_else(|| "nomic-embed-text".into());
            // Ollama's OpenAI-compatible routes are under /v1.
            let base = base.trim_end_matches('/');
            let url = if base.ends_with("/v1") { base.to_owned() } else { format!("{base}/v1") };
            endpoint(url, model, None);
        }
        "huggingface" => {
            let Some(url) = text("huggingface_base_url")? else {
                return Err(invalid(
                    "config.huggingface_base_url",
                    "without it mem0 runs sentence-transformers in Python; ATLAS embeds with an endpoint \
                     (a TEI server's URL here) or an ONNX model folder (provider \"onnx\", model_dir)"
                        .into(),
                ));
            };
            let model = text("model")?.unwrap_or_else(|| "tei".into());
            endpoint(url, model, text("api_key")?);
        }
        _ => {
            settings.embedder = EmbedderKind::Onnx;
            if let Some(dir) = text("model_dir")? {
                settings.onnx.model_dir = Some(PathBuf::from(dir));
            }
            if let Some(model) = text("model")? {
                settings.onnx.model = Some(model);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(config: Value) -> Result<Config> {
        let mut settings = Config::default();
        apply_mem0_config(&mut settings, &config).map(|()| settings)
    }

    #[test]
    fn mem0s_providers_become_endpoints() {
        let c = applied(json!({"embedder": {"provider": "ollama", "config": {"model": "nomic-embed-text", "ollama_base_url": "http://gpu:11434"}},
                               "vector_store": {"provider": "qdrant"}}))
        .unwrap();
        assert_eq!(
            (c.embedder, c.http.url.as_deref(), c.http.model.as_deref()),
            (EmbedderKind::Http, Some("http://gpu:11434/v1"), Some("nomic-embed-text"))
        );
        let c = applied(json!({"embedder": {"provider": "openai", "config": {"model": "text-embedding-3-small", "api_key": "sk-x", "embedding_dims": 1536}}})).unwrap();
        assert_eq!((c.http.url.as_deref(), c.http.dimensions), (Some("https://api.openai.com/v1"), Some(1536)));
        assert_eq!(c.http.api_key, Some(Secret("sk-x".into())));
        assert!(!format!("{c:?}").contains("sk-x"), "a key never shows in a debug print");
        let c = applied(json!({"embedder": {"provider": "openai"}})).unwrap();
        assert_eq!(c.http.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        let c = applied(
            json!({"embedder": {"provider": "huggingface", "config": {"huggingface_base_url": "http://tei:8080/v1"}}}),
        )
        .unwrap();
        assert_eq!(c.http.url.as_deref(), Some("http://tei:8080/v1"));
        let c = applied(json!({"embedder": {"provider": "onnx", "config": {"model_dir": "/m/bge"}}})).unwrap();
        assert_eq!((c.embedder, c.onnx.model_dir), (EmbedderKind::Onnx, Some(PathBuf::from("/m/bge"))));
    }

    #[test]
    fn mem0s_typescript_spelling_reads_the_same() {
        let c = applied(json!({
            "embedder": {"provider": "ollama", "config": {"model": "nomic-embed-text", "url": "http://gpu:11434"}},
            "vectorStore": {"provider": "memory", "config": {"dimension": 768}},
            "historyDbPath": "memory.db",
            "disableHistory": true
        }))
        .unwrap();
        assert_eq!(c.http.url.as_deref(), Some("http://gpu:11434/v1"));
        let c = applied(json!({"embedder": {"provider": "openai", "config": {"apiKey": "sk-y", "embeddingDims": 256, "baseURL": "http://llm:8000/v1"}}}))
            .unwrap();
        assert_eq!((c.http.url.as_deref(), c.http.dimensions), (Some("http://llm:8000/v1"), Some(256)));
        assert_eq!(c.http.api_key, Some(Secret("sk-y".into())));
        let err = applied(json!({"embedder": {"provider": "ollama", "config": {"modelName": "x"}}})).unwrap_err();
        assert!(err.to_string().contains("config.embedder.config.model_name"), "{err}");
    }

    #[test]
    fn what_cannot_be_mapped_is_named() {
        let err = |v: Value| applied(v).unwrap_err().to_string();
        assert!(err(json!({"embedder": {"provider": "gemini"}})).contains("config.embedder.provider"));
        assert!(
            err(json!({"embedder": {"provider": "ollama", "config": {"modle": "x"}}}))
                .contains("config.embedder.config.modle")
        );
        assert!(
            err(json!({"embedder": {"provider": "huggingface", "config": {"model": "x"}}}))
                .contains("huggingface_base_url")
        );
        assert!(
            err(json!({"embedder": {"provider": "openai", "config": {"embedding_dims": 0}}}))
                .contains("embedding_dims")
        );
        assert!(err(json!({"embeder": {}})).contains("config.embeder"));
        assert!(err(json!(["x"])).contains("mapping"));
    }
}
