//! A model folder of one's own: what Optimum and sentence-transformers export (`model.onnx`,
//! `tokenizer.json`, the sentence-transformers configs), with an optional `atlas-model.toml`
//! that states or overrides what the exports leave implicit; read into the settings the
//! embedder runs with and the identity a space records.

use crate::assets;
use crate::pooling::Pooling;
use atlas_domain::{AtlasError, Result};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The optional file of a folder that states or overrides its settings.
pub const SETTINGS_FILE: &str = "atlas-model.toml";

/// Tokens per text when nothing in the folder says (BERT's window).
const DEFAULT_MAX_LENGTH: usize = 512;

/// How texts become vectors with one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSettings {
    pub pooling: Pooling,
    /// Tokens per text; what falls outside is not embedded.
    pub max_length: usize,
    /// Put before a recall's query.
    pub query_prefix: String,
    /// Put before every memory's text.
    pub document_prefix: String,
}

/// A model folder, read and checked.
#[derive(Debug, Clone)]
pub struct Folder {
    pub model: PathBuf,
    pub tokenizer: PathBuf,
    pub settings: ModelSettings,
    /// What a space records: the folder's name (or `name` in atlas-model.toml) and a hash of
    /// the model, the tokenizer and the settings, so that another model (or the same model
    /// pooled or prefixed otherwise) is never mixed into a space's vectors.
    pub identity: String,
}

/// `atlas-model.toml`: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Overrides {
    /// The name a space records (before the hash); the folder's name when unset.
    name: Option<String>,
    /// The ONNX file, relative to the folder; `model.onnx`, else `onnx/model.onnx`.
    model_file: Option<String>,
    pooling: Option<Pooling>,
    normalize: Option<bool>,
    query_prefix: Option<String>,
    document_prefix: Option<String>,
    max_length: Option<usize>,
}

fn folder_error(path: &Path, what: impl std::fmt::Display) -> AtlasError {
    AtlasError::Config(format!("model folder {}: {what}", path.display()))
}

/// Reads `dir`: every error names the file (and field or line) that is wrong.
pub fn read(dir: &Path) -> Result<Folder> {
    if !dir.is_dir() {
        return Err(folder_error(dir, "not a folder (onnx.model_dir, --model-dir or ATLAS_ONNX_MODEL_DIR)"));
    }
    let overrides = read_overrides(dir)?;
    if overrides.normalize == Some(false) {
        return Err(folder_error(
            &dir.join(SETTINGS_FILE),
            "normalize = false: ATLAS keeps unit vectors and ranks by cosine (which normalising does not change); \
             remove the key",
        ));
    }
    let model = match &overrides.model_file {
        Some(file) => Some(dir.join(file)).filter(|p| p.is_file()).ok_or_else(|| {
            folder_error(&dir.join(SETTINGS_FILE), format!("model_file = {file:?}: no such file in the folder"))
        })?,
        None => ["model.onnx", "onnx/model.onnx"].iter().map(|f| dir.join(f)).find(|p| p.is_file()).ok_or_else(|| {
            folder_error(
                dir,
                "no model.onnx (nor onnx/model.onnx): export one (optimum-cli export onnx, or sentence-transformers \
                 with backend=\"onnx\") or name it with model_file in atlas-model.toml",
            )
        })?,
    };
    let beside_model = model.parent().map(|p| p.join("tokenizer.json"));
    let tokenizer = std::iter::once(dir.join("tokenizer.json"))
        .chain(beside_model)
        .find(|p| p.is_file())
        .ok_or_else(|| folder_error(dir, "no tokenizer.json (a fast tokenizer, as transformers saves it)"))?;
    let prompts = json_file(&dir.join("config_sentence_transformers.json"))?
        .and_then(|c| c.get("prompts").cloned())
        .unwrap_or(Value::Null);
    let prompt = |names: &[&str]| names.iter().find_map(|n| prompts.get(n).and_then(Value::as_str)).map(str::to_owned);
    let settings = ModelSettings {
        pooling: match overrides.pooling {
            Some(pooling) => pooling,
            None => pooling_of(dir)?.unwrap_or(Pooling::Mean),
        },
        max_length: match overrides.max_length {
            Some(0) => return Err(folder_error(&dir.join(SETTINGS_FILE), "max_length must be at least 1")),
            Some(n) => n,
            None => max_length_of(dir, &tokenizer)?.unwrap_or(DEFAULT_MAX_LENGTH),
        },
        query_prefix: overrides.query_prefix.or_else(|| prompt(&["query"])).unwrap_or_default(),
        document_prefix: overrides
            .document_prefix
            .or_else(|| prompt(&["document", "passage", "doc", "corpus"]))
            .unwrap_or_default(),
    };
    let name = match overrides.name {
        Some(name) if !name.trim().is_empty() => name,
        Some(_) => return Err(folder_error(&dir.join(SETTINGS_FILE), "name is empty")),
        None => dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into()),
    };
    let identity = identity(&name, &model, &tokenizer, &settings)?;
    Ok(Folder { model, tokenizer, settings, identity })
}

fn read_overrides(dir: &Path) -> Result<Overrides> {
    let path = dir.join(SETTINGS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| AtlasError::Config(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Overrides::default()),
        Err(e) => Err(AtlasError::Config(format!("{}: {e}", path.display()))),
    }
}

/// A JSON file of the folder, `None` when absent.
fn json_file(path: &Path) -> Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| AtlasError::Config(format!("{}: not JSON: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AtlasError::Config(format!("{}: {e}", path.display()))),
    }
}

/// The pooling sentence-transformers' Pooling module states: its folder from `modules.json`
/// (else `1_Pooling`), its mode from `config.json` there.
fn pooling_of(dir: &Path) -> Result<Option<Pooling>> {
    let module = json_file(&dir.join("modules.json"))?
        .and_then(|m| m.as_array().cloned())
        .and_then(|modules| {
            modules.iter().find_map(|m| {
                let is_pooling = m.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with(".Pooling"));
                is_pooling.then(|| m.get("path").and_then(Value::as_str).map(str::to_owned)).flatten()
            })
        })
        .unwrap_or_else(|| "1_Pooling".into());
    let path = dir.join(&module).join("config.json");
    let Some(config) = json_file(&path)? else { return Ok(None) };
    let on = |field: &str| config.get(field).and_then(Value::as_bool).unwrap_or(false);
    let supported = [
        ("pooling_mode_mean_tokens", Pooling::Mean),
        ("pooling_mode_cls_token", Pooling::Cls),
        ("pooling_mode_lasttoken", Pooling::LastToken),
    ];
    for unsupported in
        ["pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"]
    {
        if on(unsupported) {
            return Err(AtlasError::Config(format!(
                "{}: {unsupported} is not supported; ATLAS pools by mean, cls or last_token (state one as pooling in {SETTINGS_FILE})",
                path.display()
            )));
        }
    }
    let chosen: Vec<Pooling> = supported.iter().filter(|(field, _)| on(field)).map(|(_, p)| *p).collect();
    match chosen.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(AtlasError::Config(format!(
            "{}: more than one pooling mode is on; ATLAS pools by one (state it as pooling in {SETTINGS_FILE})",
            path.display()
        ))),
    }
}

/// The window sentence-transformers uses (`sentence_bert_config.json`), else the tokenizer's
/// own truncation.
fn max_length_of(dir: &Path, tokenizer: &Path) -> Result<Option<usize>> {
    let positive = |v: Option<&Value>| v.and_then(Value::as_u64).filter(|n| *n > 0).map(|n| n as usize);
    if let Some(config) = json_file(&dir.join("sentence_bert_config.json"))?
        && let Some(n) = positive(config.get("max_seq_length"))
    {
        return Ok(Some(n));
    }
    let tokenizer = json_file(tokenizer)?;
    Ok(tokenizer.and_then(|t| positive(t.get("truncation").and_then(|t| t.get("max_length")))))
}

/// `name@` and 12 hex digits of a hash over the files and the settings.
fn identity(name: &str, model: &Path, tokenizer: &Path, settings: &ModelSettings) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in [
        assets::sha256_file_cached(model)?,
        assets::sha256_file_cached(tokenizer)?,
        settings.pooling.as_str().to_owned(),
        settings.max_length.to_string(),
        settings.query_prefix.clone(),
        settings.document_prefix.clone(),
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let hash: String = hasher.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}@{hash}", name.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const TOKENIZER: &str = r#"{"truncation": {"max_length": 128}}"#;

    #[test]
    fn a_sentence_transformers_export_is_read_as_exported() {
        let dir = folder(&[
            ("onnx/model.onnx", "m"),
            ("tokenizer.json", TOKENIZER),
            (
                "modules.json",
                r#"[{"path": "", "type": "sentence_transformers.models.Transformer"}, {"path": "1_Pool", "type": "sentence_transformers.models.Pooling"}]"#,
            ),
            ("1_Pool/config.json", r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#),
            ("sentence_bert_config.json", r#"{"max_seq_length": 384}"#),
            ("config_sentence_transformers.json", r#"{"prompts": {"query": "query: ", "passage": "passage: "}}"#),
        ]);
        let read = read(dir.path()).unwrap();
        assert!(read.model.ends_with("onnx/model.onnx"));
        let expected = ModelSettings {
            pooling: Pooling::Cls,
            max_length: 384,
            query_prefix: "query: ".into(),
            document_prefix: "passage: ".into(),
        };
        assert_eq!(read.settings, expected);
    }

    #[test]
    fn atlas_model_toml_overrides_and_the_identity_follows_the_settings() {
        let files = [("model.onnx", "m"), ("tokenizer.json", TOKENIZER)];
        let plain = folder(&files);
        let first = read(plain.path()).unwrap();
        assert_eq!(
            first.settings,
            ModelSettings {
                pooling: Pooling::Mean,
                max_length: 128,
                query_prefix: String::new(),
                document_prefix: String::new()
            }
        );
        assert_eq!(read(plain.path()).unwrap().identity, first.identity, "the same folder, the same identity");
        let settings = "name = \"mine\"\npooling = \"last_token\"\nquery_prefix = \"q: \"\nmax_length = 64\n";
        let tuned = folder(&[files[0], files[1], (SETTINGS_FILE, settings)]);
        let second = read(tuned.path()).unwrap();
        assert_eq!((second.settings.pooling, second.settings.max_length), (Pooling::LastToken, 64));
        assert!(
            second.identity.starts_with("mine@") && second.identity.len() == "mine@".len() + 12,
            "{}",
            second.identity
        );
        assert_ne!(first.identity.split('@').nth(1), second.identity.split('@').nth(1));
    }

    #[test]
    fn errors_name_the_file_and_what_is_wrong() {
        let err = |dir: &tempfile::TempDir| read(dir.path()).unwrap_err().to_string();
        let message = err(&folder(&[("tokenizer.json", TOKENIZER)]));
        assert!(message.contains("no model.onnx"), "{message}");
        let message = err(&folder(&[("model.onnx", "m")]));
        assert!(message.contains("no tokenizer.json"), "{message}");
        let message = err(&folder(&[
            ("model.onnx", "m"),
            ("tokenizer.json", TOKENIZER),
            ("1_Pooling/config.json", r#"{"pooling_mode_max_tokens": true}"#),
        ]));
        assert!(message.contains("1_Pooling/config.json") && message.contains("pooling_mode_max_tokens"), "{message}");
        let message =
            err(&folder(&[("model.onnx", "m"), ("tokenizer.json", TOKENIZER), (SETTINGS_FILE, "pooling = \"max\"\n")]));
        assert!(message.contains(SETTINGS_FILE) && message.contains("line 1"), "{message}");
        let message =
            err(&folder(&[("model.onnx", "m"), ("tokenizer.json", TOKENIZER), (SETTINGS_FILE, "normalize = false\n")]));
        assert!(message.contains("normalize = false"), "{message}");
        let message = err(&folder(&[("model.onnx", "m"), ("tokenizer.json", "{not json")]));
        assert!(message.contains("tokenizer.json") && message.contains("not JSON"), "{message}");
        let missing = read(Path::new("/nonexistent/model")).unwrap_err().to_string();
        assert!(missing.contains("/nonexistent/model") && missing.contains("not a folder"), "{missing}");
    }
}
