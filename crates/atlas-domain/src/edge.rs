//! Typed, bi-temporal edges between memories.

use crate::{MemoryId, Timestamp, Validity};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The relations ATLAS keeps between memories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// `src` came right before `dst` (consecutive episodes of a session).
    Temporal,
    /// `src` caused or led to `dst`.
    Causal,
    /// `src` mentions the entity `dst`.
    Entity,
    /// `src` was consolidated from `dst`.
    DerivedFrom,
    /// `src` replaces `dst` as the current truth.
    Supersedes,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 5] =
        [EdgeKind::Temporal, EdgeKind::Causal, EdgeKind::Entity, EdgeKind::DerivedFrom, EdgeKind::Supersedes];

    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Temporal => "temporal",
            EdgeKind::Causal => "causal",
            EdgeKind::Entity => "entity",
            EdgeKind::DerivedFrom => "derived_from",
            EdgeKind::Supersedes => "supersedes",
        }
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EdgeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EdgeKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| format!("unknown edge kind {s:?}"))
    }
}

/// A directed edge `src -[kind]-> dst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub src: MemoryId,
    pub dst: MemoryId,
    pub kind: EdgeKind,
    pub weight: f32,
    pub validity: Validity,
    pub recorded_at: Timestamp,
}
