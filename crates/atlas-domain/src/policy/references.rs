//! Ids that memories hold (their edges, a concept's `composed_of`, anything a body names), and
//! their renumbering when a backup is restored into a space that already holds memories.
//!
//! A restore keeps every reference pointing at the same memory it pointed at when exported: ids
//! of the file are mapped to ids reserved for it, and a reference to an id the file does not
//! hold must name a memory of the space, or the restore is refused.

use crate::ports::StoredMemory;
use crate::{Body, MemoryId};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

/// The ids a body names, with the field that names them.
pub fn body_references(body: &Body) -> Vec<(&'static str, MemoryId)> {
    match body {
        Body::Concept { composed_of, .. } => composed_of.iter().map(|id| ("body.composed_of", *id)).collect(),
        Body::Episode { .. }
        | Body::Fact { .. }
        | Body::Entity { .. }
        | Body::Core { .. }
        | Body::Experience { .. }
        | Body::Strategy { .. }
        | Body::Summary { .. }
        | Body::Doc { .. } => Vec::new(),
    }
}

fn map_body(
    body: &mut Body,
    map: &mut dyn FnMut(&'static str, MemoryId) -> Result<MemoryId, Dangling>,
) -> Result<(), Dangling> {
    match body {
        Body::Concept { composed_of, .. } => {
            for id in composed_of {
                *id = map("body.composed_of", *id)?;
            }
            Ok(())
        }
        Body::Episode { .. }
        | Body::Fact { .. }
        | Body::Entity { .. }
        | Body::Core { .. }
        | Body::Experience { .. }
        | Body::Strategy { .. }
        | Body::Summary { .. }
        | Body::Doc { .. } => Ok(()),
    }
}

/// Where each id of a file goes, given `first`, the first of the ids reserved for it. With
/// `keep_layout`, ids keep their distances (`id - 1 + first`: the identity when `first` is 1,
/// which is a restore into a space that never held a memory); otherwise they are packed in id
/// order. Both keep the order, so every edge still travels with its later end.
pub fn plan(ids: &[MemoryId], first: MemoryId, keep_layout: bool) -> BTreeMap<MemoryId, MemoryId> {
    let sorted: BTreeSet<MemoryId> = ids.iter().copied().collect();
    sorted
        .into_iter()
        .enumerate()
        .map(|(rank, old)| {
            let new = if keep_layout { old.0 - 1 + first.0 } else { first.0 + rank as i64 };
            (old, MemoryId(new))
        })
        .collect()
}

/// How many ids [`plan`] needs reserved.
pub fn ids_needed(ids: &[MemoryId], keep_layout: bool) -> u64 {
    if keep_layout { ids.iter().map(|id| id.0).max().unwrap_or(0).max(0) as u64 } else { ids.len() as u64 }
}

/// The ids the batch refers to (edges' ends and body references) that are not memories of the
/// batch: they must be memories of the space.
pub fn outside_references(batch: &[StoredMemory]) -> BTreeSet<MemoryId> {
    let inside: HashSet<MemoryId> = batch.iter().map(|s| s.memory.id).collect();
    let mut outside = BTreeSet::new();
    for s in batch {
        let edge_ends = s.edges.iter().flat_map(|e| [e.src, e.dst]);
        let body = body_references(&s.memory.body).into_iter().map(|(_, id)| id);
        outside.extend(edge_ends.chain(body).filter(|id| !inside.contains(id)));
    }
    outside
}

/// A reference to a memory that is neither in the file nor in the space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dangling {
    /// The memory (as the file numbers it) that holds the reference.
    pub memory: MemoryId,
    pub field: String,
    pub target: MemoryId,
}

impl fmt::Display for Dangling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory {} refers to memory {} in {}, which is neither in the file nor in this space",
            self.memory, self.target, self.field
        )
    }
}

/// Renumbers the batch by `map`: memory ids, both ends of every edge and every id a body holds.
/// A reference the map lacks is kept when `in_space` holds it, and refused otherwise. An edge
/// must touch the memory that carries it.
pub fn renumber(
    batch: &mut [StoredMemory],
    map: &BTreeMap<MemoryId, MemoryId>,
    in_space: &HashSet<MemoryId>,
) -> Result<(), Dangling> {
    for item in batch.iter_mut() {
        let holder = item.memory.id;
        let mut resolve = |field: &'static str, id: MemoryId| -> Result<MemoryId, Dangling> {
            match map.get(&id) {
                Some(new) => Ok(*new),
                None if in_space.contains(&id) => Ok(id),
                None => Err(Dangling { memory: holder, field: field.to_owned(), target: id }),
            }
        };
        for edge in &mut item.edges {
            if edge.src != holder && edge.dst != holder {
                return Err(Dangling { memory: holder, field: "edges".into(), target: edge.src });
            }
            edge.src = resolve("edges", edge.src)?;
            edge.dst = resolve("edges", edge.dst)?;
        }
        map_body(&mut item.memory.body, &mut resolve)?;
        item.memory.id = resolve("id", holder)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Edge, EdgeKind, NewMemory, Scope, Timestamp, Validity};
    use proptest::prelude::*;

    fn concept(id: i64, parts: &[i64]) -> StoredMemory {
        let body = Body::Concept {
            name: format!("c{id}"),
            code: "fn f() {}".into(),
            composed_of: parts.iter().copied().map(MemoryId).collect(),
            detail: Default::default(),
        };
        let new = NewMemory { body, ..NewMemory::episode("x", Scope::default(), None, Timestamp(1), Timestamp(1)) };
        StoredMemory { memory: new.with_id(MemoryId(id)), vector: None, edges: Vec::new(), consolidated_at: None }
    }

    fn edge(src: i64, dst: i64) -> Edge {
        Edge {
            src: MemoryId(src),
            dst: MemoryId(dst),
            kind: EdgeKind::DerivedFrom,
            weight: 1.0,
            validity: Validity::from(Timestamp(1)),
            recorded_at: Timestamp(1),
        }
    }

    #[test]
    fn a_reference_outside_file_and_space_is_refused() {
        let mut batch = vec![concept(3, &[1]), concept(7, &[3, 5])];
        let map = plan(&[MemoryId(3), MemoryId(7)], MemoryId(100), false);
        let err = renumber(&mut batch, &map, &HashSet::from([MemoryId(1)])).unwrap_err();
        assert_eq!(err, Dangling { memory: MemoryId(7), field: "body.composed_of".into(), target: MemoryId(5) });
    }

    #[test]
    fn identity_from_one_keeps_every_id() {
        let ids = [MemoryId(2), MemoryId(5), MemoryId(9)];
        let map = plan(&ids, MemoryId(1), true);
        assert!(map.iter().all(|(a, b)| a == b));
        assert_eq!(ids_needed(&ids, true), 9);
        assert_eq!(ids_needed(&ids, false), 3);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Whatever the layout, every reference still names the memory it named: the memory
        /// at the new id is the one that was at the old id.
        #[test]
        fn renumbering_preserves_every_reference(
            ids in proptest::collection::btree_set(1i64..500, 1..30),
            links in proptest::collection::vec((0usize..30, 0usize..30), 0..40),
            first in 1i64..10_000,
            keep in any::<bool>(),
        ) {
            let ids: Vec<i64> = ids.into_iter().collect();
            let pick = |i: usize| ids[i % ids.len()];
            let mut batch: Vec<StoredMemory> = ids.iter().map(|id| concept(*id, &[])).collect();
            for (a, b) in &links {
                let (a, b) = (pick(*a), pick(*b));
                let (lo, hi) = (a.min(b), a.max(b));
                let holder = batch.iter_mut().find(|s| s.memory.id.0 == hi).unwrap();
                holder.edges.push(edge(hi, lo));
                if let Body::Concept { composed_of, .. } = &mut holder.memory.body {
                    composed_of.push(MemoryId(lo));
                }
            }
            let before = batch.clone();
            let old_ids: Vec<MemoryId> = ids.iter().copied().map(MemoryId).collect();
            let map = plan(&old_ids, MemoryId(first), keep);
            renumber(&mut batch, &map, &HashSet::new()).unwrap();
            for (old, new) in before.iter().zip(&batch) {
                prop_assert_eq!(map[&old.memory.id], new.memory.id);
                for (e0, e1) in old.edges.iter().zip(&new.edges) {
                    prop_assert_eq!(map[&e0.src], e1.src);
                    prop_assert_eq!(map[&e0.dst], e1.dst);
                    prop_assert!(StoredMemory::carries(new.memory.id, e1));
                }
                let refs0 = body_references(&old.memory.body);
                let refs1 = body_references(&new.memory.body);
                prop_assert_eq!(refs0.len(), refs1.len());
                for ((_, a), (_, b)) in refs0.iter().zip(&refs1) {
                    prop_assert_eq!(map[a], *b);
                }
            }
            let news: HashSet<MemoryId> = batch.iter().map(|s| s.memory.id).collect();
            prop_assert_eq!(news.len(), batch.len());
            prop_assert!(news.iter().all(|id| id.0 >= first));
            prop_assert!(news.iter().all(|id| (id.0 - first) < ids_needed(&old_ids, keep) as i64));
        }
    }
}
