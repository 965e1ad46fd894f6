//! `OnnxEmbedder`: loads the session and tokenizer once and embeds batches.

use crate::assets;
use crate::manifest::Manifest;
use async_trait::async_trait;
use atlas_domain::ports::{Embedder, EmbeddingModel};
use atlas_domain::{AtlasError, Result};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::{Tensor, ValueType};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// How to build an [`OnnxEmbedder`].
#[derive(Debug, Clone)]
pub struct OnnxOptions {
    /// A model name from `models/manifest.toml`.
    pub model: String,
    /// Tokens per text after truncation; `None` takes the manifest's.
    pub max_length: Option<usize>,
    /// Intra-op threads of ONNX Runtime.
    pub threads: usize,
    /// Texts per model call; a larger request is cut into sub-batches of similar length.
    pub batch_size: usize,
    /// Busy-wait between ops: faster on an idle machine, much slower under CPU contention.
    pub spinning: bool,
    /// Try the CUDA execution provider first (needs the `cuda` feature).
    pub cuda: bool,
    /// A directory holding the model's files instead of the cache; they are verified against
    /// the manifest's sha256 all the same, and never fetched.
    pub model_dir: Option<PathBuf>,
}

impl Default for OnnxOptions {
    fn default() -> Self {
        OnnxOptions {
            model: "all-minilm-l6-v2-qint8".into(),
            max_length: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            batch_size: 32,
            spinning: false,
            cuda: false,
            model_dir: None,
        }
    }
}

/// The embedder. Cheap to clone; one session serves every caller.
#[derive(Clone)]
pub struct OnnxEmbedder {
    inner: Arc<Inner>,
}

struct Inner {
    session: Mutex<Session>,
    /// Queries waiting for the session: background batches let them go first (between
    /// sub-batches), so that a recall waits for at most one sub-batch, not a whole backlog.
    queries_waiting: Mutex<usize>,
    queries_served: Condvar,
    tokenizer: Tokenizer,
    model: EmbeddingModel,
    uses_token_type_ids: bool,
    output: String,
    batch_size: usize,
}

/// The process-wide ONNX Runtime environment; sessions need it alive.
static ENVIRONMENT: OnceLock<ort::environment::Environment> = OnceLock::new();

/// Serialises first loads, so that a failure (a missing library, a download that failed) is
/// retried by the next load instead of being remembered for the life of the process.
static LOADING: Mutex<()> = Mutex::new(());

/// The first successful load in a process picks the library: the CUDA build (onnxruntime-gpu)
/// when CUDA is asked for and compiled in, the CPU build otherwise.
fn environment(manifest: &Manifest, cuda: bool) -> Result<&'static ort::environment::Environment> {
    if let Some(env) = ENVIRONMENT.get() {
        return Ok(env);
    }
    let _one_at_a_time = LOADING.lock().map_err(|_| AtlasError::Embedding("the loader lock is poisoned".into()))?;
    if let Some(env) = ENVIRONMENT.get() {
        return Ok(env);
    }
    let spec = if cuda && cfg!(feature = "cuda") { &manifest.runtime_cuda } else { &manifest.runtime };
    if spec.sha256.is_none() {
        tracing::warn!(library = %spec.name, "no sha256 for this ONNX Runtime build in models/manifest.toml; loading it unverified");
    }
    let library = assets::runtime_library(spec)?;
    if std::env::var_os("ORT_DISABLE_TELEMETRY").is_none() {
        // ONNX Runtime's telemetry client writes a device id under ~/.cache/Microsoft at
        // environment creation, before `with_telemetry(false)` can act; only this variable
        // stops it. The `atlas` binary sets it while single-threaded; a library host that has
        // not is covered here, once, under the loader lock.
        // SAFETY: a host that reads the environment from other threads while the embedder
        // first loads must set ORT_DISABLE_TELEMETRY itself (documented in docs/CONFIG.md).
        unsafe { std::env::set_var("ORT_DISABLE_TELEMETRY", "1") };
    }
    let builder =
        ort::init_from(&library).map_err(|e| AtlasError::Embedding(format!("cannot load ONNX Runtime: {e}")))?;
    // A local-first tool sends nothing anywhere and writes nothing outside its own cache.
    let env = builder
        .with_name("atlas")
        .with_telemetry(false)
        .build()
        .map_err(|e| AtlasError::Embedding(format!("cannot start ONNX Runtime from {}: {e}", library.display())))?;
    Ok(ENVIRONMENT.get_or_init(|| env))
}

fn ort_error(what: &str) -> impl Fn(ort::Error) -> AtlasError + '_ {
    move |e| AtlasError::Embedding(format!("{what}: {e}"))
}

impl OnnxEmbedder {
    /// Loads (fetching when missing and allowed) and verifies the files, then builds the
    /// session. Blocking: call it off the async executor.
    pub fn load(options: &OnnxOptions) -> Result<Self> {
        let manifest = Manifest::builtin()?;
        let spec = manifest.model(&options.model)?;
        let model_path = assets::model_file(spec, "model.onnx", options.model_dir.as_deref())?;
        let tokenizer_path = assets::model_file(spec, "tokenizer.json", options.model_dir.as_deref())?;
        let environment = environment(&manifest, options.cuda)?;
        let tokenizer = load_tokenizer(&tokenizer_path, options.max_length.unwrap_or(spec.max_length))?;
        let session = build_session(environment, &model_path, options)?;
        let input_names: Vec<String> = session.inputs().iter().map(|i| i.name().to_owned()).collect();
        for required in ["input_ids", "attention_mask"] {
            if !input_names.iter().any(|n| n == required) {
                return Err(AtlasError::Embedding(format!(
                    "{}: the model has no input {required:?} (inputs: {input_names:?})",
                    model_path.display()
                )));
            }
        }
        let output = session
            .outputs()
            .first()
            .ok_or_else(|| AtlasError::Embedding(format!("{}: the model has no outputs", model_path.display())))?;
        let dimension = match output.dtype() {
            ValueType::Tensor { shape, .. } if shape.len() == 3 && shape[2] > 0 => shape[2] as usize,
            other => {
                return Err(AtlasError::Embedding(format!(
                    "{}: output {:?} is {other:?}, expected token embeddings [batch, sequence, dimension]",
                    model_path.display(),
                    output.name()
                )));
            }
        };
        if dimension != spec.dimension {
            return Err(AtlasError::Embedding(format!(
                "{}: the model produces {dimension} dimensions but models/manifest.toml says {} for {}",
                model_path.display(),
                spec.dimension,
                spec.name
            )));
        }
        let output = output.name().to_owned();
        Ok(OnnxEmbedder {
            inner: Arc::new(Inner {
                uses_token_type_ids: input_names.iter().any(|n| n == "token_type_ids"),
                session: Mutex::new(session),
                queries_waiting: Mutex::new(0),
                queries_served: Condvar::new(),
                tokenizer,
                model: EmbeddingModel { name: options.model.clone(), dimension },
                output,
                batch_size: options.batch_size.max(1),
            }),
        })
    }

    /// Embeds synchronously on the calling thread.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.inner.embed(texts)
    }
}

fn load_tokenizer(path: &PathBuf, max_length: usize) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| AtlasError::Embedding(format!("{}: not a usable tokenizer.json: {e}", path.display())))?;
    // The shipped tokenizer.json truncates at 128 and pads every text to 128; batches are padded
    // here instead, to their own longest text.
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|e| AtlasError::Embedding(format!("{}: cannot set truncation: {e}", path.display())))?;
    Ok(tokenizer)
}

fn build_session(
    environment: &ort::environment::Environment,
    path: &PathBuf,
    options: &OnnxOptions,
) -> Result<Session> {
    if !path.is_file() {
        return Err(AtlasError::Embedding(format!("{}: model file not found", path.display())));
    }
    let shown = path.display().to_string();
    let builder_error = |e: ort::Error<ort::session::builder::SessionBuilder>| {
        AtlasError::Embedding(format!("{shown}: cannot configure the session: {e}"))
    };
    let mut builder = Session::builder(environment)
        .map_err(ort_error("cannot create an ONNX Runtime session"))?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(builder_error)?
        .with_intra_threads(options.threads.max(1))
        .map_err(builder_error)?
        .with_inter_threads(1)
        .map_err(builder_error)?
        .with_intra_op_spinning(options.spinning)
        .map_err(builder_error)?;
    builder = with_cuda(builder, options.cuda)?;
    builder
        .commit_from_file(path)
        .map_err(|e| AtlasError::Embedding(format!("{shown}: not a loadable ONNX model: {e}")))
}

#[cfg(feature = "cuda")]
fn with_cuda(
    builder: ort::session::builder::SessionBuilder,
    cuda: bool,
) -> Result<ort::session::builder::SessionBuilder> {
    if !cuda {
        return Ok(builder);
    }
    let provider = ort::ep::CUDA::default().build().error_on_failure();
    match builder.clone().with_execution_providers([provider]) {
        Ok(with_gpu) => {
            tracing::info!("embedding on the CUDA execution provider");
            Ok(with_gpu)
        }
        Err(e) => {
            tracing::warn!("CUDA execution provider unavailable ({e}); embedding on the CPU");
            Ok(builder)
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn with_cuda(
    builder: ort::session::builder::SessionBuilder,
    cuda: bool,
) -> Result<ort::session::builder::SessionBuilder> {
    if cuda {
        tracing::warn!("CUDA requested but atlas was built without the embed-cuda feature; embedding on the CPU");
    }
    Ok(builder)
}

impl Inner {
    /// Embeds one query ahead of any background batch.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let encoding =
            self.tokenizer.encode(text, true).map_err(|e| AtlasError::Embedding(format!("tokenizer: {e}")))?;
        *self.queries_waiting.lock().map_err(|_| poisoned())? += 1;
        let session = self.session.lock();
        *self.queries_waiting.lock().map_err(|_| poisoned())? -= 1;
        self.queries_served.notify_all();
        let prepared = self.prepare(&[&encoding]);
        let mut session = session.map_err(|_| poisoned())?;
        let mut vectors = self.run_prepared(&mut session, prepared?)?;
        vectors.pop().ok_or_else(|| AtlasError::Embedding("no vector for the query".into()))
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let encodings = texts
            .iter()
            .map(|t| self.tokenizer.encode(t.as_str(), true))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| AtlasError::Embedding(format!("tokenizer: {e}")))?;
        // Similar lengths together: each sub-batch is padded only to its own longest text.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.batch_size) {
            let batch: Vec<&tokenizers::Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            for (&i, vector) in chunk.iter().zip(self.run(&batch)?) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// A background sub-batch: prepared first, then run once no query is waiting.
    fn run(&self, batch: &[&tokenizers::Encoding]) -> Result<Vec<Vec<f32>>> {
        let prepared = self.prepare(batch)?;
        // Waiting queries go first; the timeout only guards against a lost wake-up.
        let mut waiting = self.queries_waiting.lock().map_err(|_| poisoned())?;
        while *waiting > 0 {
            waiting = self.queries_served.wait_timeout(waiting, Duration::from_millis(5)).map_err(|_| poisoned())?.0;
        }
        drop(waiting);
        let mut session = self.session.lock().map_err(|_| poisoned())?;
        self.run_prepared(&mut session, prepared)
    }

    /// The model's inputs for a batch, padded to its longest text.
    fn prepare(&self, batch: &[&tokenizers::Encoding]) -> Result<Prepared> {
        let rows = batch.len();
        let width = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0i64; rows * width];
        let mut mask = vec![0i64; rows * width];
        let mut types = vec![0i64; rows * width];
        for (r, e) in batch.iter().enumerate() {
            for (c, ((id, m), t)) in e.get_ids().iter().zip(e.get_attention_mask()).zip(e.get_type_ids()).enumerate() {
                ids[r * width + c] = i64::from(*id);
                mask[r * width + c] = i64::from(*m);
                types[r * width + c] = i64::from(*t);
            }
        }
        let tensor = |data: Vec<i64>| Tensor::from_array(([rows, width], data)).map_err(ort_error("input tensor"));
        let mut inputs = vec![("input_ids", tensor(ids)?), ("attention_mask", tensor(mask.clone())?)];
        if self.uses_token_type_ids {
            inputs.push(("token_type_ids", tensor(types)?));
        }
        Ok(Prepared { inputs, mask, rows, width })
    }

    fn run_prepared(&self, session: &mut Session, prepared: Prepared) -> Result<Vec<Vec<f32>>> {
        let Prepared { inputs, mask, rows, width } = prepared;
        let outputs = session.run(inputs).map_err(ort_error("inference"))?;
        let (shape, hidden) =
            outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(ort_error("output tensor"))?;
        let dim = self.model.dimension;
        if shape.len() != 3 || shape[0] as usize != rows || shape[1] as usize != width || shape[2] as usize != dim {
            return Err(AtlasError::Embedding(format!(
                "unexpected output shape {:?} for a batch of {rows}×{width}",
                &shape[..]
            )));
        }
        Ok((0..rows)
            .map(|r| {
                mean_pool_normalized(
                    &hidden[r * width * dim..(r + 1) * width * dim],
                    &mask[r * width..(r + 1) * width],
                    dim,
                )
            })
            .collect())
    }
}

/// A batch's model inputs and its attention mask (for pooling).
struct Prepared {
    inputs: Vec<(&'static str, Tensor<i64>)>,
    mask: Vec<i64>,
    rows: usize,
    width: usize,
}

fn poisoned() -> AtlasError {
    AtlasError::Embedding("the session lock is poisoned".into())
}

/// Mean of the token vectors the mask keeps, scaled to unit length.
fn mean_pool_normalized(hidden: &[f32], mask: &[i64], dim: usize) -> Vec<f32> {
    let mut sum = vec![0f32; dim];
    let mut count = 0f32;
    for (token, &m) in hidden.chunks_exact(dim).zip(mask) {
        if m != 0 {
            sum.iter_mut().zip(token).for_each(|(s, x)| *s += x);
            count += 1.0;
        }
    }
    let count = count.max(1.0);
    sum.iter_mut().for_each(|s| *s /= count);
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    sum.iter_mut().for_each(|s| *s /= norm);
    sum
}

#[async_trait]
impl Embedder for OnnxEmbedder {
    fn model(&self) -> EmbeddingModel {
        self.inner.model.clone()
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.embed(&texts))
            .await
            .map_err(|e| AtlasError::Embedding(format!("embedding task failed: {e}")))?
    }

    async fn embed_query(&self, text: String) -> Result<Vec<f32>> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.embed_query(&text))
            .await
            .map_err(|e| AtlasError::Embedding(format!("embedding task failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_ignores_padding_and_normalises() {
        let hidden = [1.0, 0.0, 3.0, 0.0, 100.0, 100.0];
        let v = mean_pool_normalized(&hidden, &[1, 1, 0], 2);
        assert!((v[0] - 1.0).abs() < 1e-6 && v[1].abs() < 1e-6, "{v:?}");
    }
}
