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

use crate::policy::long_text::TURN_WORDS;
use crate::policy::query;

/// The place, counted from 1, that the best-matching standing instruction takes at worst: right
/// after the memory that answers the request best, which keeps its first place.
pub const INSTRUCTION_PLACE: usize = 2;

/// Speakers whose lines are the agent's own, or its tools': "Always back up first" from the
/// assistant is advice given, not an instruction the agent was given.
const AGENT_SPEAKERS: &[&str] = &["assistant", "agent", "ai", "bot", "system", "model", "tool"];

/// Words that may open a sentence before the instruction itself ("Please always…", "Also,
/// from now on…").
const LEAD_WORDS: &[&str] = &["please", "and", "also", "so", "ok", "okay", "oh", "but"];

/// Words that start a clause with its own subject: "Whenever I hear this song, I think of her"
/// tells, where "Whenever I ask about money, give the currency" instructs.
const SUBJECTS: &[&str] = &["i", "we", "you", "he", "she", "they", "it", "this", "that", "there", "my", "our"];

/// Whether a memory said by `speaker` with `text` is a standing instruction to the agent: a
/// turn of conversation (at most [`TURN_WORDS`] words, not the agent's own) with a sentence that
/// - opens with "from now on", "going forward" or "in (the) future";
/// - opens with "always" or "never" and names the requester's condition ("when I…", "whenever
///   we…", "if I…", "any time I…", "each time I…", "every time I…"): without one, "Never give
///   up" and "Always here to help" are encouragement, not instructions;
/// - or opens with "whenever I/we …," and goes on with a command, not a clause of its own.
///
/// Openers may follow "please", "and", "also", "so", "ok", "oh", "but". Matching is on words
/// (case and punctuation aside), so no input can make it fail.
pub fn is_standing_instruction(speaker: Option<&str>, text: &str) -> bool {
    if speaker.is_some_and(|s| AGENT_SPEAKERS.iter().any(|a| s.trim().eq_ignore_ascii_case(a))) {
        return false;
    }
    // Counted no further than the bound: recall asks this of memories of any length.
    if text.split_whitespace().nth(TURN_WORDS).is_some() {
        return false;
    }
    text.split(['.', '!', '?', '\n', ';']).any(instructs)
}

fn instructs(sentence: &str) -> bool {
    let all: Vec<String> = query::words(sentence).collect();
    let lead = all.iter().take_while(|w| LEAD_WORDS.contains(&w.as_str())).count();
    let w: Vec<&str> = all[lead..].iter().map(String::as_str).collect();
    let opens = |phrase: &[&str]| w.starts_with(phrase);
    if opens(&["from", "now", "on"]) || opens(&["going", "forward"]) || opens(&["in", "future"]) {
        return true;
    }
    if opens(&["in", "the", "future"]) {
        return true;
    }
    if opens(&["always"]) || opens(&["never"]) {
        return names_a_condition(&w);
    }
    if w.len() >= 2 && w[0] == "whenever" && matches!(w[1], "i" | "we") {
        // The main clause comes after the condition's comma; a command has no subject.
        let Some((_, rest)) = sentence.split_once(',') else { return false };
        return query::words(rest).next().is_some_and(|first| !SUBJECTS.contains(&first.as_str()));
    }
    false
}

/// Whether `w` holds "when I", "whenever we", "if I", "any time I", "anytime we", "each time
/// I" or "every time I".
fn names_a_condition(w: &[&str]) -> bool {
    let requester = |i: usize| w.get(i).is_some_and(|p| matches!(*p, "i" | "we"));
    (0..w.len()).any(|i| match w[i] {
        "when" | "whenever" | "if" | "anytime" => requester(i + 1),
        "any" | "each" | "every" => w.get(i + 1) == Some(&"time") && requester(i + 2),
        _ => false,
    })
}

/// Moves the first item that `is_instruction` accepts to `place` (from 1) when it stands below
/// it, shifting the items between down by one; every other item keeps its order. Returns where
/// the instruction now stands (from 0), or `None` when no item is one.
pub fn lift_first<T>(items: &mut [T], place: usize, is_instruction: impl Fn(&T) -> bool) -> Option<usize> {
    let at = items.iter().position(is_instruction)?;
    let to = place.max(1) - 1;
    if at > to {
        items[to..=at].rotate_right(1);
        return Some(to);
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn user(text: &str) -> bool {
        is_standing_instruction(Some("user"), text)
    }

    #[test]
    fn an_instruction_with_its_condition_is_standing() {
        assert!(user("Always format dates as Month Day, Year when I ask about timeline details."));
        assert!(user("Always use APA 7th edition citation style when I ask about formatting references."));
        assert!(user("never round the figures if we talk about money"));
        assert!(user("Thanks! Please always answer in French any time I ask about travel."));
        assert!(user("From now on, keep answers short."));
        assert!(user("ok, going forward reply in bullet points"));
        assert!(user("In the future, cite your sources."));
        assert!(user("Whenever I ask about budgets, give the currency."));
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
        assert!(!user("I always format dates as Month Day, Year when I write."));
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
    }

    #[test]
    fn the_first_instruction_moves_up_to_its_place_and_the_rest_keep_their_order() {
        let mut items = vec![1, 2, 3, 40, 5, 60];
        assert_eq!(lift_first(&mut items, INSTRUCTION_PLACE, |x| *x >= 10), Some(1));
        assert_eq!(items, vec![1, 40, 2, 3, 5, 60]);
        let mut first = vec![40, 1, 2];
        assert_eq!(lift_first(&mut first, INSTRUCTION_PLACE, |x| *x >= 10), Some(0), "above its place it stays");
        assert_eq!(first, vec![40, 1, 2]);
        let mut none = vec![1, 2];
        assert_eq!(lift_first(&mut none, INSTRUCTION_PLACE, |x| *x >= 10), None);
        assert_eq!(none, vec![1, 2]);
    }

    proptest! {
        #[test]
        fn any_text_is_judged_without_failing(speaker in proptest::option::of(".{0,12}"), text in "\\PC{0,400}") {
            let _ = is_standing_instruction(speaker.as_deref(), &text);
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
            opener in prop::sample::select(vec!["Always", "never", "ALWAYS"]),
            action in "[a-z]{1,10}( [a-z]{1,10}){0,8}",
            condition in prop::sample::select(vec!["when I", "whenever we", "if I", "any time I", "every time we"]),
            topic in "[a-z]{1,10}( [a-z]{1,10}){0,5}",
        ) {
            let line = format!("{lead}{opener} {action} {condition} ask about {topic}.");
            prop_assert!(is_standing_instruction(Some("user"), &line), "{}", line);
        }

        #[test]
        fn lifting_permutes_and_puts_the_first_match_in_place(
            items in prop::collection::vec(0u8..20, 0..40),
            place in 1usize..6,
        ) {
            let mut lifted = items.clone();
            let at = lift_first(&mut lifted, place, |x| *x >= 15);
            let mut a = items.clone();
            let mut b = lifted.clone();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
            match items.iter().position(|x| *x >= 15) {
                None => { prop_assert_eq!(at, None); prop_assert_eq!(&lifted, &items); }
                Some(first) => {
                    let now = at.expect("found");
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
