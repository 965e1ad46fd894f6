//! The index as a cache file's body (`crate::cache_file`): written, read back, and an int8
//! index's codes left in that file once it is in place.

use super::{Codes, Index, Positions, Precision};
use std::collections::HashMap;

impl Index {
    /// Writes the index as a cache file's body (crate::cache_file); positions are rebuilt on load.
    pub fn encode(&self, e: &mut crate::cache_file::Encoder<'_>) -> std::io::Result<()> {
        e.u64(self.dim as u64)?;
        e.u64(match self.precision {
            Precision::F32 => 0,
            Precision::Int8 => 1,
        })?;
        e.array(&self.ids)?;
        e.array(&self.bits)?;
        e.array(&self.vectors)?;
        let codes_at = e.position() + 8;
        match &self.codes {
            Codes::Memory(codes) => e.array(codes)?,
            Codes::File { array, changed } => {
                if let Some(why) = &self.broken {
                    return Err(std::io::Error::other(why.clone()));
                }
                // Copied from the file a few thousand vectors at a time (one read each), never
                // whole in memory, with the codes written since put in their places.
                let (n, dim) = (self.len(), self.dim);
                let in_file = array.len() / dim;
                e.u64((n * dim) as u64)?;
                const PIECE: usize = 4096;
                let mut piece = vec![0i8; PIECE.min(n) * dim];
                for start in (0..n).step_by(PIECE) {
                    let end = (start + PIECE).min(n);
                    let from_file = end.min(in_file).saturating_sub(start);
                    if from_file > 0 {
                        array.read(start * dim, &mut piece[..from_file * dim])?;
                    }
                    for i in start..end {
                        let codes = &mut piece[(i - start) * dim..(i - start + 1) * dim];
                        match changed.get(&(i as u32)) {
                            Some(kept) => codes.copy_from_slice(kept),
                            None if i < in_file => {}
                            None => return Err(std::io::Error::other(format!("no codes for position {i}"))),
                        }
                    }
                    e.values(&piece[..(end - start) * dim])?;
                }
            }
        }
        e.array(&self.scales)?;
        *self.written.lock().expect("written lock") = Some((self.version, codes_at));
        Ok(())
    }

    /// An index from what [`Index::encode`] wrote, checked whole against `dim` and `precision`
    /// (any, when `None`); int8 codes of `in_file_from` vectors or more are left in the file.
    pub fn decode(
        d: &mut crate::cache_file::Decoder<'_>,
        dim: usize,
        precision: Option<Precision>,
        in_file_from: usize,
    ) -> Result<Self, crate::cache_file::Stale> {
        let found = d.u64("dimension")? as usize;
        if found != dim {
            return Err(format!("vectors of {found} dimensions, wanted {dim}"));
        }
        let precision = match (d.u64("precision")?, precision) {
            (0, None | Some(Precision::F32)) => Precision::F32,
            (1, None | Some(Precision::Int8)) => Precision::Int8,
            (found, wanted) => return Err(format!("precision {found}, wanted {wanted:?}")),
        };
        let ids: Vec<i64> = d.array("ids")?;
        let n = ids.len();
        let mut index = Index::with_capacity(dim, precision, 0);
        index.codes_in_file_from = in_file_from;
        index.bits = d.array("sign bits")?;
        index.vectors = d.array("vectors")?;
        let codes_found;
        (index.codes, codes_found) = if precision == Precision::Int8 && n >= in_file_from {
            let array = d.array_in_file::<i8>("codes")?;
            let found = array.len();
            (Codes::File { array, changed: HashMap::new() }, found)
        } else {
            let codes: Vec<i8> = d.array("codes")?;
            let found = codes.len();
            (Codes::Memory(codes), found)
        };
        index.scales = d.array("scales")?;
        let (floats, codes, scales) = match precision {
            Precision::F32 => (n * dim, 0, 0),
            Precision::Int8 => (0, n * dim, n),
        };
        if index.bits.len() != n * index.words
            || index.vectors.len() != floats
            || codes_found != codes
            || index.scales.len() != scales
        {
            return Err(format!("arrays do not match {n} vectors of {dim} dimensions as {precision:?}"));
        }
        index.position = Positions::with_capacity(n);
        for (i, id) in ids.iter().enumerate() {
            if index.position.get(*id).is_some() {
                return Err(format!("memory {id} twice"));
            }
            index.position.insert(*id, i);
        }
        index.ids = ids;
        Ok(index)
    }

    /// After the state `version` of this index was written to a cache file (`file`, at `path`:
    /// that very file, opened before it was put in place): an int8 index still in that state
    /// leaves its codes there from now on and frees their memory (or the older file's).
    pub fn adopt_file(&mut self, version: u64, file: std::fs::File, path: &std::path::Path) {
        let written = *self.written.lock().expect("written lock");
        let Some((encoded, codes_at)) = written else { return };
        if version != self.version
            || encoded != version
            || self.precision != Precision::Int8
            || self.broken.is_some()
            || self.len() < self.codes_in_file_from
        {
            return;
        }
        let array = crate::cache_file::FileArray::new(file, path.to_path_buf(), codes_at, self.len() * self.dim);
        self.codes = Codes::File { array, changed: HashMap::new() };
    }
}
