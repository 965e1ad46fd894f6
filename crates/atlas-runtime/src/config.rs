//! Configuration: a TOML file, then `ATLAS_*` environment overrides, then command-line flags.

use atlas_domain::policy::fusion::{DEFAULT_RRF_K, FusionMethod};
use atlas_domain::policy::limits::DEFAULT_MAX_TEXT_BYTES;
use atlas_domain::{AtlasError, Result};
use serde::Deserialize;

pub use crate::embedder_config::{EmbedderKind, HttpConfig, OnnxConfig, Secret};
use std::path::{Path, PathBuf};

/// Everything the runtime needs to compose an ATLAS instance.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The memory space: the SQLite file (with `storage = "qdrant"`, the space's sidecar file
    /// holding what Qdrant does not model; the collection is named after it).
    pub db: PathBuf,
    pub storage: StorageKind,
    pub qdrant: QdrantConfig,
    pub durability: DurabilityKind,
    /// What the SQLite store's vector cache keeps for rescoring: `auto` (floats below 50k
    /// vectors, int8 codes from there), `f32` or `int8`.
    pub vector_cache: VectorCacheKind,
    /// Largest accepted text of one memory, in bytes.
    pub max_text_bytes: usize,
    pub embedder: EmbedderKind,
    /// How many memories the background task embeds per batch.
    pub embed_batch: usize,
    pub onnx: OnnxConfig,
    /// The embeddings endpoint of `embedder = "http"`.
    pub http: HttpConfig,
    pub recall: RecallConfig,
    pub consolidation: ConsolidationConfig,
    pub forgetting: ForgettingConfig,
    pub llm: LlmConfig,
    pub bank: BankConfig,
    /// How long a write (and opening the file) waits for another process's lock, in ms; long
    /// enough by default for a million-memory import of another process to commit.
    pub busy_timeout_ms: u64,
    /// Create the memory space if it does not exist. Set by the caller (commands that only
    /// read leave it off, so a mistyped path is an error, not a new empty database); never
    /// read from the file.
    #[serde(skip)]
    pub create: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    Sqlite,
    /// A Qdrant server or cluster (feature `store-qdrant`).
    Qdrant,
}

/// Settings of the Qdrant store.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QdrantConfig {
    /// The server's gRPC address, e.g. `http://localhost:6334`; a cluster's nodes separated by
    /// commas (calls go to the next node while one is unreachable).
    pub url: Option<String>,
    /// The memory space's name on the server: every process of every host that names it shares
    /// it, with no local file (`db` is then not used). Unset: `db` names a space file.
    pub space: Option<String>,
    /// Better set through `ATLAS_QDRANT_API_KEY` than written in a file.
    pub api_key: Option<String>,
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub collection_prefix: String,
    /// Shards of a new collection (the server's default when unset).
    pub shards: Option<u32>,
    /// Copies of each shard in a cluster (the server's default when unset).
    pub replication_factor: Option<u32>,
    /// Replicas of a shard that must confirm a write before it is acknowledged (the
    /// server's default, 1, when unset).
    pub write_consistency_factor: Option<u32>,
    /// Keep the float vectors on disk (memory-mapped) rather than in RAM.
    pub on_disk_vectors: bool,
    /// `"none"` or `"int8"` (scalar quantisation in RAM, floats for rescoring).
    pub quantization: String,
    /// Points per upsert request.
    pub batch: usize,
}

impl Default for QdrantConfig {
    fn default() -> Self {
        QdrantConfig {
            url: None,
            space: None,
            api_key: None,
            timeout_ms: 30_000,
            connect_timeout_ms: 5_000,
            collection_prefix: "atlas".into(),
            shards: None,
            replication_factor: None,
            write_consistency_factor: None,
            on_disk_vectors: false,
            quantization: "none".into(),
            batch: 256,
        }
    }
}

impl StorageKind {
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        match text.trim() {
            "sqlite" => Ok(StorageKind::Sqlite),
            "qdrant" => Ok(StorageKind::Qdrant),
            other => Err(format!("expected sqlite or qdrant, got {other:?}")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorCacheKind {
    #[default]
    Auto,
    F32,
    Int8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityKind {
    /// Survives a crash of the process (WAL, synchronous = NORMAL).
    Normal,
    /// Also survives power loss: every commit is fsynced.
    Full,
}

/// Language models for consolidation: endpoints grouped in tiers; the cycle uses one tier and
/// falls back only within it, never to a pricier one.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The tier consolidation uses: `conversation`, `economy` or `local`.
    pub tier: String,
    pub endpoints: Vec<LlmEndpointConfig>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig { tier: "local".into(), endpoints: Vec::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmEndpointConfig {
    pub name: String,
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    pub provider: String,
    pub url: String,
    pub model: String,
    pub tier: String,
    /// The variable holding the API key: a key is never written in the file.
    pub api_key_env: Option<String>,
    pub timeout_ms: u64,
    pub max_retries: u32,
    pub max_tokens: u32,
    /// US dollars per million tokens, for the ledger.
    pub input_price: f64,
    pub output_price: f64,
    /// Set from `ATLAS_LLM_API_KEY`, never from the file.
    #[serde(skip)]
    pub api_key: Option<String>,
}

impl Default for LlmEndpointConfig {
    fn default() -> Self {
        LlmEndpointConfig {
            name: "llm".into(),
            provider: "openai".into(),
            url: String::new(),
            model: String::new(),
            tier: "local".into(),
            api_key_env: None,
            timeout_ms: 60_000,
            max_retries: 3,
            max_tokens: 1024,
            input_price: 0.0,
            output_price: 0.0,
            api_key: None,
        }
    }
}

/// The sleep cycle.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsolidationConfig {
    /// Most episodes one cycle reads.
    pub batch: usize,
    /// An episode whose extraction failed this many times is left alone (its error is kept).
    pub max_attempts: u32,
    /// A failed episode is retried after this many ms times its attempt count.
    pub retry_after_ms: i64,
    /// Most model calls per cycle (seed 003: one); the rest waits for the next cycle.
    pub llm_calls: usize,
    /// Most turns one extraction call reads. A small local model keeps each fact with its
    /// turn only one turn at a time (docs/EVAL.md: the sleep cycle's model); an endpoint model
    /// reads a batch for one call's price.
    pub turns_per_call: usize,
    /// Link turns to the people, places and things they name (entities by rule).
    pub entities: bool,
    /// Two facts of the same subject and predicate are one when their objects' embeddings are
    /// at least this similar (cosine), besides sharing most words (above 1: words only).
    pub merge_similarity: f64,
    /// Two objects that are not the same by rule, agree on every value and are at least this
    /// similar (or share a quarter of their words) are ambiguous: the model judges them (same,
    /// replaces, both hold); without one, or once `judge_calls` are spent, they are different.
    pub judge_similarity: f64,
    /// Most model calls per cycle that judge ambiguous pairs (each reads up to 32), besides
    /// `llm_calls`.
    pub judge_calls: usize,
    /// In a long-lived process: a cycle after this many new episodes (0: never by count)...
    pub every: usize,
    /// ... or after this many seconds without a new one, when some wait.
    pub idle_secs: u64,
    /// Write a summary of each session once it is closed (by LLM where one is configured,
    /// extractively otherwise).
    pub summaries: bool,
    /// A session is closed when its last turn was said this long ago, or at `end_session`.
    pub session_idle_secs: u64,
    /// Most sessions one cycle summarises.
    pub summaries_per_cycle: usize,
}

impl Default for ConsolidationConfig {
    fn default() -> Self {
        ConsolidationConfig {
            batch: 200,
            max_attempts: 5,
            retry_after_ms: 60_000,
            llm_calls: 1,
            turns_per_call: 24,
            entities: true,
            merge_similarity: atlas_domain::policy::consolidation::SAME_FACT_SIMILARITY,
            judge_similarity: atlas_domain::policy::timeline::JUDGE_SIMILARITY,
            judge_calls: 1,
            every: 20,
            idle_secs: 300,
            summaries: true,
            session_idle_secs: 1800,
            summaries_per_cycle: 20,
        }
    }
}

/// The markdown bank (docs/FILES.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BankConfig {
    /// When set, every sleep cycle writes the bank into this folder after it commits (whole
    /// pages, all of a cycle's changes or none), so that `git diff` shows what it learned.
    pub dir: Option<PathBuf>,
}

/// Decay and the archive (`atlas decay`, `atlas archive`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForgettingConfig {
    /// In a long-lived process, the decay pass runs after a sleep cycle when the last one is
    /// at least this many hours old (0: never in the background).
    pub decay_every_hours: f64,
    /// The archive pass moves memories soft-deleted at least this many days ago...
    pub archive_deleted_after_days: f64,
    /// ... and, when set, episodes learned at least this many days ago. Unset by default:
    /// raw turns are recall's strongest evidence, so they leave the store only when asked.
    pub archive_episodes_after_days: Option<f64>,
}

impl Default for ForgettingConfig {
    fn default() -> Self {
        ForgettingConfig {
            decay_every_hours: 24.0,
            archive_deleted_after_days: 30.0,
            archive_episodes_after_days: None,
        }
    }
}

/// Weights and sizes of hybrid recall.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecallConfig {
    /// `convex` (min-max-normalised scores, weighted) or `rrf` (reciprocal ranks).
    pub fusion: FusionMethod,
    pub rrf_k: f64,
    pub text_weight: f64,
    pub vector_weight: f64,
    /// Candidates each signal contributes before fusion (at least k).
    pub candidates: usize,
    /// Share of a strong hit's score given to the turns before and after it (0 turns it off).
    pub context_weight: f64,
    /// How many of the best hits spread to their neighbouring turns.
    pub context_from: usize,
    /// How many turns away (along temporal edges) context reaches.
    pub context_reach: u32,
    /// Each further turn gets this fraction of the previous one's share.
    pub context_decay: f64,
    /// Share of a strong hit's score given to memories linked to it by typed edges other than
    /// temporal ones (entity, causal, derived_from, supersedes; 0 turns it off).
    pub graph_weight: f64,
    /// How many edges away graph expansion reaches (at most 3).
    pub graph_depth: u32,
    /// Each further hop gets this fraction of the previous one's share.
    pub graph_decay: f64,
    /// Added after fusion to a memory from now, halving every `recency_half_life_days` of age
    /// (0 turns it off).
    pub recency_weight: f64,
    pub recency_half_life_days: f64,
    /// Hits whose words overlap at least this much (Jaccard) with a better hit fold into it,
    /// listed as its duplicates; above 1 nothing folds.
    pub duplicate_threshold: f64,
    /// Search vectors with the query's direction away from the space's mean vector
    /// ([`atlas_domain::policy::embedding::away_from_mean`]): helps spaces of long messages
    /// (BEAM dev R@10 0.560 → 0.603), costs short chat turns (LoCoMo dev 0.833 → 0.809;
    /// docs/EVAL.md). Off by default.
    pub centre_query: bool,
    /// At most this long (ms) a recall spends embedding memories still waiting for a vector
    /// before it answers (0: none); what is left waits for the background task or
    /// `atlas embed-pending`, and full text covers it meanwhile.
    pub embed_budget_ms: u64,
    /// At most this long (ms) a recall waits for its query's vector; past it, or while the
    /// embedder has just failed (a circuit breaker pauses it, one second doubling up to 30),
    /// the recall answers from full text at once and its vector signal says why.
    pub query_embedding_timeout_ms: u64,
    /// The standing instruction of the user that ranks best for a request ("Always … when I
    /// ask about …") comes at place 2 at worst ([`atlas_domain::policy::instructions`]): BEAM
    /// dev instruction following R@10 0.56 → 0.78 (docs/EVAL.md). Off, it ranks like any memory.
    pub standing_instructions: bool,
    /// For a request for advice, a plan or a recommendation ("How should I…", "Can you
    /// suggest…"), the user's stated preference that ranks best ("I prefer…", "I'd rather…")
    /// comes at place 3 at worst ([`atlas_domain::policy::preferences`]). Off, it ranks like
    /// any memory.
    pub standing_preferences: bool,
    /// Added to a memory that holds all the numbers the question names ("93%", "5 hours"),
    /// in proportion to the share it holds ([`atlas_domain::policy::question`]); 0 turns it off.
    pub number_weight: f64,
    /// For a question about the requester ("What score did I get…", no "you" in it), the share
    /// of its score a turn the agent said keeps ([`atlas_domain::policy::question`]); 1 turns
    /// it off.
    pub agent_turn_weight: f64,
}

impl Default for RecallConfig {
    fn default() -> Self {
        RecallConfig {
            fusion: FusionMethod::Convex,
            rrf_k: DEFAULT_RRF_K,
            text_weight: 1.0,
            vector_weight: 0.75,
            candidates: 100,
            context_weight: 0.4,
            context_from: 10,
            context_reach: 1,
            context_decay: 0.5,
            graph_weight: 0.3,
            graph_depth: 2,
            graph_decay: 0.5,
            recency_weight: 0.1,
            recency_half_life_days: 30.0,
            duplicate_threshold: 0.8,
            centre_query: false,
            embed_budget_ms: 250,
            query_embedding_timeout_ms: 500,
            standing_instructions: true,
            standing_preferences: true,
            number_weight: 0.5,
            agent_turn_weight: 0.5,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db: PathBuf::from("atlas.db"),
            storage: StorageKind::Sqlite,
            qdrant: QdrantConfig::default(),
            durability: DurabilityKind::Normal,
            vector_cache: VectorCacheKind::Auto,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
            embedder: EmbedderKind::default_for_build(),
            embed_batch: 256,
            onnx: OnnxConfig::default(),
            http: HttpConfig::default(),
            recall: RecallConfig::default(),
            consolidation: ConsolidationConfig::default(),
            forgetting: ForgettingConfig::default(),
            bank: BankConfig::default(),
            llm: LlmConfig::default(),
            busy_timeout_ms: 60_000,
            create: true,
        }
    }
}

impl Config {
    /// The name of the space on the Qdrant server when the space is named (no local file).
    pub fn named_space(&self) -> Option<&str> {
        match self.storage {
            StorageKind::Qdrant => self.qdrant.space.as_deref(),
            StorageKind::Sqlite => None,
        }
    }

    /// Reads `path` (if given) and applies environment overrides from `env`.
    pub fn load(path: Option<&Path>, env: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut config = match path {
            None => Config::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| AtlasError::Config(format!("cannot read {}: {e}", p.display())))?;
                Self::from_toml(&text, &p.display().to_string())?
            }
        };
        config.apply_env(env)?;
        Ok(config)
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| AtlasError::Config(format!("{origin}: {e}")))
    }

    /// `ATLAS_DB`, `ATLAS_MAX_TEXT_BYTES`, `ATLAS_DURABILITY` (`normal` | `full`),
    /// the embedder's (`ATLAS_EMBEDDER` and the rest: `embedder_config::apply_env`), `ATLAS_STORAGE` (`sqlite` |
    /// `qdrant`), `ATLAS_QDRANT_URL`, `ATLAS_QDRANT_SPACE`, `ATLAS_QDRANT_API_KEY`, `ATLAS_BUSY_TIMEOUT_MS`,
    /// `ATLAS_RECALL_EMBED_BUDGET_MS`.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<()> {
        if let Some(v) = env("ATLAS_STORAGE") {
            self.storage = StorageKind::parse(&v).map_err(|e| AtlasError::Config(format!("ATLAS_STORAGE: {e}")))?;
        }
        if let Some(url) = env("ATLAS_QDRANT_URL") {
            self.qdrant.url = Some(url);
        }
        if let Some(space) = env("ATLAS_QDRANT_SPACE") {
            self.qdrant.space = Some(space);
        }
        if let Some(key) = env("ATLAS_QDRANT_API_KEY") {
            self.qdrant.api_key = Some(key);
        }
        if let Some(db) = env("ATLAS_DB") {
            self.db = PathBuf::from(db);
        }
        if let Some(v) = env("ATLAS_MAX_TEXT_BYTES") {
            self.max_text_bytes = v.trim().parse().map_err(|_| {
                AtlasError::Config(format!("ATLAS_MAX_TEXT_BYTES: expected a number of bytes, got {v:?}"))
            })?;
        }
        crate::embedder_config::apply_env(self, &env)?;
        if let Some(v) = env("ATLAS_DURABILITY") {
            self.durability = match v.trim() {
                "normal" => DurabilityKind::Normal,
                "full" => DurabilityKind::Full,
                other => {
                    return Err(AtlasError::Config(format!(
                        "ATLAS_DURABILITY: expected normal or full, got {other:?}"
                    )));
                }
            };
        }
        if let Some(url) = env("ATLAS_LLM_URL").filter(|u| !u.trim().is_empty()) {
            // One endpoint from the environment, first in the configured tier.
            let endpoint = LlmEndpointConfig {
                name: "ATLAS_LLM_URL".into(),
                provider: env("ATLAS_LLM_PROVIDER").unwrap_or_else(|| "openai".into()),
                url,
                model: env("ATLAS_LLM_MODEL").unwrap_or_else(|| "default".into()),
                tier: self.llm.tier.clone(),
                api_key: env("ATLAS_LLM_API_KEY"),
                ..LlmEndpointConfig::default()
            };
            self.llm.endpoints.insert(0, endpoint);
        }
        if let Some(tier) = env("ATLAS_LLM_TIER") {
            self.llm.tier = tier;
        }
        let millis = |key: &str, v: String| -> Result<u64> {
            v.trim()
                .parse()
                .map_err(|_| AtlasError::Config(format!("{key}: expected a number of milliseconds, got {v:?}")))
        };
        if let Some(v) = env("ATLAS_BUSY_TIMEOUT_MS") {
            self.busy_timeout_ms = millis("ATLAS_BUSY_TIMEOUT_MS", v)?;
        }
        if let Some(v) = env("ATLAS_RECALL_EMBED_BUDGET_MS") {
            self.recall.embed_budget_ms = millis("ATLAS_RECALL_EMBED_BUDGET_MS", v)?;
        }
        if let Some(v) = env("ATLAS_RECALL_QUERY_EMBEDDING_TIMEOUT_MS") {
            self.recall.query_embedding_timeout_ms = millis("ATLAS_RECALL_QUERY_EMBEDDING_TIMEOUT_MS", v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_then_env() {
        let config =
            Config::from_toml("db = \"x.db\"\nmax_text_bytes = 10\n[recall]\nrrf_k = 30.0\n", "t.toml").unwrap();
        assert_eq!((config.db.to_str(), config.max_text_bytes, config.recall.rrf_k), (Some("x.db"), 10, 30.0));
        let mut config = config;
        config.apply_env(|k| (k == "ATLAS_DURABILITY").then(|| "full".to_string())).unwrap();
        assert_eq!(config.durability, DurabilityKind::Full);
    }

    #[test]
    fn errors_name_the_origin_and_key() {
        let err = Config::from_toml("max_text_byte = 3", "atlas.toml").unwrap_err().to_string();
        assert!(err.contains("atlas.toml") && err.contains("max_text_byte"), "{err}");
        let err = Config::default()
            .apply_env(|k| (k == "ATLAS_MAX_TEXT_BYTES").then(|| "lots".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ATLAS_MAX_TEXT_BYTES"), "{err}");
        let err = Config::default().apply_env(|_| Some("lots".into())).unwrap_err().to_string();
        assert!(err.contains("ATLAS_STORAGE") && err.contains("sqlite or qdrant"), "{err}");
    }
}
