//! `--model-dir`, `ATLAS_ONNX_MODEL_DIR` and `ATLAS_ONNX_MODEL` end to end: a space embedded with
//! the built-in model refuses a folder of one's own, an endpoint or the quality model until
//! `atlas reembed` moves it over, then recalls with it.

use atlas_embed_onnx::{assets, manifest::Manifest};
use std::path::Path;
use std::process::{Command, Output};

const TURNS: &str = r#"{"session": "s1", "speaker": "Priya", "text": "I signed up for the Berlin half marathon in April.", "time": "2023-05-08T13:56:00Z"}
{"session": "s1", "speaker": "Sam", "text": "Great, I painted a sunrise last week.", "time": "2023-05-08T13:56:30Z"}
{"session": "s2", "speaker": "Priya", "text": "I'm researching adoption agencies now.", "time": "2023-05-25T13:14:00Z"}
"#;

fn atlas(db: &Path, args: &[&str], model_dir_env: Option<&Path>) -> Output {
    let dir = model_dir_env.map(|d| d.to_str().unwrap());
    atlas_with(db, args, dir.map(|d| ("ATLAS_ONNX_MODEL_DIR", d)).as_slice())
}

/// atlas on `db` with none of the caller's ATLAS_ variables, and `env` set.
fn atlas_with(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atlas"));
    command.arg("--db").arg(db).args(args);
    for var in ["ATLAS_DB", "ATLAS_CONFIG", "ATLAS_EMBEDDER", "ATLAS_ONNX_MODEL_DIR", "ATLAS_ONNX_MODEL"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("run atlas")
}

fn json(out: Output) -> serde_json::Value {
    assert!(out.status.success(), "atlas failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn failed(out: Output) -> String {
    assert!(!out.status.success(), "atlas should have failed: {}", String::from_utf8_lossy(&out.stdout));
    // With --json the error is a JSON document on standard output; without, a line on standard error.
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The built-in model's files as a folder of one's own, with first-token pooling.
fn own_model(dir: &Path) {
    let manifest = Manifest::builtin().unwrap();
    let spec = manifest.default_model();
    std::fs::create_dir_all(dir).unwrap();
    for file in ["model.onnx", "tokenizer.json"] {
        std::fs::copy(assets::model_file(spec, file, None).unwrap(), dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("atlas-model.toml"), "name = \"minilm-cls\"\npooling = \"cls\"\nmax_length = 256\n")
        .unwrap();
}

#[test]
fn a_space_moves_to_a_model_folder_with_reembed_and_recalls_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = (dir.path().join("space.db"), dir.path().join("minilm-cls"));
    let turns = dir.path().join("turns.jsonl");
    std::fs::write(&turns, TURNS).unwrap();
    own_model(&model);
    let model_arg = model.to_str().unwrap();
    json(atlas(&db, &["import", turns.to_str().unwrap(), "--json"], None));

    let refused = failed(atlas(&db, &["--model-dir", model_arg, "recall", "half marathon", "--json"], None));
    assert!(refused.contains("minilm-cls@") && refused.contains("reembed"), "{refused}");

    let moved = json(atlas(&db, &["--model-dir", model_arg, "reembed", "--json"], None));
    assert_eq!(moved["reembedded"], 3, "{moved}");
    let found = json(atlas(&db, &["recall", "the Berlin half marathon", "--json"], Some(&model)));
    let hits = found["hits"].as_array().unwrap();
    assert!(hits.first().is_some_and(|h| h["text"].as_str().unwrap_or_default().contains("half marathon")), "{found}");
    let stats = json(atlas(&db, &["stats", "--json"], None));
    assert_eq!((stats["vectors"].as_u64(), stats["pending_vectors"].as_u64()), (Some(3), Some(0)), "{stats}");

    let missing = failed(atlas(&db, &["--model-dir", "/nonexistent/bge", "recall", "race"], None));
    assert!(missing.contains("/nonexistent/bge") && missing.contains("not a folder"), "{missing}");
}

/// A space moves from the built-in model to an embeddings endpoint and back with `reembed`,
/// refusing the other model before each move.
#[test]
fn a_space_moves_to_an_endpoint_and_back_with_reembed() {
    use atlas_testing::HashEmbedder;
    use atlas_testing::embeddings::EmbeddingsServer;
    let hashing = HashEmbedder::new(64);
    let server = EmbeddingsServer::answering(std::sync::Arc::new(move |text: &str| hashing.embed_one(text)));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("space.db");
    let turns = dir.path().join("turns.jsonl");
    std::fs::write(&turns, TURNS).unwrap();
    json(atlas(&db, &["import", turns.to_str().unwrap(), "--json"], None));

    let http = [("ATLAS_EMBEDDER", "http"), ("ATLAS_HTTP_URL", server.url.as_str()), ("ATLAS_HTTP_MODEL", "hash-64")];
    let endpoint = |args: &[&str]| atlas_with(&db, args, &http);
    let refused = failed(endpoint(&["recall", "half marathon", "--json"]));
    assert!(refused.contains("http:hash-64@127.0.0.1") && refused.contains("reembed"), "{refused}");
    let moved = json(endpoint(&["reembed", "--json"]));
    assert_eq!(moved["reembedded"], 3, "{moved}");
    let found = json(endpoint(&["recall", "Berlin half marathon", "--json"]));
    assert!(found["hits"][0]["text"].as_str().unwrap_or_default().contains("half marathon"), "{found}");
    let stats = json(endpoint(&["stats", "--json"]));
    assert_eq!(stats["embedding_model"]["dimension"], 64, "{stats}");
    // Every text went through the endpoint: three memories and the query.
    let sent: Vec<String> = server.requests().into_iter().flatten().collect();
    assert!(
        sent.iter().any(|t| t.contains("half marathon in April")) && sent.iter().any(|t| t == "Berlin half marathon"),
        "{sent:?}"
    );

    // And back to the built-in model.
    let refused = failed(atlas(&db, &["recall", "half marathon", "--json"], None));
    assert!(refused.contains("reembed"), "{refused}");
    json(atlas(&db, &["reembed", "--json"], None));
    let stats = json(atlas(&db, &["stats", "--json"], None));
    assert_eq!(
        (stats["embedding_model"]["dimension"].as_u64(), stats["pending_vectors"].as_u64()),
        (Some(384), Some(0)),
        "{stats}"
    );
}

/// The quality model is a model of the manifest like the default: a space moves to it with
/// `reembed`, keeps it when opened with no model named, and moves back when the default is named.
#[test]
fn a_space_moves_to_the_quality_model_and_back_with_reembed() {
    let dir = tempfile::tempdir().unwrap();
    let (db, turns) = (dir.path().join("space.db"), dir.path().join("turns.jsonl"));
    std::fs::write(&turns, TURNS).unwrap();
    json(atlas(&db, &["import", turns.to_str().unwrap(), "--json"], None));
    let named = |model: &str, args: &[&str]| atlas_with(&db, args, &[("ATLAS_ONNX_MODEL", model)]);
    let refused = failed(named("quality", &["recall", "half marathon", "--json"]));
    assert!(refused.contains("all-mpnet-base-v2-qint8-per-token") && refused.contains("reembed"), "{refused}");
    let moved = json(named("quality", &["reembed", "--json"]));
    assert_eq!(moved["reembedded"], 3, "{moved}");

    let stats = json(atlas(&db, &["stats", "--json"], None));
    assert_eq!(
        (stats["embedding_model"]["name"].as_str(), stats["embedding_model"]["dimension"].as_u64()),
        (Some("all-mpnet-base-v2-qint8-per-token"), Some(768)),
        "{stats}"
    );
    let found = json(atlas(&db, &["recall", "Which race is Priya training for?", "--json"], None));
    assert!(found["hits"][0]["text"].as_str().unwrap_or_default().contains("half marathon"), "{found}");

    let default = Manifest::builtin().unwrap().default_model().name.clone();
    json(named(&default, &["reembed", "--json"]));
    let stats = json(atlas(&db, &["stats", "--json"], None));
    assert_eq!(
        (stats["embedding_model"]["dimension"].as_u64(), stats["pending_vectors"].as_u64()),
        (Some(384), Some(0)),
        "{stats}"
    );
}
