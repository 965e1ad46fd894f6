//! Memory identifiers.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Identifies one memory within one memory space. Assigned by the store, strictly increasing in
/// insertion order, never reused; stable across migrations between stores (a Qdrant point id is
/// derived from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub i64);

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for MemoryId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(MemoryId)
            .ok_or_else(|| format!("not a memory id: {s:?} (expected a positive integer)"))
    }
}
