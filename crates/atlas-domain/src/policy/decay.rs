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

use crate::{Body, Memory, MemoryKind, Timestamp};

/// Below this strength a decaying memory is soft-deleted.
pub const SOFT_DELETE_BELOW: f64 = 0.30;

/// An opinion loses this much confidence a day.
pub const OPINION_DECAY_PER_DAY: f64 = 0.02;

/// Ebbinghaus rate of a fact reviewed once a day: unused for about 180 days, a fact stated
/// with full confidence falls below [`SOFT_DELETE_BELOW`]. Each SM-2 review stretches its
/// interval and divides the rate by it, so a fact that keeps being used keeps its strength.
pub const FACT_RATE: f64 = 0.019;

/// A superseded fact (history) decays this many times faster than a current one (seed 000 §4.3).
pub const SUPERSEDED_FACTOR: f64 = 2.0;

/// Procedural memories (experiences, concepts, strategies): unused for about 400 days they fade.
pub const PROCEDURAL_RATE: f64 = 0.010;

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

/// How `m` ages: episodes, entities, core memory, session summaries, documents and world facts (`tag:W`) never; opinions
/// (`tag:O`) linearly; other facts on the Ebbinghaus curve, slowed by their SM-2 interval and
/// hastened once superseded; procedural memories on a slower curve.
pub fn aging_of(m: &Memory) -> Aging {
    let origin = m.meta.get("origin").and_then(serde_json::Value::as_str);
    match m.kind() {
        MemoryKind::Episode | MemoryKind::Entity | MemoryKind::Core | MemoryKind::Summary | MemoryKind::Doc => {
            Aging::Never
        }
        MemoryKind::Fact => match origin {
            Some("tag:W") => Aging::Never,
            Some("tag:O") => Aging::Linear { per_day: OPINION_DECAY_PER_DAY },
            _ => {
                let interval = m.lifecycle.review.map_or(1.0, |r| r.interval_days.max(1.0));
                let history = if m.validity.valid_until.is_some() { SUPERSEDED_FACTOR } else { 1.0 };
                Aging::Curve { rate: FACT_RATE * history / interval }
            }
        },
        MemoryKind::Experience | MemoryKind::Concept | MemoryKind::Strategy => Aging::Curve { rate: PROCEDURAL_RATE },
    }
}

/// The strength `m` starts from: a fact's confidence, 1 for everything else.
pub fn initial_strength(m: &Memory) -> f64 {
    match &m.body {
        Body::Fact { confidence, .. } => f64::from(*confidence),
        _ => 1.0,
    }
}

/// `m`'s strength at `now`: its clock starts at its last use, or when it was learned.
pub fn strength_at(m: &Memory, now: Timestamp) -> f64 {
    let since = m.lifecycle.last_used.unwrap_or(m.recorded_at).max(m.recorded_at);
    let days = (now.millis() - since.millis()).max(0) as f64 / 86_400_000.0;
    strength(initial_strength(m), aging_of(m), days)
}

/// When a reviewed fact is due again: its SM-2 interval after its last use (or its recording);
/// `None` before its first review.
pub fn next_review(m: &Memory) -> Option<Timestamp> {
    let review = m.lifecycle.review?;
    let since = m.lifecycle.last_used.unwrap_or(m.recorded_at).max(m.recorded_at);
    Some(Timestamp(since.millis().saturating_add((review.interval_days * 86_400_000.0) as i64)))
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
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
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

    fn fact(origin: &str, confidence: f32) -> Memory {
        let mut m = crate::NewMemory::episode("x", crate::Scope::default(), None, Timestamp(0), Timestamp(0))
            .with_id(crate::MemoryId(1));
        m.body = Body::Fact { subject: "s".into(), predicate: "p".into(), object: "o".into(), confidence };
        m.meta.insert("origin".into(), origin.into());
        m
    }

    const DAY: i64 = 86_400_000;

    #[test]
    fn facts_fade_by_kind_and_use() {
        let world = fact("tag:W", 1.0);
        assert!(!fades(strength_at(&world, Timestamp(10_000 * DAY)), aging_of(&world)));
        let plain = fact("rule", 1.0);
        assert!(!fades(strength_at(&plain, Timestamp(150 * DAY)), aging_of(&plain)));
        assert!(fades(strength_at(&plain, Timestamp(200 * DAY)), aging_of(&plain)));
        // Used at day 100: the clock starts again.
        let mut used = plain.clone();
        used.lifecycle.last_used = Some(Timestamp(100 * DAY));
        assert!(!fades(strength_at(&used, Timestamp(200 * DAY)), aging_of(&used)));
        // Reviewed well: a longer interval, a slower curve.
        let mut reviewed = plain.clone();
        reviewed.lifecycle.review = Some(Review { interval_days: 6.0, easiness: 2.5, repetitions: 2 });
        assert!(!fades(strength_at(&reviewed, Timestamp(400 * DAY)), aging_of(&reviewed)));
        // History fades faster than the truth.
        let mut old = fact("rule", 0.5);
        old.validity.valid_until = Some(Timestamp(DAY));
        assert!(fades(strength_at(&old, Timestamp(40 * DAY)), aging_of(&old)));
        let episode = crate::NewMemory::episode("x", crate::Scope::default(), None, Timestamp(0), Timestamp(0))
            .with_id(crate::MemoryId(2));
        assert_eq!(aging_of(&episode), Aging::Never, "episodes never decay");
    }

    #[test]
    fn an_opinion_at_090_fades_after_30_days() {
        let opinion = Aging::Linear { per_day: OPINION_DECAY_PER_DAY };
        assert!(!fades(strength(0.9, opinion, 29.0), opinion));
        assert!(fades(strength(0.9, opinion, 30.5), opinion));
        assert!(!fades(strength(0.9, Aging::Never, 10_000.0), Aging::Never), "world facts never decay");
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
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
        fn a_review_falls_due_at_least_a_day_after_the_last_use(
            recorded in 0i64..4_000_000_000_000, used in proptest::option::of(0i64..4_000_000_000_000),
            qualities in proptest::collection::vec(0u8..=5, 1..20),
        ) {
            let mut m = fact("observed", 0.9);
            m.recorded_at = Timestamp(recorded);
            m.lifecycle.last_used = used.map(Timestamp);
            prop_assert_eq!(next_review(&m), None, "never reviewed: nothing due");
            m.lifecycle.review = Some(qualities.into_iter().fold(Review::default(), review));
            let due = next_review(&m).unwrap();
            let since = used.unwrap_or(recorded).max(recorded);
            prop_assert!(due.millis() >= since + 86_400_000 - 1, "{due:?} before a day after {since}");
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
