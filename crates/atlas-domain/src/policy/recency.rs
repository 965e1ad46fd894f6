//! The recency boost added after fusion: recent memories win near-ties (seed 000).

use crate::Timestamp;

/// `weight × 0.5^(age / half_life)`: the full weight for a memory from `now`, half of it one
/// half-life earlier. Memories from the future of `now` (an as-of recall, clock skew) count as
/// new. No boost for a non-positive weight or half-life.
pub fn boost(event_time: Timestamp, now: Timestamp, weight: f64, half_life_ms: f64) -> f64 {
    if weight <= 0.0 || half_life_ms <= 0.0 || !half_life_ms.is_finite() {
        return 0.0;
    }
    let age = (now.millis() - event_time.millis()).max(0) as f64;
    weight * 0.5f64.powf(age / half_life_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: f64 = 86_400_000.0;

    #[test]
    fn halves_every_half_life() {
        let now = Timestamp(100 * DAY as i64);
        assert!((boost(now, now, 0.2, 7.0 * DAY) - 0.2).abs() < 1e-12);
        assert!((boost(Timestamp(93 * DAY as i64), now, 0.2, 7.0 * DAY) - 0.1).abs() < 1e-12);
        assert_eq!(boost(now, now, 0.0, 7.0 * DAY), 0.0);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn bounded_and_never_favours_the_older(a in 0i64..1 << 40, b in 0i64..1 << 40, now in 0i64..1 << 41, w in 0.0f64..2.0, h in 1.0f64..1e11) {
            let (older, newer) = (a.min(b), a.max(b));
            let (bo, bn) = (boost(Timestamp(older), Timestamp(now), w, h), boost(Timestamp(newer), Timestamp(now), w, h));
            prop_assert!((0.0..=w).contains(&bo) && (0.0..=w).contains(&bn));
            prop_assert!(bn >= bo);
        }
    }
}
