//! The ONNX embedder on the real int8 MiniLM: golden vectors from Python's onnxruntime,
//! semantic sanity, hostile text and bad model files; model folders of one's own
//! (`model_folder`).

mod model_folder;

use atlas_embed_onnx::{OnnxEmbedder, OnnxOptions, assets, manifest::Manifest};
use std::path::Path;
use std::sync::OnceLock;

fn embedder() -> &'static OnnxEmbedder {
    static EMBEDDER: OnceLock<OnnxEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        OnnxEmbedder::load(&OnnxOptions { threads: 1, ..OnnxOptions::default() }).expect("load the default model")
    })
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn fixture(name: &str) -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/embeddings").join(name);
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Each sentence alone matches the Python reference (made by fixtures/embeddings/make_reference.py
/// from the same files) within 1e-4. ONNX Runtime's integer kernels differ by instruction set
/// (AVX2's u8 x s8 products saturate in 16 bits, AVX-512's do not), so there is a reference per
/// kind of CPU, each made on one, and every sentence must match the same one: a tokenizer,
/// pooling or normalisation of our own that differs from Python's misses all of them by far more.
#[test]
fn golden_vectors_match_python_onnxruntime() {
    let sentences = fixture("sentences.jsonl");
    assert_eq!(sentences.len(), 20);
    let ours: Vec<Vec<f32>> = sentences
        .iter()
        .map(|s| embedder().embed_blocking(&[s["text"].as_str().unwrap().to_owned()]).unwrap().remove(0))
        .collect();
    let mut misses = Vec::new();
    for name in ["reference.jsonl", "reference-avx2.jsonl"] {
        let reference = fixture(name);
        let mut worst = (0f32, String::new());
        for ((s, r), got) in sentences.iter().zip(&reference).zip(&ours) {
            assert_eq!(s["id"], r["id"]);
            let want: Vec<f32> = r["vector"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            assert_eq!(got.len(), want.len());
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            if diff > worst.0 {
                worst = (diff, s["id"].to_string());
            }
        }
        if worst.0 <= 1e-4 {
            eprintln!("golden: {name} matched, max abs difference over 20 sentences = {:e}", worst.0);
            return;
        }
        misses.push(format!("{name}: max abs difference {} ({})", worst.0, worst.1));
    }
    panic!("no reference matched every sentence within 1e-4: {}", misses.join("; "));
}

/// A text's vector is a function of its text: the default model quantises each token's
/// activations from that token alone, so neither the other texts of a batch, nor their order,
/// nor the padding to the longest of them moves it (max |diff| ≤ 1e-5; measured 0 between
/// orders and 7e-9 against a text alone).
#[test]
fn batched_vectors_equal_single_ones() {
    let texts: Vec<String> =
        fixture("sentences.jsonl").iter().map(|s| s["text"].as_str().unwrap().to_owned()).collect();
    let batched = embedder().embed_blocking(&texts).unwrap();
    for (text, b) in texts.iter().zip(&batched) {
        let single = embedder().embed_blocking(std::slice::from_ref(text)).unwrap().remove(0);
        assert!(max_diff(&single, b) <= 1e-5, "{text:?}: max |diff| {}", max_diff(&single, b));
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

proptest::proptest! {
    #![proptest_config(atlas_testing::proptest_config(24))]
    /// Random texts (short words to long runs, empty and blank ones) embedded alone, in one
    /// batch, and in random sub-batches of a random order give the same vectors.
    #[test]
    fn a_vector_does_not_depend_on_its_batch_or_order(
        texts in proptest::collection::vec(
            proptest::string::string_regex("([a-z]{1,9}[ .,!?]{1,2}){0,120}|[ \t]{0,3}").unwrap(),
            1..12,
        ),
        order in proptest::collection::vec(0usize..1000, 12),
        cut in 1usize..6,
    ) {
        let alone: Vec<Vec<f32>> =
            texts.iter().map(|t| embedder().embed_blocking(std::slice::from_ref(t)).unwrap().remove(0)).collect();
        let together = embedder().embed_blocking(&texts).unwrap();
        let mut shuffled: Vec<usize> = (0..texts.len()).collect();
        shuffled.sort_by_key(|&i| order[i]);
        for piece in shuffled.chunks(cut) {
            let batch: Vec<String> = piece.iter().map(|&i| texts[i].clone()).collect();
            for (&i, v) in piece.iter().zip(embedder().embed_blocking(&batch).unwrap()) {
                proptest::prop_assert!(max_diff(&alone[i], &v) <= 1e-5, "{:?} in a batch of {}", texts[i], piece.len());
            }
        }
        for (i, v) in together.iter().enumerate() {
            proptest::prop_assert!(max_diff(&alone[i], v) <= 1e-5, "{:?} in one batch", texts[i]);
        }
    }
}

/// A query embedded ahead of background batches gets the same vector as through `embed`, also
/// while a background thread keeps the session busy with large batches.
#[test]
fn queries_go_first_and_get_the_same_vectors() {
    use atlas_domain::ports::Embedder;
    let texts: Vec<String> =
        fixture("sentences.jsonl").iter().map(|s| s["text"].as_str().unwrap().to_owned()).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let (stop, texts) = (std::sync::Arc::clone(&stop), texts.clone());
        std::thread::spawn(move || {
            let many: Vec<String> = texts.iter().cycle().take(256).cloned().collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                embedder().embed_blocking(&many).unwrap();
            }
        })
    };
    for text in &texts {
        let query = runtime.block_on(embedder().embed_query(text.clone())).unwrap();
        let single = embedder().embed_blocking(std::slice::from_ref(text)).unwrap().remove(0);
        assert_eq!(query, single, "{text:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    background.join().unwrap();
}

#[test]
fn paraphrases_are_closer_than_unrelated_text() {
    let v = embedder()
        .embed_blocking(&[
            "The cat sits on the mat".into(),
            "A cat is sitting on a mat".into(),
            "Quarterly revenue rose 5%".into(),
        ])
        .unwrap();
    let (para, unrelated) = (cos(&v[0], &v[1]), cos(&v[0], &v[2]));
    assert!(para > 0.8 && para - unrelated > 0.5, "paraphrase {para}, unrelated {unrelated}");
}

#[test]
fn hostile_text_gives_unit_vectors() {
    let texts = vec![String::new(), "x".repeat(100_000), "nul\0inside 🎉 emoji \u{200b}".into(), "🎉".repeat(5_000)];
    let vectors = embedder().embed_blocking(&texts).unwrap();
    assert_eq!(vectors.len(), 4);
    for v in vectors {
        assert_eq!(v.len(), 384);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4 && v.iter().all(|x| x.is_finite()), "norm {norm}");
    }
    assert!(embedder().embed_blocking(&[]).unwrap().is_empty());
}

fn model_dir_with(model: Option<&[u8]>, tokenizer: bool) -> tempfile::TempDir {
    let manifest = Manifest::builtin().unwrap();
    let spec = manifest.default_model();
    let dir = tempfile::tempdir().unwrap();
    match model {
        Some(bytes) => std::fs::write(dir.path().join("model.onnx"), bytes).unwrap(),
        None => {
            std::fs::copy(assets::model_file(spec, "model.onnx", None).unwrap(), dir.path().join("model.onnx"))
                .unwrap();
        }
    }
    if tokenizer {
        std::fs::copy(assets::model_file(spec, "tokenizer.json", None).unwrap(), dir.path().join("tokenizer.json"))
            .unwrap();
    }
    dir
}

#[test]
fn a_corrupt_model_file_names_the_path_and_both_hashes() {
    let dir = model_dir_with(Some(b"definitely not an onnx graph"), true);
    let options = OnnxOptions { files_dir: Some(dir.path().to_path_buf()), ..OnnxOptions::default() };
    let err = OnnxEmbedder::load(&options).err().expect("must fail").to_string();
    let path = dir.path().join("model.onnx").display().to_string();
    let actual = assets::sha256_file(&dir.path().join("model.onnx")).unwrap();
    assert!(err.contains(&path), "{err}");
    let expected = &Manifest::builtin().unwrap().default_model().file("model.onnx").unwrap().sha256.clone();
    assert!(err.contains(expected.as_str()) && err.contains(&actual), "{err}");
}

#[test]
fn a_missing_tokenizer_is_named() {
    let dir = model_dir_with(None, false);
    let options = OnnxOptions { files_dir: Some(dir.path().to_path_buf()), ..OnnxOptions::default() };
    let err = OnnxEmbedder::load(&options).err().expect("must fail").to_string();
    assert!(err.contains("tokenizer.json") && err.contains("missing"), "{err}");
}

#[test]
#[ignore = "needs a GPU: run with ATLAS_TEST_GPU=1 cargo test -p atlas-embed-onnx --features cuda -- --ignored"]
fn cuda_embeds_like_the_cpu() {
    if std::env::var("ATLAS_TEST_GPU").as_deref() != Ok("1") {
        eprintln!("SKIPPED: ATLAS_TEST_GPU is not 1");
        return;
    }
    let gpu = OnnxEmbedder::load(&OnnxOptions { cuda: true, ..OnnxOptions::default() }).unwrap();
    let text = vec!["The cat sits on the mat".to_owned()];
    let (a, b) = (gpu.embed_blocking(&text).unwrap(), embedder().embed_blocking(&text).unwrap());
    assert!(cos(&a[0], &b[0]) > 0.999);
}
