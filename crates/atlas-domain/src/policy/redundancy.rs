//! Near-duplicate collapse: the k slots of a recall carry k different pieces of evidence.

use crate::policy::text::each_word;
use foldhash::fast::FixedState;
use std::hash::BuildHasher;

/// Texts shorter than this many distinct words never collapse: "Yes!" answering two different
/// questions is two pieces of evidence.
pub const MIN_WORDS: usize = 4;

/// What a text is compared by: its distinct lowercase words, as sorted hashes (compared within
/// one process only, so the hasher need not be stable). Recall signs every hit it returns, whole
/// assistant answers and documents among them, so words are hashed from one buffer by a fast
/// hasher (a collision only makes two different words one, as a shared stem would).
pub fn signature(text: &str) -> Vec<u64> {
    let hasher = FixedState::default();
    let mut hashes = Vec::new();
    each_word(text, |word| hashes.push(hasher.hash_one(word)));
    hashes.sort_unstable();
    hashes.dedup();
    hashes
}

/// |a ∩ b| / |a ∪ b| of two signatures; 0 for two empty ones.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 { 0.0 } else { shared as f64 / union as f64 }
}

/// Folds each item into the first earlier kept item of the same `source` whose text is at least
/// `threshold` similar (Jaccard of [`signature`]s, both of at least [`MIN_WORDS`] words). Items
/// of different sources never fold: the same words kept under two keys of a store, or told in
/// two sessions, are two things a caller addressed apart. Returns the kept items in their input
/// order, each with the items folded into it, also in input order, and stops once `keep` items
/// are kept (later items are not looked at). Below that, every input item comes out exactly
/// once. A threshold above 1 keeps everything.
pub fn collapse<T, S: PartialEq>(
    items: Vec<T>,
    text: impl Fn(&T) -> String,
    source: impl Fn(&T) -> S,
    threshold: f64,
    keep: usize,
) -> Vec<(T, Vec<T>)> {
    if threshold > 1.0 {
        return items.into_iter().take(keep).map(|item| (item, Vec::new())).collect();
    }
    let mut kept: Vec<(T, Vec<T>, Vec<u64>, S)> = Vec::new();
    for item in items {
        if kept.len() == keep {
            break;
        }
        let sig = signature(&text(&item));
        let from = source(&item);
        let home = (sig.len() >= MIN_WORDS)
            .then(|| {
                kept.iter().position(|(_, _, k, s)| *s == from && k.len() >= MIN_WORDS && jaccard(k, &sig) >= threshold)
            })
            .flatten();
        match home {
            Some(i) => kept[i].1.push(item),
            None => kept.push((item, Vec::new(), sig, from)),
        }
    }
    kept.into_iter().map(|(item, folded, _, _)| (item, folded)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_repeated_statement_folds_into_the_first_and_short_replies_stay() {
        let items = vec![
            "I moved to Berlin in May last year",
            "Yes!",
            "i moved to berlin in may, last year.",
            "Yes!",
            "We moved the meeting to Monday",
        ];
        let out = collapse(items.clone(), |s| s.to_string(), |_| (), 0.8, 10);
        let kept: Vec<&str> = out.iter().map(|(k, _)| *k).collect();
        assert_eq!(kept, ["I moved to Berlin in May last year", "Yes!", "Yes!", "We moved the meeting to Monday"]);
        assert_eq!(out[0].1, ["i moved to berlin in may, last year."]);
        // The same words from two sources (two keys, two sessions) are two items.
        let apart = collapse(items, |s| s.to_string(), |s| s.starts_with('i'), 0.8, 10);
        assert_eq!(apart.len(), 5);
        assert!(apart.iter().all(|(_, folded)| folded.is_empty()));
    }

    /// Texts of few words, so that many are near-duplicates, each with one of three sources.
    fn arb_texts() -> impl Strategy<Value = Vec<(String, u8)>> {
        let word = prop::sample::select(vec!["moved", "berlin", "may", "tea", "lake", "run", "blue", "we", "i"]);
        let text = proptest::collection::vec(word, 0..8).prop_map(|w| w.join(" "));
        proptest::collection::vec((text, 0u8..3), 0..20)
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn every_item_comes_out_once_in_order_and_kept_items_differ(texts in arb_texts(), threshold in 0.3f64..1.2) {
            let indexed: Vec<(usize, String, u8)> = texts.iter().cloned().enumerate().map(|(i, (t, s))| (i, t, s)).collect();
            let text = |x: &(usize, String, u8)| x.1.clone();
            let source = |x: &(usize, String, u8)| x.2;
            let out = collapse(indexed.clone(), text, source, threshold, usize::MAX);
            let mut seen: Vec<usize> = out.iter().flat_map(|(k, f)| std::iter::once(k.0).chain(f.iter().map(|x| x.0))).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..texts.len()).collect::<Vec<_>>());
            let kept: Vec<usize> = out.iter().map(|(k, _)| k.0).collect();
            prop_assert!(kept.windows(2).all(|w| w[0] < w[1]), "kept items keep their order");
            for (k, folded) in &out {
                for f in folded {
                    prop_assert!(f.0 > k.0, "an item folds into an earlier one");
                    prop_assert_eq!(f.2, k.2, "an item folds only into one of its own source");
                    prop_assert!(jaccard(&signature(&k.1), &signature(&f.1)) >= threshold);
                }
            }
            for (i, (a, _)) in out.iter().enumerate() {
                for (b, _) in out[i + 1..].iter().filter(|(b, _)| b.2 == a.2) {
                    let (sa, sb) = (signature(&a.1), signature(&b.1));
                    let short = sa.len() < MIN_WORDS || sb.len() < MIN_WORDS;
                    prop_assert!(short || jaccard(&sa, &sb) < threshold, "two kept items of one source are near-duplicates");
                }
            }
            // Collapsing again changes nothing.
            let again = collapse(out.iter().map(|(k, _)| k.clone()).collect(), text, source, threshold, usize::MAX);
            prop_assert!(again.iter().all(|(_, f)| f.is_empty()));
            // Asking for fewer keeps a prefix of the same answer.
            let few = collapse(indexed, text, source, threshold, 2);
            prop_assert_eq!(few.iter().map(|(k, _)| k.0).collect::<Vec<_>>(), kept.iter().copied().take(2).collect::<Vec<_>>());
        }
    }
}
