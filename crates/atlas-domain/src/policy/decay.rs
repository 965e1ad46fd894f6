//! Forgetting on purpose: how a memory's strength fades with time and comes back with use.
//!
//! - Semantic, procedural and opinion memories follow Ebbinghaus: `c · exp(−rate · days^0.8)`
//!   (seed 004), where `days` counts from the last access, so a recall resets the clock.
//! - Opinions (`O(c=…)` tags) lose 0.02 a day and are soft-deleted at 0.30 (seed 003).
//! - World facts (`W` tags) and episodes never decay.
//! - Facts are also scheduled for review by SM-2 (seed 000 §4.2): used, the interval grows;
//!   judged irrelevant, it shrinks and the easiness drops.
//!
//! Decay never deletes: below [`SOFT_DELETE_BELOW`] a memory is soft-deleted (restorable), and
//! only an explicit hard forget removes anything.

/// Below this strength a decaying memory is soft-deleted.
pub const SOFT_DELETE_BELOW: f64 = 0.30;

/// An opinion loses this much confidence a day.
pub const OPINION_DECAY_PER_DAY: f64 = 0.02;

/// How a memory ages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aging {
    /// Episodes and world facts: kept as they are.
    Never,
    /// Ebbinghaus, with this rate per day^0.8.
    Curve { rate: f64 },
    /// Opinions: linear loss per day.
    Linear { per_day: f64 },
}

/// Strength after `days` without use, from `initial` (in [0, 1]). Monotone non-increasing in
/// `days`, never above `initial`, never below 0.
pub fn strength(initial: f64, aging: Aging, days: f64) -> f64 {
    let initial = initial.clamp(0.0, 1.0);
    let days = days.max(0.0);
    match aging {
        Aging::Never => initial,
        Aging::Curve { rate } => initial * (-rate.max(0.0) * days.powf(0.8)).exp(),
        Aging::Linear { per_day } => (initial - per_day.max(0.0) * days).max(0.0),
    }
}

/// Whether a memory of this strength is soft-deleted by the decay pass.
pub fn fades(strength: f64, aging: Aging) -> bool {
    aging != Aging::Never && strength < SOFT_DELETE_BELOW
}

/// Using a memory (a recall that the agent acted on) restores part of what it lost: never
/// lowers it, never above 1.
pub fn reinforce(strength: f64, boost: f64) -> f64 {
    let s = strength.clamp(0.0, 1.0);
    (s + boost.clamp(0.0, 1.0) * (1.0 - s)).clamp(s, 1.0)
}

/// SM-2 review state of a fact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Review {
    /// Days until the fact is due again.
    pub interval_days: f64,
    /// SM-2's easiness factor, at least 1.3.
    pub easiness: f64,
    pub repetitions: u32,
}

impl Default for Review {
    fn default() -> Self {
        Review { interval_days: 1.0, easiness: 2.5, repetitions: 0 }
    }
}

/// SM-2 after a review of quality 0–5 (5: used and right; below 3: irrelevant or wrong, the
/// schedule starts over). Intervals stay positive; the easiness stays at least 1.3.
pub fn review(state: Review, quality: u8) -> Review {
    let q = f64::from(quality.min(5));
    let easiness = (state.easiness + 0.1 - (5.0 - q) * (0.08 + (5.0 - q) * 0.02)).max(1.3);
    if q < 3.0 {
        return Review { interval_days: 1.0, easiness, repetitions: 0 };
    }
    let interval_days = match state.repetitions {
        0 => 1.0,
        1 => 6.0,
        _ => (state.interval_days * easiness).max(1.0),
    };
    Review { interval_days, easiness, repetitions: state.repetitions + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn aging() -> impl Strategy<Value = Aging> {
        prop_oneof![
            Just(Aging::Never),
            (0.0f64..2.0).prop_map(|rate| Aging::Curve { rate }),
            (0.0f64..0.5).prop_map(|per_day| Aging::Linear { per_day }),
        ]
    }

    #[test]
    fn an_opinion_at_090_fades_after_30_days() {
        let opinion = Aging::Linear { per_day: OPINION_DECAY_PER_DAY };
        assert!(!fades(strength(0.9, opinion, 29.0), opinion));
        assert!(fades(strength(0.9, opinion, 30.5), opinion));
        assert!(!fades(strength(0.9, Aging::Never, 10_000.0), Aging::Never), "world facts never decay");
    }

    proptest! {
        #[test]
        fn decay_is_monotone_in_time_and_bounded(initial in 0.0f64..=1.0, a in aging(), d1 in 0.0f64..3650.0, extra in 0.0f64..3650.0) {
            let (s1, s2) = (strength(initial, a, d1), strength(initial, a, d1 + extra));
            prop_assert!(s2 <= s1 + 1e-12);
            prop_assert!((0.0..=initial + 1e-12).contains(&s1));
            prop_assert!(s2 >= 0.0);
        }

        #[test]
        fn reinforcement_never_lowers(s in 0.0f64..=1.0, boost in -1.0f64..2.0) {
            let r = reinforce(s, boost);
            prop_assert!(r >= s && r <= 1.0);
        }

        #[test]
        fn sm2_intervals_stay_positive(qualities in proptest::collection::vec(0u8..=7, 0..40)) {
            let mut state = Review::default();
            for q in qualities {
                state = review(state, q);
                prop_assert!(state.interval_days >= 1.0);
                prop_assert!(state.easiness >= 1.3);
            }
        }
    }
}
