//! The values a statement states, so that two statements are the same fact only when they agree
//! on every one: numbers (with decimals, versions, number words), quantities with their units,
//! codes (`phase B`, `v2`, `Q3`, e-mail addresses and links), proper names, places, days and months (capitalised words),
//! state words (`on` / `off`, `green` / `red`, `done` / `pending`) and negation (`not`, `no
//! longer`). Embedding similarity puts "version 1.2" and "version 1.3", "Berlin" and "Vienna"
//! close together; it may merge paraphrases ("NYC" and "New York City", "two cats" and "2
//! cats"), never statements that differ in a value.

use std::collections::BTreeSet;

/// A value one statement states and the other does not, for the cycle's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueDifference {
    /// What kind of value: `number`, `code`, `name`, `state` or `negation`.
    pub kind: &'static str,
    /// The value as written in the first statement (empty when only the second states one).
    pub first: String,
    /// As written in the second.
    pub second: String,
}

/// Words that state a state: each is a value of its own, so `on` and `off` differ.
const STATE_WORDS: &[&str] = &[
    "on",
    "off",
    "enabled",
    "disabled",
    "true",
    "false",
    "yes",
    "open",
    "closed",
    "active",
    "inactive",
    "online",
    "offline",
    "up",
    "down",
    "done",
    "pending",
    "complete",
    "completed",
    "incomplete",
    "finished",
    "unfinished",
    "started",
    "stopped",
    "running",
    "paused",
    "failed",
    "failing",
    "passed",
    "passing",
    "broken",
    "fixed",
    "approved",
    "rejected",
    "accepted",
    "declined",
    "cancelled",
    "canceled",
    "confirmed",
    "blocked",
    "unblocked",
    "available",
    "unavailable",
    "married",
    "single",
    "divorced",
    "engaged",
    "alive",
    "dead",
    "green",
    "red",
    "yellow",
    "amber",
    "orange",
    "blue",
    "black",
    "white",
    "purple",
    "pink",
    "brown",
    "grey",
    "gray",
    "high",
    "low",
    "medium",
    "public",
    "private",
    "paid",
    "unpaid",
    "full",
    "empty",
    "valid",
    "invalid",
    "allowed",
    "forbidden",
    "locked",
    "unlocked",
];

/// Words that negate what follows (`no longer` through its `no`).
const NEGATIONS: &[&str] = &["not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without"];

/// Number words, as digits.
const NUMBER_WORDS: &[(&str, &str)] = &[
    ("zero", "0"),
    ("one", "1"),
    ("two", "2"),
    ("three", "3"),
    ("four", "4"),
    ("five", "5"),
    ("six", "6"),
    ("seven", "7"),
    ("eight", "8"),
    ("nine", "9"),
    ("ten", "10"),
    ("eleven", "11"),
    ("twelve", "12"),
    ("thirteen", "13"),
    ("fourteen", "14"),
    ("fifteen", "15"),
    ("sixteen", "16"),
    ("seventeen", "17"),
    ("eighteen", "18"),
    ("nineteen", "19"),
    ("twenty", "20"),
    ("thirty", "30"),
    ("forty", "40"),
    ("fifty", "50"),
    ("sixty", "60"),
    ("seventy", "70"),
    ("eighty", "80"),
    ("ninety", "90"),
    ("hundred", "100"),
    ("thousand", "1000"),
    ("million", "1000000"),
    ("twice", "2"),
    ("once", "1"),
    ("dozen", "12"),
];

/// Unit words after a number, by the unit they name.
const UNITS: &[(&[&str], &str)] = &[
    (&["km", "kms", "kilometer", "kilometers", "kilometre", "kilometres"], "km"),
    (&["m", "meter", "meters", "metre", "metres"], "m"),
    (&["mi", "mile", "miles"], "mi"),
    (&["kg", "kgs", "kilo", "kilos", "kilogram", "kilograms"], "kg"),
    (&["g", "gram", "grams"], "g"),
    (&["lb", "lbs", "pound", "pounds"], "lb"),
    (&["h", "hr", "hrs", "hour", "hours"], "h"),
    (&["min", "mins", "minute", "minutes"], "min"),
    (&["s", "sec", "secs", "second", "seconds"], "s"),
    (&["day", "days"], "day"),
    (&["week", "weeks"], "week"),
    (&["month", "months"], "month"),
    (&["year", "years", "yr", "yrs"], "year"),
    (&["%", "percent", "pct"], "%"),
    (&["$", "usd", "dollar", "dollars"], "usd"),
    (&["€", "eur", "euro", "euros"], "eur"),
    (&["£", "gbp"], "gbp"),
    (&["am", "a.m."], "am"),
    (&["pm", "p.m."], "pm"),
    (&["gb", "gigabyte", "gigabytes"], "gb"),
    (&["mb", "megabyte", "megabytes"], "mb"),
];

/// A token of a statement: its text as written and where it stands.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    first: bool,
}

/// Splits on whitespace and on punctuation that does not join a value (`1.2`, `1,000`, `3:30`,
/// `50%`, `$5`, `e-mail` stay whole).
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for raw in text.split_whitespace() {
        let trimmed =
            raw.trim_matches(|c: char| !(c.is_alphanumeric() || c == '%' || c == '$' || c == '€' || c == '£'));
        // An e-mail address or a link stays whole: it is one value.
        if trimmed.contains('@') || trimmed.contains("://") {
            out.push(Token { text: trimmed.to_owned(), first: out.is_empty() });
            continue;
        }
        // "don't" and "isn't" negate: split the "n't" off as its own word.
        let (word, negated) = match trimmed.to_lowercase().strip_suffix("n't") {
            Some(stem) if !stem.is_empty() => (trimmed[..stem.len()].to_owned(), true),
            _ => (trimmed.to_owned(), false),
        };
        for part in word.split(['(', ')', '"', '/', ';']).filter(|p| !p.is_empty()) {
            let first = out.is_empty();
            out.push(Token { text: part.to_owned(), first });
        }
        if negated {
            out.push(Token { text: "not".into(), first: false });
        }
    }
    out
}

fn number_of(token: &str) -> Option<String> {
    let lower = token.to_lowercase();
    if let Some((_, digits)) = NUMBER_WORDS.iter().find(|(w, _)| *w == lower) {
        return Some((*digits).to_owned());
    }
    let stripped = lower.trim_start_matches(['$', '€', '£']).trim_end_matches('%');
    if stripped.chars().any(|c| c.is_ascii_digit()) {
        // Thousands separators are not values: 1,000 is 1000.
        return Some(stripped.replace(',', ""));
    }
    None
}

fn unit_of(token: &str) -> Option<&'static str> {
    let lower = token.to_lowercase();
    UNITS.iter().find(|(words, _)| words.contains(&lower.as_str())).map(|(_, unit)| *unit)
}

/// The values of a statement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values {
    /// Numbers with the unit that follows or precedes them (`5 km`, `$5`, `50%`), as digits.
    pub numbers: BTreeSet<String>,
    /// Single capital letters and letter-digit codes (`B`, `v2`), lowercased.
    pub codes: BTreeSet<String>,
    /// Capitalised words (names, places, days, months), lowercased, with their initials.
    pub names: BTreeSet<String>,
    pub states: BTreeSet<String>,
    pub negated: bool,
    /// Every word, lowercased: a name stated in one is agreed when the other has the word.
    words: BTreeSet<String>,
    /// Each run of two or more capitalised words: its initials (`New York City` → `nyc`) and
    /// its names.
    runs: Vec<(String, Vec<String>)>,
}

/// The values `text` states.
pub fn values(text: &str) -> Values {
    let tokens = tokens(text);
    let mut v = Values::default();
    let mut run: Vec<String> = Vec::new();
    let flush = |run: &mut Vec<String>, v: &mut Values| {
        if run.len() > 1 {
            let initials = run.iter().filter_map(|n| n.chars().next()).collect();
            v.runs.push((initials, std::mem::take(run)));
        }
        run.clear();
    };
    for (i, token) in tokens.iter().enumerate() {
        let lower = token.text.to_lowercase();
        v.words.insert(lower.clone());
        let capitalised = token.text.chars().next().is_some_and(char::is_uppercase);
        if let Some(number) = number_of(&token.text) {
            let currency = token.text.chars().next().filter(|c| matches!(c, '$' | '€' | '£'));
            let unit = currency
                .and_then(|c| unit_of(&c.to_string()))
                .or_else(|| token.text.ends_with('%').then_some("%"))
                .or_else(|| tokens.get(i + 1).and_then(|next| unit_of(&next.text)));
            v.numbers.insert(match unit {
                Some(unit) => format!("{number} {unit}"),
                None => number,
            });
            if token.text.chars().any(|c| c.is_alphabetic()) && token.text.chars().any(|c| c.is_ascii_digit()) {
                v.codes.insert(lower.clone());
            }
            flush(&mut run, &mut v);
            continue;
        }
        // An e-mail address or a link is a value of its own, whole.
        if lower.contains('@') || lower.contains("://") {
            v.codes.insert(lower);
            flush(&mut run, &mut v);
            continue;
        }
        if NEGATIONS.contains(&lower.as_str()) {
            v.negated = true;
        }
        if STATE_WORDS.contains(&lower.as_str()) {
            v.states.insert(lower.clone());
        }
        let single_letter = token.text.chars().count() == 1 && capitalised && token.text != "I";
        if single_letter && !(token.first && token.text == "A") {
            v.codes.insert(lower.clone());
            flush(&mut run, &mut v);
            continue;
        }
        if capitalised && token.text.chars().count() > 1 {
            v.names.insert(lower.clone());
            run.push(lower);
        } else if !matches!(lower.as_str(), "of" | "de" | "van" | "von") {
            flush(&mut run, &mut v);
        }
    }
    flush(&mut run, &mut v);
    v
}

/// Whether `name`, stated in `mine`, is stated in `other` too: the same word there (in any
/// case), a run of names there whose initials it is ("NYC"), or a run of names here whose
/// initials are a name there.
fn agreed(name: &str, mine: &Values, other: &Values) -> bool {
    other.words.contains(name)
        || other.runs.iter().any(|(initials, _)| initials == name)
        || mine.runs.iter().any(|(initials, names)| names.iter().any(|n| n == name) && other.names.contains(initials))
}

/// The first value `a` and `b` disagree on, or `None` when they state the same values.
pub fn difference(a: &str, b: &str) -> Option<ValueDifference> {
    let (va, vb) = (values(a), values(b));
    let differ = |kind: &'static str, x: &BTreeSet<String>, y: &BTreeSet<String>| {
        let first = x.difference(y).next().cloned().unwrap_or_default();
        let second = y.difference(x).next().cloned().unwrap_or_default();
        (x != y).then_some(ValueDifference { kind, first, second })
    };
    if let Some(d) = differ("number", &va.numbers, &vb.numbers) {
        return Some(d);
    }
    if let Some(d) = differ("code", &va.codes, &vb.codes) {
        return Some(d);
    }
    if let Some(d) = differ("state", &va.states, &vb.states) {
        return Some(d);
    }
    if va.negated != vb.negated {
        let shown = |n: bool| if n { "not".to_owned() } else { String::new() };
        return Some(ValueDifference { kind: "negation", first: shown(va.negated), second: shown(vb.negated) });
    }
    let missing = |mine: &Values, other: &Values| mine.names.iter().find(|n| !agreed(n, mine, other)).cloned();
    match (missing(&va, &vb), missing(&vb, &va)) {
        (None, None) => None,
        (first, second) => {
            Some(ValueDifference { kind: "name", first: first.unwrap_or_default(), second: second.unwrap_or_default() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn changed_values_differ() {
        for (a, b) in [
            ("phase B complete", "phase C complete"),
            ("version 1.2 deployed", "version 1.3 deployed"),
            ("Berlin", "Vienna"),
            ("lives in Berlin", "lives in Vienna"),
            ("ann@old.example", "ann@new.example"),
            ("https://old.example/docs", "https://new.example/docs"),
            ("owner is Bob", "owner is Carol"),
            ("status green", "status red"),
            ("the feature flag is on", "the feature flag is off"),
            ("runs 5 km every day", "runs 5 miles every day"),
            ("meets at 3pm", "meets at 4pm"),
            ("works at Acme", "no longer works at Acme"),
            ("likes sushi", "doesn't like sushi"),
            ("the meeting is on Tuesday", "the meeting is on Wednesday"),
            ("born in 1990", "born in 1991"),
            ("costs $5", "costs $6"),
            ("2 cats", "3 cats"),
            ("50% done", "60% done"),
        ] {
            assert!(difference(a, b).is_some(), "{a:?} and {b:?} differ in a value");
            assert!(difference(b, a).is_some(), "{b:?} and {a:?} differ in a value");
        }
    }

    #[test]
    fn paraphrases_agree() {
        for (a, b) in [
            ("NYC", "New York City"),
            ("lives in New York City", "lives in NYC"),
            ("likes hiking", "enjoys hiking"),
            ("two cats", "2 cats"),
            ("1,000 users", "1000 users"),
            ("Prefers tea", "prefers tea"),
            ("a red car", "a red automobile"),
            ("runs 5 km", "runs five kilometres"),
        ] {
            assert_eq!(difference(a, b), None, "{a:?} and {b:?} state the same values");
        }
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// Difference is symmetric in whether it finds one, and a text never differs from itself.
        #[test]
        fn symmetric_and_reflexive(a in "[A-Za-z0-9 .,%$']{0,40}", b in "[A-Za-z0-9 .,%$']{0,40}") {
            prop_assert_eq!(difference(&a, &a), None);
            prop_assert_eq!(difference(&a, &b).is_some(), difference(&b, &a).is_some());
        }

        /// Changing a number always makes a difference.
        #[test]
        fn a_changed_number_differs(words in "[a-z ]{0,20}", x in 0u32..10_000, y in 0u32..10_000) {
            prop_assume!(x != y);
            let (a, b) = (format!("{words} {x}"), format!("{words} {y}"));
            prop_assert!(difference(&a, &b).is_some(), "{} / {}", a, b);
        }
    }
}
