//! Standing instructions: what a user tells the agent to do from now on ("Always format dates as
//! Month Day, Year when I ask about deadlines"), told apart by rule with no model, and the place
//! recall gives the one that matches a request best.
//!
//! Why recall treats them apart: an instruction says how to answer the requests its condition
//! covers, and it shares few words and little meaning with them ("When is the final submission
//! due?" against "…when I ask about deadlines"), so by similarity alone it ranks far below the
//! memories that answer the request: on BEAM dev (docs/EVAL.md) the instruction a question
//! tests ranked 10th to 160th. Without a model ATLAS cannot tell whether a condition covers a
//! request, so it does what costs one place: the standing instruction that ranks best for the
//! request comes at [`INSTRUCTION_PLACE`] at worst.

use crate::Memory;
use crate::policy::long_text::TURN_WORDS;
use crate::policy::speakers::{is_agent_role, said_by_the_agent};
use crate::policy::text;

/// The place, counted from 1, that the best-matching standing instruction takes at worst: right
/// after the memory that answers the request best, which keeps its first place.
pub const INSTRUCTION_PLACE: usize = 2;

/// Words that may open a sentence before the instruction itself ("Please always…", "Thanks!
/// Also, from now on…").
const LEAD_WORDS: &[&str] = &["please", "and", "also", "so", "ok", "okay", "oh", "but", "thanks", "then"];

/// Words that open a clause with its own subject: "From now on I'm vegetarian" and "Whenever I
/// hear this song, I think of her" tell, where "From now on, keep it short" and "Whenever I ask
/// about money, give the currency" instruct.
const SUBJECTS: &[&str] = &[
    "i",
    "we",
    "you",
    "he",
    "she",
    "they",
    "it",
    "this",
    "that",
    "these",
    "those",
    "there",
    "my",
    "our",
    "his",
    "her",
    "their",
    "its",
    "the",
    "a",
    "an",
    "everyone",
    "everything",
    "nobody",
    "people",
];

/// What may follow "you" in a command addressed to the agent ("you should answer in French").
const MODALS: &[&str] = &["should", "must", "will", "can", "need", "have", "shall"];

/// Verbs of a request: an instruction's condition is the requester asking ("when I ask about…",
/// "if we talk about…"), not something that happened ("Always loved pizza when I was a kid",
/// "Always happy when I see you").
const REQUEST_VERBS: &[&str] = &[
    "ask", "asking", "want", "need", "request", "talk", "mention", "bring", "discuss", "inquire", "say", "send",
    "share", "paste", "write", "type", "upload", "query", "search", "show", "chat", "message", "question",
];

/// Whether `memory` is a standing instruction to the agent ([`is_standing_instruction`]), and not
/// said by the agent itself under its own name (a speaker equal to the memory's scope agent).
pub fn instructs_the_agent(memory: &Memory) -> bool {
    !said_by_the_agent(memory) && is_standing_instruction(memory.body.speaker(), &memory.text)
}

/// Whether a memory said by `speaker` with `text` is a standing instruction to the agent: a
/// turn of conversation (at most [`TURN_WORDS`] words, not the agent's own) with a sentence that
/// - opens with "from now on", "going forward" or "in (the) future" and goes on with a command;
/// - opens with "always", "never", "don't" or "do not" and names the requester's request as its
///   condition ("when I ask…", "if we talk…", "any/each/every time I mention…"): without one,
///   "Never give up" and "Always here to help" are encouragement, not instructions;
/// - or opens with such a condition and goes on, after its comma, with a command ("When I ask
///   about money, always give the currency").
///
/// A command opens with a verb, not with a subject of its own (`SUBJECTS`), or with "you" and a
/// modal ("you should…"). Openers may follow `LEAD_WORDS`. Matching is on words (case and
/// punctuation aside), so no input can make it fail.
pub fn is_standing_instruction(speaker: Option<&str>, text: &str) -> bool {
    // "Always back up first" from the assistant is advice given, not an instruction received.
    if speaker.is_some_and(is_agent_role) {
        return false;
    }
    // Counted no further than the bound: recall asks this of memories of any length.
    if text.split_whitespace().nth(TURN_WORDS).is_some() {
        return false;
    }
    sentences(text).any(instructs)
}

/// The sentences of `text`: split at "!", "?", ";" and line breaks, and at a full stop that ends
/// a word of more than one letter before a space or the end ("e.g.", "3 p.m." and "2.5" do not
/// end a sentence, where splitting would part an instruction from its condition).
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    let mut cuts = Vec::new();
    let mut word_start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        if c.is_whitespace() {
            word_start = i + c.len_utf8();
        } else if matches!(c, '!' | '?' | ';') {
            cuts.push(i);
        } else if c == '.' && next.is_none_or(char::is_whitespace) {
            let word = &text[word_start..i];
            if word.chars().filter(|c| c.is_alphanumeric()).count() > 1 && !word.contains('.') {
                cuts.push(i);
            }
        }
        if c == '\n' {
            cuts.push(i);
        }
    }
    let mut from = 0;
    let mut pieces: Vec<&str> = Vec::with_capacity(cuts.len() + 1);
    for cut in cuts {
        pieces.push(&text[from..cut]);
        from = cut + 1;
    }
    pieces.push(&text[from..]);
    pieces.into_iter()
}

/// The words an instruction's sentence can open with (after `LEAD_WORDS`): the first words of
/// its openers, its commands and its conditions. Recall asks [`instructs_the_agent`] of every
/// candidate; a sentence that opens otherwise is answered from its first words, without reading
/// (and allocating) the rest.
const OPENING_WORDS: &[&str] = &[
    "from", "going", "in", "always", "never", "don", "do", "when", "whenever", "if", "anytime", "any", "each", "every",
];

fn instructs(sentence: &str) -> bool {
    let opening = text::words(sentence).find(|w| !LEAD_WORDS.contains(&w.as_str()));
    if !opening.is_some_and(|w| OPENING_WORDS.contains(&w.as_str())) {
        return false;
    }
    reads_as_instruction(sentence)
}

/// [`instructs`] from every word of `sentence`.
fn reads_as_instruction(sentence: &str) -> bool {
    let all: Vec<String> = text::words(sentence).collect();
    let lead = all.iter().take_while(|w| LEAD_WORDS.contains(&w.as_str())).count();
    let w: Vec<&str> = all[lead..].iter().map(String::as_str).collect();
    let opener = [&["from", "now", "on"][..], &["going", "forward"], &["in", "the", "future"], &["in", "future"]]
        .into_iter()
        .find(|o| w.starts_with(o));
    if let Some(opener) = opener {
        return is_command(&w[opener.len()..]);
    }
    let command = [&["always"][..], &["never"], &["don", "t"], &["do", "not"]].into_iter().find(|o| w.starts_with(o));
    if command.is_some() {
        return !w.starts_with(&["never", "mind"]) && (0..w.len()).any(|i| condition_at(&w, i).is_some());
    }
    if condition_at(&w, 0).is_some() {
        // The command comes after the condition's comma.
        let Some((_, rest)) = sentence.split_once(',') else { return false };
        let after: Vec<String> = text::words(rest).collect();
        return is_command(&after.iter().map(String::as_str).collect::<Vec<_>>());
    }
    false
}

/// Whether `w` opens with a command: a verb, or "you" with a modal; not a subject of its own.
fn is_command(w: &[&str]) -> bool {
    match w {
        ["you", modal, ..] => MODALS.contains(modal),
        [first, ..] => !SUBJECTS.contains(first),
        [] => false,
    }
}

/// Where the requester's request starts when `w[i..]` opens with it: "when/whenever/if/anytime
/// I|we <request verb>", or "any/each/every time I|we <request verb>".
fn condition_at(w: &[&str], i: usize) -> Option<usize> {
    let asks = |at: usize| {
        w.get(at).is_some_and(|p| matches!(*p, "i" | "we")) && w.get(at + 1).is_some_and(|v| REQUEST_VERBS.contains(v))
    };
    match *w.get(i)? {
        "when" | "whenever" | "if" | "anytime" => asks(i + 1).then_some(i + 1),
        "any" | "each" | "every" => (w.get(i + 1) == Some(&"time") && asks(i + 2)).then_some(i + 2),
        _ => None,
    }
}

/// Past forms that do not end in "-ed", of verbs a person uses to tell what they did or said.
const IRREGULAR_PAST: &[&str] = &[
    "said",
    "told",
    "brought",
    "gave",
    "got",
    "made",
    "took",
    "went",
    "saw",
    "wrote",
    "found",
    "began",
    "chose",
    "felt",
    "thought",
    "did",
    "was",
    "were",
    "had",
    "spent",
    "set",
    "kept",
    "left",
    "met",
    "paid",
    "sent",
    "built",
    "bought",
    "ran",
    "won",
    "lost",
    "read",
    "came",
    "became",
    "knew",
    "heard",
    "held",
    "put",
    "sat",
    "stood",
    "taught",
    "understood",
    "shared",
];

/// Words that may stand between a subject and its past verb ("I first mentioned", "we last
/// talked").
const TIME_ADVERBS: &[&str] = &[
    "first",
    "last",
    "originally",
    "initially",
    "previously",
    "recently",
    "just",
    "already",
    "ever",
    "once",
    "also",
    "then",
];

/// Whether `request` asks about what the requester did or said ("Have I completed…", "What score
/// did I get…", "…when I first mentioned…", "the position we discussed"): a first-person subject
/// with a verb in the past, or a question's "did/have/had I (we)". Such a question is answered
/// by memories of that past; an instruction says how to answer a request for the agent to do
/// something ("Can you show me…", "How should I…"), which is what its condition covers. So
/// recall lifts no instruction for it: in a long history some instruction is always among the
/// candidates, and on BEAM's 500K-token chats the lift took place 2 in 47 of 72 questions and
/// was the evidence once (docs/EVAL.md). Matching is on words, so no input can make it fail.
pub fn asks_about_own_past(request: &str) -> bool {
    let w: Vec<String> = text::words(request).collect();
    let is = |i: usize, set: &[&str]| w.get(i).is_some_and(|x| set.contains(&x.as_str()));
    let past = |v: &str| (v.len() > 3 && v.ends_with("ed") && !v.ends_with("eed")) || IRREGULAR_PAST.contains(&v);
    let participle = |v: &str| past(v) || (v.len() > 3 && v.ends_with("en"));
    (0..w.len()).any(|i| {
        if is(i, &["did", "have", "had", "has"]) && is(i + 1, &["i", "we"]) {
            return true;
        }
        if !is(i, &["i", "we"]) {
            return false;
        }
        // "I've", "we've": the apostrophe parts the words.
        if is(i + 1, &["ve"]) {
            return true;
        }
        let mut j = i + 1;
        while is(j, TIME_ADVERBS) {
            j += 1;
        }
        w.get(j).is_some_and(|v| past(v)) || (is(j, &["have", "had"]) && w.get(j + 1).is_some_and(|v| participle(v)))
    })
}

/// Moves the first item that `is_instruction` accepts to `place` (from 1) when it stands below
/// it, shifting the items between down by one; every other item keeps its order. Returns where
/// the instruction stood and where it stands now (from 0), or `None` when no item is one.
pub fn lift_first<T>(items: &mut [T], place: usize, is_instruction: impl Fn(&T) -> bool) -> Option<(usize, usize)> {
    let at = items.iter().position(is_instruction)?;
    let to = place.max(1) - 1;
    if at > to {
        items[to..=at].rotate_right(1);
        return Some((at, to));
    }
    Some((at, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn user(text: &str) -> bool {
        is_standing_instruction(Some("user"), text)
    }

    #[test]
    fn a_question_about_ones_own_past_is_told_from_a_request() {
        for past in [
            "Have I completed any induction problems on sums of integers before?",
            "What score did I achieve on my number theory quiz most recently?",
            "How many days after I first encountered the 401 error did I see the next one?",
            "What is the amount offered for the position we discussed?",
            "How much progress have we made on the edits so far?",
            "I've been practising, what was my first score?",
            "When I last talked to you, which library did we pick?",
            "What did I say my budget was?",
        ] {
            assert!(asks_about_own_past(past), "{past}");
        }
        for request in [
            "Could you show me how to implement a login feature?",
            "How should I organize the different parts of a webpage in HTML?",
            "Which version of the Facebook API should I use in my Python code?",
            "I need help with the distance formula",
            "When is the final submission due?",
            "If I draw a card from a deck and then draw another, how do I figure out the chance?",
            "Can you help me prove that every integer greater than 1 is a product of primes?",
            "",
        ] {
            assert!(!asks_about_own_past(request), "{request}");
        }
    }

    #[test]
    fn an_instruction_with_its_condition_is_standing() {
        assert!(user("Always format dates as Month Day, Year when I ask about timeline details."));
        assert!(user("Always use APA 7th edition citation style when I ask about formatting references."));
        assert!(user("never round the figures if we talk about money"));
        assert!(user("Thanks! Please always answer in French any time I ask about travel."));
        assert!(user("Don't use emojis when I ask about work."));
        assert!(user("Always use ISO dates, e.g. 2026-01-01, when I ask about deadlines."));
        assert!(user("Always round to 2.5 hours when I ask about estimates."));
        assert!(user("From now on, keep answers short."));
        assert!(user("ok, going forward reply in bullet points"));
        assert!(user("In the future, cite your sources."));
        assert!(user("From now on you should answer in French."));
        assert!(user("Whenever I ask about budgets, give the currency."));
        assert!(user("When I ask about money, always give the currency."));
        assert!(user("If we talk about code, you should show tests first."));
        assert!(is_standing_instruction(None, "Always confirm time zones when I ask about meeting times."));
    }

    #[test]
    fn telling_encouraging_and_advising_are_not_instructions() {
        // The six LoCoMo dev lines that open like an instruction.
        assert!(!user("Whenever I hear this jam, I think about the paths I've taken."));
        assert!(!user("Never had a chance to visit it!"));
        assert!(!user("Make sure yours stands out."));
        assert!(!user("Always here to help!"));
        assert!(!user("Always here to cheer you on!"));
        assert!(!user("Never give up."));
        // Statements that open like one.
        assert!(!user("From now on I'm vegetarian."));
        assert!(!user("In the future I hope to adopt a dog."));
        assert!(!user("Always loved pizza when I was a kid."));
        assert!(!user("Always happy when I see you!"));
        assert!(!user("Never mind, I'll check when I ask my boss."));
        assert!(!user("When I asked about it, the shop was closed."));
        assert!(!user("I always format dates as Month Day, Year when I write."));
        assert!(!user("Always!"));
        assert!(!user("Whenever"));
        assert!(!user(""));
    }

    #[test]
    fn the_agent_and_long_messages_give_no_standing_instructions() {
        let line = "Always validate input when I ask about forms.";
        for agent in ["assistant", "Assistant", " AI ", "tool"] {
            assert!(!is_standing_instruction(Some(agent), line), "{agent}");
        }
        let pasted = format!("{line} {}", "more words of a pasted document ".repeat(30));
        assert!(!user(&pasted), "a turn is at most {TURN_WORDS} words");
        let scope = crate::Scope { agent: Some("Atlas".into()), ..crate::Scope::default() };
        let said = |speaker: &str| {
            let at = crate::Timestamp(1);
            crate::NewMemory::episode(line, scope.clone(), Some(speaker.into()), at, at).with_id(crate::MemoryId(1))
        };
        assert!(instructs_the_agent(&said("Ann")));
        assert!(!instructs_the_agent(&said("atlas")), "the agent, by the name its scope gives it");
    }

    #[test]
    fn sentences_end_at_full_stops_of_words_not_of_abbreviations_or_numbers() {
        let pieces: Vec<&str> =
            sentences("Use ISO dates, e.g. 2026-01-01, at 3 p.m. today. Round 2.5 up! Ok\nbye").collect();
        assert_eq!(pieces, ["Use ISO dates, e.g. 2026-01-01, at 3 p.m. today", " Round 2.5 up", " Ok", "bye"]);
    }

    #[test]
    fn the_first_instruction_moves_up_to_its_place_and_the_rest_keep_their_order() {
        let mut items = vec![1, 2, 3, 40, 5, 60];
        assert_eq!(lift_first(&mut items, INSTRUCTION_PLACE, |x| *x >= 10), Some((3, 1)));
        assert_eq!(items, vec![1, 40, 2, 3, 5, 60]);
        let mut first = vec![40, 1, 2];
        assert_eq!(lift_first(&mut first, INSTRUCTION_PLACE, |x| *x >= 10), Some((0, 0)), "above its place it stays");
        assert_eq!(first, vec![40, 1, 2]);
        let mut none = vec![1, 2];
        assert_eq!(lift_first(&mut none, INSTRUCTION_PLACE, |x| *x >= 10), None);
        assert_eq!(none, vec![1, 2]);
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_opening_words_decide_as_reading_every_word_does(
            lead in proptest::sample::select(vec!["", "please ", "ok so ", "Then "]),
            opening in proptest::sample::select(
                OPENING_WORDS.iter().copied().chain(["I", "you", "Never mind", "Do not", "Any time", "forward"]).collect::<Vec<_>>()
            ),
            rest in "[a-zA-Z ,']{0,60}",
        ) {
            let sentence = format!("{lead}{opening} {rest}");
            prop_assert_eq!(instructs(&sentence), reads_as_instruction(&sentence), "{:?}", sentence);
        }

        #[test]
        fn any_text_is_judged_without_failing(speaker in proptest::option::of(".{0,12}"), text in "\\PC{0,400}") {
            let _ = is_standing_instruction(speaker.as_deref(), &text);
            let rejoined: usize = sentences(&text).map(str::len).sum::<usize>() + sentences(&text).count() - 1;
            prop_assert_eq!(rejoined, text.len(), "the sentences and their one-byte ends are the text");
        }

        #[test]
        fn a_past_question_is_told_on_words_alone(text in "\\PC{0,300}", ascii in "[a-zA-Z ,.?']{0,200}") {
            let _ = asks_about_own_past(&text);
            prop_assert_eq!(asks_about_own_past(&ascii), asks_about_own_past(&ascii.to_ascii_uppercase()));
            let asked = format!("{ascii}. Did I {ascii}?");
            prop_assert!(asks_about_own_past(&asked));
        }

        #[test]
        fn the_agent_never_gives_a_standing_instruction(text in "\\PC{0,200}") {
            prop_assert!(!is_standing_instruction(Some("assistant"), &text));
            let instruction = format!("Always {text} when I ask");
            prop_assert!(!is_standing_instruction(Some("assistant"), &instruction));
        }

        #[test]
        fn an_opener_with_a_condition_makes_a_short_line_standing(
            lead in prop::sample::select(vec!["", "Please ", "Also, ", "ok "]),
            opener in prop::sample::select(vec!["Always", "never", "ALWAYS", "Do not"]),
            action in "[a-z]{1,10}( [a-z]{1,10}){0,8}",
            condition in prop::sample::select(vec!["when I", "whenever we", "if I", "any time I", "every time we"]),
            topic in "[a-z]{1,10}( [a-z]{1,10}){0,5}",
        ) {
            prop_assume!(!(opener == "never" && action.starts_with("mind")));
            let line = format!("{lead}{opener} {action} {condition} ask about {topic}.");
            prop_assert!(is_standing_instruction(Some("user"), &line), "{}", line);
        }

        #[test]
        fn lifting_permutes_and_puts_the_first_match_in_place(
            items in prop::collection::vec(0u8..20, 0..40),
            place in 1usize..6,
        ) {
            let mut lifted = items.clone();
            let moved = lift_first(&mut lifted, place, |x| *x >= 15);
            let mut a = items.clone();
            let mut b = lifted.clone();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
            match items.iter().position(|x| *x >= 15) {
                None => { prop_assert_eq!(moved, None); prop_assert_eq!(&lifted, &items); }
                Some(first) => {
                    let (from, now) = moved.expect("found");
                    prop_assert_eq!(from, first);
                    prop_assert_eq!(now, first.min(place - 1));
                    prop_assert_eq!(lifted[now], items[first]);
                    // Without the lifted item, the order is the input's without it.
                    let mut rest = lifted.clone();
                    rest.remove(now);
                    let mut expected = items.clone();
                    expected.remove(first);
                    prop_assert_eq!(rest, expected);
                }
            }
        }
    }
}
