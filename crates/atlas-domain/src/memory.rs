//! Memory records: episodes, facts, entities, core memory and the three agent memories.

use crate::{MemoryId, Scope, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The kinds of memory ATLAS stores. The kind follows from the [`Body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// A raw conversation turn or tool step, written on the hot path.
    Episode,
    /// A semantic statement consolidated from episodes.
    Fact,
    /// A graph node: a person, place, project, thing.
    Entity,
    /// An entry of the small always-in-context profile.
    Core,
    /// A past task with its outcome and feedback (Experience memory).
    Experience,
    /// A reusable code pattern (Concept library).
    Concept,
    /// A situation → suggestion pattern with success statistics (Strategy bank).
    Strategy,
    /// What a closed session was about, written by the sleep cycle for context assembly.
    Summary,
    /// A section of a project document (`atlas docs sync`), kept by its content hash.
    Doc,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 9] = [
        MemoryKind::Episode,
        MemoryKind::Fact,
        MemoryKind::Entity,
        MemoryKind::Core,
        MemoryKind::Experience,
        MemoryKind::Concept,
        MemoryKind::Strategy,
        MemoryKind::Summary,
        MemoryKind::Doc,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Episode => "episode",
            MemoryKind::Fact => "fact",
            MemoryKind::Entity => "entity",
            MemoryKind::Core => "core",
            MemoryKind::Experience => "experience",
            MemoryKind::Concept => "concept",
            MemoryKind::Strategy => "strategy",
            MemoryKind::Summary => "summary",
            MemoryKind::Doc => "doc",
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MemoryKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemoryKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let known: Vec<&str> = MemoryKind::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown memory kind {s:?} (known kinds: {})", known.join(", "))
        })
    }
}

/// Kind-specific content. The searchable text lives in [`Memory::text`]; the body holds the
/// structure that each kind's policies need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    Episode {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        speaker: Option<String>,
    },
    Fact {
        subject: String,
        predicate: String,
        object: String,
        /// Belief strength in [0, 1]; opinions decay, observed facts do not.
        confidence: f32,
    },
    Entity {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entity_type: Option<String>,
    },
    Core {
        /// e.g. `user_profile`, `agent_persona`, `active_goal`.
        category: String,
    },
    Experience {
        task: String,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
        /// The caller's id of the trajectory it remembers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trajectory: Option<String>,
        /// What was done: code lines or actions, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        steps: Vec<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        output: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tags: Vec<String>,
        /// Trajectories folded into this one as near-duplicates (their provenance, kept).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        merged: Vec<String>,
    },
    Concept {
        name: String,
        code: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        composed_of: Vec<MemoryId>,
        #[serde(default, skip_serializing_if = "ConceptDetail::is_empty")]
        detail: ConceptDetail,
    },
    Strategy {
        situation: String,
        suggestion: String,
        successes: u32,
        failures: u32,
    },
    Summary {
        /// The session it summarises (its user and agent are the memory's scope).
        session: String,
        /// How many of the session's turns it covers: a session that goes on gets a new
        /// summary, which supersedes this one.
        turns: u32,
    },
    Doc {
        /// The document's path below the synced folder (`/`-separated).
        path: String,
        /// The section's level-2 heading (empty for the text before the first).
        heading: String,
        /// Which section of that heading, when one document repeats it (0 for the first).
        #[serde(default, skip_serializing_if = "is_zero")]
        occurrence: u32,
        /// The sha256 of the section's text: an unchanged section is left as it is.
        hash: String,
    },
}

/// Where a concept comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConceptSource {
    /// Given by a person or a tool's API.
    #[default]
    Primitive,
    /// Compressed out of trajectories.
    Learned,
    /// Chained from other concepts.
    Composed,
}

/// What the Concept library knows of a concept beyond its name and code.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConceptDetail {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its parameters, in order: the signature.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    /// Calls that show it in use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    #[serde(default)]
    pub source: ConceptSource,
    /// How many trajectories it abstracts (a learned concept).
    #[serde(default)]
    pub occurrences: u32,
    #[serde(default)]
    pub successes: u32,
    #[serde(default)]
    pub failures: u32,
}

impl ConceptDetail {
    pub fn is_empty(&self) -> bool {
        *self == ConceptDetail::default()
    }
}

/// How a remembered task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Failure,
    Partial,
}

impl Body {
    pub fn kind(&self) -> MemoryKind {
        match self {
            Body::Episode { .. } => MemoryKind::Episode,
            Body::Fact { .. } => MemoryKind::Fact,
            Body::Entity { .. } => MemoryKind::Entity,
            Body::Core { .. } => MemoryKind::Core,
            Body::Experience { .. } => MemoryKind::Experience,
            Body::Concept { .. } => MemoryKind::Concept,
            Body::Strategy { .. } => MemoryKind::Strategy,
            Body::Summary { .. } => MemoryKind::Summary,
            Body::Doc { .. } => MemoryKind::Doc,
        }
    }

    pub fn episode(speaker: Option<String>) -> Self {
        Body::Episode { speaker }
    }

    pub fn speaker(&self) -> Option<&str> {
        match self {
            Body::Episode { speaker } => speaker.as_deref(),
            _ => None,
        }
    }
}

/// Bi-temporal validity: when the world held this to be true. The transaction time (when ATLAS
/// learned it) is [`Memory::recorded_at`]; the event time is [`Memory::event_time`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validity {
    pub valid_from: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Timestamp>,
}

impl Validity {
    pub fn from(t: Timestamp) -> Self {
        Validity { valid_from: t, valid_until: None }
    }

    /// Valid at `t`: from is inclusive, until is exclusive.
    pub fn holds_at(&self, t: Timestamp) -> bool {
        self.valid_from <= t && self.valid_until.is_none_or(|u| t < u)
    }
}

/// A memory as the caller hands it in, before the store assigns an id.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub scope: Scope,
    pub text: String,
    /// When it happened (for an episode, when it was said).
    pub event_time: Timestamp,
    /// When ATLAS learned it.
    pub recorded_at: Timestamp,
    pub validity: Validity,
    /// Free-form JSON object the caller owns (e.g. `{"dia_id": "D1:3"}`), returned verbatim.
    pub meta: serde_json::Map<String, serde_json::Value>,
    pub body: Body,
}

impl NewMemory {
    /// An episode said at `event_time`, learned at `recorded_at`, valid from when it was said.
    pub fn episode(
        text: impl Into<String>,
        scope: Scope,
        speaker: Option<String>,
        event_time: Timestamp,
        recorded_at: Timestamp,
    ) -> Self {
        NewMemory {
            scope,
            text: text.into(),
            event_time,
            recorded_at,
            validity: Validity::from(event_time),
            meta: serde_json::Map::new(),
            body: Body::episode(speaker),
        }
    }

    pub fn kind(&self) -> MemoryKind {
        self.body.kind()
    }

    pub fn with_id(self, id: MemoryId) -> Memory {
        Memory {
            id,
            scope: self.scope,
            text: self.text,
            event_time: self.event_time,
            recorded_at: self.recorded_at,
            validity: self.validity,
            meta: self.meta,
            body: self.body,
            context: None,
            lifecycle: Lifecycle::default(),
        }
    }
}

/// What happened to a memory after it was written: its use and its soft deletion. Kept beside
/// the record and changed without rewriting it ([`crate::ports::MemoryStore::update`]); the
/// forgetting policies ([`crate::policy::decay`]) read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// Soft-deleted at this time: recall no longer returns it, `get`, `explain` and exports
    /// still do, and it can be recovered. Only a hard forget removes a memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Timestamp>,
    /// Last time an agent used it (reported feedback, a strategy's or concept's use): resets
    /// the decay clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uses: u32,
    /// A fact's SM-2 review schedule, once it has been reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::policy::decay::Review>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Lifecycle {
    pub fn is_deleted(&self) -> bool {
        self.deleted_at.is_some()
    }

    /// Nothing has happened to the memory since it was written.
    pub fn is_fresh(&self) -> bool {
        *self == Lifecycle::default()
    }
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub id: MemoryId,
    pub scope: Scope,
    pub text: String,
    pub event_time: Timestamp,
    pub recorded_at: Timestamp,
    pub validity: Validity,
    pub meta: serde_json::Map<String, serde_json::Value>,
    pub body: Body,
    /// The turn this episode answers: its temporal predecessor's line (`"Speaker: text"`), set by
    /// the store when it links the two and cleared when that turn is forgotten. Indexed and
    /// embedded with the memory, so that "yes, twice last year" is found by the question it
    /// answers ([`crate::policy::embedding`]).
    pub context: Option<String>,
    pub lifecycle: Lifecycle,
}

impl Memory {
    pub fn kind(&self) -> MemoryKind {
        self.body.kind()
    }

    /// The record without its id, as it would be re-imported.
    pub fn to_new(&self) -> NewMemory {
        NewMemory {
            scope: self.scope.clone(),
            text: self.text.clone(),
            event_time: self.event_time,
            recorded_at: self.recorded_at,
            validity: self.validity,
            meta: self.meta.clone(),
            body: self.body.clone(),
        }
    }
}
