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
    /// Put before a recall's query (e5's `query: `, bge's instruction); none by default.
    #[serde(default)]
    pub query_prefix: String,
    /// Put before every memory's text (e5's `passage: `); none by default.
    #[serde(default)]
    pub document_prefix: String,
    pub upstream: String,
    pub files: Vec<ModelFile>,
}

pub use crate::pooling::Pooling;

/// One file of a model, taken out of a wheel (and out of a zip inside it when `inner` is set),
/// or made here from another model's file (`derive`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub file: String,
    pub package: Option<String>,
    pub path: Option<String>,
    pub inner: Option<String>,
    pub derive: Option<Derivation>,
    pub sha256: String,
}

/// How a file is made from another model's file: `script` (in models/, compiled in) run by a
/// Python holding exactly `tools` (pinned requirements).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derivation {
    pub from_model: String,
    pub from_file: String,
    pub script: String,
    pub tools: Vec<String>,
}

/// Where a model file comes from, once the manifest is checked.
pub enum Source<'a> {
    Wheel { package: &'a str, path: &'a str, inner: Option<&'a str> },
    Derived(&'a Derivation),
}

impl ModelFile {
    pub fn source(&self) -> Result<Source<'_>> {
        match (&self.package, &self.path, &self.derive) {
            (Some(package), Some(path), None) => Ok(Source::Wheel { package, path, inner: self.inner.as_deref() }),
            (None, None, Some(derive)) if self.inner.is_none() => Ok(Source::Derived(derive)),
            _ => Err(AtlasError::Config(format!(
                "models/manifest.toml, file {:?}: give either `package` and `path` (and `inner`) or `derive`",
                self.file
            ))),
        }
    }
}

impl Manifest {
    pub fn builtin() -> Result<Manifest> {
        Self::parse(MANIFEST_TOML, "models/manifest.toml")
    }

    pub fn parse(text: &str, origin: &str) -> Result<Manifest> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| AtlasError::Config(format!("{origin}: {e}")))?;
        for model in &manifest.models {
            for file in &model.files {
                let in_model = |e: AtlasError| AtlasError::Config(format!("{origin}: model {}: {e}", model.name));
                if let Source::Derived(d) = file.source().map_err(in_model)? {
                    let from = manifest.model(&d.from_model).map_err(in_model)?;
                    from.file(&d.from_file).map_err(in_model)?;
                    if matches!(from.file(&d.from_file)?.source()?, Source::Derived(_)) || d.tools.is_empty() {
                        return Err(in_model(AtlasError::Config(format!(
                            "file {:?} must derive from a downloaded file, with pinned tools",
                            file.file
                        ))));
                    }
                }
            }
        }
        Ok(manifest)
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
        assert_eq!(
            (model.name.as_str(), model.dimension, model.max_length),
            ("all-minilm-l6-v2-qint8-per-token", 384, 256)
        );
        for model in &m.models {
            for f in &model.files {
                assert_eq!(f.sha256.len(), 64, "{}", f.file);
                match f.source().unwrap() {
                    Source::Wheel { package, .. } => assert!(package.contains("=="), "{}: pin the package", f.file),
                    Source::Derived(d) => {
                        assert!(d.tools.iter().all(|t| t.contains("==")), "{}: pin every tool", f.file);
                        assert!(crate::assets::script(&d.script).is_ok(), "{}: unknown script", f.file);
                    }
                }
            }
        }
        assert!(m.runtime.sha256.as_ref().is_some_and(|h| h.len() == 64));
        assert!(m.model("nope").unwrap_err().to_string().contains("all-minilm-l6-v2-int8"));
    }

    #[test]
    fn a_file_with_two_sources_or_a_derivation_from_nowhere_is_refused() {
        let base = |file: &str| {
            format!(
                "[runtime]\nname='o'\nversion='1'\npackage='o==1'\npip_platform='p'\npip_python='3'\npath='p'\nfile='f'\nupstream='u'\n\
                 [runtime_cuda]\nname='o'\nversion='1'\npackage='o==1'\npip_platform='p'\npip_python='3'\npath='p'\nfile='f'\nupstream='u'\n\
                 [[models]]\nname='m'\ndescription='d'\ndimension=4\npooling='mean'\nnormalize=true\nmax_length=8\nupstream='u'\n{file}"
            )
        };
        let both = base(
            "[[models.files]]\nfile='model.onnx'\npackage='x==1'\npath='p'\nsha256='0'\n\
             [models.files.derive]\nfrom_model='m'\nfrom_file='a'\nscript='s'\ntools=['t==1']\n",
        );
        let err = Manifest::parse(&both, "test.toml").unwrap_err().to_string();
        assert!(err.contains("test.toml") && err.contains("model m") && err.contains("model.onnx"), "{err}");
        let nowhere = base(
            "[[models.files]]\nfile='model.onnx'\nsha256='0'\n\
             [models.files.derive]\nfrom_model='elsewhere'\nfrom_file='a'\nscript='s'\ntools=['t==1']\n",
        );
        let err = Manifest::parse(&nowhere, "test.toml").unwrap_err().to_string();
        assert!(err.contains("elsewhere"), "{err}");
    }
}
