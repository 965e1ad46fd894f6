//! Facts in words: the subject, relation and value one English statement states ("Frank lives
//! in Berlin" → `frank`, `lives_in`, `Berlin`; "Frank no longer lives in Berlin" → the same
//! with `not Berlin`), and the one rule that keys every fact on its way in, whatever it came
//! from (a world-fact tag, a model's extraction, a bank edit, a revision): [`key_fact`].
//!
//! A statement is read when its relation is in `policy::relations` ("lives in", "works at",
//! "Frank's phone number is …"), or, with a person's name (or "I") as its subject, as an
//! unknown relation named by its verb ("Frank drives a Toyota": `drives`), whose values only a
//! model may judge. Anything else — several clauses, a question, "also" / "too" (an addition,
//! which supersedes nothing), a past tense the table does not list — is left as the statement
//! it is, under `fact`: never guessed.

use crate::policy::consolidation::normalize;
use crate::policy::relations::{Kind, RELATIONS, by_noun, canonical_predicate, kind};

/// What a statement states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// As written ("Frank", or the speaker for "I").
    pub subject: String,
    /// A relation of the table, or the verb of an unknown one (`drives`, `plays_for`).
    pub relation: String,
    /// As written, without the adverbs that change nothing ("now", "again").
    pub value: String,
    /// "no longer", "not", "doesn't": the statement ends the value rather than stating it.
    pub negated: bool,
}

impl Reading {
    /// The fact's object: the value, or `not <value>` for a negation (which replaces the
    /// value it negates, and agrees with any other).
    pub fn object(&self) -> String {
        if self.negated { format!("not {}", self.value) } else { self.value.clone() }
    }
}

/// A fact keyed as the timeline files it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedFact {
    /// Normalised: the key.
    pub subject: String,
    pub subject_shown: String,
    pub predicate: String,
    pub object: String,
    /// The statement as said, when the fact was read from words: the fact's text.
    pub wording: Option<String>,
}

/// The one rule for a fact on its way in: `predicate` in the table's spelling; a statement in
/// words (`fact`) read into its subject, relation and value where it can be; a predicate the
/// table does not know read with its subject and object as words. `None`: a predicate that is
/// neither known nor readable (a model's invention), which is rejected.
pub fn key_fact(subject: &str, predicate: &str, object: &str, speaker: &str) -> Option<KeyedFact> {
    let keyed = |subject: &str, predicate: &str, object: &str, wording: Option<String>| KeyedFact {
        subject: normalize(subject),
        subject_shown: subject.to_owned(),
        predicate: predicate.to_owned(),
        object: object.to_owned(),
        wording,
    };
    let read_from = |text: &str, wording: Option<String>| {
        read(text, speaker).map(|r| keyed(&r.subject, &r.relation, &r.object(), wording))
    };
    match canonical_predicate(predicate) {
        Some("fact") => {
            Some(read_from(object, Some(object.to_owned())).unwrap_or_else(|| keyed(subject, "fact", object, None)))
        }
        Some(known) => Some(keyed(subject, known, object, None)),
        None => {
            let said = format!("{subject} {} {object}", predicate.replace('_', " "));
            read_from(&said, None).filter(|k| kind(&k.predicate) != Kind::Unknown)
        }
    }
}

/// Words that make a statement say what might be rather than what is.
const UNREAL: &[&str] = &["will", "would", "could", "should", "might", "may", "can", "if", "maybe", "perhaps"];

fn unreal(word: &Word) -> bool {
    UNREAL.contains(&word.key.as_str()) || word.key.ends_with("'ll") || word.key.ends_with("'d")
}

/// The statements a model wrote for a turn ("Ann lives in Rome", "Nina's address is Oudegracht
/// 12, for the deliveries"), keyed by the one rule, a clause at a time: each read into its
/// relation where the table can, else kept as the clause it is (`fact`) about the person it
/// opens with; a clause that opens with no one ("for the deliveries") is dropped. Nothing of a
/// question, or of a statement of what might be (a condition holds for all its clauses).
pub fn key_statements(statement: &str, speaker: &str) -> Vec<KeyedFact> {
    let text = statement.trim();
    if text.contains(['?', '\n']) || tokens(text).iter().any(unreal) {
        return Vec::new();
    }
    text.split([',', ';'])
        .flat_map(|part| part.split(". "))
        .flat_map(|clause| conjoined(clause.trim().trim_end_matches(['.', '!']).trim(), speaker))
        .filter_map(|clause| key_clause(&clause, speaker))
        .collect()
}

/// Auxiliaries that open a second predicate of one subject ("Omar is 41 and has started running").
const CONJOINED: &[&str] = &["is", "was", "has", "have", "had", "does", "did"];

/// A clause's predicates, each with its subject: "Omar is 41 and has started running" is "Omar
/// is 41" and "Omar has started running". "and" before anything but an auxiliary joins values
/// ("Mondays and Fridays"), and the clause stays whole.
fn conjoined(clause: &str, speaker: &str) -> Vec<String> {
    let words = tokens(clause);
    let Some((_, split)) = opening_subject(&words, speaker) else { return vec![clause.to_owned()] };
    let subject = join_shown(&words[..split]);
    let mut out = Vec::new();
    let mut start = 0;
    for at in split..words.len().saturating_sub(1) {
        if words[at].key == "and" && CONJOINED.contains(&words[at + 1].key.as_str()) && at > start {
            out.push(join_shown(&words[start..at]));
            start = at + 1;
        }
    }
    if start == 0 {
        return vec![clause.to_owned()];
    }
    out.push(format!("{subject} {}", join_shown(&words[start..])));
    out
}

fn key_clause(text: &str, speaker: &str) -> Option<KeyedFact> {
    let words = tokens(text);
    if words.len() < 3 {
        return None;
    }
    // "Leo's friend Sara lives in Osaka": about Sara, whom the owner's noun introduces.
    let capital = |w: &Word| w.shown.chars().next().is_some_and(char::is_uppercase);
    if words.len() > 3
        && words[0].key.ends_with("'s")
        && capital(&words[0])
        && words[1].shown.chars().all(char::is_lowercase)
        && capital(&words[2])
    {
        return key_clause(&join_shown(&words[2..]), speaker);
    }
    // Its text is the fact's own (`Ann lives in Rome`), never the model's "I".
    if read(text, speaker).is_some() {
        return key_fact(speaker, "fact", text, speaker).map(|k| KeyedFact { wording: None, ..k });
    }
    let (shown, split) = opening_subject(&words, speaker)?;
    let object = format!("{shown} {}", join_shown(&words[split..]));
    // "Ann's partner is Joao staying in Porto": about Ann.
    let shown = shown.strip_suffix("'s").map(str::to_owned).unwrap_or(shown);
    Some(KeyedFact {
        subject: normalize(&shown),
        subject_shown: shown,
        predicate: "fact".to_owned(),
        object,
        wording: None,
    })
}

/// The fact a revision of (`subject`, `predicate`) to `text` states: `text` read by the one
/// rule when it states a relation of the same subject and predicate, or when the revised fact
/// was a statement in words (`fact`); otherwise `text` is the new object under the same key.
pub fn revised_fact(subject: &str, predicate: &str, text: &str) -> KeyedFact {
    let read = key_fact(subject, "fact", text, subject).filter(|k| {
        k.predicate != "fact" && (predicate == "fact" || (k.subject == normalize(subject) && k.predicate == predicate))
    });
    read.unwrap_or_else(|| KeyedFact {
        subject: subject.to_owned(),
        subject_shown: subject.to_owned(),
        predicate: predicate.to_owned(),
        object: text.to_owned(),
        wording: None,
    })
}

/// Words that stand for the speaker.
const FIRST_PERSON: &[&str] = &["i"];

/// Determiners a noun phrase subject may open with ("the Pro plan costs $9").
const DETERMINERS: &[&str] = &["the", "our", "their", "his", "her", "its", "this", "that", "a", "an"];

/// Adverbs between a subject and its relation, or after a value, that change no fact.
const IDLE: &[&str] = &["now", "currently", "still", "actually", "officially", "again", "anymore", "nowadays"];

/// Words that make a statement an addition ("Frank also lives in Vienna"): both hold.
const ADDING: &[&str] = &["also", "too"];

/// Words that end a value's clause: a statement with one of these says more than one thing.
const CLAUSES: &[&str] = &[
    "because", "but", "which", "who", "while", "although", "though", "since", "when", "where", "if", "until", "after",
    "before",
];

/// Negations between a subject and its relation, longest first; `true`: it held the copula
/// ("is no longer married to" reads as "is married to", negated).
const NEGATORS: &[(&[&str], bool)] = &[
    (&["is", "no", "longer"], true),
    (&["is", "not"], true),
    (&["isn't"], true),
    (&["does", "not"], false),
    (&["do", "not"], false),
    (&["doesn't"], false),
    (&["don't"], false),
    (&["no", "longer"], false),
    (&["not"], false),
];

/// Most words a value may have (a longer one is a sentence of its own).
const MAX_VALUE_WORDS: usize = 8;

/// One word of the statement: as written, and lower case without surrounding punctuation.
#[derive(Debug, Clone)]
struct Word {
    shown: String,
    key: String,
}

fn tokens(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    for raw in text.split_whitespace() {
        let raw = raw.replace('’', "'");
        let shown = raw.trim_matches(|c: char| matches!(c, ',' | '.' | '!' | ';' | ':' | '"' | '(' | ')')).to_owned();
        if shown.is_empty() {
            continue;
        }
        let key = shown.to_lowercase();
        // "I'm" is "I am"; "am" and "are" are the copula "is" to the table.
        match key.as_str() {
            "i'm" => {
                out.push(Word { shown: "I".into(), key: "i".into() });
                out.push(Word { shown: "am".into(), key: "is".into() });
            }
            "am" | "are" => out.push(Word { shown, key: "is".into() }),
            "aren't" => out.push(Word { shown, key: "isn't".into() }),
            _ => out.push(Word { shown, key }),
        }
    }
    out
}

/// The subject `words` name, as shown, or `None` when they are not one: "I", a name ("Frank",
/// "Ann Lee"), "my sister" (the speaker's), or, where `noun_phrase`, a determiner and up to
/// three words ("the Pro plan").
fn subject(words: &[Word], speaker: &str, noun_phrase: bool) -> Option<String> {
    let first = words.first()?;
    if words.len() == 1 && FIRST_PERSON.contains(&first.key.as_str()) {
        return Some(speaker.to_owned());
    }
    if first.key == "my" && (2..=3).contains(&words.len()) {
        let rest: Vec<&str> = words[1..].iter().map(|w| w.key.as_str()).collect();
        return Some(format!("{speaker}'s {}", rest.join(" ")));
    }
    let is_name = words.len() <= 4
        && words.iter().all(|w| w.shown.chars().next().is_some_and(char::is_uppercase) && is_word(&w.key))
        && !DETERMINERS.contains(&first.key.as_str())
        && !crate::policy::consolidation::proper_names(&format!("x {}", join_shown(words))).is_empty();
    if is_name {
        return Some(join_shown(words));
    }
    let phrase = noun_phrase
        && DETERMINERS.contains(&first.key.as_str())
        && (2..=4).contains(&words.len())
        && words.iter().all(|w| is_word(&w.key));
    phrase.then(|| join_shown(words))
}

fn is_word(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '-' || c == '\'')
}

fn join_shown(words: &[Word]) -> String {
    words.iter().map(|w| w.shown.as_str()).collect::<Vec<_>>().join(" ")
}

/// The value `words` state, as shown, without idle adverbs; `None` when it is not one value.
fn value(words: &[Word]) -> Option<String> {
    let mut end = words.len();
    loop {
        let key = |back: usize| words[end - back].key.as_str();
        if end >= 1 && IDLE.contains(&key(1)) {
            end -= 1;
        } else if end >= 2 && matches!((key(2), key(1)), ("these", "days") | ("any", "more")) {
            end -= 2;
        } else {
            break;
        }
    }
    let words = &words[..end];
    let clean = !words.is_empty()
        && words.len() <= MAX_VALUE_WORDS
        && words.iter().all(|w| !CLAUSES.contains(&w.key.as_str()) && !ADDING.contains(&w.key.as_str()));
    clean.then(|| join_shown(words))
}

/// What `text`, said by `speaker`, states; `None` when it is not one fact the rules can read.
pub fn read(text: &str, speaker: &str) -> Option<Reading> {
    let text = text.trim();
    let one_sentence = !text.contains(['?', ';', '\n'])
        && !text.trim_end_matches(['.', '!']).contains(". ")
        && !text.trim_end_matches(['.', '!']).contains(", ");
    if !one_sentence {
        return None;
    }
    let words = tokens(text);
    if words.len() < 3 || words.iter().any(|w| ADDING.contains(&w.key.as_str())) {
        return None;
    }
    possessive(&words, speaker).or_else(|| worded(&words, speaker))
}

/// "Frank's phone number is 555", "my email is …", "the price of the Pro plan is $9".
fn possessive(words: &[Word], speaker: &str) -> Option<Reading> {
    let is = words.iter().position(|w| w.key == "is")?;
    let (before, after) = (&words[..is], &words[is + 1..]);
    let (owner, noun): (String, Vec<&Word>) = if let Some(at) = before.iter().position(|w| w.key.ends_with("'s")) {
        let mut owner_words = before[..=at].to_vec();
        let last = owner_words.last_mut().expect("at least one");
        last.shown = last.shown[..last.shown.len() - 2].to_owned();
        last.key = last.key[..last.key.len() - 2].to_owned();
        (subject(&owner_words, speaker, true)?, before[at + 1..].iter().collect())
    } else if before.first().is_some_and(|w| w.key == "my") {
        (speaker.to_owned(), before[1..].iter().collect())
    } else if before.first().is_some_and(|w| w.key == "the") {
        let of = before.iter().position(|w| w.key == "of")?;
        (subject(&before[of + 1..], speaker, true)?, before[1..of].iter().collect())
    } else {
        return None;
    };
    if noun.is_empty() || noun.len() > 3 {
        return None;
    }
    let noun = noun.iter().map(|w| w.key.as_str()).collect::<Vec<_>>().join(" ");
    let (negated, after) = match after.first().map(|w| w.key.as_str()) {
        Some("not") => (true, &after[1..]),
        Some("no") if after.get(1).is_some_and(|w| w.key == "longer") => (true, &after[2..]),
        _ => (false, after),
    };
    let relation = match by_noun(&noun) {
        Some(r) => r.name.to_owned(),
        None if noun.starts_with("favorite ") || noun.starts_with("favourite ") => {
            format!("favorite_{}", noun.split_once(' ').expect("two words").1.replace(' ', "_"))
        }
        None => noun.replace(' ', "_"),
    };
    let value = value(after)?;
    Some(Reading { subject: owner, relation, value, negated })
}

/// "Frank lives in Berlin", "I don't work at Acme anymore", "Frank is 34 years old", and an
/// unknown relation by its verb: "Frank drives a Toyota".
fn worded(words: &[Word], speaker: &str) -> Option<Reading> {
    for split in 1..words.len().min(6) {
        let Some(shown) = subject(&words[..split], speaker, true) else { continue };
        let mut rest: Vec<Word> =
            words[split..].iter().skip_while(|w| IDLE.contains(&w.key.as_str())).cloned().collect();
        let mut negated = false;
        for (negator, copula) in NEGATORS {
            let keys: Vec<&str> = rest.iter().take(negator.len()).map(|w| w.key.as_str()).collect();
            if keys == *negator {
                negated = true;
                rest.drain(..negator.len());
                if *copula {
                    rest.insert(0, Word { shown: "is".into(), key: "is".into() });
                }
                break;
            }
        }
        // "is 34 years old": the age.
        if let [is, number, years, old] = &rest[..]
            && is.key == "is"
            && number.key.chars().all(|c| c.is_ascii_digit())
            && years.key == "years"
            && old.key == "old"
        {
            return Some(Reading { subject: shown, relation: "age".into(), value: number.shown.clone(), negated });
        }
        // "Omar is 41": a person's age, said as people say it.
        if let [is, number] = &rest[..]
            && is.key == "is"
            && !DETERMINERS.contains(&words[0].key.as_str())
            && (1..=3).contains(&number.key.len())
            && number.key.chars().all(|c| c.is_ascii_digit())
        {
            return Some(Reading { subject: shown, relation: "age".into(), value: number.shown.clone(), negated });
        }
        if let Some((relation, length)) = phrase_at(&rest) {
            let value = value(&rest[length..])?;
            return Some(Reading { subject: shown, relation: relation.to_owned(), value, negated });
        }
    }
    unknown(words, speaker)
}

/// The longest phrase of the table that `words` open with: its relation and length in words.
fn phrase_at(words: &[Word]) -> Option<(&'static str, usize)> {
    let mut best: Option<(&'static str, usize)> = None;
    for r in RELATIONS {
        for phrase in r.phrases {
            let parts: Vec<&str> = phrase.split(' ').collect();
            let matches = parts.len() < words.len() && parts.iter().zip(words).all(|(p, w)| *p == w.key);
            if matches && best.is_none_or(|(_, len)| parts.len() > len) {
                best = Some((r.name, parts.len()));
            }
        }
    }
    best
}

/// Words that cannot be the verb of a relation.
const NOT_VERBS: &[&str] = &[
    "and", "or", "with", "to", "of", "in", "on", "at", "from", "for", "said", "says", "told", "thinks", "think", "was",
    "were", "had", "did", "will", "would", "could", "should", "might", "may", "can", "must", "used",
];

/// Prepositions an unknown relation keeps with its verb ("plays for").
const PREPOSITIONS: &[&str] = &["in", "at", "on", "for", "to", "with", "as", "by", "from", "of", "into"];

/// The person a statement opens with ("I", "my sister", a name of up to four words), as
/// shown, and how many words name them.
fn opening_subject(words: &[Word], speaker: &str) -> Option<(String, usize)> {
    let split = if words.first()?.key == "my" {
        2
    } else {
        words.iter().take_while(|w| w.shown.chars().next().is_some_and(char::is_uppercase)).count().min(4)
    };
    let split = split.min(words.len());
    Some((subject(&words[..split], speaker, false)?, split))
}

/// A person's name (or "I", "my X") and a verb the table does not know: an unknown relation.
fn unknown(words: &[Word], speaker: &str) -> Option<Reading> {
    let (shown, split) = opening_subject(words, speaker)?;
    // "Kenji's billing service runs on …": the owner's noun is no verb.
    if words[split - 1].key.ends_with("'s") {
        return None;
    }
    let rest = &words[split..];
    let verb = rest.first()?;
    let verb_like = is_word(&verb.key)
        && verb.key.chars().all(char::is_alphabetic)
        && !NOT_VERBS.contains(&verb.key.as_str())
        && !NEGATORS.iter().any(|(n, _)| n[0] == verb.key)
        && !IDLE.contains(&verb.key.as_str())
        // A past tense the table does not list is history, not a relation that holds.
        && !verb.key.ends_with("ed");
    if !verb_like {
        return None;
    }
    let with_preposition = rest.get(1).is_some_and(|w| PREPOSITIONS.contains(&w.key.as_str()));
    let length = if with_preposition { 2 } else { 1 };
    let relation = rest[..length].iter().map(|w| w.key.as_str()).collect::<Vec<_>>().join("_");
    let value = value(rest.get(length..)?)?;
    Some(Reading { subject: shown, relation, value, negated: false })
}

/// The fact a retain tag states, about whom, keyed by the one rule ([`key_fact`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaggedFact {
    /// As written (`Proj-X`); [`normalize`](crate::policy::consolidation::normalize) it to compare.
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub confidence: f32,
    /// `tag:W`, `tag:B`, `tag:O`, `tag:S` or `tag:U`.
    pub origin: &'static str,
    /// The statement as said, when a world fact was read from words: the fact's text.
    pub wording: Option<String>,
}

/// What `tag`, said by `speaker`, states: a world fact (read into its subject, relation and
/// value where the rules can: "Frank lives in Berlin"), what the speaker did or believes, an
/// entity's state, or an observation about the user (its aspect in the vocabulary, else a
/// `pattern`).
pub fn tag_fact(tag: crate::policy::retain::RetainTag, speaker: &str) -> TaggedFact {
    use crate::policy::retain::RetainTag;
    let (subject, predicate, object, confidence, origin) = match tag {
        RetainTag::World(text) => {
            let keyed = key_fact("world", "fact", &text, speaker).expect("`fact` is a relation of the table");
            return TaggedFact {
                subject: keyed.subject_shown,
                predicate: keyed.predicate,
                object: keyed.object,
                confidence: 1.0,
                origin: "tag:W",
                wording: keyed.wording,
            };
        }
        RetainTag::Behavior(text) => (speaker.to_owned(), "did", text, 1.0, "tag:B"),
        RetainTag::Opinion { confidence, text } => (speaker.to_owned(), "believes", text, confidence, "tag:O"),
        RetainTag::State { entity, state } => (entity, "state", state, 1.0, "tag:S"),
        RetainTag::User { aspect, text } => {
            ("user".to_owned(), canonical_predicate(&aspect).unwrap_or("pattern"), text, 0.6, "tag:U")
        }
    };
    TaggedFact { subject, predicate: predicate.to_owned(), object, confidence, origin, wording: None }
}

#[cfg(test)]
mod tests;
