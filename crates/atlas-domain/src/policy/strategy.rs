//! The Strategy bank's statistics (ArcMemo): a strategy's success rate under a Beta(1, 1)
//! prior, and how reading ranks strategies for a task.
//!
//! Rank (documented contract of `strategy read`): `score = relevance × (0.5 + rate)`, where
//! `relevance` ([`relevance`]) is the candidate's best share, over full text and vectors, of
//! the best candidate's raw score for that search (recall's fused scores are min-max normalised
//! per query, so with few candidates their ratios say nothing; the raw BM25 and cosine do), and
//! `rate` its success rate. An untried strategy (rate 0.5) keeps its relevance; one that always
//! worked counts 1.5×, one that always failed 0.5×, so relevance still leads. With exploration
//! on, the rate is replaced by its upper confidence bound (UCB1), which favours strategies
//! tried rarely.

/// Success rate under a Beta(1, 1) prior: 0.5 before any use, `(s + 1) / (s + f + 2)` after.
pub fn success_rate(successes: u32, failures: u32) -> f64 {
    (f64::from(successes) + 1.0) / (f64::from(successes) + f64::from(failures) + 2.0)
}

/// The rate's upper confidence bound (UCB1) when `total` uses were spread over all strategies:
/// rarely tried strategies get a bonus, so a reader explores them.
pub fn upper_bound(successes: u32, failures: u32, total: u64, c: f64) -> f64 {
    let uses = f64::from(successes) + f64::from(failures);
    success_rate(successes, failures) + c * ((total as f64 + 1.0).ln() / (uses + 1.0)).sqrt()
}

/// How relevant a candidate is from `(raw, best raw)` of each search that found it: its best
/// share, in [0, 1]; 0 when no search found it (it came through context). The Experience
/// memory weighs its candidates the same way.
pub fn relevance(searches: &[(f64, f64)]) -> f64 {
    searches.iter().filter(|(_, best)| *best > 0.0).map(|(raw, best)| (raw / best).clamp(0.0, 1.0)).fold(0.0, f64::max)
}

/// A strategy's rank for a task (see the module's formula).
pub fn rank_score(relevance: f64, rate: f64) -> f64 {
    relevance.clamp(0.0, 1.0) * (0.5 + rate.max(0.0))
}

/// The counts after one more use.
pub fn record(successes: u32, failures: u32, success: bool) -> (u32, u32) {
    if success { (successes.saturating_add(1), failures) } else { (successes, failures.saturating_add(1)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn half_before_any_use() {
        assert_eq!(success_rate(0, 0), 0.5);
        assert_eq!(relevance(&[(2.0, 4.0), (0.3, 0.6)]), 0.5);
        assert_eq!(relevance(&[(0.9, 0.6)]), 1.0);
        assert_eq!(relevance(&[]), 0.0);
        assert_eq!(success_rate(3, 1), 4.0 / 6.0);
        assert!(rank_score(1.0, success_rate(9, 0)) > rank_score(1.0, 0.5));
        assert!(rank_score(0.9, success_rate(0, 0)) > rank_score(0.5, success_rate(50, 0)), "relevance leads");
        assert!(upper_bound(0, 0, 100, 1.0) > upper_bound(40, 40, 100, 1.0), "the untried get a bonus");
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_rate_stays_in_bounds_and_converges(outcomes in proptest::collection::vec(any::<bool>(), 0..2000)) {
            let (mut s, mut f) = (0, 0);
            for o in &outcomes {
                (s, f) = record(s, f, *o);
                let r = success_rate(s, f);
                prop_assert!((0.0..=1.0).contains(&r));
            }
            if outcomes.len() >= 1000 {
                let observed = s as f64 / outcomes.len() as f64;
                prop_assert!((success_rate(s, f) - observed).abs() < 0.002);
            }
        }

        #[test]
        fn the_order_of_updates_does_not_matter(mut outcomes in proptest::collection::vec(any::<bool>(), 0..200), seed in any::<u64>()) {
            let fold = |os: &[bool]| os.iter().fold((0, 0), |(s, f), o| record(s, f, *o));
            let before = fold(&outcomes);
            // A deterministic shuffle.
            let n = outcomes.len();
            for i in 0..n {
                let j = ((seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64)) % n as u64) as usize;
                outcomes.swap(i, j);
            }
            prop_assert_eq!(fold(&outcomes), before);
        }

        #[test]
        fn success_never_ranks_lower(relevance in 0.0f64..=1.0, s in 0u32..100, f in 0u32..100) {
            let (s2, f2) = record(s, f, true);
            prop_assert!(rank_score(relevance, success_rate(s2, f2)) >= rank_score(relevance, success_rate(s, f)));
        }
    }
}
