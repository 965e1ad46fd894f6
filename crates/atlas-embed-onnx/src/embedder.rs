//! `OnnxEmbedder`: loads the session and tokenizer once and embeds batches.

use crate::assets;
use crate::folder::{self, ModelSettings};
use crate::manifest::Manifest;
use crate::pooling::{Pooling, matryoshka_cut, normalize};
use crate::session::{build_session, choose_output, ort_error};
use async_trait::async_trait;
use atlas_domain::ports::{Embedder, EmbeddingModel};
use atlas_domain::{AtlasError, Result};
use ort::session::Session;
use ort::value::Tensor;
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
    /// A Matryoshka model's vectors cut to this width (one the manifest lists for it);
    /// `None` keeps the full width.
    pub dimensions: Option<usize>,
    /// Intra-op threads of ONNX Runtime.
    pub threads: usize,
    /// Texts per model call at most; a larger request is cut into sub-batches of similar
    /// length, each also bounded by [`ATTENTION_BUDGET`] and [`TOKEN_BUDGET`] (long texts go a
    /// few at a time).
    pub batch_size: usize,
    /// Busy-wait between ops: faster on an idle machine, much slower under CPU contention.
    pub spinning: bool,
    /// Try the CUDA execution provider first (needs the `cuda` feature).
    pub cuda: bool,
    /// A model folder of one's own ([`folder`]) instead of a manifest model: `model` is then
    /// not used, and the space records the folder's identity.
    pub model_dir: Option<PathBuf>,
    /// A directory holding the manifest model's files instead of the cache; they are verified
    /// against the manifest's sha256 all the same, and never fetched.
    pub files_dir: Option<PathBuf>,
}

impl Default for OnnxOptions {
    fn default() -> Self {
        OnnxOptions {
            // The manifest is compiled in and checked by its own test; an unreadable one names
            // no model, and loading then says which models the manifest lists.
            model: Manifest::builtin().map(|m| m.default_model().name.clone()).unwrap_or_default(),
            max_length: None,
            dimensions: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            batch_size: 32,
            spinning: false,
            cuda: false,
            model_dir: None,
            files_dir: None,
        }
    }
}

/// The most attention cells (rows × width², width the sub-batch's longest text in tokens) one
/// model call may hold: the attention scores of a layer take 12 heads × 4 bytes per cell, so
/// this bounds them at about 6 MB whatever the mix of lengths: 32 texts of 64 tokens, 8 of 128
/// or 2 of 256. With the per-token model a text's vector does not depend on its sub-batch, so
/// the bound changes no vector, only memory.
pub const ATTENTION_BUDGET: usize = 32 * 64 * 64;

/// The most tokens (rows × width) one model call may hold: the feed-forward layers' activations
/// take 1,536 floats per token, several alive at once, so 2,048 tokens (32 texts of 64) held
/// 60 MB of a 107 MB heap (heaptrack). At 512 a process embedding 10,000 mixed texts peaked at
/// 125 MB against 158 at 1,024, and took 141 s against 167 (one after the other; why it is
/// faster was not measured). Like the attention budget it changes no vector.
pub const TOKEN_BUDGET: usize = 512;

/// Hands the pages ONNX Runtime freed back to the system. Every sub-batch has its own shape, so
/// glibc's heap fills with freed blocks of past shapes that no later one fits, and a process
/// embedding a mix of lengths grew to 250 MB holding 90 MB of live data; trimming after each
/// model call keeps it near what the largest call needs. About a millisecond, against a call's
/// tens. Elsewhere the allocator is left as it is.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's own locks; it only returns free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of a text the tokenizer is given at most: a window of `max_length` tokens never needs
/// more than this many bytes of ordinary text (WordPiece reads words of up to 100 characters
/// as one token), and a megabyte-long memory is not tokenised whole to keep its first 256
/// tokens. Cut at a character boundary; deterministic, so a vector stays a function of its text.
fn tokenizer_input(text: &str, max_length: usize) -> &str {
    let limit = max_length.saturating_mul(128);
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Consecutive runs of `order` (ids sorted by length, `lengths` in tokens) that each fit
/// `batch_size` texts, [`ATTENTION_BUDGET`] and [`TOKEN_BUDGET`].
fn sub_batches(order: &[usize], lengths: &[usize], batch_size: usize) -> Vec<std::ops::Range<usize>> {
    let mut batches = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        let mut width = lengths[order[start]].max(1);
        while end < order.len() && end - start < batch_size {
            let wider = width.max(lengths[order[end]]);
            let rows = end - start + 1;
            if rows * wider * wider > ATTENTION_BUDGET || rows * wider > TOKEN_BUDGET {
                break;
            }
            width = wider;
            end += 1;
        }
        batches.push(start..end);
        start = end;
    }
    batches
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
    /// The output is one vector per text already (a `sentence_embedding` output): no pooling.
    pooled_output: bool,
    pooling: Pooling,
    query_prefix: String,
    document_prefix: String,
    batch_size: usize,
    max_length: usize,
    /// The width of the graph's vectors; `model.dimension` is narrower when they are cut
    /// (Matryoshka).
    graph_dimension: usize,
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

impl OnnxEmbedder {
    /// Loads (fetching when missing and allowed) and verifies the files, then builds the
    /// session. Blocking: call it off the async executor.
    pub fn load(options: &OnnxOptions) -> Result<Self> {
        let manifest = Manifest::builtin()?;
        let (model_path, tokenizer_path, settings, name, stated_dimension) = match &options.model_dir {
            Some(dir) => {
                if let Some(width) = options.dimensions {
                    return Err(AtlasError::Config(format!(
                        "[onnx] dimensions = {width}: a model folder's vectors are not cut (only a manifest model \
                         trained Matryoshka-style is); {} gives its own width",
                        dir.display()
                    )));
                }
                let folder = folder::read(dir)?;
                (folder.model, folder.tokenizer, folder.settings, folder.identity, None)
            }
            None => {
                let spec = manifest.model(&options.model)?;
                if let Some(width) = options.dimensions {
                    spec.check_width(width)?;
                }
                let files = options.files_dir.as_deref();
                let settings = ModelSettings {
                    pooling: spec.pooling,
                    max_length: spec.max_length,
                    query_prefix: spec.query_prefix.clone(),
                    document_prefix: spec.document_prefix.clone(),
                };
                let model = assets::model_file(spec, "model.onnx", files)?;
                let tokenizer = assets::model_file(spec, "tokenizer.json", files)?;
                (model, tokenizer, settings, spec.name.clone(), Some(spec.dimension))
            }
        };
        let environment = environment(&manifest, options.cuda)?;
        let max_length = options.max_length.unwrap_or(settings.max_length);
        let tokenizer = load_tokenizer(&tokenizer_path, max_length)?;
        let session = build_session(environment, &model_path, options.threads, options.spinning, options.cuda)?;
        let input_names: Vec<String> = session.inputs().iter().map(|i| i.name().to_owned()).collect();
        for required in ["input_ids", "attention_mask"] {
            if !input_names.iter().any(|n| n == required) {
                return Err(AtlasError::Embedding(format!(
                    "{}: the model has no input {required:?} (inputs: {input_names:?})",
                    model_path.display()
                )));
            }
        }
        let output = choose_output(&session, &model_path)?;
        let mut inner = Inner {
            uses_token_type_ids: input_names.iter().any(|n| n == "token_type_ids"),
            session: Mutex::new(session),
            queries_waiting: Mutex::new(0),
            queries_served: Condvar::new(),
            tokenizer,
            model: EmbeddingModel { name, dimension: output.dimension.unwrap_or(0) },
            output: output.name,
            pooled_output: output.pooled,
            pooling: settings.pooling,
            query_prefix: settings.query_prefix,
            document_prefix: settings.document_prefix,
            batch_size: options.batch_size.max(1),
            max_length,
            graph_dimension: output.dimension.unwrap_or(0),
        };
        if output.dimension.is_none() {
            // A dimension the graph leaves open is learnt from one text.
            inner.model.dimension = inner.probe_dimension()?;
            inner.graph_dimension = inner.model.dimension;
        }
        if let Some(stated) = stated_dimension
            && stated != inner.model.dimension
        {
            return Err(AtlasError::Embedding(format!(
                "{}: the model produces {} dimensions but models/manifest.toml says {stated} for {}",
                model_path.display(),
                inner.model.dimension,
                inner.model.name
            )));
        }
        if let Some(width) = options.dimensions.filter(|&w| w < inner.model.dimension) {
            // The space records the cut width: a space embedded at 256 refuses 768-wide vectors.
            inner.model.dimension = width;
        }
        Ok(OnnxEmbedder { inner: Arc::new(inner) })
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

impl Inner {
    /// Embeds one query ahead of any background batch.
    /// A text's tokens, truncated to the window; what falls outside is not kept.
    fn encode(&self, prefix: &str, text: &str) -> Result<tokenizers::Encoding> {
        let prefixed;
        let text = if prefix.is_empty() {
            text
        } else {
            prefixed = format!("{prefix}{text}");
            &prefixed
        };
        let mut encoding = self
            .tokenizer
            .encode(tokenizer_input(text, self.max_length), true)
            .map_err(|e| AtlasError::Embedding(format!("tokenizer: {e}")))?;
        drop(encoding.take_overflowing());
        Ok(encoding)
    }

    /// The dimension of the model's vectors, from one text.
    fn probe_dimension(&self) -> Result<usize> {
        let encoding = self.encode("", "dimension")?;
        let prepared = self.prepare(&[&encoding])?;
        let mut session = self.session.lock().map_err(|_| poisoned())?;
        let outputs = session.run(prepared.inputs).map_err(ort_error("inference"))?;
        let (shape, _) =
            outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(ort_error("output tensor"))?;
        match shape.last() {
            Some(&d) if d > 0 => Ok(d as usize),
            _ => Err(AtlasError::Embedding(format!("the model's output has the shape {:?}", &shape[..]))),
        }
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let encoding = self.encode(&self.query_prefix, text)?;
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
        let encodings = texts.iter().map(|t| self.encode(&self.document_prefix, t)).collect::<Result<Vec<_>>>()?;
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        // Similar lengths together: each sub-batch is padded only to its own longest text.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| lengths[i]);
        let mut out = vec![Vec::new(); texts.len()];
        for range in sub_batches(&order, &lengths, self.batch_size) {
            let chunk = &order[range];
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
        let vectors = self.run_prepared(&mut session, prepared);
        drop(session);
        release_freed_memory();
        vectors
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
        let dim = self.graph_dimension;
        let expected: &[i64] =
            if self.pooled_output { &[rows as i64, dim as i64] } else { &[rows as i64, width as i64, dim as i64] };
        if shape[..] != *expected {
            return Err(AtlasError::Embedding(format!(
                "unexpected output shape {:?} for a batch of {rows}×{width} (expected {expected:?})",
                &shape[..]
            )));
        }
        let vectors: Vec<Vec<f32>> = if self.pooled_output {
            hidden
                .chunks_exact(dim)
                .map(|row| {
                    let mut vector = row.to_vec();
                    normalize(&mut vector);
                    vector
                })
                .collect()
        } else {
            (0..rows)
                .map(|r| {
                    self.pooling.pool(
                        &hidden[r * width * dim..(r + 1) * width * dim],
                        &mask[r * width..(r + 1) * width],
                        dim,
                    )
                })
                .collect()
        };
        let width = self.model.dimension;
        Ok(if width < dim { vectors.iter().map(|v| matryoshka_cut(v, width)).collect() } else { vectors })
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

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Sub-batches cover the order once, in order, each within the text count and the
        /// attention budget (a single text wider than the budget goes alone).
        #[test]
        fn sub_batches_cover_everything_within_the_bounds(
            mut lengths in proptest::collection::vec(0usize..300, 0..200),
            batch_size in 1usize..64,
        ) {
            lengths.sort_unstable();
            let order: Vec<usize> = (0..lengths.len()).collect();
            let batches = sub_batches(&order, &lengths, batch_size);
            let mut next = 0;
            for range in batches {
                prop_assert_eq!(range.start, next);
                prop_assert!(!range.is_empty() && range.len() <= batch_size);
                let width = range.clone().map(|i| lengths[i].max(1)).max().unwrap();
                prop_assert!(range.len() == 1 || range.len() * width * width <= ATTENTION_BUDGET);
                prop_assert!(range.len() == 1 || range.len() * width <= TOKEN_BUDGET);
                next = range.end;
            }
            prop_assert_eq!(next, lengths.len());
        }

        /// The tokenizer's input is a prefix of the text, cut at a character boundary, and the
        /// whole text when it is short enough.
        #[test]
        fn the_tokenizer_gets_a_prefix_cut_at_a_character(text in ".{0,300}", max_length in 0usize..3) {
            let cut = tokenizer_input(&text, max_length);
            prop_assert!(text.starts_with(cut));
            prop_assert!(cut.len() <= max_length * 128);
            if text.len() <= max_length * 128 {
                prop_assert_eq!(cut, text.as_str());
            }
        }
    }
}
