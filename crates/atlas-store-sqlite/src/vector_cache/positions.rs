//! Where each memory's vector sits in the index: a plain array by id for the dense ids most
//! spaces have, a map for the rest.

use std::collections::HashMap;

/// Where each memory's vector sits. Memory ids are mostly dense from 1, so a plain array
/// indexed by id (4 bytes a memory) replaces a hash map (about 35 bytes a memory at a million);
/// ids far outside that range go to a map.
#[derive(Default)]
pub(super) struct Positions {
    pub(super) dense: Vec<u32>,
    pub(super) sparse: HashMap<i64, u32>,
}

const ABSENT: u32 = u32::MAX;

impl Positions {
    pub(super) fn with_capacity(n: usize) -> Self {
        Positions { dense: Vec::with_capacity(n + 1), sparse: HashMap::new() }
    }

    /// Ids up to this bound are kept in the array.
    pub(super) fn dense_bound(&self) -> usize {
        self.dense.capacity().max(self.dense.len() * 2).max(1 << 16)
    }

    pub(super) fn in_dense(&self, id: i64) -> Option<usize> {
        usize::try_from(id).ok().filter(|i| *i < self.dense.len() && self.dense[*i] != ABSENT)
    }

    /// (An id placed in the map while the array was shorter stays there: both are looked at.)
    pub(super) fn get(&self, id: i64) -> Option<usize> {
        match self.in_dense(id) {
            Some(i) => Some(self.dense[i] as usize),
            None => self.sparse.get(&id).map(|p| *p as usize),
        }
    }

    pub(super) fn insert(&mut self, id: i64, position: usize) {
        if let Some(p) = self.sparse.get_mut(&id) {
            *p = position as u32;
            return;
        }
        match usize::try_from(id) {
            Ok(i) if i < self.dense_bound() => {
                if i >= self.dense.len() {
                    self.dense.resize(i + 1, ABSENT);
                }
                self.dense[i] = position as u32;
            }
            _ => {
                self.sparse.insert(id, position as u32);
            }
        }
    }

    pub(super) fn remove(&mut self, id: i64) -> Option<usize> {
        match self.in_dense(id) {
            Some(i) => Some(std::mem::replace(&mut self.dense[i], ABSENT) as usize),
            None => self.sparse.remove(&id).map(|p| p as usize),
        }
    }
}
