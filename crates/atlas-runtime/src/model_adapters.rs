//! The model adapters the configuration names, as this build has them: the embedder (ONNX
//! model, model folder, or embeddings endpoint) and the language models' tier.

use crate::config::{self, Config};
use atlas_domain::ports::{Embedder, Llm};
use atlas_domain::{AtlasError, Result};
use std::sync::Arc;

/// The endpoints of the configured tier, tried in order; `None` when it has none (rules only).
#[cfg(feature = "llm")]
pub fn open_llm(config: &config::LlmConfig) -> Result<Option<Arc<dyn Llm>>> {
    use atlas_llm::{Endpoint, Fallback, HttpLlm, Provider};
    const TIERS: [&str; 3] = ["conversation", "economy", "local"];
    if !TIERS.contains(&config.tier.as_str()) {
        return Err(AtlasError::Config(format!(
            "llm.tier: expected one of {}, got {:?}",
            TIERS.join(", "),
            config.tier
        )));
    }
    let mut members: Vec<Arc<dyn Llm>> = Vec::new();
    for (i, c) in config.endpoints.iter().enumerate() {
        let at = |field: &str| format!("llm.endpoints[{i}].{field}");
        if !TIERS.contains(&c.tier.as_str()) {
            return Err(AtlasError::Config(format!(
                "{}: expected one of {}, got {:?}",
                at("tier"),
                TIERS.join(", "),
                c.tier
            )));
        }
        if c.tier != config.tier {
            continue;
        }
        let provider: Provider =
            c.provider.parse().map_err(|m| AtlasError::Config(format!("{}: {m}", at("provider"))))?;
        if !(c.url.starts_with("http://") || c.url.starts_with("https://")) {
            let shown = atlas_domain::policy::secrets::display_url(&c.url);
            return Err(AtlasError::Config(format!("{}: expected an http(s) URL, got {shown:?}", at("url"))));
        }
        let mut endpoint = Endpoint::new(&c.name, provider, &c.url, &c.model);
        endpoint.api_key = match (&c.api_key, &c.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => match std::env::var(var) {
                Ok(key) => Some(key),
                // A missing key stops this endpoint, not the space: every command that does not
                // call the model (remember, recall, stats) works, and each call says why.
                Err(_) => {
                    let why = format!("{}: the variable {var} is not set", at("api_key_env"));
                    tracing::warn!(%why, "the model endpoint cannot be called until its key is set");
                    members.push(Arc::new(Unconfigured(why)));
                    continue;
                }
            },
            (None, None) => None,
        };
        endpoint.timeout = std::time::Duration::from_millis(c.timeout_ms.max(1));
        endpoint.max_retries = c.max_retries;
        endpoint.max_tokens = c.max_tokens;
        (endpoint.input_price, endpoint.output_price) = (c.input_price, c.output_price);
        members.push(Arc::new(HttpLlm::new(endpoint)?));
    }
    if members.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(Fallback::new(members)?)))
}

/// An endpoint that cannot be called as configured (its key's variable is unset): each call
/// fails with why, as a model that is away does, so the sleep cycle's model band waits.
#[cfg(feature = "llm")]
struct Unconfigured(String);

#[cfg(feature = "llm")]
#[async_trait::async_trait]
impl Llm for Unconfigured {
    async fn complete(&self, _: atlas_domain::ports::LlmRequest) -> Result<atlas_domain::ports::Completion> {
        Err(AtlasError::Config(self.0.clone()))
    }
}

#[cfg(not(feature = "llm"))]
pub fn open_llm(config: &config::LlmConfig) -> Result<Option<Arc<dyn Llm>>> {
    if config.endpoints.is_empty() {
        Ok(None)
    } else {
        Err(AtlasError::Config("llm endpoints need atlas built with the llm feature".into()))
    }
}

/// The embedder `config` names, loaded off the async executor; `None` for `embedder = "none"`.
pub async fn open_embedder(config: &Config) -> Result<Option<Arc<dyn Embedder>>> {
    open_embedder_recorded(config, None).await
}

/// [`open_embedder`] for a space that recorded `recorded` as its model: an endpoint that is that
/// model takes its dimension from the record instead of asking for it.
pub async fn open_embedder_recorded(
    config: &Config,
    recorded: Option<atlas_domain::ports::EmbeddingModel>,
) -> Result<Option<Arc<dyn Embedder>>> {
    match config.embedder {
        config::EmbedderKind::None => Ok(None),
        config::EmbedderKind::Onnx => open_onnx(config).await,
        config::EmbedderKind::Http => open_http(&config.http, recorded).await,
    }
}

/// The ONNX model the configuration names, or its models side by side when the name joins
/// several (`nomic+all-minilm-l6-v2-qint8-per-token`, a `JoinedEmbedder`).
#[cfg(feature = "embed-onnx")]
async fn open_onnx(config: &Config) -> Result<Option<Arc<dyn Embedder>>> {
    let defaults = atlas_embed_onnx::OnnxOptions::default();
    let named = config.onnx.model.clone().unwrap_or(defaults.model);
    let members: Vec<MemberSettings> = match config.onnx.model_dir {
        Some(_) => vec![MemberSettings {
            model: named,
            dimensions: config.onnx.dimensions,
            max_length: config.onnx.max_length,
        }],
        None => member_settings(&atlas_embed_onnx::manifest::Manifest::builtin()?.members(&named)?, &config.onnx)?,
    };
    let mut loaded: Vec<Arc<dyn Embedder>> = Vec::with_capacity(members.len());
    for MemberSettings { model, dimensions, max_length } in members {
        let options = atlas_embed_onnx::OnnxOptions {
            model,
            max_length,
            dimensions,
            threads: config.onnx.threads.unwrap_or(defaults.threads),
            batch_size: config.onnx.batch_size,
            spinning: config.onnx.spinning,
            cuda: config.onnx.cuda,
            model_dir: config.onnx.model_dir.clone(),
            files_dir: None,
        };
        let embedder = tokio::task::spawn_blocking(move || atlas_embed_onnx::OnnxEmbedder::load(&options))
            .await
            .map_err(|e| AtlasError::Embedding(format!("loading the embedder failed: {e}")))??;
        loaded.push(Arc::new(embedder));
    }
    if loaded.len() == 1 {
        return Ok(loaded.pop());
    }
    Ok(Some(Arc::new(crate::joined_embedder::JoinedEmbedder::new(loaded)?)))
}

/// What one model of the configured ones is loaded with.
#[cfg(feature = "embed-onnx")]
struct MemberSettings {
    model: String,
    dimensions: Option<usize>,
    max_length: Option<usize>,
}

/// Each member of the configured model with its settings. One model takes `[onnx] dimensions`
/// and `max_length` as they are (the embedder refuses a width it cannot give, by name). Among
/// models side by side:
/// - the width cuts the Matryoshka-trained members and leaves the others whole, and at least one
///   must take it;
/// - the window is a bound: each member reads at most its own trained window (MiniLM's 256
///   tokens beside nomic's 2,048 cut to 512), since a shared setting that stretched one model
///   past the window it was trained on would change what its vectors mean.
#[cfg(feature = "embed-onnx")]
fn member_settings(
    members: &[&atlas_embed_onnx::manifest::Model],
    onnx: &config::OnnxConfig,
) -> Result<Vec<MemberSettings>> {
    let alone = members.len() == 1;
    let takes_width = |m: &atlas_embed_onnx::manifest::Model| alone || !m.matryoshka.is_empty();
    if let Some(width) = onnx.dimensions
        && !members.iter().any(|m| takes_width(m))
    {
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        return Err(AtlasError::Config(format!(
            "[onnx] dimensions = {width}: none of {} was trained to be cut (Matryoshka)",
            names.join(", ")
        )));
    }
    Ok(members
        .iter()
        .map(|m| MemberSettings {
            model: m.name.clone(),
            dimensions: onnx.dimensions.filter(|_| takes_width(m)),
            max_length: onnx.max_length.map(|window| if alone { window } else { window.min(m.max_length) }),
        })
        .collect())
}

/// The `[onnx]` settings that open a store embedded with `stored_model` at `stored_dim` when the
/// configured ones do not, if the configuration leaves them open: the stored model when none is
/// configured (a new default never forces a re-embedding), and the stored Matryoshka width when
/// no width is configured (a space cut to 256 reopens at 256). `None` when nothing left open
/// would change.
#[cfg(feature = "embed-onnx")]
pub(crate) fn stored_onnx_settings(
    configured: &config::OnnxConfig,
    stored_model: &str,
    stored_dim: usize,
) -> Option<config::OnnxConfig> {
    let manifest = atlas_embed_onnx::manifest::Manifest::builtin().ok()?;
    let stored = manifest.members(stored_model).ok()?;
    let joined_name = |members: &[&atlas_embed_onnx::manifest::Model]| {
        members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(&atlas_embed_onnx::manifest::JOIN.to_string())
    };
    let same_model = match &configured.model {
        None => true,
        Some(model) => manifest.members(model).is_ok_and(|m| joined_name(&m) == joined_name(&stored)),
    };
    if configured.model_dir.is_some() || !same_model {
        return None;
    }
    let dimensions = match configured.dimensions {
        Some(width) => Some(width),
        None => stored_width(&stored, stored_dim),
    };
    // Only what the configuration left open is taken: a width it sets stays, and the error it
    // meets is the store's answer, not a second open with the same settings.
    let adopts = configured.model.is_none() || dimensions != configured.dimensions;
    adopts.then(|| config::OnnxConfig { model: Some(stored_model.to_owned()), dimensions, ..configured.clone() })
}

/// The Matryoshka width at which `members` give vectors of `dimension` in all, if one does (and
/// is not their full width).
#[cfg(feature = "embed-onnx")]
fn stored_width(members: &[&atlas_embed_onnx::manifest::Model], dimension: usize) -> Option<usize> {
    if members.iter().map(|m| m.dimension).sum::<usize>() == dimension {
        return None;
    }
    // A width cuts every Matryoshka member and leaves the others whole (`member_settings`).
    let total_at = |width: usize| -> usize {
        members.iter().map(|m| if m.matryoshka.is_empty() { m.dimension } else { width }).sum()
    };
    let trained_at = |width: usize| members.iter().all(|m| m.matryoshka.is_empty() || m.matryoshka.contains(&width));
    members.iter().flat_map(|m| m.matryoshka.iter().copied()).find(|&w| trained_at(w) && total_at(w) == dimension)
}

#[cfg(not(feature = "embed-onnx"))]
pub(crate) fn stored_onnx_settings(_: &config::OnnxConfig, _: &str, _: usize) -> Option<config::OnnxConfig> {
    None
}

#[cfg(not(feature = "embed-onnx"))]
async fn open_onnx(_: &Config) -> Result<Option<Arc<dyn Embedder>>> {
    Err(AtlasError::Config("embedder = \"onnx\" needs atlas built with the embed-onnx feature".into()))
}

/// The embeddings endpoint of the `[http]` section; its API key read from `http.api_key_env`.
#[cfg(feature = "embed-http")]
async fn open_http(
    c: &config::HttpConfig,
    recorded: Option<atlas_domain::ports::EmbeddingModel>,
) -> Result<Option<Arc<dyn Embedder>>> {
    use atlas_embed_http::{HttpEmbedder, HttpEmbedderOptions};
    let missing = |field: &str| {
        AtlasError::Config(format!("embedder = \"http\" needs http.{field} (or ATLAS_HTTP_{})", field.to_uppercase()))
    };
    let url = c.url.as_deref().ok_or_else(|| missing("url"))?;
    let model = c.model.as_deref().ok_or_else(|| missing("model"))?;
    let mut options = HttpEmbedderOptions::new(url, model);
    options.dimensions = c.dimensions;
    options.api_key = match (&c.api_key, &c.api_key_env) {
        (Some(key), _) => Some(key.0.clone()),
        (None, Some(var)) => Some(
            std::env::var(var)
                .map_err(|_| AtlasError::Config(format!("http.api_key_env: the variable {var} is not set")))?,
        ),
        (None, None) => None,
    };
    options.query_prefix = c.query_prefix.clone();
    options.document_prefix = c.document_prefix.clone();
    options.timeout = std::time::Duration::from_millis(c.timeout_ms.max(1));
    options.retry.max_retries = c.max_retries;
    options.batch_size = c.batch_size.max(1);
    options.batch_bytes = c.batch_bytes.max(1);
    options.concurrency = c.concurrency.max(1);
    options.max_input_chars = c.max_input_chars.max(1);
    if options.dimensions.is_none()
        && let Some(recorded) = recorded.filter(|r| r.name == options.identity())
    {
        options.dimensions = Some(recorded.dimension);
    }
    Ok(Some(Arc::new(HttpEmbedder::connect(options).await?)))
}

#[cfg(not(feature = "embed-http"))]
async fn open_http(
    _: &config::HttpConfig,
    _: Option<atlas_domain::ports::EmbeddingModel>,
) -> Result<Option<Arc<dyn Embedder>>> {
    Err(AtlasError::Config("embedder = \"http\" needs atlas built with the embed-http feature".into()))
}
