//! How long a memory is, and what a full-text match in a long one is worth.
//!
//! BM25 (k1 = 1.2, b = 0.75, as FTS5 scores it) normalises a document's term counts by its
//! length only in part: a 600-word answer that touches a question's words here and there keeps
//! most of the credit of a 40-word message that is about them. In a space of conversation turns
//! that is the right trade, since turns are alike in length; beside long messages (an
//! assistant's answers, pasted documents, tool output) the long ones collect every query's words
//! and fill the top of the full-text list. Past the length of a turn of conversation, a memory's
//! match is therefore read as a density: its score times [`TURN_WORDS`] / its length, so that a
//! long memory matched as densely as a turn scores as that turn would, not higher. A turn is
//! scored as BM25 scores it. Measured (docs/EVAL.md): on BEAM dev full text alone R@10 0.433 →
//! 0.52 (plain BM25 0.447), fused R@10 +0.09 before spreading; LoCoMo dev, whose turns are all
//! shorter (at most 81 words), is unchanged.

/// The most words of a turn of conversation: a paragraph. LoCoMo's longest turn has 81 words,
/// while 99% of BEAM's assistant answers are longer. Also the longest turn a successor carries as
/// its context ([`crate::policy::embedding::CONTEXT_MAX_WORDS`]).
pub const TURN_WORDS: usize = 100;

/// Words of `text` as the length rules count them: runs of non-blank characters.
pub fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// A full-text score of a memory of `words` words, read as [`TURN_WORDS`] of it would score
/// at the same density: unchanged for a turn, `score × TURN_WORDS / words` past one.
pub fn per_turn(score: f64, words: usize) -> f64 {
    if words <= TURN_WORDS { score } else { score * TURN_WORDS as f64 / words as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_turn_keeps_its_score_and_a_long_memory_is_read_per_turn() {
        assert_eq!(per_turn(3.0, 0), 3.0);
        assert_eq!(per_turn(3.0, TURN_WORDS), 3.0);
        assert_eq!(per_turn(3.0, 4 * TURN_WORDS), 0.75);
        assert_eq!(words("  a\tb\nc  "), 3);
    }

    proptest! {
        #[test]
        fn longer_never_scores_more_and_density_is_what_counts(
            score in 0.0f64..50.0,
            short in 0usize..400,
            extra in 0usize..4000,
        ) {
            let long = short + extra;
            let (s, l) = (per_turn(score, short), per_turn(score, long));
            prop_assert!(l <= s && s <= score && l >= 0.0);
            if short <= TURN_WORDS {
                prop_assert_eq!(s, score);
            }
            // Past a turn, twice the words at twice the score is the same density.
            if long > TURN_WORDS {
                prop_assert!((per_turn(2.0 * score, 2 * long) - l).abs() < 1e-9 * (1.0 + score));
            }
        }
    }
}
