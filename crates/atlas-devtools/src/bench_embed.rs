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
    let script = crate::root().join("crates/atlas-devtools/scripts/bench_embed.py");
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

/// Up to `limit` real texts: every LoCoMo dev turn and BEAM dev message, then the paragraphs of
/// BEAM's long messages (real text of every length: the mix a user's space holds).
fn real_turns(data: &Path, limit: usize) -> Result<Vec<String>> {
    let read = |path: &Path| -> Result<serde_json::Value> {
        Ok(serde_json::from_str(&std::fs::read_to_string(path).with_context(|| path.display().to_string())?)?)
    };
    let mut texts = Vec::new();
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(data.join("locomo-dev"))?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let conversation = read(file)?;
        for (key, session) in conversation.as_object().into_iter().flatten() {
            if key.starts_with("session_") && !key.ends_with("date_time") {
                let turns = session.as_array().into_iter().flatten();
                texts.extend(turns.filter_map(|t| t["text"].as_str()).map(str::to_owned));
            }
        }
    }
    let mut paragraphs = Vec::new();
    for chat in 1..=10 {
        let file = data.join(format!("beam-dev/chats/100K/{chat}/chat.json"));
        if !file.is_file() {
            continue;
        }
        for batch in read(&file)?.as_array().into_iter().flatten() {
            for turn in batch["turns"].as_array().into_iter().flatten() {
                for message in turn.as_array().into_iter().flatten() {
                    let Some(text) = message["content"].as_str() else { continue };
                    texts.push(text.to_owned());
                    if text.len() > 2_000 {
                        paragraphs.extend(text.split("\n\n").filter(|p| p.len() > 40).map(str::to_owned));
                    }
                }
            }
        }
    }
    texts.extend(paragraphs);
    texts.truncate(limit);
    Ok(texts)
}

/// Each text's vector by `model` in batches of 32, in the order given by `order`.
fn embedded_in_order(embedder: &OnnxEmbedder, texts: &[String], order: &[usize]) -> Result<Vec<Vec<f32>>> {
    let mut out = vec![Vec::new(); texts.len()];
    for chunk in order.chunks(32) {
        let batch: Vec<String> = chunk.iter().map(|&i| texts[i].clone()).collect();
        for (&i, vector) in chunk.iter().zip(embedder.embed_blocking(&batch)?) {
            out[i] = vector;
        }
    }
    Ok(out)
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs() as f64)).fold(0.0, f64::max)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(p, q)| *p as f64 * *q as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|x| *x as f64 * *x as f64).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(1e-12)
}

/// A vector is a function of its text: each model embeds the real turns in batches of 32 in
/// their order, in a shuffled order, and (the first 200) alone; the vectors are compared with
/// each other and with the float-kernel model's, and the in-order pass is timed.
fn fidelity(manifest: &Manifest, texts: &[String]) -> Result<()> {
    let default = manifest.default_model().name.clone();
    let float = models(manifest).last().cloned().unwrap_or_else(|| default.clone());
    // The default before 2026-11-26 (one activation scale per call), when the manifest has it.
    let previous = "all-minilm-l6-v2-qint8".to_owned();
    let mut names = vec![previous.clone(), default.clone()];
    names.retain(|n| manifest.model(n).is_ok());
    names.push(float.clone());
    names.dedup();
    let mut order: Vec<usize> = (0..texts.len()).collect();
    let mut rng = crate::rng::Xorshift::new(0x5EED);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let in_order: Vec<usize> = (0..texts.len()).collect();
    let load =
        |name: &str| OnnxEmbedder::load(&OnnxOptions { model: name.into(), threads: 2, ..OnnxOptions::default() });
    let reference = embedded_in_order(&load(&float)?, texts, &in_order)?;
    let alone_n = texts.len().min(200);
    println!();
    println!("{} real turns (LoCoMo dev, BEAM dev, BEAM paragraphs), batches of 32:", texts.len());
    println!();
    println!(
        "| model | max \\|diff\\| in order vs shuffled | max \\|diff\\| alone vs batched ({alone_n}) | cosine to {float}: min | mean | texts/s | throughput / {} |",
        names[0]
    );
    println!("|---|---|---|---|---|---|---|");
    let mut baseline = None;
    for name in &names {
        let embedder = load(name)?;
        embedder.embed_blocking(&texts[..texts.len().min(32)])?;
        let started = Instant::now();
        let ordered = embedded_in_order(&embedder, texts, &in_order)?;
        let per_s = texts.len() as f64 / started.elapsed().as_secs_f64();
        let shuffled = embedded_in_order(&embedder, texts, &order)?;
        let alone: Vec<Vec<f32>> = texts[..alone_n]
            .iter()
            .map(|t| embedder.embed_blocking(std::slice::from_ref(t)).map(|mut v| v.remove(0)))
            .collect::<Result<_, _>>()?;
        let cosines: Vec<f64> = ordered.iter().zip(&reference).map(|(a, b)| cosine(a, b)).collect();
        let baseline_per_s = *baseline.get_or_insert(per_s);
        println!(
            "| {name} | {:.1e} | {:.1e} | {:.4} | {:.4} | {per_s:.0} | {:.2} |",
            max_abs_diff(&ordered, &shuffled),
            max_abs_diff(&ordered[..alone_n], &alone),
            cosines.iter().copied().fold(f64::INFINITY, f64::min),
            cosines.iter().sum::<f64>() / cosines.len().max(1) as f64,
            per_s / baseline_per_s
        );
    }
    Ok(())
}

pub fn run(rss_sentences: usize, turns: usize, data: &Path) -> Result<()> {
    crate::fetch_embedding_models()?;
    let atlas = crate::atlas_binary()?;
    let manifest = Manifest::builtin()?;
    let data = if data.is_absolute() { data.to_owned() } else { crate::root().join(data) };
    let real = if data.join("locomo-dev").is_dir() {
        real_turns(&data, turns.max(1))?
    } else {
        eprintln!(
            "SKIPPED: no real turns in {} (locomo-dev/, beam-dev/): the fidelity table and the mixed-length \
             memory run use synthetic sentences only",
            data.display()
        );
        Vec::new()
    };
    if turns > 0 && !real.is_empty() {
        fidelity(&manifest, &real)?;
        println!();
    }
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

    // The memory runs embed the mix a space holds: real turns of every length (long BEAM
    // answers, short replies) and, every 50th, an empty text; synthetic sentences only when
    // no real turns are at hand.
    let mixed: Vec<String> = if real.is_empty() {
        texts[..rss_sentences].to_vec()
    } else {
        (0..rss_sentences).map(|i| if i % 50 == 49 { String::new() } else { real[i % real.len()].clone() }).collect()
    };
    let texts = mixed;
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
    let what = if real.is_empty() { "sentences" } else { "mixed real texts (every 50th empty)" };
    println!("| model | process embedding {rss_sentences} {what} | peak RSS (MB) |");
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
                .arg(crate::root().join("crates/atlas-devtools/scripts/bench_embed.py"))
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
