//! `cargo xtask bench embed`: the ONNX embedder beside Python's onnxruntime + tokenizers on the
//! same model files, threads, batches and sentences, in one run.

use crate::peak_rss;
use anyhow::{Context, Result, bail};
use atlas_embed_onnx::{OnnxEmbedder, OnnxOptions, assets, manifest::Manifest};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const WORDS: &[&str] = &[
    "the",
    "a",
    "we",
    "I",
    "you",
    "they",
    "my",
    "our",
    "team",
    "project",
    "meeting",
    "deadline",
    "dog",
    "trip",
    "Lisbon",
    "coffee",
    "report",
    "bug",
    "release",
    "friday",
    "yesterday",
    "tomorrow",
    "moved",
    "finished",
    "started",
    "painted",
    "booked",
    "called",
    "decided",
    "about",
    "with",
    "after",
    "before",
    "because",
    "new",
    "old",
    "big",
    "small",
    "garden",
    "kitchen",
    "budget",
    "review",
    "school",
    "music",
    "lesson",
    "violin",
    "race",
    "training",
    "knee",
    "doctor",
    "sister",
    "brother",
    "parents",
    "weekend",
    "holiday",
    "beach",
    "mountain",
    "dinner",
    "recipe",
    "and",
    "but",
    "so",
    "really",
    "very",
    "still",
    "again",
    "finally",
    "maybe",
    "think",
    "want",
    "need",
    "like",
];

/// Deterministic English-like sentences of 6 to 28 words.
pub fn sentences(n: usize) -> Vec<String> {
    let mut rng = crate::rng::Xorshift::new(0x2545_F491_4F6C_DD1D);
    (0..n)
        .map(|_| {
            let len = 6 + rng.below(23);
            let words: Vec<&str> = (0..len).map(|_| WORDS[rng.below(WORDS.len())]).collect();
            format!("{}.", words.join(" "))
        })
        .collect()
}

struct Figures {
    p50_ms: f64,
    p95_ms: f64,
    batch32_per_s: f64,
}

fn rust_figures(model: &str, threads: usize, spinning: bool, texts: &[String]) -> Result<(Figures, f64)> {
    let embedder =
        OnnxEmbedder::load(&OnnxOptions { model: model.into(), threads, spinning, ..OnnxOptions::default() })?;
    for t in &texts[..20] {
        embedder.embed_blocking(std::slice::from_ref(t))?;
    }
    let mut single: Vec<f64> = texts[..200]
        .iter()
        .map(|t| {
            let started = Instant::now();
            embedder.embed_blocking(std::slice::from_ref(t)).map(|_| started.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<Result<_, _>>()?;
    single.sort_by(f64::total_cmp);
    let started = Instant::now();
    for batch in texts[..640].chunks(32) {
        embedder.embed_blocking(batch)?;
    }
    let batch32_per_s = 640.0 / started.elapsed().as_secs_f64();
    // The same 640 in one call: sorted by length across the whole set, then cut into 32s.
    let started = Instant::now();
    embedder.embed_blocking(&texts[..640])?;
    let bucketed_per_s = 640.0 / started.elapsed().as_secs_f64();
    let p = |q: f64| single[((single.len() - 1) as f64 * q).round() as usize];
    Ok((Figures { p50_ms: p(0.5), p95_ms: p(0.95), batch32_per_s }, bucketed_per_s))
}

/// A virtualenv in the cache with Python's onnxruntime and tokenizers, for the baseline.
fn python_env() -> Result<PathBuf> {
    let manifest = Manifest::builtin()?;
    Ok(atlas_embed_onnx::assets::python_venv(
        "bench-pyenv",
        "onnxruntime, tokenizers, numpy",
        &[&manifest.runtime.package, "tokenizers", "numpy"],
    )?)
}

fn python_figures(
    python: &Path,
    sentences_file: &Path,
    model_dir: &Path,
    threads: usize,
    spinning: bool,
) -> Result<Figures> {
    let script = crate::root().join("xtask/scripts/bench_embed.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(sentences_file)
        .arg(model_dir)
        .arg(threads.to_string())
        .arg(if spinning { "1" } else { "0" })
        .output()?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bench_embed.py output")?;
    let f = |k: &str| v[k].as_f64().with_context(|| format!("bench_embed.py: no {k}"));
    Ok(Figures { p50_ms: f("p50_ms")?, p95_ms: f("p95_ms")?, batch32_per_s: f("batch32_per_s")? })
}

/// Peak resident memory of a command, in MB, from GNU time.
/// The default model, and the model it is made from (the baseline of the same run).
fn models(manifest: &Manifest) -> Vec<String> {
    let default = manifest.default_model();
    let mut names = vec![default.name.clone()];
    names.extend(default.files.iter().filter_map(|f| f.derive.as_ref()).map(|d| d.from_model.clone()));
    names.dedup();
    names
}

pub fn run(rss_sentences: usize) -> Result<()> {
    crate::fetch_models()?;
    let atlas = crate::atlas_binary()?;
    let manifest = Manifest::builtin()?;
    let texts = sentences(rss_sentences.max(640));
    let dir = tempfile::tempdir()?;
    let sentences_file = dir.path().join("sentences.json");
    std::fs::write(&sentences_file, serde_json::to_string(&texts[..640])?)?;
    let python = python_env()?;

    println!(
        "| model | threads | spinning | Rust p50 (ms) | Rust p95 (ms) | Python p50 (ms) | p50 Python / Rust | Rust batch-32 (sent/s) | Python batch-32 (sent/s) | throughput Rust / Python | Rust 640 length-bucketed (sent/s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for model in models(&manifest) {
        let model_dir = assets::model_dir(manifest.model(&model)?);
        for (threads, spinning) in [(1, false), (2, false), (2, true)] {
            let (rust, bucketed) = rust_figures(&model, threads, spinning, &texts)?;
            let py = python_figures(&python, &sentences_file, &model_dir, threads, spinning)?;
            println!(
                "| {model} | {threads} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} |",
                if spinning { "on" } else { "off" },
                rust.p50_ms,
                rust.p95_ms,
                py.p50_ms,
                py.p50_ms / rust.p50_ms,
                rust.batch32_per_s,
                py.batch32_per_s,
                rust.batch32_per_s / py.batch32_per_s,
                bucketed
            );
        }
    }

    let jsonl = dir.path().join("rss.jsonl");
    let lines: String = texts[..rss_sentences]
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{}\n", serde_json::json!({"id": i, "text": t})))
        .collect();
    std::fs::write(&jsonl, lines)?;
    let all_file = dir.path().join("all.json");
    std::fs::write(&all_file, serde_json::to_string(&texts[..rss_sentences])?)?;
    println!();
    println!("| model | process embedding {rss_sentences} sentences | peak RSS (MB) |");
    println!("|---|---|---|");
    for model in models(&manifest) {
        let model_dir = assets::model_dir(manifest.model(&model)?);
        let config = dir.path().join("model.toml");
        std::fs::write(&config, format!("[onnx]\nmodel = {model:?}\n"))?;
        let rust_rss = peak_rss::run(
            peak_rss::command(&atlas)
                .args(["--db", "/nonexistent/unused.db", "--config"])
                .arg(&config)
                .args(["embed", "--json", "--batch"])
                .arg(&jsonl)
                .env("ATLAS_EMBED_THREADS", "2")
                .stdout(std::process::Stdio::null()),
        )?
        .peak_rss_mb;
        let py_rss = peak_rss::run(
            peak_rss::command(&python)
                .arg(crate::root().join("xtask/scripts/bench_embed.py"))
                .arg(&all_file)
                .arg(&model_dir)
                .args(["2", "0", "--rss-only"]),
        )?
        .peak_rss_mb;
        println!("| {model} | atlas embed --batch (Rust) | {rust_rss:.0} |");
        println!("| {model} | Python onnxruntime + tokenizers | {py_rss:.0} |");
        println!("| {model} | ratio Rust / Python | {:.2} |", rust_rss / py_rss);
    }
    Ok(())
}
