//! Weighted reciprocal rank fusion of ranked lists from independent signals.

use crate::MemoryId;
use crate::ports::ScoredId;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The retrieval signals recall can fuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Full-text BM25.
    Text,
    /// Vector similarity.
    Vector,
    /// Adjacent to a strong hit in its session (the turn before or after).
    Context,
    /// Linked to a strong hit by typed edges other than temporal ones (entity, causal,
    /// derived_from, supersedes), up to a few hops away.
    Graph,
    /// How recent the memory is (a boost added after fusion; rank 1 = the newest hit).
    Recency,
    /// The user's standing instruction that ranks best for the request, lifted to its place
    /// (`policy::instructions`); its contribution is the score the lift added.
    Instruction,
    /// The user's stated preference that ranks best for a request for advice, lifted to its
    /// place (`policy::preferences`); its contribution is the score the lift added.
    Preference,
    /// The share of the numbers the question names that the memory holds
    /// (`policy::question`); its contribution is what they added.
    Numbers,
    /// A turn the agent said, for a question about the requester (`policy::question`); its
    /// contribution is the (negative) part of the score it lost.
    Speaker,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Text => "text",
            Signal::Vector => "vector",
            Signal::Context => "context",
            Signal::Graph => "graph",
            Signal::Recency => "recency",
            Signal::Instruction => "instruction",
            Signal::Preference => "preference",
            Signal::Numbers => "numbers",
            Signal::Speaker => "speaker",
        }
    }
}

/// The reciprocal-rank constant from Cormack et al. (2009); damps the advantage of the top rank.
pub const DEFAULT_RRF_K: f64 = 60.0;

/// One signal's ranking, best first, with the signal's own scores (higher is better).
#[derive(Debug, Clone)]
pub struct RankedList {
    pub signal: Signal,
    pub weight: f64,
    pub hits: Vec<ScoredId>,
}

/// What one signal said about a fused result: its 1-based rank, its raw score, and what it
/// added to the fused score (the explanation `recall --explain` prints).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SignalScore {
    pub rank: usize,
    pub raw: f64,
    pub contribution: f64,
}

/// A fused result: its score and what each signal that found it contributed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fused {
    pub id: MemoryId,
    pub score: f64,
    pub signals: BTreeMap<Signal, SignalScore>,
}

impl Fused {
    pub fn rank(&self, signal: Signal) -> Option<usize> {
        self.signals.get(&signal).map(|s| s.rank)
    }
}

/// score(d) = Σ over lists of weight / (k + rank(d)). A repeated id within one list counts at
/// its first (best) rank only. Ties break by best single rank, then by id, so the output is a
/// deterministic function of the input.
pub fn reciprocal_rank_fusion(lists: &[RankedList], k: f64) -> Vec<Fused> {
    combine(lists, |list| move |rank: usize, _score: f64| list.weight / (k + rank as f64))
}

/// The one accumulation every method shares: each list's first occurrence of an id, at its
/// 1-based rank among first occurrences, adds `contribution(rank, raw score)`; `scorer` builds
/// that function once per list.
fn combine<'l, F: Fn(usize, f64) -> f64>(lists: &'l [RankedList], scorer: impl Fn(&'l RankedList) -> F) -> Vec<Fused> {
    let mut by_id: HashMap<MemoryId, Fused> = HashMap::new();
    for list in lists {
        let contribution = scorer(list);
        let mut rank = 0usize;
        for hit in &list.hits {
            let entry =
                by_id.entry(hit.id).or_insert_with(|| Fused { id: hit.id, score: 0.0, signals: BTreeMap::new() });
            if entry.signals.contains_key(&list.signal) {
                continue;
            }
            rank += 1;
            let added = contribution(rank, hit.score);
            entry.signals.insert(list.signal, SignalScore { rank, raw: hit.score, contribution: added });
            entry.score += added;
        }
    }
    sorted(by_id.into_values().collect())
}

/// Best score first; ties by best single rank, then by id: a deterministic order.
fn sorted(mut fused: Vec<Fused>) -> Vec<Fused> {
    fused.sort_by(|a, b| {
        b.score.total_cmp(&a.score).then_with(|| best_rank(a).cmp(&best_rank(b))).then_with(|| a.id.cmp(&b.id))
    });
    fused
}

/// How ranked lists are combined.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionMethod {
    /// Σ weight / (k + rank): uses ranks only.
    Rrf,
    /// Σ weight × min-max-normalised score: uses how far ahead a hit is, not only its place.
    Convex,
}

/// Fuses `lists` by `method` (`k` is the RRF constant).
pub fn fuse(lists: &[RankedList], method: FusionMethod, k: f64) -> Vec<Fused> {
    match method {
        FusionMethod::Rrf => reciprocal_rank_fusion(lists, k),
        FusionMethod::Convex => convex_combination(lists),
    }
}

/// score(d) = Σ over lists of weight × (s(d) − min) / (max − min), the list's raw scores
/// scaled to [0, 1] (all 1 when they are equal); a list that does not hold d adds nothing.
/// Unlike RRF it keeps the margins a signal sees: a BM25 hit far ahead of the rest stays far
/// ahead of a vector hit that is only slightly nearer than its neighbours (Bruch et al., "An
/// Analysis of Fusion Functions for Hybrid Retrieval", 2023). Measured in docs/EVAL.md.
pub fn convex_combination(lists: &[RankedList]) -> Vec<Fused> {
    combine(lists, |list| {
        let (min, max) =
            list.hits.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), h| (lo.min(h.score), hi.max(h.score)));
        let span = max - min;
        move |_rank: usize, score: f64| {
            let normalised = if span > 0.0 && span.is_finite() { (score - min) / span } else { 1.0 };
            list.weight * normalised
        }
    })
}

/// Spreading: every memory near (per `neighbours`: id and distance in hops) one of the `from`
/// best fused hits gains `weight × decay^(distance − 1) ×` that hit's score, from the best such
/// offer only, credited to `signal`, and the list is re-sorted. A turn's neighbours carry what
/// it refers to or what answers it ("what did you think?" → the next turn), and a memory's
/// typed links (entities, causes) what it is about: neither words nor vectors of the memory
/// alone find them. Scores from before the spreading are used, so nothing cascades. Measured
/// in docs/EVAL.md.
pub fn spread(
    fused: Vec<Fused>,
    neighbours: &HashMap<MemoryId, Vec<(MemoryId, u32)>>,
    from: usize,
    weight: f64,
    decay: f64,
    signal: Signal,
) -> Vec<Fused> {
    let mut best: HashMap<MemoryId, SignalScore> = HashMap::new();
    for (i, parent) in fused.iter().take(from).enumerate() {
        for (n, distance) in neighbours.get(&parent.id).into_iter().flatten().filter(|(n, _)| *n != parent.id) {
            let share = weight * decay.powi(distance.saturating_sub(1) as i32);
            let offer = SignalScore { rank: i + 1, raw: parent.score, contribution: share * parent.score };
            let slot = best.entry(*n).or_insert(offer);
            if offer.contribution > slot.contribution {
                *slot = offer;
            }
        }
    }
    let mut by_id: HashMap<MemoryId, Fused> = fused.into_iter().map(|f| (f.id, f)).collect();
    for (id, spread) in best {
        let entry = by_id.entry(id).or_insert_with(|| Fused { id, score: 0.0, signals: BTreeMap::new() });
        entry.score += spread.contribution;
        entry.signals.insert(signal, spread);
    }
    sorted(by_id.into_values().collect())
}

fn best_rank(f: &Fused) -> usize {
    f.signals.values().map(|s| s.rank).min().unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn hits(ids: impl IntoIterator<Item = i64>) -> Vec<ScoredId> {
        ids.into_iter().enumerate().map(|(i, id)| ScoredId { id: MemoryId(id), score: -(i as f64) }).collect()
    }

    fn list(signal: Signal, ids: &[i64]) -> RankedList {
        RankedList { signal, weight: 1.0, hits: hits(ids.iter().copied()) }
    }

    #[test]
    fn agreement_beats_a_single_first_place() {
        let fused = reciprocal_rank_fusion(&[list(Signal::Text, &[1, 2, 3]), list(Signal::Vector, &[4, 2, 5])], 60.0);
        assert_eq!(fused[0].id, MemoryId(2));
        assert_eq!(fused[0].rank(Signal::Text), Some(2));
        assert_eq!(fused[0].rank(Signal::Vector), Some(2));
        assert!((fused[0].score - 2.0 / 62.0).abs() < 1e-12);
        let explained: f64 = fused[0].signals.values().map(|s| s.contribution).sum();
        assert!((explained - fused[0].score).abs() < 1e-12, "contributions add up to the score");
    }

    fn arb_lists() -> impl Strategy<Value = Vec<RankedList>> {
        let ids = proptest::collection::vec(1i64..40, 0..30);
        (ids.clone(), ids, 0.1f64..3.0, 0.1f64..3.0).prop_map(|(a, b, wa, wb)| {
            vec![
                RankedList { signal: Signal::Text, weight: wa, hits: hits(a) },
                RankedList { signal: Signal::Vector, weight: wb, hits: hits(b) },
            ]
        })
    }

    #[test]
    fn convex_keeps_the_margin_a_signal_sees() {
        let text = RankedList {
            signal: Signal::Text,
            weight: 1.0,
            hits: vec![
                ScoredId { id: MemoryId(1), score: 20.0 },
                ScoredId { id: MemoryId(2), score: 2.0 },
                ScoredId { id: MemoryId(3), score: 1.0 },
            ],
        };
        let vector = RankedList {
            signal: Signal::Vector,
            weight: 1.0,
            hits: vec![
                ScoredId { id: MemoryId(2), score: 0.61 },
                ScoredId { id: MemoryId(1), score: 0.60 },
                ScoredId { id: MemoryId(3), score: 0.10 },
            ],
        };
        let fused = convex_combination(&[text, vector]);
        assert_eq!(fused[0].id, MemoryId(1), "far ahead in text, a hair behind in vectors");
        let explained: f64 = fused[0].signals.values().map(|s| s.contribution).sum();
        assert!((explained - fused[0].score).abs() < 1e-12);
        assert_eq!(fused[0].signals[&Signal::Text].raw, 20.0);
    }

    fn methods() -> impl Strategy<Value = FusionMethod> {
        prop_oneof![Just(FusionMethod::Rrf), Just(FusionMethod::Convex)]
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn every_method_outputs_the_union_once_sorted_by_score(lists in arb_lists(), method in methods()) {
            let fused = fuse(&lists, method, DEFAULT_RRF_K);
            let expected: HashSet<MemoryId> = lists.iter().flat_map(|l| l.hits.iter().map(|h| h.id)).collect();
            let got: Vec<MemoryId> = fused.iter().map(|f| f.id).collect();
            let unique: HashSet<MemoryId> = got.iter().copied().collect();
            prop_assert_eq!(unique.len(), got.len());
            prop_assert_eq!(unique, expected);
            for w in fused.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
            for f in &fused {
                let explained: f64 = f.signals.values().map(|s| s.contribution).sum();
                prop_assert!((explained - f.score).abs() < 1e-9);
            }
            prop_assert_eq!(&fuse(&lists, method, DEFAULT_RRF_K), &fused, "deterministic");
        }

        /// Spreading only adds: no hit loses score, nothing is duplicated, the neighbours of the
        /// best hit appear, and contributions still add up to each score.
        #[test]
        fn spreading_only_adds(lists in arb_lists(), links in proptest::collection::vec((1i64..40, 1i64..60, 1u32..4), 0..40), weight in 0.0f64..1.0) {
            let fused = convex_combination(&lists);
            let mut neighbours: HashMap<MemoryId, Vec<(MemoryId, u32)>> = HashMap::new();
            for (a, b, d) in links {
                neighbours.entry(MemoryId(a)).or_default().push((MemoryId(b), d));
            }
            let spread = spread(fused.clone(), &neighbours, 10, weight, 0.5, Signal::Context);
            let after: HashMap<MemoryId, f64> = spread.iter().map(|f| (f.id, f.score)).collect();
            prop_assert_eq!(after.len(), spread.len());
            for f in &fused {
                prop_assert!(after[&f.id] >= f.score - 1e-12);
            }
            if let Some(top) = fused.first() {
                for (n, _) in neighbours.get(&top.id).into_iter().flatten() {
                    prop_assert!(after.contains_key(n));
                }
            }
            for f in &spread {
                let explained: f64 = f.signals.values().map(|s| s.contribution).sum();
                prop_assert!((explained - f.score).abs() < 1e-9);
            }
            for w in spread.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
        }

        /// Raising a hit's score in one signal never lowers its fused score.
        #[test]
        fn convex_is_monotone_in_each_score(lists in arb_lists(), pick in 0usize..30, raise in 0.0f64..5.0) {
            let mut lists = lists;
            let mut seen = HashSet::new();
            lists[0].hits.retain(|h| seen.insert(h.id));
            if pick < lists[0].hits.len() {
                let target = lists[0].hits[pick].id;
                let score = |v: &[Fused]| v.iter().find(|f| f.id == target).unwrap().score;
                let before = score(&convex_combination(&lists));
                lists[0].hits[pick].score += raise;
                prop_assert!(score(&convex_combination(&lists)) >= before - 1e-12);
            }
        }

        /// A model's score scale does not decide: stretching and shifting one signal's scores
        /// (another model's cosines, BM25 of a longer corpus) leaves every fused score as it was,
        /// for both methods, since each list is scaled by its own spread in that query.
        #[test]
        fn fusion_does_not_see_a_signals_scale(lists in arb_lists(), stretch in 0.01f64..100.0, shift in -10.0f64..10.0, method in methods()) {
            let mut rescaled = lists.clone();
            for hit in &mut rescaled[0].hits {
                hit.score = hit.score * stretch + shift;
            }
            let (before, after) = (fuse(&lists, method, DEFAULT_RRF_K), fuse(&rescaled, method, DEFAULT_RRF_K));
            let by_id = |v: &[Fused]| v.iter().map(|f| (f.id, f.score)).collect::<HashMap<_, _>>();
            let (before, after) = (by_id(&before), by_id(&after));
            prop_assert_eq!(before.len(), after.len());
            for (id, score) in before {
                prop_assert!((after[&id] - score).abs() < 1e-9 * (1.0 + score.abs()), "{:?}: {} -> {}", id, score, after[&id]);
            }
        }

        #[test]
        fn output_is_the_union_without_duplicates_sorted_by_score(lists in arb_lists()) {
            let fused = reciprocal_rank_fusion(&lists, DEFAULT_RRF_K);
            let expected: HashSet<MemoryId> = lists.iter().flat_map(|l| l.hits.iter().map(|h| h.id)).collect();
            let got: Vec<MemoryId> = fused.iter().map(|f| f.id).collect();
            let unique: HashSet<MemoryId> = got.iter().copied().collect();
            prop_assert_eq!(unique.len(), got.len());
            prop_assert_eq!(unique, expected);
            for w in fused.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
        }

        #[test]
        fn deterministic_under_input_order_of_signals(lists in arb_lists()) {
            let forward = reciprocal_rank_fusion(&lists, DEFAULT_RRF_K);
            let reversed: Vec<RankedList> = lists.iter().rev().cloned().collect();
            let backward = reciprocal_rank_fusion(&reversed, DEFAULT_RRF_K);
            let ids = |v: &[Fused]| v.iter().map(|f| f.id).collect::<Vec<_>>();
            prop_assert_eq!(ids(&forward), ids(&backward));
        }

        #[test]
        fn monotone_moving_an_id_up_never_lowers_its_score(lists in arb_lists(), pick in 0usize..30) {
            let mut lists = lists;
            let text = &mut lists[0].hits;
            text.dedup_by_key(|h| h.id);
            if pick < text.len() && pick > 0 {
                let target = text[pick].id;
                let before = reciprocal_rank_fusion(&lists, DEFAULT_RRF_K);
                let score_before = before.iter().find(|f| f.id == target).unwrap().score;
                lists[0].hits.swap(pick, pick - 1);
                let after = reciprocal_rank_fusion(&lists, DEFAULT_RRF_K);
                let score_after = after.iter().find(|f| f.id == target).unwrap().score;
                prop_assert!(score_after >= score_before);
            }
        }

        #[test]
        fn adding_a_signal_that_finds_an_id_raises_it(ids in proptest::collection::vec(1i64..40, 1..20), extra in 1i64..40) {
            let base = vec![list(Signal::Text, &ids)];
            let mut more = base.clone();
            more.push(list(Signal::Vector, &[extra]));
            let score = |v: &[Fused]| v.iter().find(|f| f.id == MemoryId(extra)).map_or(0.0, |f| f.score);
            prop_assert!(score(&reciprocal_rank_fusion(&more, DEFAULT_RRF_K)) > score(&reciprocal_rank_fusion(&base, DEFAULT_RRF_K)));
        }
    }
}
