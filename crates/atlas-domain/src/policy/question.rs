//! What a recall question says about where its answer lies, read from its words alone: the
//! numbers it names, and whether it asks about the requester rather than about what the agent
//! said.
//!
//! Why recall reads them (measured on BEAM dev, docs/EVAL.md):
//! - A number in a question ("my quiz score of 93%", "after 5 hours", "the point (4, 7)") names
//!   one event among many alike. An embedding barely tells 93% from 95%, and in full text a
//!   number is one word among many, so in a long history the many messages on the same subject
//!   with other numbers outrank the one the question names. A memory that holds the question's
//!   numbers is credited for them ([`numbers_held`]).
//! - A question in the first person that does not address the agent ("What score did I get…",
//!   "How many hours did I study…") asks about the requester: what they said answers it. The
//!   agent's replies restate the requester's words at length (explanations, worked examples),
//!   so they compete on every list; for such a question they count for less
//!   ([`asks_about_the_requester`]). A question with "you" in it ("How did you explain…", "Can
//!   you summarise…") asks for the agent's side too, and is left alone.

use crate::policy::text::{each_word, words};

/// Words of the requester speaking of themselves.
const FIRST_PERSON: &[&str] = &["i", "me", "my", "mine", "myself"];

/// Words that address the agent.
const SECOND_PERSON: &[&str] = &["you", "your", "yours", "yourself"];

/// Whether `question` asks about the requester and not about what the agent said: it has a
/// first-person word ("I", "my", "me") and no second-person one ("you", "your"). Words only, so
/// no input can make it fail.
pub fn asks_about_the_requester(question: &str) -> bool {
    let (mut first, mut second) = (false, false);
    each_word(question, |w| {
        first |= FIRST_PERSON.contains(&w);
        second |= SECOND_PERSON.contains(&w);
    });
    first && !second
}

/// The distinct words of `text` with a digit in them ("93", "5", "v4", "2024"), in order of
/// first appearance: the same words the text pipeline reads ("4.5" is "4" and "5").
pub fn numbers(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words(text) {
        if w.bytes().any(|b| b.is_ascii_digit()) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// The share (0 to 1) of `numbers` (from [`numbers`]) that are words of `text`; 0 when there are
/// none. Stops reading once all are found.
pub fn numbers_held(numbers: &[String], text: &str) -> f64 {
    if numbers.is_empty() {
        return 0.0;
    }
    let mut held = vec![false; numbers.len()];
    let mut left = numbers.len();
    each_word(text, |w| {
        if left > 0
            && let Some(i) = numbers.iter().position(|n| n == w)
            && !held[i]
        {
            held[i] = true;
            left -= 1;
        }
    });
    (numbers.len() - left) as f64 / numbers.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_question_about_the_requester_is_told_from_one_for_the_agent() {
        for about_me in [
            "What score did I achieve on my number theory quiz most recently?",
            "How many hours did I study this week to improve my graphing quiz score to 93%?",
            "How old did I say I am?",
            "I've been practising: what was my first score?",
        ] {
            assert!(asks_about_the_requester(about_me), "{about_me}");
        }
        for not_about_me in [
            "How did you guide me through confirming the validity of my approach?",
            "Can you give me a summary of how my project developed?",
            "What did Caroline research?",
            "Which library did we pick?",
            "",
        ] {
            assert!(!asks_about_the_requester(not_about_me), "{not_about_me}");
        }
    }

    #[test]
    fn numbers_are_words_with_digits() {
        assert_eq!(
            numbers("Between 5 hours and 93%, 5 again; Tweepy v4.10.1 in 2024"),
            ["5", "93", "v4", "10", "1", "2024"]
        );
        assert!(numbers("no numbers here").is_empty());
        let asked = numbers("from 4 hours to 5 hours, score 93%");
        assert_eq!(numbers_held(&asked, "I studied 5 hours and got 93."), 2.0 / 3.0);
        assert_eq!(numbers_held(&asked, "4, 5 and 93 (93 twice)"), 1.0);
        assert_eq!(numbers_held(&asked, "4.5 hours, 95%"), 2.0 / 3.0);
        assert_eq!(numbers_held(&[], "4 5 93"), 0.0);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn every_number_is_a_word_of_the_text_and_held_by_it(text in "(\\PC|[0-9 .%])*") {
            let found = numbers(&text);
            let all: Vec<String> = words(&text).collect();
            for (i, n) in found.iter().enumerate() {
                prop_assert!(n.bytes().any(|b| b.is_ascii_digit()));
                prop_assert!(all.contains(n));
                prop_assert!(!found[..i].contains(n));
            }
            if !found.is_empty() {
                prop_assert_eq!(numbers_held(&found, &text), 1.0);
            }
        }

        #[test]
        fn the_share_held_is_a_share(asked in "[0-9a-z ]{0,40}", text in "\\PC{0,200}") {
            let share = numbers_held(&numbers(&asked), &text);
            prop_assert!((0.0..=1.0).contains(&share));
        }

        #[test]
        fn a_question_addressing_the_agent_is_never_about_the_requester_alone(q in "\\PC{0,120}") {
            let addressed = format!("{q} Could you remind me?");
            prop_assert!(!asks_about_the_requester(&addressed));
        }
    }
}
