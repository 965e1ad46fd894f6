//! What the sleep cycle decides without a model: which episodes carry nothing to learn
//! (phatic), which names a turn mentions (entities by rule), and how an incoming fact meets the
//! current ones (the words and values that make two objects the same fact; the timeline they
//! are filed into is `policy::timeline`).

use crate::{MemoryId, Timestamp};
use std::collections::BTreeSet;

/// Words that carry no memory on their own: a turn made only of these (and punctuation) is
/// phatic and is marked processed without extraction.
const PHATIC: &[&str] = &[
    "ok",
    "okay",
    "k",
    "kk",
    "thanks",
    "thank",
    "you",
    "thx",
    "ty",
    "hello",
    "hi",
    "hey",
    "there",
    "bye",
    "goodbye",
    "cheers",
    "yes",
    "yeah",
    "yep",
    "no",
    "nope",
    "sure",
    "great",
    "cool",
    "nice",
    "lol",
    "haha",
    "hmm",
    "right",
    "alright",
    "got",
    "it",
    "see",
    "ya",
    "good",
    "morning",
    "night",
    "evening",
    "afternoon",
    "np",
    "welcome",
    "awesome",
    "wow",
    "oh",
    "ah",
    "indeed",
    "agreed",
    "perfect",
    "fine",
    "so",
    "much",
    "a",
    "lot",
    "very",
    "too",
    "and",
    "the",
];

/// Lower-cased words of a text (letters and digits), for the rules below.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// A turn that says nothing to remember: at most six words, every one a pleasantry.
pub fn is_phatic(text: &str) -> bool {
    let words = words(text);
    words.len() <= 6 && words.iter().all(|w| PHATIC.contains(&w.as_str()))
}

/// How names are compared: case, spacing and surrounding punctuation do not matter.
pub fn normalize(name: &str) -> String {
    name.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Capitalised words that start sentences or are everyday words, never names on their own.
const NOT_NAMES: &[&str] = &[
    "i",
    "i'm",
    "i've",
    "i'll",
    "i'd",
    "the",
    "a",
    "an",
    "and",
    "but",
    "or",
    "so",
    "if",
    "when",
    "what",
    "why",
    "how",
    "who",
    "where",
    "which",
    "this",
    "that",
    "these",
    "those",
    "it",
    "it's",
    "its",
    "we",
    "you",
    "he",
    "she",
    "they",
    "my",
    "your",
    "our",
    "their",
    "his",
    "her",
    "me",
    "us",
    "them",
    "yes",
    "no",
    "oh",
    "wow",
    "hey",
    "hi",
    "hello",
    "thanks",
    "thank",
    "ok",
    "okay",
    "sure",
    "well",
    "just",
    "also",
    "then",
    "there",
    "here",
    "do",
    "did",
    "does",
    "have",
    "has",
    "had",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "can",
    "could",
    "would",
    "should",
    "will",
    "not",
    "let's",
    "lets",
    "let",
    "that's",
    "there's",
    "what's",
    "yeah",
    "great",
    "good",
    "nice",
    "cool",
    "awesome",
    "haha",
    "lol",
    "really",
    "totally",
    "definitely",
    "absolutely",
    "sounds",
    "congrats",
    "congratulations",
    "for",
    "in",
    "on",
    "at",
    "to",
    "of",
    "with",
    "by",
    "from",
    "as",
    "after",
    "before",
    "since",
    "until",
    "while",
    "because",
    "maybe",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "today",
    "tomorrow",
    "yesterday",
    "mr",
    "mrs",
    "ms",
    "dr",
    "all",
    "some",
    "any",
    "every",
    "each",
    "both",
    "one",
    "two",
    "first",
    "last",
];

/// A name a text mentions, and whether every mention of it opened a sentence (where any
/// word is capitalised, so the name is only as sure as the same word seen capitalised
/// elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameMention {
    pub name: String,
    pub only_at_sentence_start: bool,
}

/// Proper names a text mentions, by rule: runs of capitalised words ("New York", "Caroline"),
/// skipping everyday words, dropping a possessive `'s`. In order of first mention, without
/// repeats (compared normalised). A line break starts a sentence too (a heading, a list item, a
/// line of code opens capitalised by convention, punctuated or not), and a word holding the
/// characters of code (`Flask(__name__)`, `db.Model`, a path) is no word of a name.
pub fn name_mentions(text: &str) -> Vec<NameMention> {
    let mut names: Vec<NameMention> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let mut run_at_start = false;
    let mut at_start = true;
    let flush = |run: &mut Vec<String>, run_at_start: bool, names: &mut Vec<NameMention>| {
        if run.is_empty() {
            return;
        }
        let name = run.join(" ");
        let key = normalize(&name);
        match names.iter_mut().find(|n| normalize(&n.name) == key) {
            Some(seen) => seen.only_at_sentence_start &= run_at_start,
            None => names.push(NameMention { name, only_at_sentence_start: run_at_start }),
        }
        run.clear();
    };
    let words = text.lines().flat_map(|line| {
        let mut words = line.split_whitespace().peekable();
        std::iter::from_fn(move || words.next().map(|w| (w, words.peek().is_none())))
    });
    for (raw, ends_line) in words {
        let title = matches!(raw.to_lowercase().trim_end_matches('.'), "dr" | "mr" | "mrs" | "ms" | "st" | "prof");
        let ends_sentence = (raw.ends_with(['.', '!', '?', ':']) && !title) || raw.starts_with('-') || ends_line;
        let ends_clause = ends_sentence || raw.ends_with([',', ';', ')', '"']);
        let token = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '-');
        let token = token.strip_suffix("'s").or_else(|| token.strip_suffix("’s")).unwrap_or(token);
        let capitalised = token.chars().next().is_some_and(char::is_uppercase)
            && token.chars().any(char::is_alphabetic)
            && !is_code(token)
            && !NOT_NAMES.contains(&token.to_lowercase().as_str());
        if capitalised {
            if run.is_empty() {
                run_at_start = at_start;
            }
            run.push(token.to_owned());
        } else {
            flush(&mut run, run_at_start, &mut names);
        }
        if ends_clause {
            flush(&mut run, run_at_start, &mut names);
        }
        at_start = ends_sentence || (at_start && token.is_empty());
    }
    flush(&mut run, run_at_start, &mut names);
    names
}

/// Whether a word holds what only code, paths and markup hold inside a word: brackets,
/// underscores, slashes, operators. Letters, digits, apostrophes, hyphens, dots (initials,
/// "Node.js") and ampersands ("AT&T") are the characters of names.
fn is_code(token: &str) -> bool {
    token.chars().any(|c| !(c.is_alphanumeric() || matches!(c, '\'' | '’' | '-' | '.' | '&')))
}

/// The names of [`name_mentions`] that are names for sure: seen at least once inside a
/// sentence.
pub fn proper_names(text: &str) -> Vec<String> {
    name_mentions(text).into_iter().filter(|m| !m.only_at_sentence_start).map(|m| m.name).collect()
}

/// A fact on its way in: what, from which episode, said when.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Normalised ([`normalize`]); the display form is in `subject_shown`.
    pub subject: String,
    pub subject_shown: String,
    pub predicate: String,
    pub object: String,
    pub confidence: f32,
    pub source: MemoryId,
    /// When the statement was made (the episode's event time): the fact's `valid_from`.
    pub said_at: Timestamp,
    /// The statement as said, when it was read from words: the text of a fact it begins.
    pub wording: Option<String>,
}

/// Word overlap (Jaccard of word sets) from which two objects are the same fact.
pub const SAME_FACT_OVERLAP: f64 = 0.8;

/// How much two texts share: the Jaccard index of their word sets (1 for two empty texts).
pub fn word_overlap(a: &str, b: &str) -> f64 {
    let (a, b): (BTreeSet<String>, BTreeSet<String>) = (words(a).into_iter().collect(), words(b).into_iter().collect());
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    a.intersection(&b).count() as f64 / a.union(&b).count() as f64
}

/// Similarity (e.g. the cosine of their embeddings) from which two objects are the same fact.
pub const SAME_FACT_SIMILARITY: f64 = 0.8;

/// The searchable sentence of a fact.
pub fn fact_text(subject: &str, predicate: &str, object: &str) -> String {
    match predicate {
        "state" => format!("{subject} is now: {object}"),
        "fact" => object.to_owned(),
        other => format!("{subject} {} {object}", other.replace('_', " ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pleasantries_are_phatic_and_content_is_not() {
        for t in ["ok", "Thanks!", "hello", "ok thanks, bye", "Yes!!", "haha nice", ""] {
            assert!(is_phatic(t), "{t:?}");
        }
        for t in ["ok, I moved to Lisbon", "thanks for the tea recipe", "I prefer Rust", "see you at 5"] {
            assert!(!is_phatic(t), "{t:?}");
        }
    }

    #[test]
    fn names_by_rule() {
        assert_eq!(proper_names("I went to New York with Caroline's sister."), vec!["New York", "Caroline"]);
        assert_eq!(proper_names("Thanks! We met Dr. Ada Lovelace on Monday"), vec!["Ada Lovelace"]);
        assert!(proper_names("i have no names here at all").is_empty());
        // A capitalised word that opens a sentence is only a candidate.
        let opening = name_mentions("Melanie painted a sunrise. Understood. The lake was calm near Melanie.");
        assert_eq!(
            opening,
            vec![
                NameMention { name: "Melanie".into(), only_at_sentence_start: false },
                NameMention { name: "Understood".into(), only_at_sentence_start: true },
            ]
        );
        assert!(name_mentions("Noted.\n- S:checkout: Great")[0].only_at_sentence_start);
    }

    #[test]
    fn a_line_opens_a_sentence_and_code_holds_no_names() {
        // A heading or a list item without a full stop: its first word is only a candidate.
        let lines = name_mentions("## Summary\nEnsure the tests pass\n**Explanation** we asked Priya");
        let sure: Vec<_> = lines.iter().filter(|m| !m.only_at_sentence_start).map(|m| m.name.as_str()).collect();
        assert_eq!(sure, ["Priya"], "{lines:?}");
        // Code: identifiers with brackets, underscores or operators are not names.
        assert_eq!(
            proper_names("then app = Flask(__name__) and User(db.Model) with SQLAlchemy(app)"),
            Vec::<String>::new()
        );
        assert_eq!(
            proper_names("we flew with AT&T to St. Louis and wrote Node.js there"),
            ["AT&T", "St Louis", "Node.js"]
        );
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn rules_never_panic(text in "\\PC{0,200}") {
            let _ = proper_names(&text);
            let _ = name_mentions(&text);
            let _ = is_phatic(&text);
            let _ = normalize(&text);
        }
    }
}
