//! The scoring kernels of the vector cache, kept apart for review: int8 codes and their dot
//! product, and the sign-bit scan (Hamming distance, with the popcnt instruction where the CPU
//! has it) that keeps only the nearest pairs.

/// Appends to `out` (sign-bit distance to the query, position) of at least the `keep`
/// nearest of the rows of `bits` (`words` a row): every row that ranks among those `keep`.
pub(super) fn hamming(bits: &[u64], words: usize, qbits: &[u64], keep: usize, out: &mut Vec<(u32, u32)>) {
    let mut near = Nearest::new(words, keep, out);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU supports popcnt, checked just above.
        return unsafe { hamming_popcnt(bits, words, qbits, &mut near) };
    }
    hamming_portable(bits, words, qbits, &mut near)
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
pub(super) struct Nearest<'a> {
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
    pub(super) fn new(words: usize, keep: usize, out: &'a mut Vec<(u32, u32)>) -> Self {
        let start = out.len();
        let compact_at = start + keep.max(64) * 4;
        Nearest { out, start, keep: keep.max(1), counts: vec![0; words * 64 + 1], bound: u32::MAX, compact_at }
    }

    #[inline(always)]
    pub(super) fn offer(&mut self, distance: u32, position: u32) {
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
