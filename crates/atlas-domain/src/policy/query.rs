//! Turns user text into plain search terms, so no query syntax ever reaches a full-text engine.

/// Words too common to carry evidence; dropped unless the query has nothing else.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for", "from", "had",
    "has", "have", "he", "her", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she",
    "so", "that", "the", "their", "them", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Most terms a query keeps; a 10k-character query must not become a 2k-term disjunction.
pub const MAX_TERMS: usize = 64;

/// Every word of `text`, lowercase, in order, repeats included: the word boundaries of SQLite's
/// `unicode61` tokenizer, which adapters without FTS5 use to index text the same way.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    pieces(text)
        .map(|piece| {
            let mut word = String::new();
            lowercase_into(piece, &mut word);
            word
        })
        .filter(|w| !w.is_empty())
}

/// Calls `visit` with each of [`words`]' words in turn, lowercased into one buffer: the same
/// words without a `String` each, for loops over long memories (near-duplicate signatures,
/// matched passages), which read tens of thousands of words per recall.
pub fn each_word(text: &str, mut visit: impl FnMut(&str)) {
    let mut word = String::new();
    for piece in pieces(text) {
        lowercase_into(piece, &mut word);
        if !word.is_empty() {
            visit(&word);
        }
    }
}

/// The runs of letters and digits of `text`: what [`words`] lowercases.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|p| !p.is_empty())
}

/// `piece` lowercased into `word` (cleared first). Lowercasing can produce non-alphanumeric marks
/// (e.g. combining dots), which are dropped to keep words clean; an ASCII piece, most of them,
/// is lowercased in place.
fn lowercase_into(piece: &str, word: &mut String) {
    word.clear();
    if piece.is_ascii() {
        word.push_str(piece);
        word.make_ascii_lowercase();
    } else {
        word.extend(piece.to_lowercase().chars().filter(|c| c.is_alphanumeric()));
    }
}

/// A lowercase word without its common inflection (`seats`, `seat`; `rebuilding`, `rebuild`):
/// enough to tell that two words are one, where no stemmer of a full-text engine is at hand. A
/// final "e" stays: folding it would make `car` and `care`, `not` and `note` one word.
pub fn stem(word: &str) -> &str {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(stem) = word.strip_suffix(suffix).filter(|s| s.len() >= 3) {
            return stem;
        }
    }
    word
}

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

    #[test]
    fn inflections_share_a_stem() {
        for (a, b) in [("seats", "seat"), ("rebuilding", "rebuild"), ("bowls", "bowl")] {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        for (a, b) in [("car", "care"), ("not", "note"), ("plan", "plane")] {
            assert_ne!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("is"), "is");
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

        /// `words` is the reference definition (lowercase each run of letters and digits, drop
        /// what lowercasing made that is neither), and `each_word` visits exactly its words.
        #[test]
        fn words_and_each_word_agree_with_the_definition(text in "(\\PC|[ÀİΣßǅ\u{301}])*") {
            let reference: Vec<String> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(|w| w.to_lowercase().chars().filter(|c| c.is_alphanumeric()).collect::<String>())
                .filter(|w| !w.is_empty())
                .collect();
            prop_assert_eq!(words(&text).collect::<Vec<_>>(), reference.clone());
            let mut visited = Vec::new();
            each_word(&text, |w| visited.push(w.to_owned()));
            prop_assert_eq!(visited, reference);
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
