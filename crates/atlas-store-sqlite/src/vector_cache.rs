//! An in-memory copy of the vector table for fast nearest-neighbour search.
//!
//! SQLite (`memory_vectors`) stays the truth; this is a derived cache, loaded on the first
//! vector search and kept in step by this process's own writes. A query scans sign bits
//! (48 bytes a vector for 384 dimensions) by Hamming distance on one thread, keeping only the
//! nearest, then rescores the best of those with the kept vectors: float copies (exact), or
//! int8 codes with a scale per vector (a quarter of the memory, scores within about 1% of
//! exact; rereading the floats from vec0 for the final hits was measured at 0.18 ms a vector,
//! too slow to be worth it).
//! From 250k vectors (`crate::CODES_IN_FILE_FROM`), an int8 index read from (or written to) its
//! cache file leaves the codes there and reads the shortlist's codes by position (`pread`): at a
//! million vectors, 384 MB stay in the system's file cache instead of the process's memory, for
//! about 0.7 ms of reads a search.
//! SQL only applies the filter. Writes by another process reach this cache when the store is
//! next opened.

use std::collections::HashMap;

/// What the cache keeps of each vector for rescoring the sign-bit candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// The float vectors: exact scores, 4 bytes a dimension.
    #[default]
    F32,
    /// Symmetric int8 codes and one scale per vector: 1 byte a dimension, scores within about
    /// 1% of exact.
    Int8,
}

pub struct Index {
    dim: usize,
    words: usize,
    precision: Precision,
    ids: Vec<i64>,
    bits: Vec<u64>,
    /// `F32`: `dim` floats a vector.
    vectors: Vec<f32>,
    /// `Int8`: `dim` codes and one scale a vector.
    codes: Codes,
    scales: Vec<f32>,
    /// This state of the index, unique in the process ([`next_version`]): an index's file is
    /// adopted only by the very state it was written from.
    version: u64,
    /// The version last written to a file, and where its codes start there.
    written: std::sync::Mutex<Option<(u64, u64)>>,
    /// Why the codes cannot be read any more (their file failed under this process): every
    /// search fails until the index is loaded again.
    broken: Option<String>,
    /// From this many vectors, int8 codes are left in the index's file (read from or written to).
    codes_in_file_from: usize,
    position: Positions,
    /// Buffers of past sign-bit scans (the nearest pairs of distance and position), kept for
    /// reuse ([`crate::SEARCH_BUFFERS_KEPT`]).
    scan_buffers: std::sync::Mutex<Vec<Vec<(u32, u32)>>>,
    /// The sum of the kept vectors (as kept: int8 codes times their scale), counted on the first
    /// [`Index::mean`] and kept in step by every change after it.
    sum: std::sync::Mutex<Option<Vec<f64>>>,
}

/// Where each memory's vector sits. Memory ids are mostly dense from 1, so a plain array
/// indexed by id (4 bytes a memory) replaces a hash map (about 35 bytes a memory at a million);
/// ids far outside that range go to a map.
#[derive(Default)]
struct Positions {
    dense: Vec<u32>,
    sparse: HashMap<i64, u32>,
}

const ABSENT: u32 = u32::MAX;

/// Where an int8 index keeps its codes.
enum Codes {
    /// In memory, `dim` a vector by position (an index built from SQL, or below
    /// `codes_in_file_from` vectors).
    Memory(Vec<i8>),
    /// Left in the index's cache file (read from it, or written by this process) and read per
    /// candidate: a million vectors' codes (384 MB) stay out of the process's memory, in the
    /// system's file cache. The codes of positions written since, or moved, are in `changed`;
    /// positions past the file's are always there.
    File { array: crate::cache_file::FileArray, changed: HashMap<u32, Box<[i8]>> },
}

/// A number no state of an index in this process had before.
fn next_version() -> u64 {
    static VERSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Positions {
    fn with_capacity(n: usize) -> Self {
        Positions { dense: Vec::with_capacity(n + 1), sparse: HashMap::new() }
    }

    /// Ids up to this bound are kept in the array.
    fn dense_bound(&self) -> usize {
        self.dense.capacity().max(self.dense.len() * 2).max(1 << 16)
    }

    fn in_dense(&self, id: i64) -> Option<usize> {
        usize::try_from(id).ok().filter(|i| *i < self.dense.len() && self.dense[*i] != ABSENT)
    }

    /// (An id placed in the map while the array was shorter stays there: both are looked at.)
    fn get(&self, id: i64) -> Option<usize> {
        match self.in_dense(id) {
            Some(i) => Some(self.dense[i] as usize),
            None => self.sparse.get(&id).map(|p| *p as usize),
        }
    }

    fn insert(&mut self, id: i64, position: usize) {
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

    fn remove(&mut self, id: i64) -> Option<usize> {
        match self.in_dense(id) {
            Some(i) => Some(std::mem::replace(&mut self.dense[i], ABSENT) as usize),
            None => self.sparse.remove(&id).map(|p| p as usize),
        }
    }
}

impl Index {
    /// Room for `n` vectors up front: growing by doubling would briefly hold the old and the
    /// new buffer, half again the cache's size at its peak.
    pub fn with_capacity(dim: usize, precision: Precision, n: usize) -> Self {
        let words = dim.div_ceil(64);
        let (floats, codes) = match precision {
            Precision::F32 => (n * dim, 0),
            Precision::Int8 => (0, n * dim),
        };
        Index {
            dim,
            words,
            precision,
            ids: Vec::with_capacity(n),
            bits: Vec::with_capacity(n * words),
            vectors: Vec::with_capacity(floats),
            codes: Codes::Memory(Vec::with_capacity(codes)),
            scales: Vec::with_capacity(if codes > 0 { n } else { 0 }),
            position: Positions::with_capacity(n),
            scan_buffers: std::sync::Mutex::default(),
            sum: std::sync::Mutex::default(),
            version: next_version(),
            written: std::sync::Mutex::default(),
            broken: None,
            codes_in_file_from: usize::MAX,
        }
    }

    /// From `n` vectors on, int8 codes are left in the index's file ([`Index::adopt_file`]).
    pub fn keep_codes_in_file_from(&mut self, n: usize) {
        self.codes_in_file_from = n;
    }

    /// Copies the int8 codes of position `i` into `out`.
    fn read_codes(&self, i: usize, out: &mut [i8]) -> std::io::Result<()> {
        match &self.codes {
            Codes::Memory(codes) => {
                out.copy_from_slice(&codes[i * self.dim..(i + 1) * self.dim]);
                Ok(())
            }
            Codes::File { array, changed } => match changed.get(&(i as u32)) {
                Some(codes) => {
                    out.copy_from_slice(codes);
                    Ok(())
                }
                None => array.read(i * self.dim, out),
            },
        }
    }

    /// Whether the int8 codes stay in the cache file rather than in memory.
    pub fn codes_on_file(&self) -> bool {
        matches!(self.codes, Codes::File { .. })
    }

    /// The file the int8 codes are read from.
    #[cfg(test)]
    fn codes_file(&self) -> Option<std::path::PathBuf> {
        match &self.codes {
            Codes::File { array, .. } => Some(array.path().to_path_buf()),
            Codes::Memory(_) => None,
        }
    }

    /// This state of the index ([`Index::adopt_file`]).
    pub fn version(&self) -> u64 {
        self.version
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

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    #[cfg(test)]
    pub fn precision(&self) -> Precision {
        self.precision
    }

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

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn upsert(&mut self, id: i64, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dim);
        self.version = next_version();
        let bits = self.sign_bits(v);
        let i = match self.position.get(id) {
            Some(i) => {
                self.count_in_sum(i, -1.0);
                self.bits[i * self.words..(i + 1) * self.words].copy_from_slice(&bits);
                i
            }
            None => {
                let i = self.ids.len();
                self.position.insert(id, i);
                self.ids.push(id);
                self.bits.extend_from_slice(&bits);
                match self.precision {
                    Precision::F32 => self.vectors.resize((i + 1) * self.dim, 0.0),
                    Precision::Int8 => {
                        if let Codes::Memory(codes) = &mut self.codes {
                            codes.resize((i + 1) * self.dim, 0);
                        }
                        self.scales.push(1.0);
                    }
                }
                i
            }
        };
        match self.precision {
            Precision::F32 => self.vectors[i * self.dim..(i + 1) * self.dim].copy_from_slice(v),
            Precision::Int8 => {
                let (codes, scale) = quantize(v);
                match &mut self.codes {
                    Codes::Memory(kept) => kept[i * self.dim..(i + 1) * self.dim].copy_from_slice(&codes),
                    Codes::File { changed, .. } => drop(changed.insert(i as u32, codes.into_boxed_slice())),
                }
                self.scales[i] = scale;
            }
        }
        self.count_in_sum(i, 1.0);
    }

    /// The vector kept at position `i` (int8 codes times their scale).
    fn kept(&self, i: usize) -> std::io::Result<Vec<f32>> {
        match self.precision {
            Precision::F32 => Ok(self.vectors[i * self.dim..(i + 1) * self.dim].to_vec()),
            Precision::Int8 => {
                let mut codes = vec![0i8; self.dim];
                self.read_codes(i, &mut codes)?;
                Ok(codes.iter().map(|c| f32::from(*c) * self.scales[i]).collect())
            }
        }
    }

    /// Adds (`sign` 1) or takes out (−1) the vector at `i` from the sum, once it is kept.
    fn count_in_sum(&mut self, i: usize, sign: f64) {
        if self.sum.get_mut().expect("sum lock").is_none() {
            return;
        }
        match self.kept(i) {
            Ok(v) => {
                let sum = self.sum.get_mut().expect("sum lock").as_mut().expect("kept sum");
                for (acc, x) in sum.iter_mut().zip(v) {
                    *acc += sign * f64::from(x);
                }
            }
            // Counted again from the kept vectors on the next mean.
            Err(_) => *self.sum.get_mut().expect("sum lock") = None,
        }
    }

    /// The mean of the kept vectors (`None` when there are none): counted once, in one pass,
    /// then kept in step by [`Index::upsert`] and [`Index::remove`].
    pub fn mean(&self) -> std::io::Result<Option<Vec<f32>>> {
        if self.ids.is_empty() {
            return Ok(None);
        }
        let mut sum = self.sum.lock().expect("sum lock");
        if sum.is_none() {
            let mut counted = vec![0.0f64; self.dim];
            for i in 0..self.ids.len() {
                for (acc, x) in counted.iter_mut().zip(self.kept(i)?) {
                    *acc += f64::from(x);
                }
            }
            *sum = Some(counted);
        }
        let n = self.ids.len() as f64;
        Ok(sum.as_ref().map(|s| s.iter().map(|x| (x / n) as f32).collect()))
    }

    pub fn remove(&mut self, id: i64) {
        let Some(i) = self.position.remove(id) else { return };
        self.count_in_sum(i, -1.0);
        self.version = next_version();
        let last = self.ids.len() - 1;
        if i != last {
            let moved = self.ids[last];
            self.ids.swap(i, last);
            for w in 0..self.words {
                self.bits.swap(i * self.words + w, last * self.words + w);
            }
            match self.precision {
                Precision::F32 => {
                    for d in 0..self.dim {
                        self.vectors.swap(i * self.dim + d, last * self.dim + d);
                    }
                }
                Precision::Int8 => {
                    let mut moved = vec![0i8; self.dim];
                    if let Codes::File { .. } = self.codes
                        && let Err(e) = self.read_codes(last, &mut moved)
                    {
                        self.broken = Some(e.to_string());
                    }
                    match &mut self.codes {
                        Codes::Memory(codes) => {
                            for d in 0..self.dim {
                                codes.swap(i * self.dim + d, last * self.dim + d);
                            }
                        }
                        Codes::File { changed, .. } => drop(changed.insert(i as u32, moved.into_boxed_slice())),
                    }
                    self.scales.swap(i, last);
                }
            }
            self.position.insert(moved, i);
        }
        self.ids.pop();
        self.bits.truncate(last * self.words);
        self.vectors.truncate(last * self.dim);
        match &mut self.codes {
            Codes::Memory(codes) => codes.truncate(last * self.dim),
            Codes::File { changed, .. } => drop(changed.remove(&(last as u32))),
        }
        self.scales.truncate(last);
    }

    fn sign_bits(&self, v: &[f32]) -> Vec<u64> {
        let mut bits = vec![0u64; self.words];
        for (d, x) in v.iter().enumerate() {
            if *x > 0.0 {
                bits[d / 64] |= 1 << (d % 64);
            }
        }
        bits
    }

    /// Up to `wanted × per_result` (at least 256) vectors nearest by sign bits, rescored with
    /// the kept vectors: (id, cosine similarity, exact when [`Index::exact`]), best first.
    pub fn candidates(&self, query: &[f32], wanted: usize, per_result: usize) -> std::io::Result<Vec<(i64, f32)>> {
        if let Some(why) = &self.broken {
            return Err(std::io::Error::other(why.clone()));
        }
        let n = self.len();
        if n == 0 || wanted == 0 {
            return Ok(Vec::new());
        }
        let qbits = self.sign_bits(query);
        let keep_bits = (wanted * per_result).max(256).min(n);
        // One thread: the scan runs at memory speed (1.6 ms a million vectors of 384 dimensions
        // here), and a second thread measured slower in a recall, whose full-text search and
        // query embedding want the other core at the same time.
        let mut near = self.scan_buffer();
        self.hamming(&qbits, keep_bits, &mut near);
        if keep_bits < near.len() {
            near.select_nth_unstable(keep_bits - 1);
            near.truncate(keep_bits);
        }
        let scored = self.rescore(&mut near, query);
        self.keep_scan_buffer(near);
        let mut scored = scored?;
        scored.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(scored)
    }

    /// The query's dot product with the kept vectors at the positions in `near`; with int8,
    /// both sides' codes multiply as integers.
    fn rescore(&self, near: &mut [(u32, u32)], query: &[f32]) -> std::io::Result<Vec<(i64, f32)>> {
        let dim = self.dim;
        match self.precision {
            Precision::F32 => Ok(near
                .iter()
                .map(|&(_, i)| {
                    let i = i as usize;
                    (self.ids[i], self.vectors[i * dim..(i + 1) * dim].iter().zip(query).map(|(a, b)| a * b).sum())
                })
                .collect()),
            Precision::Int8 => {
                let (quantized, scale) = quantize(query);
                // In position order, so that codes read from the file come in file order.
                near.sort_unstable_by_key(|&(_, i)| i);
                let score = |part: &[(u32, u32)]| -> std::io::Result<Vec<(i64, f32)>> {
                    let mut codes = vec![0i8; dim];
                    let mut scored = Vec::with_capacity(part.len());
                    for &(_, i) in part {
                        let i = i as usize;
                        self.read_codes(i, &mut codes)?;
                        scored.push((self.ids[i], self.scales[i] * scale * int8_dot(&codes, &quantized) as f32));
                    }
                    Ok(scored)
                };
                if !matches!(self.codes, Codes::File { .. }) || near.len() < 64 {
                    return score(near);
                }
                // Codes read from the file, half on a second thread: the reads are system calls,
                // and the other core is free by now in a recall (measured at 1M inside recall:
                // the vector stage 3.9 -> 3.2 ms). Without a thread to spare, one reads all.
                let (first, second) = near.split_at(near.len() / 2);
                std::thread::scope(|s| {
                    let rest = std::thread::Builder::new().name("atlas-codes".into()).spawn_scoped(s, || score(second));
                    let mut scored = score(first)?;
                    match rest {
                        Ok(rest) => scored.extend(rest.join().expect("codes reader")?),
                        Err(_) => scored.extend(score(second)?),
                    }
                    Ok(scored)
                })
            }
        }
    }

    fn scan_buffer(&self) -> Vec<(u32, u32)> {
        self.scan_buffers.lock().expect("scan buffers lock").pop().unwrap_or_default()
    }

    fn keep_scan_buffer(&self, mut buffer: Vec<(u32, u32)>) {
        buffer.clear();
        let mut kept = self.scan_buffers.lock().expect("scan buffers lock");
        if kept.len() < crate::SEARCH_BUFFERS_KEPT {
            kept.push(buffer);
        }
    }

    /// Appends to `out` (sign-bit distance to the query, position) of at least the `keep`
    /// nearest vectors (every vector that ranks among those `keep`).
    fn hamming(&self, qbits: &[u64], keep: usize, out: &mut Vec<(u32, u32)>) {
        let mut near = Nearest::new(self.words, keep, out);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU supports popcnt, checked just above.
            return unsafe { hamming_popcnt(&self.bits, self.words, qbits, &mut near) };
        }
        hamming_portable(&self.bits, self.words, qbits, &mut near)
    }
}

/// Symmetric int8 codes of `v` and their scale (the largest magnitude maps to 127).
pub fn quantize(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    (v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale)
}

/// Σ a·b in 32-bit integers (a shape the compiler vectorises).
pub fn int8_dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

// Inlined into the popcnt version below, so that its loop is compiled with the instruction.
#[inline(always)]
fn hamming_portable(bits: &[u64], words: usize, q: &[u64], near: &mut Nearest<'_>) {
    // The common widths get a loop of fixed length, unrolled (twice as fast as the general one).
    match words {
        6 => hamming_fixed::<6>(bits, q, near),
        12 => hamming_fixed::<12>(bits, q, near),
        16 => hamming_fixed::<16>(bits, q, near),
        _ => {
            for (i, row) in bits.chunks_exact(words).enumerate() {
                near.offer(row.iter().zip(q).map(|(a, b)| (a ^ b).count_ones()).sum(), i as u32);
            }
        }
    }
}

#[inline(always)]
fn hamming_fixed<const W: usize>(bits: &[u64], q: &[u64], near: &mut Nearest<'_>) {
    let q: &[u64; W] = q.try_into().expect("query bits of the index's width");
    for (i, row) in bits.chunks_exact(W).enumerate() {
        let mut distance = 0;
        for w in 0..W {
            distance += (row[w] ^ q[w]).count_ones();
        }
        near.offer(distance, i as u32);
    }
}

/// The same loop compiled with the popcnt instruction (the baseline x86-64 target lacks it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn hamming_popcnt(bits: &[u64], words: usize, q: &[u64], near: &mut Nearest<'_>) {
    hamming_portable(bits, words, q, near)
}

/// The `keep` smallest (distance, position) pairs of a scan, and perhaps some more: a pair is
/// written only while its distance is within a bound that tightens as the buffer fills, so a
/// scan of a million vectors writes thousands of pairs, not a million (and the selection after
/// it sorts those few). No pair among the `keep` smallest is ever left out: the bound only
/// drops distances that at least `keep` pairs already beat.
struct Nearest<'a> {
    out: &'a mut Vec<(u32, u32)>,
    /// Where this scan's pairs start in `out`.
    start: usize,
    keep: usize,
    /// Pairs written of each distance.
    counts: Vec<u32>,
    /// Distances above this are not written.
    bound: u32,
    /// Buffer length at which the bound is tightened next.
    compact_at: usize,
}

impl<'a> Nearest<'a> {
    fn new(words: usize, keep: usize, out: &'a mut Vec<(u32, u32)>) -> Self {
        let start = out.len();
        let compact_at = start + keep.max(64) * 4;
        Nearest { out, start, keep: keep.max(1), counts: vec![0; words * 64 + 1], bound: u32::MAX, compact_at }
    }

    #[inline(always)]
    fn offer(&mut self, distance: u32, position: u32) {
        if distance > self.bound {
            return;
        }
        self.out.push((distance, position));
        self.counts[distance as usize] += 1;
        if self.out.len() >= self.compact_at {
            self.tighten();
        }
    }

    /// Lowers the bound to the smallest distance at which `keep` pairs are written, and drops
    /// the pairs beyond it.
    #[cold]
    fn tighten(&mut self) {
        let mut written = 0;
        let mut bound = self.counts.len() as u32 - 1;
        for (distance, count) in self.counts.iter().enumerate() {
            written += *count as usize;
            if written >= self.keep {
                bound = distance as u32;
                break;
            }
        }
        self.bound = bound;
        self.counts[bound as usize + 1..].iter_mut().for_each(|c| *c = 0);
        let start = self.start;
        let mut kept = start;
        for i in start..self.out.len() {
            if self.out[i].0 <= bound {
                self.out[kept] = self.out[i];
                kept += 1;
            }
        }
        self.out.truncate(kept);
        // Many pairs tied at the bound keep the buffer long: the next compaction waits until it
        // has doubled, so a scan never compacts more than a logarithmic number of times in vain.
        self.compact_at = self.compact_at.max(start + (kept - start) * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Whatever order distances come in (ties included), the pairs a scan keeps hold the
        /// `keep` smallest of all it was offered.
        #[test]
        fn a_scan_keeps_every_pair_of_the_nearest(
            distances in proptest::collection::vec(0u32..=128, 0..3_000),
            keep in 1usize..300,
            offset in 0usize..3,
        ) {
            let mut out = vec![(7, 7); offset];
            let mut near = Nearest::new(2, keep, &mut out);
            for (i, d) in distances.iter().enumerate() {
                near.offer(*d, i as u32);
            }
            let mut kept = out[offset..].to_vec();
            kept.sort_unstable();
            let mut all: Vec<(u32, u32)> = distances.iter().enumerate().map(|(i, d)| (*d, i as u32)).collect();
            all.sort_unstable();
            let wanted = keep.min(all.len());
            prop_assert_eq!(&kept[..wanted], &all[..wanted]);
            prop_assert!(out[..offset].iter().all(|p| *p == (7, 7)), "pairs before the scan's own are left alone");
        }
    }

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v: Vec<f32> = (0..dim)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    #[test]
    fn an_index_read_back_from_its_file_answers_as_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.cache");
        let stamp = crate::cache_file::Stamp { schema: 7, epoch: 1, nonce: 3 };
        for precision in [Precision::F32, Precision::Int8] {
            let mut index = Index::with_capacity(48, precision, 0);
            for id in (1..=300).chain([1 << 40]) {
                index.upsert(id, &unit(id as u64, 48));
            }
            index.remove(7);
            crate::cache_file::write(&path, stamp, "k", |e| index.encode(e)).unwrap().commit().unwrap();
            let read =
                |dim, wanted| crate::cache_file::read(&path, stamp, "k", |d| Index::decode(d, dim, wanted, usize::MAX));
            let back = read(48, None).unwrap();
            assert_eq!(back.precision(), precision);
            assert_eq!(back.len(), index.len());
            for q in [3u64, 70, 1 << 40] {
                assert_eq!(
                    back.candidates(&unit(q, 48), 10, 16).unwrap(),
                    index.candidates(&unit(q, 48), 10, 16).unwrap()
                );
            }
            let other = if precision == Precision::F32 { Precision::Int8 } else { Precision::F32 };
            assert!(read(48, Some(precision)).is_ok());
            assert!(read(48, Some(other)).is_err());
            assert!(read(32, None).err().unwrap().contains("48 dimensions"));
        }
    }

    /// An int8 index read from its file leaves the codes there and keeps answering as one that
    /// holds them, through upserts and removals (a removal moves the last position, whose codes
    /// may be in the file, into the removed one's), and writes a file of its own that reads back
    /// the same. An index that wrote its file adopts it, unless it changed since.
    #[test]
    fn int8_codes_left_in_the_file_answer_as_codes_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let stamp = crate::cache_file::Stamp { schema: 7, epoch: 1, nonce: 3 };
        let write = |index: &Index, name: &str| {
            let path = dir.path().join(name);
            let file = crate::cache_file::write(&path, stamp, "k", |e| index.encode(e)).unwrap().commit().unwrap();
            (path, file, index.version())
        };
        let read = |path: &std::path::Path| {
            crate::cache_file::read(path, stamp, "k", |d| Index::decode(d, 48, Some(Precision::Int8), 0)).unwrap()
        };
        let same = |a: &Index, b: &Index| {
            for q in [3u64, 70, 299, 1 << 40, 5_000] {
                assert_eq!(a.candidates(&unit(q, 48), 10, 16).unwrap(), b.candidates(&unit(q, 48), 10, 16).unwrap());
            }
        };
        let mut memory = Index::with_capacity(48, Precision::Int8, 0);
        memory.keep_codes_in_file_from(0);
        for id in 1..=300 {
            memory.upsert(id, &unit(id as u64, 48));
        }
        let (path, _, _) = write(&memory, "a.cache");
        let mut on_file = read(&path);
        assert!(on_file.codes_on_file() && !memory.codes_on_file());
        same(&memory, &on_file);
        for index in [&mut memory, &mut on_file] {
            index.upsert(5_000, &unit(5_000, 48));
            index.upsert(70, &unit(71, 48));
            index.remove(3);
            index.remove(299);
            index.remove(5_000);
            index.upsert(1 << 40, &unit(1 << 40, 48));
        }
        same(&memory, &on_file);
        let (again, _, _) = write(&on_file, "b.cache");
        same(&memory, &read(&again));

        let (path, file, version) = write(&memory, "c.cache");
        memory.adopt_file(version, file, &path);
        assert!(memory.codes_on_file(), "the file written from this very state is adopted");
        same(&memory, &on_file);
        // Another index, written since in a state of its own, does not take the first file.
        let (path, _, version) = write(&on_file, "f.cache");
        let mut other = read(&again);
        write(&other, "g.cache");
        other.adopt_file(version, std::fs::File::open(&path).unwrap(), &path);
        assert_eq!(other.codes_file(), Some(again.clone()), "kept its own file");
        let mut changed = Index::with_capacity(48, Precision::Int8, 0);
        changed.keep_codes_in_file_from(0);
        changed.upsert(1, &unit(1, 48));
        let (path, file, version) = write(&changed, "d.cache");
        changed.upsert(2, &unit(2, 48));
        changed.adopt_file(version, file, &path);
        assert!(!changed.codes_on_file(), "changed since it was written: the file lacks the change");
        // A file cut short under an index that reads from it: a removal cannot move the last
        // codes, and the index refuses to search or to write a file until it is loaded again.
        let (path, _, _) = write(&memory, "h.cache");
        let mut cut = read(&path);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
        cut.remove(1);
        assert!(cut.candidates(&unit(3, 48), 10, 16).is_err());
        assert!(crate::cache_file::write(&dir.path().join("i.cache"), stamp, "k", |e| cut.encode(e)).is_err());
        let mut small = Index::with_capacity(48, Precision::Int8, 0);
        small.keep_codes_in_file_from(2);
        small.upsert(1, &unit(1, 48));
        let (path, file, version) = write(&small, "e.cache");
        small.adopt_file(version, file, &path);
        assert!(!small.codes_on_file(), "below the size from which codes stay in the file");
        assert!(
            !crate::cache_file::read(&path, stamp, "k", |d| Index::decode(d, 48, None, 2)).unwrap().codes_on_file()
        );
    }

    #[test]
    fn int8_scores_stay_within_a_percent_and_find_the_same_vector() {
        let mut exact = Index::with_capacity(48, Precision::F32, 0);
        let mut coarse = Index::with_capacity(48, Precision::Int8, 0);
        for id in 1..=500 {
            exact.upsert(id, &unit(id as u64, 48));
            coarse.upsert(id, &unit(id as u64, 48));
        }
        coarse.remove(3);
        exact.remove(3);
        for q in [7u64, 77, 499] {
            let (e, c) =
                (exact.candidates(&unit(q, 48), 5, 16).unwrap(), coarse.candidates(&unit(q, 48), 5, 16).unwrap());
            assert_eq!(e[0].0, c[0].0);
            let exact_of: HashMap<i64, f32> = e.iter().copied().collect();
            for (id, score) in c.iter().filter(|(id, _)| exact_of.contains_key(id)) {
                assert!((score - exact_of[id]).abs() < 0.01, "{id}: {score} vs {}", exact_of[id]);
            }
        }
    }

    #[test]
    fn positions_hold_dense_and_far_ids_alike() {
        let mut p = Positions::with_capacity(4);
        let far = [1i64 << 40, -5, 1 << 20];
        for (i, id) in [1i64, 2, 3].iter().chain(&far).enumerate() {
            p.insert(*id, i);
        }
        // The array grows past an id first placed in the map: it is still found, once.
        p.insert(70_000, 9);
        assert_eq!(p.get(70_000), Some(9));
        for i in 0..1_100_000 {
            if 10 + i != 1 << 20 {
                p.insert(10 + i, 100 + i as usize);
            }
        }
        assert!(p.dense.len() > 1 << 20, "the array now covers both ids first placed in the map");
        assert_eq!(p.get(70_000), Some(100 + 69_990), "updated where it lives, not duplicated");
        assert_eq!(p.get(1 << 20), Some(5));
        p.insert(1 << 20, 6);
        assert_eq!((p.get(1 << 20), p.get(-5), p.get(1 << 40), p.get(2)), (Some(6), Some(4), Some(3), Some(1)));
        assert_eq!(p.remove(1 << 20), Some(6));
        assert_eq!((p.get(1 << 20), p.remove(1 << 20), p.get(4)), (None, None, None));
    }

    #[test]
    fn the_mean_is_kept_in_step_with_every_change() {
        for precision in [Precision::F32, Precision::Int8] {
            let mut index = Index::with_capacity(16, precision, 0);
            assert_eq!(index.mean().unwrap(), None);
            let vectors: Vec<Vec<f32>> = (0..20).map(|i| unit(i, 16)).collect();
            for (i, v) in vectors.iter().enumerate() {
                index.upsert(i as i64 + 1, v);
            }
            let exact = |kept: &[&Vec<f32>]| -> Vec<f32> {
                (0..16).map(|d| kept.iter().map(|v| v[d]).sum::<f32>() / kept.len() as f32).collect()
            };
            let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 0.01);
            assert!(close(&index.mean().unwrap().unwrap(), &exact(&vectors.iter().collect::<Vec<_>>())));
            // Replaced and removed after the first mean: kept in step, not counted again.
            index.upsert(1, &vectors[5]);
            index.remove(20);
            index.remove(3);
            let mut kept: Vec<&Vec<f32>> = vectors[1..19].iter().collect();
            kept.remove(1);
            kept.push(&vectors[5]);
            assert!(close(&index.mean().unwrap().unwrap(), &exact(&kept)), "{precision:?}");
        }
    }

    #[test]
    fn finds_the_exact_vector_and_survives_removal() {
        let mut index = Index::with_capacity(48, Precision::F32, 0);
        for id in 1..=500 {
            index.upsert(id, &unit(id as u64, 48));
        }
        let top = |index: &Index, q: u64| {
            index.candidates(&unit(q, 48), 5, 16).unwrap().iter().map(|c| c.0).collect::<Vec<_>>()
        };
        assert_eq!(top(&index, 77)[0], 77);
        assert!((index.candidates(&unit(77, 48), 5, 16).unwrap()[0].1 - 1.0).abs() < 1e-5, "exact cosine");
        index.remove(77);
        index.remove(500);
        assert_eq!(index.len(), 498);
        assert!(!top(&index, 77).contains(&77));
        assert_eq!(top(&index, 499)[0], 499, "the moved last row is still found");
        index.upsert(499, &unit(3, 48));
        assert_eq!(top(&index, 3)[..2].iter().filter(|id| **id == 499 || **id == 3).count(), 2);
    }
}
