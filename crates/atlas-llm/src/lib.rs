//! The `Llm` port over HTTP: an OpenAI-compatible chat-completions client (OpenAI, Ollama,
//! llama.cpp's server, vLLM, Groq) and an Anthropic Messages client, with timeouts, retries
//! with backoff on 429 and 5xx, output constrained by a JSON schema where the endpoint can, a
//! price per token for the ledger, and [`Fallback`] within one tier.

mod wire;

use async_trait::async_trait;
use atlas_domain::policy::model_answer::answer_bytes;
use atlas_domain::policy::secrets::{display_url, redact};
use atlas_domain::ports::{Completion, Llm, LlmRequest};
use atlas_domain::{AtlasError, Result};
use atlas_http::{Failure, Retry};
use std::sync::Arc;
use std::time::Duration;

/// Which wire format an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `POST {url}/chat/completions`, `response_format` with a JSON schema.
    OpenAi,
    /// `POST {url}/v1/messages`; the schema becomes a forced tool's input.
    Anthropic,
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            other => Err(format!("expected openai or anthropic, got {other:?}")),
        }
    }
}

/// One model behind one URL.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Named in errors and logs.
    pub name: String,
    pub provider: Provider,
    /// For OpenAI-compatible servers, the base that `/chat/completions` is appended to (e.g.
    /// `http://127.0.0.1:8080/v1`); for Anthropic, `https://api.anthropic.com`.
    pub url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// For the whole request, connection included.
    pub timeout: Duration,
    /// Retries after a 429, a 5xx, a timeout or a refused connection.
    pub max_retries: u32,
    /// The first retry waits up to this long (unless the server says `Retry-After`), doubling,
    /// with jitter (atlas-http's policy).
    pub backoff: Duration,
    pub max_tokens: u32,
    /// US dollars per million input and output tokens, for the ledger.
    pub input_price: f64,
    pub output_price: f64,
}

impl Endpoint {
    pub fn new(name: &str, provider: Provider, url: &str, model: &str) -> Self {
        Endpoint {
            name: name.to_owned(),
            provider,
            url: url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(500),
            max_tokens: 1024,
            input_price: 0.0,
            output_price: 0.0,
        }
    }
}

/// An [`Endpoint`] as an [`Llm`].
pub struct HttpLlm {
    endpoint: Endpoint,
    client: reqwest::Client,
}

impl HttpLlm {
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        let client = atlas_http::client(endpoint.timeout)
            .map_err(|e| AtlasError::Config(format!("llm endpoint {}: {e}", endpoint.name)))?;
        Ok(HttpLlm { endpoint, client })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

#[async_trait]
impl Llm for HttpLlm {
    async fn complete(&self, request: LlmRequest) -> Result<Completion> {
        let e = &self.endpoint;
        let retry = Retry { max_retries: e.max_retries, backoff: e.backoff, ..Retry::default() };
        atlas_http::with_retries(retry, &e.name, || self.attempt(&request)).await.map_err(|(failure, tries)| {
            // Neither the URL's credentials nor a key the server echoed (redacted in `attempt`)
            // reach an error, a log line or the ledger of cycles.
            AtlasError::Llm(format!(
                "{} ({} at {}): {} (after {tries} attempt{})",
                e.name,
                e.model,
                display_url(&e.url),
                failure.message,
                if tries == 1 { "" } else { "s" }
            ))
        })
    }
}

impl HttpLlm {
    async fn attempt(&self, request: &LlmRequest) -> std::result::Result<Completion, Failure> {
        let e = &self.endpoint;
        let (url, body) = match e.provider {
            Provider::OpenAi => (format!("{}/chat/completions", e.url), wire::openai_request(e, request)),
            Provider::Anthropic => (format!("{}/v1/messages", e.url), wire::anthropic_request(e, request)),
        };
        let mut call = self.client.post(&url).json(&body);
        call = match (e.provider, &e.api_key) {
            (Provider::OpenAi, Some(key)) => call.bearer_auth(key),
            (Provider::Anthropic, key) => {
                let call = call.header("anthropic-version", "2023-06-01");
                match key {
                    Some(key) => call.header("x-api-key", key),
                    None => call,
                }
            }
            (Provider::OpenAi, None) => call,
        };
        let secrets: Vec<&str> = e.api_key.as_deref().into_iter().collect();
        let text = atlas_http::send(call, e.timeout, answer_cap(e, request))
            .await
            .map_err(|failure| Failure { message: redact(&failure.message, &secrets), ..failure })?;
        let parsed = match e.provider {
            Provider::OpenAi => wire::openai_answer(&text),
            Provider::Anthropic => wire::anthropic_answer(&text),
        };
        let (answer, input_tokens, output_tokens) = parsed.map_err(Failure::permanent)?;
        Ok(Completion {
            text: answer,
            input_tokens,
            output_tokens,
            cost: (input_tokens as f64 * e.input_price + output_tokens as f64 * e.output_price) / 1e6,
        })
    }
}

/// The most bytes of an answer read for `request`: what its schema allows, or else what
/// `max_tokens` tokens can spell (at most 16 bytes a token), each byte escaped twice over in the
/// widest form (the answer is JSON inside a JSON string), and room for the envelope.
fn answer_cap(e: &Endpoint, request: &LlmRequest) -> usize {
    let by_tokens = u64::from(e.max_tokens).saturating_mul(16);
    let answer = request.json_schema.as_ref().and_then(answer_bytes).unwrap_or(by_tokens);
    usize::try_from(answer.saturating_mul(7).saturating_add(64 << 10)).unwrap_or(usize::MAX)
}

/// Several endpoints of one tier, tried in order: the first that answers does. A tier never
/// falls back to another (a pricier one would surprise the bill; seed 003).
pub struct Fallback {
    members: Vec<Arc<dyn Llm>>,
}

impl Fallback {
    pub fn new(members: Vec<Arc<dyn Llm>>) -> Result<Self> {
        if members.is_empty() {
            return Err(AtlasError::Config("an llm tier needs at least one endpoint".into()));
        }
        Ok(Fallback { members })
    }
}

#[async_trait]
impl Llm for Fallback {
    async fn complete(&self, request: LlmRequest) -> Result<Completion> {
        let mut errors = Vec::new();
        for member in &self.members {
            match member.complete(request.clone()).await {
                Ok(completion) => return Ok(completion),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(AtlasError::Llm(format!("every endpoint of the tier failed: {}", errors.join("; "))))
    }
}
