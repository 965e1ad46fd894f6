//! The `Embedder` port over HTTP: OpenAI's `POST /v1/embeddings` wire, which OpenAI, Ollama,
//! llama.cpp's server, vLLM, Hugging Face TEI and LM Studio serve. Texts are cut into requests
//! by count and bytes, a few in flight at once; each request is retried with backoff and jitter
//! on 429, 5xx, timeouts and broken connections (honouring `Retry-After`); every answer's count
//! and dimension is checked. A request the endpoint refuses as too large is split, and a single
//! text too long for it is shortened, so that one memory never blocks the rest.
//!
//! What fails here fails the call and nothing else: the runtime keeps memories pending until
//! their vectors come, and recall runs on full text meanwhile.

mod batches;
mod wire;

use async_trait::async_trait;
use atlas_domain::policy::secrets::{display_url, redact};
use atlas_domain::ports::{Embedder, EmbedderUsage, EmbeddingModel};
use atlas_domain::{AtlasError, Result};
use atlas_http::{Failure, Retry};
use futures_util::{StreamExt, TryStreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One embeddings endpoint and how to call it.
#[derive(Clone)]
pub struct HttpEmbedderOptions {
    /// The API's base (`http://127.0.0.1:11434/v1`, `https://api.openai.com/v1`), to which
    /// `/embeddings` is appended, or the full URL of the embeddings route.
    pub url: String,
    pub model: String,
    /// The vectors' length. Unset: asked of the endpoint when the embedder starts (which then
    /// must answer); set, the embedder starts while the endpoint is away.
    pub dimensions: Option<usize>,
    /// Sent as a bearer token; never logged, never stored.
    pub api_key: Option<String>,
    /// Put before a recall's query (`search_query: `, `query: `, an instruction).
    pub query_prefix: String,
    /// Put before every memory's text (`search_document: `, `passage: `).
    pub document_prefix: String,
    /// For one request, connection included.
    pub timeout: Duration,
    pub retry: Retry,
    /// Texts per request.
    pub batch_size: usize,
    /// About this many bytes of text per request (a longer text goes alone).
    pub batch_bytes: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Longer texts are cut to this many characters first, as a local model cuts at its
    /// window (what lies past a model's window does not change its vector).
    pub max_input_chars: usize,
}

impl std::fmt::Debug for HttpEmbedderOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEmbedderOptions")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish_non_exhaustive()
    }
}

impl HttpEmbedderOptions {
    pub fn new(url: &str, model: &str) -> Self {
        HttpEmbedderOptions {
            url: url.trim().trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            dimensions: None,
            api_key: None,
            query_prefix: String::new(),
            document_prefix: String::new(),
            timeout: Duration::from_secs(30),
            retry: Retry { max_retries: 4, backoff: Duration::from_millis(500), max_wait: Duration::from_secs(30) },
            batch_size: 32,
            batch_bytes: 128 * 1024,
            concurrency: 2,
            max_input_chars: 8_000,
        }
    }

    /// The embeddings route: the URL itself when its path names one, else the base's
    /// `/embeddings`, put before a query string (Azure's `?api-version=`), which stays.
    fn route(&self) -> String {
        self.route_under("")
    }

    /// The route under the base's `/v1`, tried once when the base has no version in its path
    /// and its `/embeddings` answers another API's shape: a bare `http://127.0.0.1:8080` of
    /// llama.cpp's server reaches its native route, whose OpenAI twin is `/v1/embeddings`.
    fn versioned_route(&self) -> Option<String> {
        let base = self.url.split(['?', '#']).next().unwrap_or_default().trim_end_matches('/');
        let path = base.split_once("://").and_then(|(_, rest)| rest.split_once('/')).map_or("", |(_, path)| path);
        let named = path.ends_with("embeddings") || path.ends_with("embed");
        let versioned = path.split('/').any(|segment| {
            segment.strip_prefix('v').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        (!named && !versioned).then(|| self.route_under("/v1"))
    }

    fn route_under(&self, version: &str) -> String {
        let (base, query) = match self.url.split_once('?') {
            Some((base, query)) => (base.trim_end_matches('/'), Some(query)),
            None => (self.url.as_str(), None),
        };
        let path = if base.ends_with("/embeddings") || base.ends_with("/embed") {
            base.to_owned()
        } else {
            format!("{base}{version}/embeddings")
        };
        match query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        }
    }

    /// The model's identity, recorded by the space: the model at this endpoint (without scheme,
    /// credentials or query), and a digest of the prefixes when there are any, since they change
    /// every vector.
    pub fn identity(&self) -> String {
        let without_scheme = self.url.split_once("://").map_or(self.url.as_str(), |(_, rest)| rest);
        let without_user = without_scheme.rsplit_once('@').map_or(without_scheme, |(_, host)| host);
        let place = without_user.split(['?', '#']).next().unwrap_or_default();
        let place = place.trim_end_matches('/').trim_end_matches("/embeddings").trim_end_matches('/');
        let mut name = format!("http:{}@{place}", self.model);
        if !(self.query_prefix.is_empty() && self.document_prefix.is_empty()) {
            let digest = fnv1a(format!("{}\u{0}{}", self.query_prefix, self.document_prefix).as_bytes());
            name.push_str(&format!("+prefixes-{:08x}", digest as u32));
        }
        name
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// An [`HttpEmbedderOptions`] endpoint as an [`Embedder`].
pub struct HttpEmbedder {
    options: HttpEmbedderOptions,
    /// Where requests go: the configured route, or its `/v1` twin once that answered
    /// ([`HttpEmbedderOptions::versioned_route`]).
    route: std::sync::RwLock<String>,
    /// The `/v1` twin not yet tried, while the configured route has not answered the wire.
    versioned: std::sync::Mutex<Option<String>>,
    client: reqwest::Client,
    model: EmbeddingModel,
    usage: Counters,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    texts: AtomicU64,
    tokens: AtomicU64,
}

/// A request's vectors, boxed: splitting a refused request calls itself.
type Vectors<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<Vec<f32>>>> + Send + 'a>>;

/// The status a [`Failure`] carries for an answer that is well-formed but not this space's
/// vectors (not an HTTP status: none is in the 600s).
const MISMATCH: u16 = 600;

/// The most bytes an answer to `inputs` inputs may take: each vector's numbers written out in
/// full (at most 26 bytes each, `-1.2345678901234567e-300,`), of the space's dimension or, while
/// it is not known, of the widest models' (16,384), and room for the envelope.
fn answer_cap(inputs: usize, dimension: usize) -> usize {
    let dimension = if dimension == 0 { 16_384 } else { dimension };
    inputs.max(1).saturating_mul(dimension.saturating_mul(26).saturating_add(256)).saturating_add(64 << 10)
}

/// The shortest text a refused single input is shortened to before the refusal is final.
const SHORTEST_RETRIED_TEXT: usize = 64;

/// Whether the endpoint refused a request as too large: a 400, 413 or 422, or a 500 that says
/// so (llama.cpp's server answers 500 "input (602 tokens) is too large to process" for a text
/// longer than its batch). Only those words: a gateway's "took too long" is a passing fault.
fn too_large(failure: &Failure) -> bool {
    match failure.status {
        Some(400 | 413 | 422) => true,
        Some(500) => failure.message.to_ascii_lowercase().contains("too large"),
        _ => false,
    }
}

impl HttpEmbedder {
    /// Checks the options and learns the dimension (from them, else by asking the endpoint).
    pub async fn connect(options: HttpEmbedderOptions) -> Result<Self> {
        let config = |m: String| AtlasError::Config(format!("embeddings endpoint {}: {m}", display_url(&options.url)));
        if !(options.url.starts_with("http://") || options.url.starts_with("https://")) {
            return Err(config("expected an http(s) URL".into()));
        }
        if options.model.trim().is_empty() {
            return Err(config("no model named".into()));
        }
        if options.dimensions == Some(0) {
            return Err(config("dimensions must be at least 1".into()));
        }
        let client = atlas_http::client(options.timeout).map_err(config)?;
        let model = EmbeddingModel { name: options.identity(), dimension: options.dimensions.unwrap_or(0) };
        let mut embedder = HttpEmbedder {
            route: std::sync::RwLock::new(options.route()),
            versioned: std::sync::Mutex::new(options.versioned_route()),
            options,
            client,
            model,
            usage: Counters::default(),
        };
        if embedder.model.dimension == 0 {
            let probe = embedder.embed_with(vec!["dimension".into()], Prefix::Document).await.map_err(|e| {
                // The inner words only: "embedding error: " once.
                let said = match e {
                    AtlasError::Embedding(m) | AtlasError::EmbeddingRefused(m) => m,
                    other => other.to_string(),
                };
                AtlasError::Embedding(format!(
                    "{said}; the embedder asks the endpoint for its dimension at start (a space that has \
                     recorded it does not): set http.dimensions to start while the endpoint is away"
                ))
            })?;
            embedder.model.dimension = probe.first().map_or(0, Vec::len);
        }
        Ok(embedder)
    }

    pub fn options(&self) -> &HttpEmbedderOptions {
        &self.options
    }

    async fn embed_with(&self, texts: Vec<String>, prefix: Prefix) -> Result<Vec<Vec<f32>>> {
        let prefix = match prefix {
            Prefix::Query => &self.options.query_prefix,
            Prefix::Document => &self.options.document_prefix,
        };
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| {
                let input = format!("{prefix}{}", batches::truncate(t, self.options.max_input_chars));
                // Endpoints refuse an empty input (OpenAI's does): a space embeds as "nothing".
                if input.trim().is_empty() { " ".to_owned() } else { input }
            })
            .collect();
        let lengths: Vec<usize> = inputs.iter().map(String::len).collect();
        let requests = batches::split(&lengths, self.options.batch_size, self.options.batch_bytes);
        let vectors: Vec<Vec<Vec<f32>>> = futures_util::stream::iter(requests)
            .map(|range| self.embed_batch(inputs[range].to_vec()))
            .buffered(self.options.concurrency.max(1))
            .try_collect()
            .await?;
        Ok(vectors.into_iter().flatten().collect())
    }

    /// One request's vectors, with its retries; a request the endpoint refuses as too large, or
    /// does not answer within the timeout, is split in two, and a single input it refuses is
    /// shortened by half, until it is taken.
    fn embed_batch(&self, inputs: Vec<String>) -> Vectors<'_> {
        Box::pin(async move {
            let mut first = true;
            let several = inputs.len() > 1;
            let result = atlas_http::with_retries(self.options.retry, "embeddings", || {
                if !std::mem::take(&mut first) {
                    self.usage.retries.fetch_add(1, Ordering::Relaxed);
                }
                let attempt = self.attempt(&inputs);
                async move {
                    match attempt.await {
                        // An endpoint on a slow machine may take longer than the timeout for a
                        // whole batch every time, and keeps computing what was given up on:
                        // the same batch again would never land. Its halves are sent instead.
                        Err(failure) if failure.timed_out && several => Err(Failure { retry: false, ..failure }),
                        // Refused as too large: the same request again would be refused again.
                        Err(failure) if too_large(&failure) => Err(Failure { retry: false, ..failure }),
                        other => other,
                    }
                }
            })
            .await;
            let (failure, tries) = match result {
                Ok(vectors) => return Ok(vectors),
                Err(failed) => failed,
            };
            let refused = too_large(&failure);
            if (refused || failure.timed_out) && several {
                tracing::warn!(texts = inputs.len(), reason = %failure.message, "embedding a request's halves apart");
                let mut second = inputs;
                let first = second.drain(..second.len() / 2).collect();
                let mut vectors = self.embed_batch(first).await?;
                vectors.extend(self.embed_batch(second).await?);
                return Ok(vectors);
            }
            if refused && inputs.len() == 1 && inputs[0].chars().count() > SHORTEST_RETRIED_TEXT {
                let half = inputs[0].chars().count() / 2;
                let shorter = batches::truncate(&inputs[0], half).to_owned();
                tracing::warn!(chars = half, "the endpoint refused a text; embedding its first half");
                return self.embed_batch(vec![shorter]).await;
            }
            let tries = if tries == 1 { String::new() } else { format!(" (after {tries} attempts)") };
            let message = format!(
                "embeddings endpoint {} (model {}): {}{tries}",
                display_url(&self.options.url),
                self.options.model,
                failure.message
            );
            // The endpoint answered, and would answer this input the same way again: a text it
            // refuses alone, or vectors that are not this space's. The runtime sets such a memory
            // aside; anything else (an outage) keeps every memory queued.
            let refused_alone = refused && inputs.len() == 1;
            if refused_alone || failure.status == Some(MISMATCH) {
                Err(AtlasError::EmbeddingRefused(message))
            } else {
                Err(AtlasError::Embedding(message))
            }
        })
    }

    async fn attempt(&self, inputs: &[String]) -> std::result::Result<Vec<Vec<f32>>, Failure> {
        self.usage.calls.fetch_add(1, Ordering::Relaxed);
        // Redacted here, before the retry loop logs it: an error body may echo the key.
        let result = self
            .request(inputs)
            .await
            .map_err(|failure| Failure { message: redact(&failure.message, &self.secrets()), ..failure });
        match &result {
            Ok(_) => {
                self.usage.texts.fetch_add(inputs.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.usage.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// What must never be shown: the API key.
    fn secrets(&self) -> Vec<&str> {
        self.options.api_key.as_deref().into_iter().collect()
    }

    async fn request(&self, inputs: &[String]) -> std::result::Result<Vec<Vec<f32>>, Failure> {
        let route = self.route.read().expect("route lock").clone();
        match self.request_at(&route, inputs).await {
            Err(Miss::Answer(wire::Unusable::Shape(shape))) => self.request_versioned(&route, &shape, inputs).await,
            other => other.map_err(Miss::into_failure),
        }
    }

    /// After `route` answered another API's `shape`: the `/v1` twin, once, kept when it answers
    /// the wire (and said so); else a refusal at once that says which URL to give instead.
    async fn request_versioned(
        &self,
        route: &str,
        shape: &wire::Shape,
        inputs: &[String],
    ) -> std::result::Result<Vec<Vec<f32>>, Failure> {
        let hint = |to: &str| {
            let base = to.trim_end_matches("/embeddings");
            format!("{} answered: {shape}: use {base} as the endpoint's url", display_url(route))
        };
        // Another request in flight may have moved the route meanwhile.
        let current = self.route.read().expect("route lock").clone();
        if current != route {
            return self.request_at(&current, inputs).await.map_err(Miss::into_failure);
        }
        let Some(versioned) = self.versioned.lock().expect("versioned lock").clone() else {
            return Err(Failure::permanent(format!("{} answered: {shape}", display_url(route))));
        };
        let outcome = self.request_at(&versioned, inputs).await;
        // Tried once: whatever it answered, it is not tried again.
        *self.versioned.lock().expect("versioned lock") = None;
        match outcome {
            Ok(vectors) => {
                tracing::warn!(
                    configured = %display_url(route),
                    using = %display_url(&versioned),
                    "the embeddings route answered another API's shape ({shape}); its /v1 twin answers \
                     OpenAI's and is used from now on: set the url to the /v1 base to say so"
                );
                *self.route.write().expect("route lock") = versioned;
                Ok(vectors)
            }
            Err(Miss::Answer(wire::Unusable::Shape(again))) => Err(Failure::permanent(format!(
                "{} answered: {shape}; {} (tried once) answered: {again}",
                display_url(route),
                display_url(&versioned)
            ))),
            // The twin is not there (a 404) or failed otherwise: the configured route's answer
            // is the one to report, with the advice.
            Err(_) => Err(Failure::permanent(hint(&versioned))),
        }
    }

    async fn request_at(&self, route: &str, inputs: &[String]) -> std::result::Result<Vec<Vec<f32>>, Miss> {
        let mut call = self.client.post(route).json(&wire::request(&self.options.model, inputs));
        if let Some(key) = &self.options.api_key {
            call = call.bearer_auth(key);
        }
        let cap = answer_cap(inputs.len(), self.model.dimension);
        let text = atlas_http::send(call, self.options.timeout, cap).await.map_err(Miss::Transport)?;
        let dimension = (self.model.dimension > 0).then_some(self.model.dimension);
        let answer = wire::answer(&text, inputs.len(), dimension).map_err(Miss::Answer)?;
        self.usage.tokens.fetch_add(answer.tokens, Ordering::Relaxed);
        Ok(answer.vectors)
    }
}

/// Why one request got no vectors: the exchange failed, or its answer is unusable.
enum Miss {
    Transport(Failure),
    Answer(wire::Unusable),
}

impl Miss {
    fn into_failure(self) -> Failure {
        match self {
            Miss::Transport(failure) => failure,
            // Cut or garbled on the way: the same request may well be answered whole next time.
            Miss::Answer(wire::Unusable::Malformed(m)) => {
                Failure { message: m, retry: true, wait: None, status: None, timed_out: false }
            }
            // Whole, of another API: asking again gets the same answer; a setting to change, and
            // no memory's fault (they stay queued).
            Miss::Answer(wire::Unusable::Shape(shape)) => Failure::permanent(shape.to_string()),
            Miss::Answer(wire::Unusable::Mismatch(m)) => Failure {
                status: Some(MISMATCH),
                ..Failure::permanent(format!(
                    "{m}: is another model behind the URL now? `atlas reembed` moves the space to it"
                ))
            },
        }
    }
}

#[derive(Clone, Copy)]
enum Prefix {
    Query,
    Document,
}

#[async_trait]
impl Embedder for HttpEmbedder {
    fn model(&self) -> EmbeddingModel {
        self.model.clone()
    }

    fn usage(&self) -> EmbedderUsage {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let u = &self.usage;
        EmbedderUsage {
            calls: get(&u.calls),
            retries: get(&u.retries),
            failures: get(&u.failures),
            texts: get(&u.texts),
            tokens: get(&u.tokens),
        }
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.embed_with(texts, Prefix::Document).await
    }

    async fn embed_query(&self, text: String) -> Result<Vec<f32>> {
        self.embed_with(vec![text], Prefix::Query)
            .await?
            .pop()
            .ok_or_else(|| AtlasError::Embedding("the endpoint returned no vector for the query".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_names_model_and_place_without_secrets() {
        let mut o = HttpEmbedderOptions::new("https://user:pw@api.example.com/v1/?x=1", "text-embedding-3-small");
        assert_eq!(o.identity(), "http:text-embedding-3-small@api.example.com/v1");
        o.query_prefix = "search_query: ".into();
        assert!(o.identity().starts_with("http:text-embedding-3-small@api.example.com/v1+prefixes-"));
        let azure =
            HttpEmbedderOptions::new("https://x.openai.azure.com/openai/deployments/d?api-version=2024-02-01", "m");
        assert_eq!(azure.route(), "https://x.openai.azure.com/openai/deployments/d/embeddings?api-version=2024-02-01");
        let full = HttpEmbedderOptions::new("http://127.0.0.1:8080/v1/embeddings", "m");
        assert_eq!(
            (full.route().as_str(), full.identity().as_str()),
            ("http://127.0.0.1:8080/v1/embeddings", "http:m@127.0.0.1:8080/v1")
        );
    }
}
