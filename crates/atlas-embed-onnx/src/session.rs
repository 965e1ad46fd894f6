//! The ONNX Runtime session of a model: built with the options (threads, spinning, CUDA when
//! asked and compiled in), and the output its vectors come from.

use atlas_domain::{AtlasError, Result};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::ValueType;
use std::path::PathBuf;

/// Names what failed in an error of ort's.
pub(crate) fn ort_error(what: &str) -> impl Fn(ort::Error) -> AtlasError + '_ {
    move |e| AtlasError::Embedding(format!("{what}: {e}"))
}

/// A session on `threads` intra-op threads (busy-waiting between ops when `spinning`), on the
/// CUDA execution provider first when `cuda` is asked and compiled in.
pub(crate) fn build_session(
    environment: &ort::environment::Environment,
    path: &PathBuf,
    threads: usize,
    spinning: bool,
    cuda: bool,
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
        .with_intra_threads(threads.max(1))
        .map_err(builder_error)?
        .with_inter_threads(1)
        .map_err(builder_error)?
        .with_intra_op_spinning(spinning)
        .map_err(builder_error)?
        // Every batch has its own shape (texts are cut by length): a memory pattern planned
        // for one shape is never reused, and an arena keeps the largest shape's blocks for the
        // life of the process. Plain allocations give them back after each run.
        .with_memory_pattern(false)
        .map_err(builder_error)?
        .with_execution_providers([ort::ep::CPU::default().with_arena_allocator(false).build()])
        .map_err(builder_error)?;
    builder = with_cuda(builder, cuda)?;
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

/// The output the vectors come from.
pub(crate) struct ChosenOutput {
    pub name: String,
    /// One vector per text already ([batch, dimension]) rather than per token.
    pub pooled: bool,
    /// `None` when the graph leaves it open.
    pub dimension: Option<usize>,
}

/// The token vectors ([batch, sequence, dimension]: `last_hidden_state` or `token_embeddings`
/// by preference, else the first such output), else an already pooled [batch, dimension]
/// output (`sentence_embedding`).
pub(crate) fn choose_output(session: &Session, path: &std::path::Path) -> Result<ChosenOutput> {
    let outputs: Vec<(String, Vec<i64>)> = session
        .outputs()
        .iter()
        .filter_map(|o| match o.dtype() {
            ValueType::Tensor { shape, .. } => Some((o.name().to_owned(), shape.iter().copied().collect())),
            _ => None,
        })
        .collect();
    let rank = |r: usize| outputs.iter().filter(move |(_, shape)| shape.len() == r);
    let preferred = ["last_hidden_state", "token_embeddings"];
    let tokens =
        rank(3).find(|(name, _)| preferred.contains(&name.as_str())).or_else(|| rank(3).next()).map(|o| (o, false));
    let chosen = tokens.or_else(|| rank(2).next().map(|o| (o, true)));
    let Some(((name, shape), pooled)) = chosen else {
        let shown: Vec<String> = outputs.iter().map(|(n, s)| format!("{n} {s:?}")).collect();
        return Err(AtlasError::Embedding(format!(
            "{}: no output of token vectors [batch, sequence, dimension] nor of text vectors [batch, dimension] \
             (outputs: {})",
            path.display(),
            shown.join(", ")
        )));
    };
    let last = shape.last().copied().unwrap_or(-1);
    Ok(ChosenOutput { name: name.clone(), pooled, dimension: (last > 0).then_some(last as usize) })
}
