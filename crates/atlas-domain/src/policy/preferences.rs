//! A user's stated preferences as standing context: which memories state one ("I prefer…",
//! "I'd rather…", "I like to keep…", "I don't like…"), which requests ask for the advice, plan
//! or recommendation a preference governs, and the place recall lifts the best-ranked one to.
//!
//! A request for advice ("How should I structure the final interview stages?") shares few
//! words with the message where the user said how they like things done ("I prefer short
//! panels with a clear rubric…"), so that message ranks far below the memories about the topic
//! itself; an answer that ignores it ignores the user. Like a standing instruction
//! (`policy::instructions`), the best-ranked preference among recall's candidates comes at
//! [`PREFERENCE_PLACE`] at worst, explained as the `preference` signal.
//!
//! The rule reads a memory's stored words, so it holds for memories written before it existed
//! and needs no tag kept in step with the text.

use crate::Memory;
use crate::policy::instructions::asks_about_own_past;
use crate::policy::long_text::TURN_WORDS;
use crate::policy::speakers::said_by_the_agent;
use crate::policy::text;

/// Where (from 1) the best-ranked stated preference comes at worst: below the standing
/// instruction's place, so that both fit above the answers of a top 10.
pub const PREFERENCE_PLACE: usize = 3;

/// How far into a memory the rule reads, in words: a person states a preference in their own
/// words before what they paste (code, a document someone else wrote, in which "I prefer" is
/// its author's). On BEAM's and LongMemEval's user turns, 95% of the preferences the rule
/// finds start within the first 120 words.
pub const PREFERENCE_WORDS: usize = 2 * TURN_WORDS;

/// Adverbs that may stand between "I" and the verb ("I really prefer", "I'd much rather").
const ADVERBS: &[&str] = &[
    "always",
    "generally",
    "usually",
    "really",
    "much",
    "strongly",
    "personally",
    "definitely",
    "typically",
    "normally",
    "mostly",
    "still",
    "also",
    "just",
    "actually",
    "honestly",
    "certainly",
    "think",
];

/// Auxiliaries that make "I prefer" part of a question ("Would I prefer…?", "Do I like…?"),
/// which asks rather than states.
const AUXILIARIES: &[&str] = &["do", "does", "did", "would", "should", "will", "could", "can", "shall"];

/// Whether `memory` states a preference of the person who said it ([`states_preference`]): not
/// said by the agent (an assistant's "I'd rather suggest…" is advice given, not a preference).
pub fn is_stated_preference(memory: &Memory) -> bool {
    !said_by_the_agent(memory) && states_preference(&memory.text)
}

/// Whether `text` states a preference in its first [`PREFERENCE_WORDS`] words, in the first
/// person and not as a question:
/// - "I prefer", "I'd prefer", "I would prefer", "I favo(u)r", "I dislike", each with at most one
///   adverb after "I" ("I really prefer", "I tend to prefer", "I'd much rather");
/// - "I'd rather" and "I would rather" (a bare "I rather liked it" tells what happened);
/// - "I like to keep" and "I like keeping" (where "I'd like to keep track of" asks for a thing
///   now, a habit is stated);
/// - negations: "I don't like", "I do not like", "I don't prefer";
/// - "my preference", "my preferences", "my preferred".
///
/// "Make sure it…" is left out: in a working conversation it asks for something about the
/// task at hand, and its standing form ("Always make sure…") is a standing instruction.
/// Matching is on words (case and punctuation aside), so no input can make it fail.
pub fn states_preference(text: &str) -> bool {
    // A text without any of the verbs is answered without cutting it into words: recall asks
    // this of every candidate of a request for advice.
    if !has_preference_verb(text) {
        return false;
    }
    let w: Vec<String> = text::words(text).take(PREFERENCE_WORDS).collect();
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    (0..w.len()).any(|i| preference_at(&w, i))
}

/// Whether `text` holds a word a preference is stated with (ASCII case aside).
fn has_preference_verb(text: &str) -> bool {
    let bytes = text.as_bytes();
    ["prefer", "rather", "like", "favo", "dislike"]
        .iter()
        .any(|verb| bytes.windows(verb.len()).any(|window| window.eq_ignore_ascii_case(verb.as_bytes())))
}

/// Whether a stated preference opens at `w[i]`.
fn preference_at(w: &[&str], i: usize) -> bool {
    let at = |j: usize| w.get(j).copied().unwrap_or("");
    if at(i) == "my" {
        return matches!(at(i + 1), "preference" | "preferences" | "preferred");
    }
    if at(i) != "i" || (i > 0 && AUXILIARIES.contains(&at(i - 1))) {
        return false;
    }
    let mut j = i + 1;
    // "I'd": the apostrophe parts the words.
    let wishing = matches!(at(j), "d" | "would");
    if wishing {
        j += 1;
    }
    if ADVERBS.contains(&at(j)) {
        j += 1;
    } else if at(j) == "tend" && at(j + 1) == "to" {
        j += 2;
    }
    match at(j) {
        "prefer" | "favor" | "favour" | "dislike" => true,
        "rather" => wishing,
        "like" => !wishing && (at(j + 1) == "keeping" || (at(j + 1) == "to" && at(j + 2) == "keep")),
        "don" => !wishing && at(j + 1) == "t" && matches!(at(j + 2), "like" | "prefer"),
        "do" => !wishing && at(j + 1) == "not" && matches!(at(j + 2), "like" | "prefer"),
        _ => false,
    }
}

/// Words that ask for advice, a plan or a recommendation wherever they stand.
const ADVICE_WORDS: &[&str] = &[
    "suggest",
    "suggestion",
    "suggestions",
    "recommend",
    "recommendation",
    "recommendations",
    "advice",
    "advise",
    "tips",
    "approach",
    "best",
];

/// Word pairs that ask how to do something or what to do.
const ADVICE_PAIRS: &[[&str; 2]] = &[
    ["should", "i"],
    ["should", "we"],
    ["how", "should"],
    ["what", "should"],
    ["which", "should"],
    ["how", "can"],
    ["how", "do"],
    ["how", "would"],
    ["how", "to"],
    ["help", "me"],
    ["walk", "me"],
    ["show", "me"],
];

/// Whether `request` asks for advice, a plan or a recommendation: what a stated preference
/// governs ("How should I…", "Can you suggest…", "What's the best way to…", "Help me plan…").
/// Not a question about what the requester or the agent did or said ([`asks_about_own_past`],
/// "What did you suggest…"): that is answered by memories of the past, which a lifted
/// preference would push down. Matching is on words, so no input can make it fail.
pub fn asks_for_advice(request: &str) -> bool {
    if asks_about_own_past(request) {
        return false;
    }
    let w: Vec<String> = text::words(request).collect();
    if w.windows(2).any(|pair| pair[0] == "did" && pair[1] == "you") {
        return false;
    }
    w.iter().any(|x| ADVICE_WORDS.contains(&x.as_str()))
        || w.windows(2).any(|pair| ADVICE_PAIRS.iter().any(|p| pair[0] == p[0] && pair[1] == p[1]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryId, NewMemory, Scope, Timestamp};
    use proptest::prelude::*;

    fn said(speaker: &str, text: &str) -> Memory {
        let at = Timestamp::from_millis(0);
        NewMemory::episode(text, Scope::default(), Some(speaker.to_owned()), at, at).with_id(MemoryId(1))
    }

    #[test]
    fn stated_preferences_are_recognised() {
        for text in [
            "I prefer OAuth 2.0 PKCE for secure token exchange in public clients, but I'm not sure how.",
            "For the appointment I'm flexible, but I'd prefer it to be sometime in the morning.",
            "I would rather keep the interviews short.",
            "Honestly I'd much rather fly out of JFK.",
            "I really prefer evening runs.",
            "I tend to prefer algebraic solutions supported by geometric intuition.",
            "I like to keep things simple, so I use a dry rub.",
            "I like keeping my notes in markdown.",
            "Too generic, I don't like it.",
            "I do not like long meetings.",
            "My preference is exact fractions before decimals.",
            "My preferred stack is Rust and SQLite.",
            "I dislike verbose logging.",
            "I favour small pull requests.",
            "I PREFER TABS!",
        ] {
            assert!(states_preference(text), "{text:?}");
        }
    }

    #[test]
    fn other_first_person_sentences_are_not_preferences() {
        for text in [
            "I'd like to keep track of my connections and the workshops we attended.",
            "Would I prefer the train or the plane?",
            "Do I like it? Hard to say.",
            "I rather liked the film.",
            "I like pizza.",
            "Make sure it compiles on stable.",
            "You prefer tea, right?",
            "Which do you prefer?",
            "She prefers the window seat.",
            "I'd like a summary of the meeting.",
            "",
        ] {
            assert!(!states_preference(text), "{text:?}");
        }
    }

    #[test]
    fn only_what_the_person_said_and_only_before_a_paste() {
        assert!(is_stated_preference(&said("user", "I prefer short answers.")));
        assert!(is_stated_preference(&said("Caroline", "I prefer hiking to running.")));
        assert!(!is_stated_preference(&said("assistant", "I'd rather suggest a smaller model.")));
        let paste = "word ".repeat(PREFERENCE_WORDS);
        assert!(!states_preference(&format!("Here is the article: {paste} I prefer tabs.")));
        assert!(states_preference(&format!("I prefer tabs. Here is the article: {paste}")));
    }

    #[test]
    fn requests_for_advice_are_recognised() {
        for request in [
            "How should I structure the final stages of the interview process?",
            "Can you suggest some problems I can work on?",
            "Which transformer model would you recommend I start with?",
            "What's the best way to cache price data across restarts?",
            "Can you help me solve the differential equation dy/dx + y = e^x?",
            "How would you approach solving y'' + 4y = tan 2x?",
            "Can you walk me through how to prove it?",
            "Any tips for my trip to Lisbon?",
        ] {
            assert!(asks_for_advice(request), "{request:?}");
        }
        for request in [
            "What did I say about the interview process?",
            "When did we first discuss caching?",
            "What is the capital of France?",
            "Who is Caroline's sister?",
            "Which model did you recommend I start with?",
        ] {
            assert!(!asks_for_advice(request), "{request:?}");
        }
    }

    /// Texts made of the words the rules read, so that generated cases state preferences (and
    /// ask for advice) as often as not.
    fn phrases() -> impl Strategy<Value = String> {
        let vocabulary = prop::sample::select(vec![
            "I",
            "I'd",
            "i",
            "would",
            "prefer",
            "PREFER",
            "rather",
            "like",
            "to",
            "keep",
            "keeping",
            "don't",
            "do",
            "not",
            "my",
            "preference",
            "really",
            "tend",
            "favour",
            "dislike",
            "should",
            "how",
            "the",
            "plan",
            "best",
            "did",
            "said",
            ",",
            ".",
            "?",
        ]);
        prop::collection::vec(vocabulary, 0..24).prop_map(|w| w.join(" "))
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]

        /// No text makes the rules fail, and case and punctuation never change an answer.
        #[test]
        fn case_and_punctuation_do_not_matter(text in prop_oneof![phrases(), ".{0,200}"]) {
            let plain: String = text.chars().map(|c| if c.is_alphanumeric() { c } else { ' ' }).collect();
            prop_assert_eq!(states_preference(&text), states_preference(&plain.to_uppercase()));
            prop_assert_eq!(asks_for_advice(&text), asks_for_advice(&plain.to_lowercase()));
        }

        /// A preference stated in a sentence of its own is found whatever words surround it.
        #[test]
        fn a_statement_is_found_among_other_words(
            before in "[a-z]{1,8}( [a-z]{1,8}){0,20}",
            after in "( [a-z]{1,8}){0,20}",
            statement in prop::sample::select(vec![
                "I prefer", "I'd rather", "I like to keep", "I don't like", "my preference is", "I generally favor",
            ]),
        ) {
            let last = before.rsplit(' ').next().unwrap_or("");
            prop_assume!(!AUXILIARIES.contains(&last));
            let text = format!("{before}. {statement}{after}");
            prop_assert!(states_preference(&text), "{}", text);
        }

        /// The quick check never refuses what the full reading of the words would accept.
        #[test]
        fn the_quick_check_agrees_with_the_reading(text in phrases()) {
            let w: Vec<String> = text::words(&text).collect();
            let w: Vec<&str> = w.iter().map(String::as_str).collect();
            let read = (0..w.len()).any(|i| preference_at(&w, i));
            prop_assert_eq!(states_preference(&text), read, "{}", text);
        }
    }
}
