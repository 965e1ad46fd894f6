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

/// Writes ids as runs, `"1-5,9,12-20"`: a receipt of a bulk write stays a few bytes however
/// many memories it stored (an insert's ids are consecutive).
pub fn encode_id_runs(ids: &[MemoryId]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i].0;
        let mut end = start;
        while i + 1 < ids.len() && ids[i + 1].0 == end + 1 {
            end += 1;
            i += 1;
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// Reads what [`encode_id_runs`] wrote.
pub fn decode_id_runs(text: &str) -> Result<Vec<MemoryId>, String> {
    let mut ids = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("not an id run: {part:?}");
        let (start, end) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i64>().map_err(|_| bad())?, b.parse::<i64>().map_err(|_| bad())?),
            None => {
                let n = part.parse::<i64>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if end < start {
            return Err(bad());
        }
        ids.extend((start..=end).map(MemoryId));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn id_runs_round_trip(ids in proptest::collection::vec(1i64..10_000, 0..200)) {
            let ids: Vec<MemoryId> = ids.into_iter().map(MemoryId).collect();
            prop_assert_eq!(decode_id_runs(&encode_id_runs(&ids)).unwrap(), ids);
        }
    }

    #[test]
    fn consecutive_ids_are_one_run() {
        let ids: Vec<MemoryId> = (5..=50_004).map(MemoryId).collect();
        assert_eq!(encode_id_runs(&ids), "5-50004");
        assert_eq!(encode_id_runs(&[MemoryId(1), MemoryId(2), MemoryId(7)]), "1-2,7");
    }
}
