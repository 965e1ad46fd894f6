//! An extractive summary of a closed session, for when no model writes one: the turns most
//! central to what the session talked about (centroid scoring: a turn scores by how many of the
//! session's recurring content words it carries, per word it has; small talk and off-topic
//! turns never enter), in the order they were said, within a character budget. Deterministic
//! for the same input.

use crate::policy::consolidation::is_phatic;
use crate::policy::query::terms;
use std::collections::{BTreeMap, BTreeSet};

/// Longest a single chosen turn is quoted (cut at a word boundary).
pub const TURN_CHARS: usize = 200;

/// One turn of a session.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    pub speaker: Option<&'a str>,
    pub text: &'a str,
}

/// The summary of `turns` in at most about `budget` characters (every chosen turn is whole up
/// to [`TURN_CHARS`]; the first chosen turn is kept even if alone it is longer than `budget`).
/// Empty when every turn is phatic or there are none.
pub fn extractive(turns: &[Turn<'_>], budget: usize) -> String {
    let content: Vec<(usize, BTreeSet<String>)> = turns
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.text.trim().is_empty() && !is_phatic(t.text))
        .map(|(i, t)| (i, terms(t.text).into_iter().collect()))
        .collect();
    // How many turns use each word: the session's topic is what recurs.
    let mut spread: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, words) in &content {
        for w in words {
            *spread.entry(w.as_str()).or_default() += 1;
        }
    }
    let weight = |words: &BTreeSet<String>| words.iter().map(|w| spread[w.as_str()] - 1).sum::<usize>();
    // Once anything recurs, a turn that shares no word with the rest is off topic.
    let on_topic = content.iter().any(|(_, words)| weight(words) > 0);
    let mut ranked: Vec<(f64, usize, &BTreeSet<String>)> = content
        .iter()
        .filter(|(_, words)| !on_topic || weight(words) > 0)
        .map(|(i, words)| {
            let score = (weight(words) as f64 + 0.5 * words.len() as f64) / (words.len().max(1) as f64).sqrt();
            (score, *i, words)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut chosen: Vec<(usize, String)> = Vec::new();
    let mut chosen_words: Vec<&BTreeSet<String>> = Vec::new();
    let mut used = 0;
    for (_, i, words) in ranked {
        // A near restatement of a chosen turn (Jaccard ≥ 0.7 over content words) adds nothing.
        let repeats = chosen_words.iter().any(|c| {
            let shared = c.intersection(words).count();
            shared * 10 >= 7 * c.union(words).count().max(1)
        });
        if repeats {
            continue;
        }
        let line = quote(turns[i]);
        let cost = line.chars().count() + 1;
        if !chosen.is_empty() && used + cost > budget {
            continue;
        }
        used += cost;
        chosen.push((i, line));
        chosen_words.push(words);
    }
    chosen.sort_by_key(|(i, _)| *i);
    // One quoted turn per line: a turn's own text never holds a line break (it is quoted with
    // its whitespace collapsed), so the lines are the turns.
    chosen.into_iter().map(|(_, line)| line).collect::<Vec<_>>().join("\n")
}

/// `Speaker: text`, the text cut at a word boundary after [`TURN_CHARS`] characters.
fn quote(turn: Turn<'_>) -> String {
    let text = turn.text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = if text.chars().count() > TURN_CHARS {
        let head: String = text.chars().take(TURN_CHARS).collect();
        let at = head.rfind(' ').filter(|at| *at > TURN_CHARS / 2).unwrap_or(head.len());
        format!("{}…", &head[..at])
    } else {
        text
    };
    match turn.speaker {
        Some(s) => format!("{s}: {cut}"),
        None => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn turn<'a>(speaker: &'a str, text: &'a str) -> Turn<'a> {
        Turn { speaker: Some(speaker), text }
    }

    #[test]
    fn the_topic_turns_win_in_spoken_order_and_small_talk_never_does() {
        let session = [
            turn("Ann", "hi!"),
            turn("Ann", "The checkout service had a latency spike at noon."),
            turn("Bo", "Was it the database or the checkout service itself?"),
            turn("Ann", "The checkout service: a slow query on the orders table caused the latency spike."),
            turn("Bo", "I had pasta for lunch."),
            turn("Ann", "thanks"),
        ];
        let summary = extractive(&session, 220);
        assert!(summary.starts_with("Ann: The checkout service had a latency spike"), "{summary}");
        assert!(summary.contains("slow query"), "{summary}");
        assert!(!summary.contains("pasta") && !summary.contains("thanks") && !summary.contains("hi!"), "{summary}");
        assert_eq!(extractive(&[turn("Ann", "ok"), turn("Bo", "thanks")], 500), "");
    }

    #[test]
    fn long_turns_are_cut_at_a_word() {
        let long = "word ".repeat(100);
        let s = extractive(&[Turn { speaker: None, text: &long }], 50);
        assert!(s.ends_with('…') && s.chars().count() <= TURN_CHARS + 1, "{s}");
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn summaries_quote_the_session_in_order_within_budget(
            texts in proptest::collection::vec("\\PC{0,120}", 0..20),
            budget in 0usize..800,
        ) {
            let turns: Vec<Turn<'_>> = texts.iter().map(|t| Turn { speaker: Some("A"), text: t }).collect();
            let summary = extractive(&turns, budget);
            let again = extractive(&turns, budget);
            prop_assert_eq!(&summary, &again, "deterministic");
            if summary.is_empty() {
                return Ok(());
            }
            let quoted: Vec<&str> = summary.split('\n').collect();
            let first = quoted[0].chars().count();
            prop_assert!(summary.chars().count() <= budget.max(first + 1) + 1, "{} > {}", summary.len(), budget);
            // Every part is a turn (or its head), and the parts keep the session's order.
            let mut from = 0;
            for part in quoted {
                let body = part.strip_prefix("A: ").unwrap_or(part).trim_end_matches('…');
                let found = turns[from..].iter().position(|t| {
                    t.text.split_whitespace().collect::<Vec<_>>().join(" ").starts_with(body)
                });
                prop_assert!(found.is_some(), "{part:?} is not a later turn");
                from += found.unwrap() + 1;
            }
        }
    }
}
