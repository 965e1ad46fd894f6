//! The one text pipeline: text into words, words into the tokens every store indexes and every
//! query looks up (lowercase, Latin diacritics folded, English Snowball stems). The SQLite text
//! cache, the Qdrant sparse vectors, the in-memory fake and the rules that match words across
//! texts (a long memory's matched passage, a value's swapped words) all cut words here, so one
//! space ranks the same on every store. [`crate::policy::bm25`] scores what this produces.

use std::borrow::Cow;
use std::sync::LazyLock;

/// Names this pipeline: stored with whatever holds its tokens (a store's cache file), so that
/// a change to it rebuilds them instead of mixing two pipelines' tokens. Change it with any
/// change to what [`tokens`] returns.
pub const PIPELINE: &str = "unicode-alnum-words lowercase fold-latin snowball-english 1";

/// Snowball's English stemmer (Porter2): what tantivy and Lucene's English analysers use, and
/// what the Qdrant store indexed with before this module existed, so its sparse vectors stay
/// valid. Building it is cheap, but it is built once.
static STEMMER: LazyLock<rust_stemmers::Stemmer> =
    LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// Every word of `text`, lowercase, in order, repeats included: each run of letters and digits
/// (the word boundaries of SQLite's `unicode61` tokenizer, which ATLAS used before it had its
/// own pipeline).
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

/// A lowercase word's stem: `seats` and `seat`, `rebuilding` and `rebuild`, `crazed` and
/// `craze` are one. A final "e" is not folded away where it makes another word (`car` and
/// `care`, `not` and `note` stay two).
pub fn stem(word: &str) -> Cow<'_, str> {
    STEMMER.stem(word)
}

/// `word` with each Latin letter's diacritics removed (`café` → `cafe`, `naïve` → `naive`), as
/// SQLite's `remove_diacritics` did: a user who types without accents still finds the word.
/// Only a letter whose canonical decomposition is a plain ASCII letter and combining marks is
/// folded; other scripts keep their letters (a Hangul syllable is not cut into its jamo).
pub fn fold(word: &str) -> Cow<'_, str> {
    if word.is_ascii() {
        return Cow::Borrowed(word);
    }
    let mut folded = String::with_capacity(word.len());
    for c in word.chars() {
        folded.push(folded_letter(c));
    }
    if folded == word { Cow::Borrowed(word) } else { Cow::Owned(folded) }
}

fn folded_letter(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let (mut base, mut only_marks) = (None, true);
    unicode_normalization::char::decompose_canonical(c, |part| match base {
        None => base = Some(part),
        Some(_) => only_marks &= unicode_normalization::char::is_combining_mark(part),
    });
    match base {
        Some(b) if b != c && b.is_ascii_alphanumeric() && only_marks => b,
        _ => c,
    }
}

/// The token a lowercase word is indexed and looked up as: folded, then stemmed.
pub fn token(word: &str) -> String {
    let mut token = String::new();
    token_into(word, &mut token);
    token
}

/// Calls `visit` with each of [`tokens`]' tokens in turn, through one buffer: for tokenising
/// many or long memories.
pub fn each_token(text: &str, mut visit: impl FnMut(&str)) {
    let mut token = String::new();
    each_word(text, |word| {
        token_into(word, &mut token);
        visit(&token);
    });
}

/// Words whose tokens a thread remembers: a text cache built from every row, or a long memory's
/// passage found, meets the same few thousand words over and over, and a lookup costs a fraction
/// of a Snowball stem. Bounded: the memory is emptied when full (about a megabyte).
const REMEMBERED_WORDS: usize = 1 << 14;

thread_local! {
    static REMEMBERED: std::cell::RefCell<std::collections::HashMap<String, Box<str>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// [`token`] into `out`, from the thread's memory of words when it holds `word`. (The memory is
/// never borrowed while a caller's code runs, so a visitor may tokenise too.)
fn token_into(word: &str, out: &mut String) {
    out.clear();
    let remembered = REMEMBERED.with(|memory| memory.borrow().get(word).map(|token| out.push_str(token)).is_some());
    if remembered {
        return;
    }
    let token = stem(&fold(word)).into_owned();
    out.push_str(&token);
    REMEMBERED.with(|memory| {
        let mut memory = memory.borrow_mut();
        if memory.len() >= REMEMBERED_WORDS {
            memory.clear();
        }
        memory.insert(word.to_owned(), token.into_boxed_str());
    });
}

/// Every token of `text`, in order, repeats included.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    words(text).map(|w| token(&w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inflections_share_a_stem() {
        for (a, b) in [("seats", "seat"), ("rebuilding", "rebuild"), ("bowls", "bowl"), ("crazed", "craze")] {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        for (a, b) in [("car", "care"), ("not", "note"), ("plan", "plane")] {
            assert_ne!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("is"), "is");
    }

    #[test]
    fn tokens_fold_latin_diacritics_and_stem() {
        assert_eq!(tokens("Café ÉCOLE naïve Zoë runs").collect::<Vec<_>>(), ["cafe", "ecol", "naiv", "zoe", "run"]);
        // Other scripts keep their letters; a letter with no decomposition stays as it is.
        assert_eq!(token("한국"), "한국");
        assert_eq!(fold("øre"), "øre");
        assert_eq!(fold("ελλάδα"), "ελλάδα");
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
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


        /// What the thread remembers of a word is that word's token: asked twice (the second
        /// time from memory) or after the memory was emptied, a word gives the stem of its
        /// folded self.
        #[test]
        fn a_remembered_token_is_the_token(text in "(\\PC|[àéïõüÀÉß])*", filler in 0usize..3) {
            for round in 0..2 {
                for word in words(&text) {
                    prop_assert_eq!(token(&word), stem(&fold(&word)).into_owned(), "round {}", round);
                }
                if filler == 2 && round == 0 {
                    (0..REMEMBERED_WORDS + 1).for_each(|i| drop(token(&format!("w{i}"))));
                }
            }
        }

        /// A token is never empty, a word's token is its own token (stemming twice changes
        /// nothing a store relies on: both sides of a match are stemmed once), and folding keeps
        /// letters letters.
        #[test]
        fn tokens_are_words_of_their_own(text in "(\\PC|[àéïõüÀÉß])*") {
            for (word, token) in words(&text).zip(tokens(&text)) {
                prop_assert!(!token.is_empty(), "{word:?}");
                prop_assert!(fold(&word).chars().all(char::is_alphanumeric), "{word:?}");
                prop_assert_eq!(fold(&word).chars().count(), word.chars().count());
            }
            let mut visited = Vec::new();
            each_token(&text, |t| visited.push(t.to_owned()));
            prop_assert_eq!(visited, tokens(&text).collect::<Vec<_>>());
        }
    }
}
