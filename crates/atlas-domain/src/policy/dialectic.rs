//! The dialectic (seed 003): what the agent observes about its user becomes core memory only
//! once the conversation has borne it out. An observation (one episode) is a hypothesis when a
//! second episode supports it, and verified at three; only verified ones enter core memory.

use serde::Serialize;

/// How well the conversation supports an observation about the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Observation,
    Hypothesis,
    Verified,
}

/// Supporting episodes a hypothesis needs.
pub const HYPOTHESIS_FROM: usize = 2;
/// Supporting episodes that verify it.
pub const VERIFIED_FROM: usize = 3;

/// The stage of an observation supported by `episodes` distinct episodes.
pub fn stage(episodes: usize) -> Stage {
    match episodes {
        n if n >= VERIFIED_FROM => Stage::Verified,
        n if n >= HYPOTHESIS_FROM => Stage::Hypothesis,
        _ => Stage::Observation,
    }
}

/// The belief an observation at `stage` carries (the fact's confidence).
pub fn confidence(stage: Stage) -> f32 {
    match stage {
        Stage::Observation => 0.6,
        Stage::Hypothesis => 0.75,
        Stage::Verified => 0.9,
    }
}

/// Only verified observations enter core memory.
pub fn enters_core(stage: Stage) -> bool {
    stage == Stage::Verified
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_two_three_episodes() {
        assert_eq!(
            (stage(0), stage(1), stage(2), stage(3)),
            (Stage::Observation, Stage::Observation, Stage::Hypothesis, Stage::Verified)
        );
        assert!(!enters_core(stage(2)) && enters_core(stage(3)));
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn more_support_never_lowers_the_stage_or_the_belief(a in 0usize..100, b in 0usize..100) {
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(stage(lo) <= stage(hi));
            prop_assert!(confidence(stage(lo)) <= confidence(stage(hi)));
            prop_assert!((0.0..=1.0).contains(&confidence(stage(hi))));
        }
    }
}
