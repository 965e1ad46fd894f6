//! The Experience memory's policies (ReMem's refine): what an experience is worth to a search
//! (exploit what worked, keep failures that teach, demote failures that say nothing), which
//! experiences are near-duplicates to merge, and the clusters they form in embedding space.

use crate::Outcome;
use crate::policy::embedding::cosine;
use crate::policy::query::terms;

/// Content words from which feedback says something.
pub const INFORMATIVE_WORDS: usize = 3;

/// Whether feedback carries a lesson (at least [`INFORMATIVE_WORDS`] content words).
pub fn informative(feedback: Option<&str>) -> bool {
    feedback.is_some_and(|f| terms(f).len() >= INFORMATIVE_WORDS)
}

/// How much an experience counts in a search, times its relevance: a success fully, a
/// partial success 0.8, a failure with a lesson 0.7 (what not to do is worth knowing), a failure
/// without one 0.3 (noise).
pub fn weight(outcome: Outcome, feedback: Option<&str>) -> f64 {
    match outcome {
        Outcome::Success => 1.0,
        Outcome::Partial => 0.8,
        Outcome::Failure if informative(feedback) => 0.7,
        Outcome::Failure => 0.3,
    }
}

/// Two experiences are comparably relevant to a task when their relevance differs by at most
/// this (on the absolute 0..1 scale of cosine similarity): only then does the outcome reorder
/// them. A different task that succeeded never passes the same task that failed.
pub const COMPARABLE_RELEVANCE: f64 = 0.05;

/// The order in which experiences are shown, as indices into `items` of (relevance, outcome
/// weight): by relevance, in bands that each start at the most relevant experience not yet
/// placed and hold those within [`COMPARABLE_RELEVANCE`] of it; inside a band, by weight
/// ([`weight`]), then relevance, then position. Relevance must be absolute (the same task
/// scores the same whatever else is found), not normalised to the best hit.
pub fn rank(items: &[(f64, f64)]) -> Vec<usize> {
    let mut by_relevance: Vec<usize> = (0..items.len()).collect();
    by_relevance.sort_by(|&a, &b| items[b].0.total_cmp(&items[a].0).then(a.cmp(&b)));
    let mut order = Vec::with_capacity(items.len());
    let mut start = 0;
    while start < by_relevance.len() {
        let top = items[by_relevance[start]].0;
        let end = (start..by_relevance.len())
            .find(|&i| top - items[by_relevance[i]].0 > COMPARABLE_RELEVANCE)
            .unwrap_or(by_relevance.len());
        let mut band = by_relevance[start..end].to_vec();
        band.sort_by(|&a, &b| {
            items[b].1.total_cmp(&items[a].1).then(items[b].0.total_cmp(&items[a].0)).then(a.cmp(&b))
        });
        order.extend(band);
        start = end;
    }
    order
}

/// Experiences with the same key are near-duplicates: the same task (its content words, in any
/// order, case and punctuation aside) with the same outcome.
pub fn duplicate_key(task: &str, outcome: Outcome) -> String {
    let mut words = terms(task);
    words.sort();
    format!("{outcome:?}:{}", words.join(" "))
}

/// Groups of experiences whose embeddings are at least `threshold` alike, joined transitively
/// (single link); every index is in exactly one group, groups in order of their first member.
pub fn clusters(vectors: &[Vec<f32>], threshold: f64) -> Vec<Vec<usize>> {
    let n = vectors.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..n {
        for j in i + 1..n {
            if cosine(&vectors[i], &vectors[j]) >= threshold {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut slot: Vec<Option<usize>> = vec![None; n];
    for i in 0..n {
        let r = root(&mut parent, i);
        match slot[r] {
            Some(g) => groups[g].push(i),
            None => {
                slot[r] = Some(groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_same_task_failed_comes_before_another_task_succeeded() {
        // "Sort the rows of the grid by their sum" (failed, no lesson) against "Count the blue
        // cells in each row" (succeeded), for "order each row of the grid by the total of its values".
        let items = [(0.52, weight(Outcome::Success, None)), (0.81, weight(Outcome::Failure, None))];
        assert_eq!(rank(&items), vec![1, 0]);
        // Comparably relevant: what worked first.
        let close = [(0.80, weight(Outcome::Failure, None)), (0.78, weight(Outcome::Success, None))];
        assert_eq!(rank(&close), vec![1, 0]);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Every experience is placed once; one clearly more relevant than another always comes
        /// first; and only comparably relevant ones are reordered by outcome.
        #[test]
        fn relevance_first_outcome_within_a_margin(
            items in prop::collection::vec((0.0f64..1.0, prop::sample::select(vec![0.3, 0.7, 0.8, 1.0])), 0..24)
        ) {
            let order = rank(&items);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..items.len()).collect::<Vec<_>>());
            for (i, &a) in order.iter().enumerate() {
                for &b in &order[i + 1..] {
                    prop_assert!(items[b].0 <= items[a].0 + COMPARABLE_RELEVANCE,
                        "{:?} placed before the clearly more relevant {:?}", items[a], items[b]);
                    if items[b].0 > items[a].0 {
                        prop_assert!(items[a].1 > items[b].1, "{:?} before {:?} only for its outcome", items[a], items[b]);
                    }
                }
            }
        }
    }

    #[test]
    fn failures_that_teach_outrank_failures_that_do_not() {
        assert!(weight(Outcome::Success, None) > weight(Outcome::Failure, Some("flood fill leaked past the border")));
        assert!(
            weight(Outcome::Failure, Some("flood fill leaked past the border")) > weight(Outcome::Failure, Some("bad"))
        );
        assert_eq!(
            duplicate_key("Mirror the grid!", Outcome::Success),
            duplicate_key("the grid: mirror", Outcome::Success)
        );
        assert_ne!(
            duplicate_key("mirror the grid", Outcome::Success),
            duplicate_key("mirror the grid", Outcome::Failure)
        );
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn clusters_partition_the_experiences(points in proptest::collection::vec(proptest::collection::vec(-1.0f32..1.0, 4), 0..30), t in 0.0f64..1.0) {
            let unit: Vec<Vec<f32>> = points.iter().map(|p| {
                let n = p.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                p.iter().map(|x| x / n).collect()
            }).collect();
            let groups = clusters(&unit, t);
            let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
            seen.sort();
            prop_assert_eq!(seen, (0..unit.len()).collect::<Vec<_>>());
            // Members of different groups are never that alike.
            for (a, g) in groups.iter().enumerate() {
                for h in &groups[a + 1..] {
                    for i in g { for j in h { prop_assert!(cosine(&unit[*i], &unit[*j]) < t); } }
                }
            }
        }
    }
}
