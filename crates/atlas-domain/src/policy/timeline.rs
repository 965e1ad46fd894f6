//! How the statements about one subject and predicate become facts with history: a timeline
//! ordered by when each was said, never by when it was consolidated, so that the same
//! statements give the same facts however the episodes were batched or imported.
//!
//! For a predicate with one object at a time (`lives_in`, `state`), each statement that is not
//! the same as the fact in effect when it was said begins a new fact, which ends that one and
//! supersedes it; a reversion (A, B, A) is three facts. For the others, every distinct object
//! holds from when it was first said until a statement replaces it (its negation, or a model's
//! judgment). A statement consolidated late (an old conversation imported after a newer one)
//! takes its place by its time: it may extend a fact back, split one, or end one earlier.
//! Stored facts keep their ids; what changes is their validity, their sources and the
//! `supersedes` edges between them.

use crate::policy::consolidation::{SAME_FACT_OVERLAP, word_overlap};
use crate::policy::relations::Kind;
use crate::policy::text::stem;
use crate::policy::values::difference;
use crate::{MemoryId, Timestamp, Validity};
use std::collections::{BTreeMap, BTreeSet};

/// How a later statement's object relates to an earlier one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The same fact said again ("NYC" and "New York City"): one more source.
    Same,
    /// The later one ends the earlier one ("no longer likes sushi").
    Replaces,
    /// Both hold. For a predicate with one object at a time this still begins a new fact.
    Both,
}

/// What the rules say about a pair of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Decided(Verdict),
    /// Alike, agreeing on every value, and still not close enough to be the same by rule: a
    /// model decides where one is configured; without one they are different ([`Verdict::Both`]).
    Ambiguous,
}

/// Word overlap from which a pair that is not the same fact is ambiguous ("likes hiking in the
/// mountains", "likes mountain hiking").
pub const JUDGE_OVERLAP: f64 = 0.25;

/// Similarity (the objects' embeddings' cosine) from which a pair that is not the same fact is
/// ambiguous, by default.
pub const JUDGE_SIMILARITY: f64 = 0.6;

/// How `later` relates to `earlier` by rule. `similarity` is their embeddings' cosine where
/// known; `same_from` and `judge_from` are the similarities from which they are the same, and
/// from which they are ambiguous. Objects that differ in a value are never the same: a negation
/// of the same words replaces, any other value makes another fact.
pub fn by_rule(earlier: &str, later: &str, similarity: Option<f64>, same_from: f64, judge_from: f64) -> Relation {
    let overlap = word_overlap(earlier, later);
    let similar = |from: f64| similarity.is_some_and(|s| s >= from);
    let alike = overlap >= SAME_FACT_OVERLAP || similar(same_from);
    match difference(earlier, later) {
        None if alike && !substitutes(earlier, later) => Relation::Decided(Verdict::Same),
        None if alike || overlap >= JUDGE_OVERLAP || similar(judge_from) => Relation::Ambiguous,
        None => Relation::Decided(Verdict::Both),
        Some(d) if d.kind == "negation" && word_overlap(&affirmed(earlier), &affirmed(later)) >= SAME_FACT_OVERLAP => {
            Relation::Decided(Verdict::Replaces)
        }
        Some(_) => Relation::Decided(Verdict::Both),
    }
}

/// How `later` relates to `earlier` by rule, for a relation of `kind` (`policy::relations`):
/// [`by_rule`], except that under a relation the table does not know, values that differ are
/// for a model to judge (without one, both hold: the rules do not guess), and under a relation
/// with one value at a time, a negation of another value ("no longer lives in Berlin" while
/// Vienna holds) agrees with the value that holds: it is one more statement of it.
pub fn by_rule_for(
    kind: Kind,
    earlier: &str,
    later: &str,
    similarity: Option<f64>,
    same_from: f64,
    judge_from: f64,
) -> Relation {
    let relation = by_rule(earlier, later, similarity, same_from, judge_from);
    match (kind, relation) {
        (Kind::Unknown, Relation::Decided(Verdict::Both)) => Relation::Ambiguous,
        (Kind::Single, Relation::Decided(Verdict::Both)) if negates_another(earlier, later) => {
            Relation::Decided(Verdict::Same)
        }
        _ => relation,
    }
}

/// Whether `later` is a negation as `policy::reading` writes it (`not Berlin`) of a value that
/// `earlier`, an affirmed value, does not state.
fn negates_another(earlier: &str, later: &str) -> bool {
    let Some(negated) = later.strip_prefix("not ") else { return false };
    !earlier.starts_with("not ") && difference(earlier, negated).is_some()
}

/// Words that change no fact when one replaces another ("by the river", "along the river").
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "in",
    "on",
    "at",
    "by",
    "to",
    "of",
    "for",
    "with",
    "from",
    "along",
    "into",
    "is",
    "are",
    "was",
    "were",
    "be",
    "being",
    "been",
    "now",
    "currently",
    "still",
    "again",
    "also",
    "my",
    "our",
    "his",
    "her",
    "their",
    "its",
    "this",
    "that",
    "just",
    "really",
    "very",
];

/// Whether each side has a word of substance the other lacks: "small" for "large", "train"
/// for "car". Embeddings put such words close (antonyms most of all), and values cannot list
/// every one: a close pair that swaps words is for a model to judge, never merged by rule.
/// Names, numbers and codes are [`difference`]'s; a word only one side adds ("now") is no swap.
fn substitutes(a: &str, b: &str) -> bool {
    // Words written with a capital are names: agreed on, or not, by `difference`.
    let content = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| !w.is_empty() && !w.chars().any(char::is_uppercase))
            .map(|w| w.trim_matches('\'').to_lowercase())
            .filter(|w| !w.is_empty() && !FILLER.contains(&w.as_str()) && !w.chars().any(|c| c.is_ascii_digit()))
            .map(|w| stem(&w).into_owned())
            .collect()
    };
    let (a, b) = (content(a), content(b));
    a.difference(&b).next().is_some() && b.difference(&a).next().is_some()
}

/// `text` without its negation (`no longer`, `not`, `n't`): what it would say affirmed.
fn affirmed(text: &str) -> String {
    const NEGATING: &[&str] = &["not", "no", "never", "longer", "anymore", "any", "more", "dont", "doesnt", "isnt"];
    crate::policy::consolidation::words(text)
        .into_iter()
        .map(|w| w.strip_suffix("n't").map(str::to_owned).unwrap_or(w))
        .filter(|w| !NEGATING.contains(&w.as_str()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A fact already stored for the subject and predicate, with what the timeline needs of it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFact {
    pub id: MemoryId,
    pub object: String,
    pub validity: Validity,
    pub confidence: f32,
    /// Its statements: the episodes it is `derived_from`, each with when it was said.
    pub sources: Vec<(MemoryId, Timestamp)>,
    /// The facts of the same subject and predicate it has a `supersedes` edge to.
    pub supersedes: Vec<MemoryId>,
}

/// A statement on its way in.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub source: MemoryId,
    pub said_at: Timestamp,
    pub object: String,
    pub confidence: f32,
    /// Where it came from (`tag:S`, `llm`), kept on the fact it begins.
    pub origin: String,
    /// The statement as said, when it was read from words: the text of a fact it begins.
    pub wording: Option<String>,
}

/// One fact of the timeline: a stored one continued (`fact`), or a new one.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub fact: Option<MemoryId>,
    pub object: String,
    pub validity: Validity,
    pub confidence: f32,
    pub origin: String,
    /// The wording of the statement that began it, when it was read from words.
    pub wording: Option<String>,
    /// Every statement it is derived from, in the order said.
    pub sources: Vec<(MemoryId, Timestamp)>,
    /// The segment this one ended and supersedes.
    pub replaces: Option<usize>,
    /// Statements said in this consolidation that joined a fact, rather than began one.
    pub joined: usize,
}

/// The timeline after new statements, and what must go from the stored one.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reconciled {
    pub segments: Vec<Segment>,
    /// `derived_from` edges `(fact, episode)` of stored facts whose statement now belongs to
    /// another fact (a late statement split the fact it was part of).
    pub moved: Vec<(MemoryId, MemoryId)>,
    /// `supersedes` edges `(newer, older)` between stored facts that no longer follow each other.
    pub unlinked: Vec<(MemoryId, MemoryId)>,
}

/// One statement in the walk: new, or one of a stored fact's.
struct Said {
    source: MemoryId,
    said_at: Timestamp,
    object: String,
    confidence: f32,
    origin: String,
    wording: Option<String>,
    stored: Option<MemoryId>,
}

/// The timeline of `stored` facts and `new` statements of one subject and predicate.
/// `functional`: one object at a time. `relate(earlier, later)` says how two objects relate
/// (the rules, with a model's judgments where they were ambiguous). The result does not depend
/// on which statements were already stored: stored facts keep their ids, the first statement
/// of each stored fact keeps it, and its wording is kept.
pub fn reconcile(
    functional: bool,
    stored: &[StoredFact],
    new: &[Statement],
    relate: &dyn Fn(&str, &str) -> Verdict,
) -> Reconciled {
    let mut said: Vec<Said> = Vec::new();
    for fact in stored {
        // A fact with no recorded statement (kept from an older store) stands for one said when
        // it began.
        let sources =
            if fact.sources.is_empty() { vec![(MemoryId(0), fact.validity.valid_from)] } else { fact.sources.clone() };
        // The confidence it was said with: a fact that stopped being current was halved.
        let said_with =
            if fact.validity.valid_until.is_some() { (fact.confidence * 2.0).min(1.0) } else { fact.confidence };
        for (source, said_at) in sources {
            said.push(Said {
                source,
                said_at,
                object: fact.object.clone(),
                confidence: said_with,
                origin: String::new(),
                wording: None,
                stored: Some(fact.id),
            });
        }
    }
    for s in new {
        said.push(Said {
            source: s.source,
            said_at: s.said_at,
            object: s.object.clone(),
            confidence: s.confidence,
            origin: s.origin.clone(),
            wording: s.wording.clone(),
            stored: None,
        });
    }
    // By time said; at one time by episode, then wording: a total order of the statements alone.
    said.sort_by(|a, b| (a.said_at, a.source, &a.object).cmp(&(b.said_at, b.source, &b.object)));
    said.dedup_by(|b, a| a.source == b.source && a.object == b.object && a.source != MemoryId(0));

    let mut segments: Vec<Segment> = Vec::new();
    let mut owned: BTreeSet<MemoryId> = BTreeSet::new();
    let mut verdicts: BTreeMap<(String, String), Verdict> = BTreeMap::new();
    let mut moved = Vec::new();
    for s in said {
        // A segment it may join: not another stored fact (two facts stored apart stay apart).
        let joinable = |seg: &Segment| s.stored.is_none() || seg.fact.is_none() || seg.fact == s.stored;
        let holding: Vec<usize> = if functional {
            segments.len().checked_sub(1).into_iter().collect()
        } else {
            (0..segments.len()).filter(|&i| segments[i].validity.holds_at(s.said_at)).collect()
        };
        let mut joined = None;
        let mut replaced = None;
        for &i in &holding {
            // Between two stored facts, what was decided stands: one that supersedes the other
            // replaced it (a model may have judged so), whatever the rules say today.
            let decided = match (segments[i].fact, s.stored) {
                (Some(older), Some(newer)) if older != newer => stored
                    .iter()
                    .find(|f| f.id == newer)
                    .filter(|f| f.supersedes.contains(&older))
                    .map(|_| Verdict::Replaces),
                _ => None,
            };
            let verdict = decided.unwrap_or_else(|| {
                // A fact's statements share its object: each pair is related once.
                *verdicts
                    .entry((segments[i].object.clone(), s.object.clone()))
                    .or_insert_with(|| relate(&segments[i].object, &s.object))
            });
            match verdict {
                Verdict::Same if joinable(&segments[i]) => {
                    joined = Some(i);
                    break;
                }
                Verdict::Same | Verdict::Both if !functional => {}
                _ => replaced = replaced.or(Some(i)),
            }
        }
        let index = match joined {
            Some(i) => i,
            None => {
                if let Some(i) = replaced {
                    // Replaced at the instant it began, a fact still held for that instant (one
                    // millisecond): a validity is never empty, as every door requires of what it
                    // stores (`policy::limits`), so that a space the cycle wrote restores whole.
                    let began = segments[i].validity.valid_from.millis();
                    segments[i].validity.valid_until = Some(Timestamp(s.said_at.millis().max(began + 1)));
                }
                segments.push(Segment {
                    fact: None,
                    object: s.object.clone(),
                    validity: Validity::from(s.said_at),
                    confidence: s.confidence,
                    origin: s.origin.clone(),
                    wording: s.wording.clone(),
                    sources: Vec::new(),
                    replaces: replaced,
                    joined: 0,
                });
                segments.len() - 1
            }
        };
        let segment = &mut segments[index];
        match s.stored {
            Some(fact) if segment.fact.is_none() && owned.insert(fact) => {
                // The stored fact continues here, with its wording and confidence.
                segment.fact = Some(fact);
                segment.object = stored.iter().find(|f| f.id == fact).map_or(s.object, |f| f.object.clone());
                segment.confidence = s.confidence;
            }
            Some(fact) if segment.fact != Some(fact) => moved.push((fact, s.source)),
            Some(_) => {}
            None if joined.is_some() => segment.joined += 1,
            None => {}
        }
        if s.source != MemoryId(0) {
            segment.sources.push((s.source, s.said_at));
        }
    }
    // A fact that is history holds half the confidence it was said with.
    for segment in &mut segments {
        if segment.validity.valid_until.is_some() {
            segment.confidence *= 0.5;
        }
    }
    let wanted: BTreeSet<(MemoryId, MemoryId)> =
        segments.iter().filter_map(|seg| Some((seg.fact?, segments[seg.replaces?].fact?))).collect();
    let key_facts: BTreeMap<MemoryId, &StoredFact> = stored.iter().map(|f| (f.id, f)).collect();
    let unlinked = stored
        .iter()
        .flat_map(|f| f.supersedes.iter().map(move |old| (f.id, *old)))
        .filter(|pair| key_facts.contains_key(&pair.1) && !wanted.contains(pair))
        .collect();
    Reconciled { segments, moved, unlinked }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rules(a: &str, b: &str) -> Verdict {
        match by_rule(a, b, None, 0.8, 0.6) {
            Relation::Decided(v) => v,
            Relation::Ambiguous => Verdict::Both,
        }
    }

    fn say(source: i64, day: i64, object: &str) -> Statement {
        Statement {
            source: MemoryId(source),
            said_at: Timestamp(day),
            object: object.into(),
            confidence: 1.0,
            origin: "tag:S".into(),
            wording: None,
        }
    }

    #[test]
    fn values_decide_before_similarity() {
        assert_eq!(
            by_rule("version 1.2 deployed", "version 1.3 deployed", Some(0.97), 0.8, 0.6),
            Relation::Decided(Verdict::Both)
        );
        assert_eq!(by_rule("NYC", "New York City", Some(0.9), 0.8, 0.6), Relation::Decided(Verdict::Same));
        assert_eq!(by_rule("NYC", "New York City", Some(0.7), 0.8, 0.6), Relation::Ambiguous);
        assert_eq!(
            by_rule("likes sushi", "no longer likes sushi", None, 0.8, 0.6),
            Relation::Decided(Verdict::Replaces)
        );
        assert_eq!(by_rule("long walks by the sea", "walks along the sea", None, 0.8, 0.6), Relation::Ambiguous);
        assert_eq!(by_rule("tea", "coffee", None, 0.8, 0.6), Relation::Decided(Verdict::Both));
        // Embeddings put antonyms close; a swapped word is for a model, never merged by rule.
        let room = ("meets in the small conference room", "meets in the large conference room now");
        assert_eq!(by_rule(room.0, room.1, Some(0.93), 0.8, 0.6), Relation::Ambiguous);
        assert_eq!(
            by_rule("aisle seats when flying", "an aisle seat when flying", Some(0.9), 0.8, 0.6),
            Relation::Decided(Verdict::Same)
        );
        assert_eq!(
            by_rule("the build is done", "the build is done now", None, 0.8, 0.6),
            Relation::Decided(Verdict::Same)
        );
    }

    #[test]
    fn a_replacement_judged_once_stands_when_the_key_is_filed_again() {
        // A model judged "no sushi on the menu" to replace "sushi on the menu"; the rules alone
        // would keep both. A new statement about the key must not revive the old fact.
        let (old, new) = (MemoryId(10), MemoryId(11));
        let validity =
            |from: i64, until: Option<i64>| Validity { valid_from: Timestamp(from), valid_until: until.map(Timestamp) };
        let stored = [
            StoredFact {
                id: old,
                object: "sushi on the menu".into(),
                validity: validity(1, Some(5)),
                confidence: 0.5,
                sources: vec![(MemoryId(1), Timestamp(1))],
                supersedes: vec![],
            },
            StoredFact {
                id: new,
                object: "the menu is sushi free".into(),
                validity: validity(5, None),
                confidence: 1.0,
                sources: vec![(MemoryId(5), Timestamp(5))],
                supersedes: vec![old],
            },
        ];
        let r = reconcile(false, &stored, &[say(9, 9, "ramen on the menu")], &rules);
        let old_now = r.segments.iter().find(|s| s.fact == Some(old)).unwrap();
        assert_eq!(old_now.validity.valid_until, Some(Timestamp(5)), "{r:?}");
        assert!(r.unlinked.is_empty(), "{r:?}");
    }

    #[test]
    fn a_late_statement_splits_the_fact_it_falls_in() {
        // Stored: A said on days 1 and 3, one fact. Late: B said on day 2.
        let stored = [StoredFact {
            id: MemoryId(10),
            object: "Berlin".into(),
            validity: Validity::from(Timestamp(1)),
            confidence: 1.0,
            sources: vec![(MemoryId(1), Timestamp(1)), (MemoryId(3), Timestamp(3))],
            supersedes: vec![],
        }];
        let r = reconcile(true, &stored, &[say(2, 2, "Vienna")], &rules);
        let shape: Vec<_> = r.segments.iter().map(|s| (s.fact, s.object.as_str(), s.validity.valid_until)).collect();
        assert_eq!(
            shape,
            [
                (Some(MemoryId(10)), "Berlin", Some(Timestamp(2))),
                (None, "Vienna", Some(Timestamp(3))),
                (None, "Berlin", None)
            ]
        );
        assert_eq!(r.moved, [(MemoryId(10), MemoryId(3))]);
        assert_eq!(r.segments[2].replaces, Some(1));
    }

    /// Statements as (source, day, object index), with objects from a small set so that
    /// repeats, reversions and late ones all occur.
    fn statements() -> impl Strategy<Value = Vec<(i64, i64, usize)>> {
        proptest::collection::vec((1i64..8, 0usize..3), 1..9)
            .prop_map(|v| v.into_iter().enumerate().map(|(i, (day, object))| (i as i64 + 1, day, object)).collect())
    }

    /// A segment as an outside reader sees it: object, validity, confidence in thousandths,
    /// sources, and the segment it replaces (by object and start).
    type Content = (String, Validity, u32, Vec<(MemoryId, Timestamp)>, Option<String>);

    /// The timeline as content, with ids left out.
    fn content(segments: &[Segment]) -> Vec<Content> {
        segments
            .iter()
            .map(|s| {
                let mut sources = s.sources.clone();
                sources.sort();
                let replaces =
                    s.replaces.map(|i| format!("{}@{}", segments[i].object, segments[i].validity.valid_from.millis()));
                (s.object.clone(), s.validity, (s.confidence * 1000.0) as u32, sources, replaces)
            })
            .collect()
    }

    /// Files `new` into `stored` as a store would: segments become stored facts.
    fn file(functional: bool, stored: &mut Vec<StoredFact>, new: &[Statement], next_id: &mut i64) -> Vec<Segment> {
        let r = reconcile(functional, stored, new, &rules);
        let mut ids = Vec::new();
        for seg in &r.segments {
            let id = seg.fact.unwrap_or_else(|| {
                *next_id += 1;
                MemoryId(*next_id)
            });
            ids.push(id);
        }
        let mut next: Vec<StoredFact> = r
            .segments
            .iter()
            .zip(&ids)
            .map(|(seg, id)| StoredFact {
                id: *id,
                object: seg.object.clone(),
                validity: seg.validity,
                confidence: seg.confidence,
                sources: seg.sources.clone(),
                supersedes: seg.replaces.map(|i| ids[i]).into_iter().collect(),
            })
            .collect();
        next.sort_by_key(|f| f.id);
        *stored = next;
        r.segments
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn batching_never_changes_the_timeline(said in statements(), cut in proptest::collection::vec(any::<bool>(), 9), functional in any::<bool>()) {
            const OBJECTS: [&str; 3] = ["lives in Berlin", "lives in Vienna", "no longer lives in Berlin"];
            let all: Vec<Statement> = said.iter().map(|&(id, day, o)| say(id, day, OBJECTS[o])).collect();
            let (mut once, mut split) = (Vec::new(), Vec::new());
            let mut next = 100;
            let whole = file(functional, &mut once, &all, &mut next);
            let mut last = Vec::new();
            let mut batch = Vec::new();
            for (i, s) in all.iter().enumerate() {
                batch.push(s.clone());
                if cut[i] || i + 1 == all.len() {
                    last = file(functional, &mut split, &batch, &mut next);
                    batch.clear();
                }
            }
            prop_assert_eq!(content(&whole), content(&last));
            for segment in &whole {
                prop_assert!(segment.validity.valid_until.is_none_or(|u| u > segment.validity.valid_from), "{:?}", segment);
            }
            if functional {
                let current = whole.iter().filter(|s| s.validity.valid_until.is_none()).count();
                prop_assert_eq!(current, 1, "one object at a time");
            }
        }
    }
}
