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

mod file;
mod kernels;
mod positions;
#[cfg(test)]
mod tests;

pub use kernels::{int8_dot, quantize};
use positions::Positions;
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

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    #[cfg(test)]
    pub fn precision(&self) -> Precision {
        self.precision
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
        kernels::hamming(&self.bits, self.words, &qbits, keep_bits, &mut near);
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
}
