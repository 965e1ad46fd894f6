//! How an in-process binding (the Python and Node packages) names the space it opens: one set of
//! options, turned into a [`Config`] the same way for every language, so that a file, a named
//! space on Qdrant, a TOML file, mem0's config and the `ATLAS_*` variables mean one thing
//! whichever package reads them.

use crate::config::{Config, StorageKind};
use atlas_domain::Result;
use serde_json::Value;
use std::path::PathBuf;

/// What a binding's constructor takes.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The SQLite file (created when missing).
    pub db: Option<PathBuf>,
    /// A Qdrant server (a space on it instead of a file).
    pub url: Option<String>,
    /// The name of the space on that server.
    pub space: Option<String>,
    /// A TOML configuration file (docs/CONFIG.md).
    pub config_file: Option<PathBuf>,
    /// mem0's configuration object (its `embedder` section mapped).
    pub mem0: Option<Value>,
    /// `onnx`, `http` or `none`, as `ATLAS_EMBEDDER`.
    pub embedder: Option<String>,
}

impl OpenOptions {
    /// The configuration: the file, then `env` (`ATLAS_*`), then mem0's config, then the
    /// options given here, which name the space last; a binding always creates a missing space.
    pub fn config(&self, env: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut settings = Config::load(self.config_file.as_deref(), env)?;
        if let Some(mem0) = &self.mem0 {
            crate::apply_mem0_config(&mut settings, mem0)?;
        }
        if let Some(url) = &self.url {
            settings.storage = StorageKind::Qdrant;
            settings.qdrant.url = Some(url.clone());
        }
        if let Some(space) = &self.space {
            settings.qdrant.space = Some(space.clone());
        }
        if let Some(db) = &self.db {
            settings.db = db.clone();
        }
        if let Some(kind) = &self.embedder {
            settings.apply_env(|k| (k == "ATLAS_EMBEDDER").then(|| kind.clone()))?;
        }
        settings.create = true;
        Ok(settings)
    }
}

/// What a binding calls the space it opened: the file, or the named space and its server.
pub fn label(settings: &Config) -> String {
    match settings.named_space() {
        Some(name) => format!("space {name:?} on {}", settings.qdrant.url.as_deref().unwrap_or("Qdrant")),
        None => settings.db.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_name_the_space_over_the_environment() {
        let env = |k: &str| (k == "ATLAS_DB").then(|| "from-env.db".to_owned());
        let options = OpenOptions { db: Some("given.db".into()), ..OpenOptions::default() };
        let settings = options.config(env).unwrap();
        assert_eq!(settings.db, PathBuf::from("given.db"));
        assert!(settings.create);
        assert_eq!(label(&settings), "given.db");
        let settings = OpenOptions::default().config(env).unwrap();
        assert_eq!(settings.db, PathBuf::from("from-env.db"));
    }

    #[test]
    fn a_url_and_a_name_open_a_named_space_on_qdrant() {
        let options = OpenOptions {
            url: Some("http://127.0.0.1:6334".into()),
            space: Some("team".into()),
            ..OpenOptions::default()
        };
        let settings = options.config(|_| None).unwrap();
        assert_eq!(settings.storage, StorageKind::Qdrant);
        assert_eq!(label(&settings), "space \"team\" on http://127.0.0.1:6334");
    }

    #[test]
    fn an_unknown_embedder_is_a_configuration_error() {
        let options = OpenOptions { embedder: Some("telepathy".into()), ..OpenOptions::default() };
        let err = options.config(|_| None).unwrap_err();
        assert!(err.to_string().contains("telepathy"), "{err}");
    }
}
