//! Turns user text into plain search terms, so no query syntax ever reaches a full-text engine.

use crate::policy::text::words;

/// Words too common to carry evidence; dropped unless the query has nothing else.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for", "from", "had",
    "has", "have", "he", "her", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she",
    "so", "that", "the", "their", "them", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Most terms a query keeps; a 10k-character query must not become a 2k-term disjunction.
pub const MAX_TERMS: usize = 64;

/// Splits `text` into lowercase words of letters and digits (the same word boundaries as
/// SQLite's `unicode61` tokenizer), drops stop words unless nothing else is left, removes
/// duplicates keeping first occurrences, and keeps at most [`MAX_TERMS`].
///
/// Quotes, `NEAR`, `*`, `-`, `:` and parentheses are separators here, so the result is always
/// safe to quote as literal FTS5 strings.
pub fn terms(text: &str) -> Vec<String> {
    let words: Vec<String> = words(text).collect();
    let content: Vec<&String> = words.iter().filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let chosen: Vec<&String> = if content.is_empty() { words.iter().collect() } else { content };
    let mut out: Vec<String> = Vec::new();
    for w in chosen {
        if out.len() == MAX_TERMS {
            break;
        }
        if !out.contains(w) {
            out.push(w.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn query_syntax_becomes_words() {
        assert_eq!(terms(r#""hello" NEAR(world*) -foo :bar (("#), ["hello", "near", "world", "foo", "bar"]);
        assert_eq!(terms("What did Caroline research?"), ["caroline", "research"]);
        assert_eq!(terms("who is it"), ["who", "is", "it"]);
        assert!(terms("  ()*:- ").is_empty());
        assert_eq!(terms("Émilie 🎉 café"), ["émilie", "café"]);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn terms_are_clean_unique_and_bounded(text in ".{0,400}") {
            let ts = terms(&text);
            prop_assert!(ts.len() <= MAX_TERMS);
            for (i, t) in ts.iter().enumerate() {
                prop_assert!(!t.is_empty());
                prop_assert!(t.chars().all(char::is_alphanumeric), "{t:?}");
                prop_assert!(!ts[..i].contains(t));
            }
            prop_assert_eq!(terms(&text), ts);
        }

        #[test]
        fn every_term_comes_from_the_text(text in "[a-zA-Z0-9 \"*:()-]{0,80}") {
            let lower = text.to_lowercase();
            for t in terms(&text) {
                prop_assert!(lower.contains(&t));
            }
        }
    }
}
