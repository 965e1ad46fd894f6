//! Whether a fact a model proposed is grounded in the turn it cites: its value said in that
//! turn's words, its subject the speaker or named there. A small model fills a schema with
//! what its prompt mentions (every relation of the vocabulary in turn, the speaker as the
//! value, an example address), so an ungrounded proposal is dropped, never filed: a model's
//! answer is untrusted input (policy::model_answer), and so is what it claims a turn says.
//! A question states nothing: a value only asked about ("Do you know a gym in Lisbon?") grounds
//! no fact.

use crate::policy::consolidation::{normalize, proper_names};
use crate::policy::text::tokens;
use std::collections::HashSet;

/// Words that carry no value of their own (after the text pipeline's stemming): a value of only
/// these is not grounded by them.
const FILLER: &[&str] = &[
    "a", "an", "the", "not", "no", "my", "his", "her", "their", "our", "your", "it", "of", "to", "in", "at", "on",
    "for", "and", "is", "are", "be", "with", "by", "s",
];

fn content(text: &str) -> Vec<String> {
    tokens(text).filter(|t| !FILLER.contains(&t.as_str())).collect()
}

/// More than half of `words` (and at least one) among `said`: a value may be reworded
/// (`drinks green tea` for "switched to green tea") but not made up.
fn mostly_said(words: &[String], said: &HashSet<String>) -> bool {
    let found = words.iter().filter(|w| said.contains(*w)).count();
    found > 0 && 2 * found > words.len()
}

/// The sentences of `turn` that are not questions, joined.
fn statements(turn: &str) -> String {
    let mut out = String::new();
    let mut sentence = String::new();
    for c in turn.chars() {
        sentence.push(c);
        if matches!(c, '.' | '!' | '?' | '\n') {
            if c != '?' {
                out.push_str(&sentence);
                out.push(' ');
            }
            sentence.clear();
        }
    }
    out.push_str(&sentence);
    out
}

/// Whether (`subject`, `object`), proposed from `turn` said by `speaker`, is grounded in it:
/// in the turn's sentences other than its questions.
pub fn grounded(subject: &str, object: &str, turn: &str, speaker: &str) -> bool {
    let said: HashSet<String> = tokens(&statements(turn)).collect();
    let subject_words = content(subject);
    let is_speaker = !subject_words.is_empty() && subject_words == content(speaker);
    (is_speaker || mostly_said(&subject_words, &said)) && mostly_said(&content(object), &said)
}

/// Whether `subject` (normalised) is the speaker or a name `turn` mentions inside a sentence
/// (any word opens one capitalised): a statement the rules keep whole is about someone only
/// then ("Things are changing" is about no one).
pub fn names(subject: &str, turn: &str, speaker: &str) -> bool {
    subject == normalize(speaker) || proper_names(turn).iter().any(|n| normalize(n) == subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_value_must_be_said_and_a_subject_be_the_speaker_or_named() {
        let turn = "I got a job offer. I'll be working as a data engineer at Fieldline.";
        assert!(grounded("Ann", "Fieldline", turn, "Ann"));
        assert!(grounded("Ann", "a data engineer", turn, "Ann"));
        // Subject and value swapped: the speaker's name is not said in the turn.
        assert!(!grounded("Fieldline", "Ann", turn, "Ann"));
        // Made up from the prompt's examples.
        assert!(!grounded("Ann", "info@example.com", turn, "Ann"));
        assert!(!grounded("Ann", "25", turn, "Ann"));
        assert!(!grounded("Ann", "the", turn, "Ann"));
        assert!(!grounded("Bob", "Fieldline", turn, "Ann"));
        let tea = "I'm not a coffee drinker anymore, I switched to green tea.";
        assert!(grounded("Omar", "drinks green tea", tea, "Omar"));
        assert!(grounded("Omar", "not coffee", tea, "Omar"));
        assert!(grounded("my brother Dev", "Leeds", "My brother Dev lives in Leeds.", "Raj"));
        // Asked, not said; a statement beside a question still grounds.
        assert!(!grounded("Ann", "climbing gym", "Do you know a good climbing gym in Lisbon?", "Ann"));
        assert!(names("ann", "Things are changing.", "Ann") && names("joao", "My partner Joao stays.", "Ann"));
        assert!(!names("things", "Things are changing.", "Ann"));
        assert!(grounded("Raj", "vegetarian", "Can you suggest dinner ideas? I'm vegetarian.", "Raj"));
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn a_value_taken_from_the_turn_is_grounded_and_one_absent_is_not(
            turn in "[a-z]{3,8}( [a-z]{3,8}){2,10}",
            pick in 0usize..3,
            absent in "[0-9]{4,8}",
        ) {
            let words: Vec<&str> = turn.split(' ').collect();
            let value = words[pick % words.len()];
            // A word whose stem is filler ("toed" stems to "to") grounds nothing.
            prop_assume!(!content(value).is_empty());
            prop_assert!(grounded("Speaker", value, &turn, "Speaker"));
            prop_assert!(!grounded("Speaker", &absent, &turn, "Speaker"));
            prop_assert!(!grounded(&absent, value, &turn, "Speaker"));
            // The same words asked about ground nothing.
            let asked = format!("{turn}?");
            prop_assert!(!grounded("Speaker", value, &asked, "Speaker"));
        }
    }
}
