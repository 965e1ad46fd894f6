//! How long a memory is, what a full-text match in a long one is worth, and which part of it
//! matched.
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
//!
//! A long memory is found by all of its words (full text indexes the whole text; the embedding
//! model reads its first 256 tokens), so a hit on one says which part matched: the
//! [`matched_passage`], a turn's length of its words, which `context` quotes instead of the whole.

use crate::policy::text::{each_token, token};

/// The most words of a turn of conversation: a paragraph. LoCoMo's longest turn has 81 words,
/// while 99% of BEAM's assistant answers are longer. Also the longest turn a successor carries as
/// its context ([`crate::policy::embedding::CONTEXT_MAX_WORDS`]).
pub const TURN_WORDS: usize = 100;

/// Words of `text` as the length rules count them: runs of non-blank characters (what
/// `split_whitespace` yields). Recall counts every full-text candidate and every neighbour it
/// spreads to, whole answers and documents among them, so words are counted where they start,
/// without slicing them out: ASCII text, most of it, a byte at a time without branches
/// (Unicode's blanks in ASCII are tab to carriage return, and space).
pub fn words(text: &str) -> usize {
    fn starts(blanks: impl Iterator<Item = bool>) -> usize {
        let (mut count, mut after_blank) = (0, true);
        for blank in blanks {
            count += usize::from(after_blank && !blank);
            after_blank = blank;
        }
        count
    }
    if text.is_ascii() {
        starts(text.bytes().map(|b| b == b' ' || (b'\t'..=b'\r').contains(&b)))
    } else {
        starts(text.chars().map(char::is_whitespace))
    }
}

/// A full-text score of a memory of `words` words, read as [`TURN_WORDS`] of it would score
/// at the same density: unchanged for a turn, `score × TURN_WORDS / words` past one.
pub fn per_turn(score: f64, words: usize) -> f64 {
    if words <= TURN_WORDS { score } else { score * TURN_WORDS as f64 / words as f64 }
}

/// The part of a long memory that a query matched: byte offsets into its text, on word
/// boundaries (the first byte of a word, the byte after the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passage {
    pub start: usize,
    pub end: usize,
}

impl Passage {
    pub fn of<'t>(&self, text: &'t str) -> &'t str {
        &text[self.start..self.end]
    }

    /// The passage as a quotation: an ellipsis where the memory goes on before or after it.
    pub fn quote(&self, text: &str) -> String {
        let before = if self.start > text.len() - text.trim_start().len() { "… " } else { "" };
        let after = if self.end < text.trim_end().len() { " …" } else { "" };
        format!("{before}{}{after}", self.of(text))
    }
}

/// Which [`TURN_WORDS`] words of a memory longer than a turn a query with `terms` matched: of the
/// windows of that many words, stepping by half a window (and one ending at the last word), the
/// one holding the most distinct terms, then the most occurrences, the earliest on ties. A word
/// matches a term when their [`token`]s are equal (what full text matches). When no term occurs
/// (a hit by meaning alone), the opening window, which is what the embedding model read. `None`
/// for a memory of a turn or shorter: all of it matched.
pub fn matched_passage(text: &str, terms: &[String]) -> Option<Passage> {
    let spans = word_spans(text);
    if spans.len() <= TURN_WORDS {
        return None;
    }
    let stems: Vec<String> = terms.iter().map(|t| token(t)).collect();
    // Each (word, term) that a word holds, once, in word order. A word may hold several terms
    // ("e-mail" is two of the tokenizer's words); they are read as full text reads them,
    // through one buffer, since a long memory has tens of thousands of words.
    let mut held: Vec<(usize, usize)> = Vec::new();
    for (index, &(start, end)) in spans.iter().enumerate() {
        let first_of_word = held.len();
        each_token(&text[start..end], |piece_token| {
            if let Some(term) = stems.iter().position(|s| s == piece_token)
                && !held[first_of_word..].iter().any(|&(_, t)| t == term)
            {
                held.push((index, term));
            }
        });
    }
    let last = spans.len() - TURN_WORDS;
    let mut starts: Vec<usize> = (0..=last).step_by(TURN_WORDS / 2).collect();
    if starts.last() != Some(&last) {
        starts.push(last);
    }
    let mut best: Option<((usize, usize), usize)> = None;
    let mut counts = vec![0usize; stems.len()];
    for first in starts {
        let from = held.partition_point(|&(w, _)| w < first);
        let to = held.partition_point(|&(w, _)| w < first + TURN_WORDS);
        counts.iter_mut().for_each(|c| *c = 0);
        for &(_, term) in &held[from..to] {
            counts[term] += 1;
        }
        let score = (counts.iter().filter(|c| **c > 0).count(), to - from);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, first));
        }
    }
    let first = best.map_or(0, |(_, f)| f);
    Some(Passage { start: spans[first].0, end: spans[first + TURN_WORDS - 1].1 })
}

/// Byte ranges of the whitespace-separated words of `text` (the words [`words`] counts).
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let base = text.as_ptr() as usize;
    text.split_whitespace().map(|w| (w.as_ptr() as usize - base, w.as_ptr() as usize - base + w.len())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::query::terms;
    use crate::policy::text::tokens;
    use proptest::prelude::*;

    #[test]
    fn a_long_memory_quotes_the_part_that_matched() {
        let filler = "the weather was fine and we talked about nothing much at all ".repeat(30);
        let text = format!("{filler}Then Ann said the kiln reached cone six before lunch. {filler}");
        let passage = matched_passage(&text, &terms("When did the kiln reach cone six?")).unwrap();
        let quoted = passage.of(&text);
        assert!(quoted.contains("kiln reached cone six"), "{quoted}");
        assert_eq!(words(quoted), TURN_WORDS);
        assert!(passage.quote(&text).starts_with("… ") && passage.quote(&text).ends_with(" …"));
        // Nothing matched: the opening, which the embedding model read.
        let opening = matched_passage(&text, &terms("zebra")).unwrap();
        assert_eq!(opening.start, 0);
        assert!(opening.quote(&text).ends_with(" …") && !opening.quote(&text).starts_with('…'));
        // More of the query's words beat more occurrences of one of them.
        let repeated = format!("{} {filler}kiln and cone {filler}", "kiln ".repeat(60));
        let both = matched_passage(&repeated, &terms("kiln cone")).unwrap();
        assert!(both.of(&repeated).contains("kiln and cone"), "{}", both.of(&repeated));
        // A memory that opens with blank lines is quoted from its opening without an ellipsis.
        let indented = format!("\n\n  {filler}");
        assert!(!matched_passage(&indented, &[]).unwrap().quote(&indented).starts_with('…'));
        // A turn is matched whole.
        assert_eq!(matched_passage("the kiln reached cone six", &terms("kiln")), None);
    }

    #[test]
    fn a_turn_keeps_its_score_and_a_long_memory_is_read_per_turn() {
        assert_eq!(per_turn(3.0, 0), 3.0);
        assert_eq!(per_turn(3.0, TURN_WORDS), 3.0);
        assert_eq!(per_turn(3.0, 4 * TURN_WORDS), 0.75);
        assert_eq!(words("  a\tb\nc  "), 3);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Words are what `split_whitespace` yields, on ASCII text (counted by bytes) as on any.
        #[test]
        fn words_are_the_runs_of_non_blanks(text in "([ -~\t\n\x0b\x0c\r\x1c-\x1f]|\\PC|[\u{85}\u{a0}\u{2003}\u{3000}])*") {
            prop_assert_eq!(words(&text), text.split_whitespace().count());
            let ascii: String = text.chars().filter(char::is_ascii).collect();
            prop_assert_eq!(words(&ascii), ascii.split_whitespace().count());
        }

        /// The passage is a turn's length of the memory's own words, on word boundaries: the
        /// window (of those stepping by half a window, and the last) with the most distinct
        /// terms, then occurrences, and no earlier one scores as much.
        #[test]
        fn the_passage_is_the_window_with_most_of_the_query(
            text in proptest::collection::vec(prop_oneof!["kiln", "cone", "six", "lunch", "a", "the", "Kilns,", "é-mail", "\\n\\n"], 0..400)
                .prop_map(|w| w.join(" ")),
            query in proptest::collection::btree_set(prop_oneof!["kiln", "cone", "lunch", "mail", "zebra"], 1..4)
                .prop_map(|q| q.into_iter().collect::<Vec<String>>()),
        ) {
            let passage = matched_passage(&text, &query);
            let spans: Vec<(usize, usize)> = text
                .split_whitespace()
                .map(|w| {
                    let start = w.as_ptr() as usize - text.as_ptr() as usize;
                    (start, start + w.len())
                })
                .collect();
            prop_assert_eq!(passage.is_none(), spans.len() <= TURN_WORDS);
            let Some(p) = passage else { return Ok(()) };
            prop_assert!(p.start < p.end && p.end <= text.len());
            prop_assert_eq!(words(p.of(&text)), TURN_WORDS);
            let first = spans.iter().position(|s| s.0 == p.start).expect("starts on a word");
            let score = |from: usize| {
                let mut distinct = std::collections::BTreeSet::new();
                let mut occurrences = 0;
                for &(s, e) in &spans[from..from + TURN_WORDS] {
                    let held: std::collections::BTreeSet<&String> =
                        query.iter().filter(|t| tokens(&text[s..e]).any(|w| w == token(t))).collect();
                    occurrences += held.len();
                    distinct.extend(held);
                }
                (distinct.len(), occurrences)
            };
            let last = spans.len() - TURN_WORDS;
            let chosen = score(first);
            for from in (0..=last).step_by(TURN_WORDS / 2).chain([last]) {
                prop_assert!(score(from) <= chosen);
                if from < first {
                    prop_assert!(score(from) < chosen);
                }
            }
        }

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
