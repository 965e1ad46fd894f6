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
