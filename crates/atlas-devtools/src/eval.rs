//! `cargo xtask eval`: recall on the three benchmarks in one command (LoCoMo dev, BEAM dev and
//! LongMemEval_S dev, through their harnesses in `../shared/eval/`; BEAM at 100K and 500K tokens
//! a chat, 1M with `--beam-sizes`), with BM25 floors for each computed in the same run, printed
//! as one table, so every recall change is judged on every benchmark and as a history grows.

use anyhow::{Context, Result, bail};
use atlas_domain::policy::bm25;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct Eval {
    /// The folder holding the harnesses (locomo_recall.py, beam_recall.py) and their data sets
    /// (locomo-dev/, beam-dev/).
    #[arg(long, default_value = "../shared/eval")]
    pub data: PathBuf,
    /// Run only one benchmark: locomo, beam or longmemeval.
    #[arg(long)]
    pub only: Option<String>,
    /// LongMemEval_S dev questions to run (round-robin over the question types, as the harness
    /// takes them; 0: all of them). Each has its own haystack of about 490 turns, so the whole
    /// dev set is long with a larger model.
    #[arg(long, default_value = "24")]
    pub longmemeval_limit: usize,
    /// The BEAM chat sizes to run, each a row (folders under beam-dev/chats/): recall is judged
    /// as a history grows, so both dev sizes run unless asked otherwise.
    #[arg(long, value_delimiter = ',', default_value = "100K,500K")]
    pub beam_sizes: Vec<String>,
    /// Extra arguments for the atlas command, e.g. "--config recall.toml" to try settings.
    #[arg(long, default_value = "")]
    pub atlas_args: String,
    /// Write both harnesses' full results here (one JSON object keyed by benchmark).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// The embedder both runs use: onnx (the built-in model, or --model-dir's), http (an
    /// embeddings endpoint: --http-url, --http-model) or none (full text only).
    #[arg(long, value_parser = ["onnx", "http", "none"])]
    pub embedder: Option<String>,
    /// A model of models/manifest.toml, or an alias of one (`quality`).
    #[arg(long)]
    pub model: Option<String>,
    /// A model folder of one's own (docs/CONFIG.md, "Your own model: a folder").
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// The embeddings endpoint's base URL, e.g. http://127.0.0.1:11434/v1.
    #[arg(long)]
    pub http_url: Option<String>,
    #[arg(long)]
    pub http_model: Option<String>,
    /// Instead of recall: the sleep cycle's model band, per model (fixtures/extraction/'s
    /// labelled conversations and the conflict suite); `--json` writes
    /// `{"extraction": {MODEL: {...}}, "conflicts": {MODEL: {...}}}`.
    #[arg(long)]
    pub sleep: bool,
    /// The models `--sleep` measures: rules, smollm2-135m, qwen2.5-0.5b, qwen2.5-1.5b (each
    /// local model fetched when missing).
    #[arg(long, value_delimiter = ',', default_value = "rules,smollm2-135m,qwen2.5-0.5b,qwen2.5-1.5b")]
    pub sleep_models: Vec<String>,
    /// With `--sleep`: the turns one extraction call reads (`consolidation.turns_per_call`;
    /// 1, the offline set-up of docs/CONFIG.md).
    #[arg(long, default_value_t = 1)]
    pub turns_per_call: usize,
    /// Instead of recall: how many people's turns of LoCoMo, LongMemEval and BEAM dev the
    /// stated-preference rule takes (`policy::preferences`), with a sample of each to judge.
    #[arg(long)]
    pub preferences: bool,
    /// With `--sleep`: print every miss (a label not filed, a fact filed without a label).
    #[arg(long)]
    pub verbose: bool,
}

impl Eval {
    /// The variables that give every atlas command of the harnesses this run's embedder.
    fn embedder_env(&self) -> Result<Vec<(&'static str, String)>> {
        let mut env = Vec::new();
        if let Some(kind) = &self.embedder {
            env.push(("ATLAS_EMBEDDER", kind.clone()));
        }
        env.extend(self.model.clone().map(|m| ("ATLAS_ONNX_MODEL", m)));
        if let Some(dir) = &self.model_dir {
            let dir = std::fs::canonicalize(dir).with_context(|| format!("--model-dir {}", dir.display()))?;
            env.push(("ATLAS_ONNX_MODEL_DIR", dir.display().to_string()));
        }
        if self.embedder.as_deref() == Some("http") && (self.http_url.is_none() || self.http_model.is_none()) {
            bail!("--embedder http needs --http-url and --http-model");
        }
        env.extend(self.http_url.clone().map(|u| ("ATLAS_HTTP_URL", u)));
        env.extend(self.http_model.clone().map(|m| ("ATLAS_HTTP_MODEL", m)));
        Ok(env)
    }
}

struct Row {
    name: String,
    atlas: [f64; 3],
    p50_ms: f64,
    /// Turns (LoCoMo) or messages (BEAM) imported per second, embedding included (the harness
    /// times each `atlas import`, start-up included).
    import_per_s: f64,
    /// Each floor's name and its R@5, R@10, R@20.
    floors: Vec<(String, [f64; 3])>,
}

pub fn run(args: Eval) -> Result<()> {
    if args.sleep {
        return crate::eval_sleep::run(&args.sleep_models, args.turns_per_call, args.json.as_deref(), args.verbose);
    }
    let root = crate::root();
    let data = if args.data.is_absolute() { args.data.clone() } else { root.join(&args.data) };
    if args.preferences {
        return crate::eval_preferences::run(&data, args.json.as_deref());
    }
    let harnesses = ["locomo_recall.py", "beam_recall.py", "longmemeval_recall.py"];
    if harnesses.iter().any(|h| !data.join(h).is_file()) {
        bail!(
            "{} does not hold locomo_recall.py, beam_recall.py and longmemeval_recall.py; pass --data with the \
             folder of the evaluation harnesses and their data sets",
            data.display()
        );
    }
    let atlas = crate::atlas_binary()?;
    let env = args.embedder_env()?;
    for (k, v) in &env {
        println!("{k}={v}");
    }
    let dir = tempfile::tempdir()?;
    // Every atlas command of the harnesses runs under /usr/bin/time, which appends its peak
    // resident set (KiB) to one file: the run's largest is the table's RSS.
    let rss_log = dir.path().join("peak-rss-kib");
    let wrapper = dir.path().join("atlas-measured");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec /usr/bin/time -a -o '{}' -f '%M' '{}' \"$@\"\n", rss_log.display(), atlas.display()),
    )?;
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let command = format!("{} {}", wrapper.display(), args.atlas_args).trim().to_owned();
    let mut rows = Vec::new();
    let mut full = serde_json::Map::new();
    let wants = |name: &str| args.only.as_deref().is_none_or(|o| o.eq_ignore_ascii_case(name));
    if wants("locomo") {
        let set = data.join("locomo-dev");
        let result =
            harness(&data.join("locomo_recall.py"), &set, &command, &dir.path().join("locomo.json"), &env, &[], true)?;
        let floor = locomo_bm25_floor(&set)?;
        rows.push(Row {
            name: "LoCoMo dev".into(),
            atlas: triple(&result, "R@5", "R@10", "R@20"),
            p50_ms: result["took_ms_p50"].as_f64().unwrap_or(f64::NAN),
            import_per_s: per_second(&result, "turns"),
            floors: vec![("bm25".into(), floor)],
        });
        full.insert("locomo".into(), result);
    }
    if wants("beam") {
        for size in &args.beam_sizes {
            let result = harness(
                &data.join("beam_recall.py"),
                &data.join("beam-dev"),
                &command,
                &dir.path().join(format!("beam-{size}.json")),
                &env,
                &["--size", size],
                true,
            )?;
            let floors = result["baselines"]
                .as_object()
                .map(|b| b.iter().map(|(name, r)| (name.clone(), triple(r, "R@5", "R@10", "R@20"))).collect())
                .unwrap_or_default();
            rows.push(Row {
                name: format!("BEAM {size} dev"),
                atlas: triple(&result, "R@5", "R@10", "R@20"),
                p50_ms: result["took_ms_p50"].as_f64().unwrap_or(f64::NAN),
                import_per_s: per_second(&result, "messages"),
                floors,
            });
            // The 100K result keeps its old key, so scripts that read `beam` still find it.
            let key = if size == "100K" { "beam".to_owned() } else { format!("beam-{size}") };
            full.insert(key, result);
        }
    }
    if wants("longmemeval") {
        let set = data.join("longmemeval-dev").join("longmemeval_s_dev.json.gz");
        let limit = args.longmemeval_limit.to_string();
        let extra: Vec<&str> = if args.longmemeval_limit > 0 { vec!["--limit", &limit] } else { Vec::new() };
        let out = dir.path().join("longmemeval.json");
        let result = harness(&data.join("longmemeval_recall.py"), &set, &command, &out, &env, &extra, false)?;
        // Its three headline figures in the table's three columns: session R_any@5, session
        // R_all@5 (the paper's recall), turn R_all@10; the floors the same.
        let headline = |r: &serde_json::Value| triple(r, "session_R_any@5", "session_R_all@5", "turn_R_all@10");
        let floors = result["baselines"]
            .as_object()
            .map(|b| b.iter().map(|(name, r)| (name.clone(), headline(r))).collect())
            .unwrap_or_default();
        rows.push(Row {
            name: "LongMemEval dev".into(),
            atlas: headline(&result),
            p50_ms: result["took_ms_p50"].as_f64().unwrap_or(f64::NAN),
            import_per_s: per_second(&result, "turns"),
            floors,
        });
        full.insert("longmemeval".into(), result);
    }
    if rows.is_empty() {
        bail!("--only takes locomo, beam or longmemeval, not {:?}", args.only.unwrap_or_default());
    }
    let peak_rss_mb = std::fs::read_to_string(&rss_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .fold(f64::NAN, f64::max)
        / 1024.0;
    println!();
    println!(
        "{:<15} {:<16} {:>6} {:>6} {:>6} {:>8} {:>10}",
        "benchmark", "method", "R@5", "R@10", "R@20", "p50 ms", "import/s"
    );
    for row in &rows {
        let [r5, r10, r20] = row.atlas;
        println!(
            "{:<15} {:<16} {r5:>6.3} {r10:>6.3} {r20:>6.3} {:>8.2} {:>10.0}",
            row.name, "atlas", row.p50_ms, row.import_per_s
        );
        for (name, [f5, f10, f20]) in &row.floors {
            println!("{:<15} {:<16} {f5:>6.3} {f10:>6.3} {f20:>6.3}", "", format!("floor: {name}"));
        }
        let best = row.floors.iter().map(|(_, f)| f[1]).fold(f64::NAN, f64::max);
        if row.name.starts_with("LongMemEval") {
            // Its columns are the harness's headline: sessions, then turns.
            println!("{:<15} {:<16} (columns: session R_any@5, session R_all@5, turn R_all@10)", "", "");
            println!("{:<15} {:<16} session R_all@5 {:+.3} against the better floor", "", "", row.atlas[1] - best);
        } else {
            println!("{:<15} {:<16} R@10 {:+.3} against the better floor", "", "", row.atlas[1] - best);
        }
    }
    println!("peak resident memory of any atlas command: {peak_rss_mb:.0} MB");
    full.insert("peak_rss_mb".into(), serde_json::json!(peak_rss_mb));
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&serde_json::Value::Object(full))?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// `count_key` items of a harness result per second of its imports.
fn per_second(result: &serde_json::Value, count_key: &str) -> f64 {
    result[count_key].as_f64().unwrap_or(f64::NAN) / result["ingest_s"].as_f64().unwrap_or(f64::NAN)
}

fn triple(v: &serde_json::Value, a: &str, b: &str, c: &str) -> [f64; 3] {
    [a, b, c].map(|k| v[k].as_f64().unwrap_or(f64::NAN))
}

/// Runs one harness (its CLI contract is its header) and reads its `--json` result.
pub(crate) fn harness(
    script: &Path,
    set: &Path,
    atlas: &str,
    out: &Path,
    env: &[(&str, String)],
    extra: &[&str],
    takes_k: bool,
) -> Result<serde_json::Value> {
    println!("$ python3 {} --data {} {} --atlas '{atlas}'", script.display(), set.display(), extra.join(" "));
    let mut python = Command::new("python3");
    python.envs(env.iter().map(|(k, v)| (*k, v.as_str()))).arg(script).arg("--data").arg(set).arg("--atlas").arg(atlas);
    if takes_k {
        python.arg("--k").arg("5,10,20");
    }
    let status =
        python.arg("--json").arg(out).args(extra).status().with_context(|| format!("run {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    let text = std::fs::read_to_string(out).with_context(|| format!("read {}", out.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} wrote no JSON result", script.display()))
}

/// BM25 with each LoCoMo turn as a document (its text and image caption, as the harness imports
/// it; lowercased `\w+` words; k1 = 1.2, b = 0.75; idf = ln(1 + (N − df + 0.5) / (df + 0.5))), the
/// same floor the BEAM harness computes, scored as that harness scores: the share of a
/// question's evidence turns among the first k.
fn locomo_bm25_floor(set: &Path) -> Result<[f64; 3]> {
    let mut files: Vec<_> = std::fs::read_dir(set)
        .with_context(|| format!("read {}", set.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut sums = [0.0; 3];
    let mut questions = 0usize;
    for file in files {
        let conv: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file)?)
            .with_context(|| format!("{} is not JSON", file.display()))?;
        let mut ids = Vec::new();
        let mut docs = Vec::new();
        if let Some(sessions) = conv.as_object() {
            let mut numbered: Vec<(u32, &serde_json::Value)> = sessions
                .iter()
                .filter_map(|(k, v)| k.strip_prefix("session_")?.parse().ok().map(|n| (n, v)))
                .filter(|(_, v)| v.is_array())
                .collect();
            numbered.sort_by_key(|(n, _)| *n);
            for (_, turns) in numbered {
                for turn in turns.as_array().into_iter().flatten() {
                    let mut text = turn["text"].as_str().unwrap_or_default().to_owned();
                    if let Some(caption) = turn["blip_caption"].as_str() {
                        text.push_str(&format!(" [shares {caption}]"));
                    }
                    ids.push(turn["dia_id"].as_str().unwrap_or_default().trim().to_owned());
                    docs.push(text);
                }
            }
        }
        let index = Bm25::new(&docs);
        for qa in conv["qa"].as_array().into_iter().flatten() {
            let evidence: HashSet<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str())
                .map(|e| e.trim().to_owned())
                .collect();
            if evidence.is_empty() {
                continue;
            }
            let question = qa["question"].as_str().unwrap_or_default();
            let ranked = index.rank(question);
            for (slot, k) in [5, 10, 20].into_iter().enumerate() {
                let found = ranked.iter().take(k).filter(|&&i| evidence.contains(&ids[i])).count();
                sums[slot] += found as f64 / evidence.len() as f64;
            }
            questions += 1;
        }
    }
    if questions == 0 {
        bail!("no LoCoMo questions with evidence in {}", set.display());
    }
    Ok(sums.map(|s| s / questions as f64))
}

/// The harnesses' BM25 floor, not ATLAS's full text: a document's lowercased `\w+` words as
/// they are (no stemming, no stop words), idf = ln(1 + (N − n + 0.5) / (n + 0.5)), scored by the
/// one BM25 formula (`policy::bm25`, k1 = 1.2, b = 0.75). Through ATLAS's own pipeline it
/// would be a stronger floor than the one the BEAM harness prints beside it (LoCoMo dev R@10
/// 0.584 against 0.536).
struct Bm25 {
    docs: Vec<bm25::Document>,
}

/// Python's `re.findall(r"\w+", text.lower())`.
fn plain_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

impl Bm25 {
    fn new(texts: &[String]) -> Self {
        let docs = texts
            .iter()
            .map(|t| {
                let mut doc = bm25::Document::default();
                for word in plain_words(t) {
                    *doc.frequencies.entry(word).or_default() += 1.0;
                    doc.length += 1;
                }
                doc
            })
            .collect();
        Bm25 { docs }
    }

    /// Indices of the documents that hold a query word, best first (ties in document order).
    fn rank(&self, query: &str) -> Vec<usize> {
        let rows = self.docs.len() as f64;
        let avg_len = self.docs.iter().map(|d| f64::from(d.length)).sum::<f64>() / rows.max(1.0);
        let distinct: std::collections::BTreeSet<String> = plain_words(query).collect();
        let weighted: Vec<(String, u32, f64)> = distinct
            .into_iter()
            .map(|w| {
                let n = self.docs.iter().filter(|d| d.frequencies.contains_key(&w)).count() as f64;
                let idf = (1.0 + (rows - n + 0.5) / (n + 0.5)).ln();
                (w, 1, idf)
            })
            .collect();
        // As the harness ranks: only documents holding a query word, best first.
        let mut scored: Vec<(usize, f64)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| bm25::score(d, &weighted, avg_len).map(|s| (i, s)))
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.into_iter().map(|(i, _)| i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_ranks_the_rare_word_first_and_penalises_length() {
        let docs = [
            "the cat sat on the mat".to_owned(),
            "a zebra".to_owned(),
            "the dog and the cat and the bird and the zebra".to_owned(),
        ];
        let index = Bm25::new(&docs);
        assert_eq!(index.rank("zebra")[..2], [1, 2]);
        assert_eq!(index.rank("cat")[0], 0);
    }
}
