//! The relations ATLAS knows, in one table: each relation's name (the predicate facts are keyed
//! by), whether it holds one value at a time for a subject (a newer value supersedes the older)
//! or adds (every value holds), how English says it after a subject ("lives in", "moved to"),
//! the nouns that name it in "Frank's phone number is …", and how a model may spell it. The
//! model's vocabulary, the reading of facts in words (`policy::reading`) and the timeline's
//! choice of one value or many all come from here, so they cannot disagree.
//!
//! A relation outside the table is unknown: its facts are kept, never superseded by rule, and
//! a model (where one is configured) judges whether a newer value replaces an older one.

/// How a relation's values meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One value at a time (where someone lives): a newer value supersedes the older one.
    Single,
    /// Values add up (what someone likes): none supersedes another by rule.
    Additive,
    /// Not in the table: no rule decides; a model's judgment may.
    Unknown,
}

/// One relation of the table.
#[derive(Debug, Clone, Copy)]
pub struct Relation {
    pub name: &'static str,
    pub kind: Kind,
    /// How a statement says it after its subject, lower case, in the third person and in the
    /// base form (for "I live in", "does not live in").
    pub phrases: &'static [&'static str],
    /// Nouns that name it: "Frank's `phone number` is 555", "the `price` of X is $9".
    pub nouns: &'static [&'static str],
    /// Other spellings a model may use for the predicate.
    pub synonyms: &'static [&'static str],
}

const fn single(
    name: &'static str,
    phrases: &'static [&'static str],
    nouns: &'static [&'static str],
    synonyms: &'static [&'static str],
) -> Relation {
    Relation { name, kind: Kind::Single, phrases, nouns, synonyms }
}

const fn additive(
    name: &'static str,
    phrases: &'static [&'static str],
    nouns: &'static [&'static str],
    synonyms: &'static [&'static str],
) -> Relation {
    Relation { name, kind: Kind::Additive, phrases, nouns, synonyms }
}

/// Every relation ATLAS knows. docs/RELATIONS.md lists it for people; a test keeps the two equal.
pub const RELATIONS: &[Relation] = &[
    // One value at a time.
    single(
        "lives_in",
        &[
            "lives in",
            "live in",
            "is living in",
            "living in",
            "resides in",
            "reside in",
            "moved to",
            "has moved to",
            "relocated to",
            "has relocated to",
            "lives at",
            "live at",
        ],
        &["home town", "hometown", "city of residence"],
        &["live_in", "lives_at", "resides_in", "moved_to", "residence", "city"],
    ),
    single(
        "works_at",
        &[
            "works at",
            "work at",
            "works for",
            "work for",
            "is working at",
            "is working for",
            "is employed by",
            "is employed at",
        ],
        &["employer", "company", "workplace"],
        &["works_for", "work_at", "work_for", "employed_at", "employed_by", "employer", "company"],
    ),
    single(
        "role",
        &["works as", "work as", "is working as", "is employed as"],
        &["job", "job title", "title", "role", "position", "occupation", "profession"],
        &["job_title", "job", "title", "position", "occupation", "profession", "works_as"],
    ),
    single(
        "studies_at",
        &["studies at", "study at", "is studying at", "is enrolled at"],
        &["school", "university", "college"],
        &["study_at", "enrolled_at", "school", "university"],
    ),
    single("married_to", &["is married to"], &["husband", "wife", "spouse"], &["spouse", "husband", "wife"]),
    single(
        "partner",
        &["is dating", "is engaged to", "is in a relationship with"],
        &["partner", "girlfriend", "boyfriend", "fiance", "fiancee", "fiancé", "fiancée"],
        &["girlfriend", "boyfriend", "engaged_to"],
    ),
    single("age", &[], &["age"], &["years_old", "aged"]),
    single(
        "phone",
        &[],
        &[
            "phone",
            "phone number",
            "number",
            "mobile",
            "mobile number",
            "cell",
            "cell number",
            "telephone",
            "telephone number",
        ],
        &["phone_number", "mobile", "telephone"],
    ),
    single(
        "email",
        &[],
        &["email", "e-mail", "email address", "e-mail address", "mail address"],
        &["email_address", "e_mail"],
    ),
    single(
        "address",
        &[],
        &["address", "home address", "street address", "postal address"],
        &["home_address", "street_address"],
    ),
    single(
        "price",
        &["costs", "cost", "is priced at", "sells for", "sell for"],
        &["price", "cost"],
        &["costs", "cost", "priced_at"],
    ),
    single(
        "runs_on",
        &["runs on", "run on", "is running on", "is hosted on"],
        &["platform", "host"],
        &["run_on", "hosted_on"],
    ),
    single("name", &["is called", "is named", "goes by", "go by"], &["name", "nickname"], &["nickname"]),
    single("owner", &["is owned by", "belongs to", "belong to"], &["owner"], &["owned_by", "belongs_to"]),
    single("status", &[], &["status"], &[]),
    single(
        "manager",
        &["reports to", "report to"],
        &["manager", "boss", "supervisor"],
        &["reports_to", "boss", "supervisor"],
    ),
    single(
        "located_in",
        &["is located in", "is based in", "is headquartered in"],
        &["location", "headquarters"],
        &["based_in", "headquartered_in", "location"],
    ),
    // Kept from the model's vocabulary: one value at a time.
    single("state", &[], &["state"], &["is", "is_now", "current_state"]),
    single("prefers", &["prefers", "prefer"], &[], &["prefer", "prefers_to_use", "favors", "favours"]),
    single("uses", &[], &[], &["use", "using", "writes", "codes_in"]),
    single("favorite", &[], &["favorite", "favourite"], &["favourite"]),
    single("on_call", &["is on call for"], &[], &[]),
    single("version", &[], &["version"], &[]),
    // Values that add up.
    additive("likes", &["likes", "like", "loves", "love", "is into"], &[], &["like", "loves", "love"]),
    additive("dislikes", &["dislikes", "dislike", "hates", "hate"], &[], &["dislike", "hates"]),
    additive("enjoys", &["enjoys", "enjoy"], &[], &["enjoy"]),
    additive(
        "visited",
        &["visited", "has visited", "has been to", "went to", "traveled to", "travelled to"],
        &[],
        &["visit", "been_to", "went_to"],
    ),
    additive("speaks", &["speaks", "speak"], &["language"], &["speak", "language"]),
    additive(
        "friend_of",
        &["is friends with", "is a friend of", "has a friend", "has a friend called", "has a friend named"],
        &["friend", "best friend"],
        &["friends_with", "friend"],
    ),
    additive("has", &["has", "have"], &[], &[]),
    additive("owns", &["owns", "own"], &[], &["own"]),
    additive("plays", &["plays", "play"], &[], &["play"]),
    additive("knows", &["knows", "know"], &[], &["know"]),
    additive("wants", &["wants", "want", "wants to", "want to"], &[], &["want", "wants_to"]),
    additive("plans", &["plans to", "plan to", "is planning to"], &[], &["plan", "plans_to", "intends_to"]),
    additive(
        "studies",
        &["studies", "study", "is studying", "is learning", "learns", "learn"],
        &[],
        &["study", "learns"],
    ),
    additive("member_of", &["is a member of", "is part of"], &[], &["belongs_to_group", "part_of"]),
    additive("attended", &["attended", "has attended"], &[], &["attend"]),
    additive("fact", &[], &[], &[]),
    additive("did", &[], &[], &[]),
    additive("believes", &[], &[], &[]),
    additive("feels", &[], &[], &[]),
    additive("decided", &[], &[], &[]),
    additive("caused", &[], &[], &[]),
    additive("parent_of", &[], &[], &[]),
    additive("child_of", &[], &[], &[]),
    additive("sibling_of", &[], &[], &[]),
    additive("preference", &[], &[], &[]),
    additive("habit", &[], &[], &[]),
    additive("pattern", &[], &[], &[]),
    additive("goal", &[], &[], &[]),
];

/// The relation named `name` (a canonical predicate).
pub fn relation(name: &str) -> Option<&'static Relation> {
    RELATIONS.iter().find(|r| r.name == name)
}

/// How `predicate`'s values meet: the table's, and unknown for a predicate outside it.
pub fn kind(predicate: &str) -> Kind {
    match relation(predicate) {
        Some(r) => r.kind,
        // "Frank's favourite colour": one favourite of a kind at a time.
        None if predicate.starts_with("favorite_") => Kind::Single,
        None => Kind::Unknown,
    }
}

/// Whether `predicate` holds one value at a time.
pub fn is_functional(predicate: &str) -> bool {
    kind(predicate) == Kind::Single
}

/// The predicates a model may propose, for its prompt.
pub fn vocabulary() -> impl Iterator<Item = &'static str> {
    RELATIONS.iter().map(|r| r.name)
}

/// The table's spelling of a predicate a model wrote ("Works for", "lives-in", "prefer"), or
/// `None` when the table does not know it.
pub fn canonical_predicate(raw: &str) -> Option<&'static str> {
    let key = crate::policy::consolidation::normalize(&raw.replace(['_', '-'], " ")).replace(' ', "_");
    RELATIONS.iter().find(|r| r.name == key || r.synonyms.contains(&key.as_str())).map(|r| r.name)
}

/// The relation a noun names ("phone number" → `phone`), lower case.
pub fn by_noun(noun: &str) -> Option<&'static Relation> {
    RELATIONS.iter().find(|r| r.nouns.contains(&noun))
}

/// Why a fact of `predicate` whose object is `newer` superseded the one whose object was
/// `older`, in words, for `explain`: the relation's rule, a negation, or a model's judgment.
pub fn why_superseded(predicate: &str, older: &str, newer: &str, by_model: bool) -> String {
    let relation = predicate.replace('_', " ");
    if by_model {
        return format!("a model judged that \"{newer}\" replaces \"{older}\" ({relation})");
    }
    if newer.strip_prefix("not ").is_some_and(|negated| negated == older) {
        return format!("\"{newer}\" negates \"{older}\": it no longer holds ({relation})");
    }
    match kind(predicate) {
        Kind::Single => {
            format!("\"{relation}\" holds one value at a time (docs/RELATIONS.md): \"{newer}\" replaced \"{older}\"")
        }
        _ => format!("\"{newer}\" replaced \"{older}\" ({relation})"),
    }
}

/// The table as markdown rows (`| name | kind | phrases | nouns |`), for docs/RELATIONS.md.
pub fn table_rows() -> String {
    let mut out = String::from("| relation | values | said as | named by |\n|---|---|---|---|\n");
    for r in RELATIONS {
        let kind = match r.kind {
            Kind::Single => "one at a time",
            Kind::Additive => "add up",
            Kind::Unknown => "unknown",
        };
        let list = |v: &[&str]| v.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
        out.push_str(&format!("| `{}` | {kind} | {} | {} |\n", r.name, list(r.phrases), list(r.nouns)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_are_mapped_to_the_table_or_rejected() {
        assert_eq!(canonical_predicate("Works for"), Some("works_at"));
        assert_eq!(canonical_predicate("lives-in"), Some("lives_in"));
        assert_eq!(canonical_predicate("prefer"), Some("prefers"));
        assert_eq!(canonical_predicate("state"), Some("state"));
        assert_eq!(canonical_predicate("phone number"), Some("phone"));
        assert_eq!(canonical_predicate("teleported_to"), None);
    }

    #[test]
    fn the_table_is_consistent() {
        let mut names: Vec<&str> = vocabulary().collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a relation is listed twice");
        // A phrase or noun reads as one relation only.
        for (i, a) in RELATIONS.iter().enumerate() {
            for b in &RELATIONS[i + 1..] {
                for p in a.phrases {
                    assert!(!b.phrases.contains(p), "{p:?} is both {} and {}", a.name, b.name);
                }
                for n in a.nouns {
                    assert!(!b.nouns.contains(n), "{n:?} names both {} and {}", a.name, b.name);
                }
                for s in a.synonyms {
                    assert!(b.name != *s, "{s:?} is a synonym of {} and a relation", a.name);
                }
            }
        }
        for r in RELATIONS {
            for p in r.phrases.iter().chain(r.nouns) {
                assert_eq!(*p, p.to_lowercase(), "{p:?}");
            }
        }
    }

    #[test]
    fn the_relations_doc_lists_the_table() {
        let doc = include_str!("../../../../docs/RELATIONS.md");
        assert!(
            doc.contains(&table_rows()),
            "docs/RELATIONS.md does not hold the table; paste this between its markers:\n{}",
            table_rows()
        );
    }
}
