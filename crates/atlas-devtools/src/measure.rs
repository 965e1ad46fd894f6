//! The arithmetic every benchmark reports with: timings sorted, and a percentile of them. Kept
//! below the benchmarks so that none of them reaches into another for it.

/// `v` in ascending order (NaN last, as `total_cmp` orders it).
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The value at quantile `p` (0..=1) of `sorted`, the nearest rank: p50 of 1, 2, 3, 4 is 3.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
