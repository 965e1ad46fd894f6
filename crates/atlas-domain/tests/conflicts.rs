//! The conflict suite on the rules: every scenario of `conflicts.jsonl` (state changes of each
//! kind of value, additions, replacements, negations, corrections, reversions, late imports,
//! two subjects, restatements, paraphrases) filed through `policy::timeline` as a store would,
//! all in one cycle and one cycle per imported turn, checked as of each day and now; scenarios
//! with a model's `judge` run again with that verdict for their ambiguous pairs. The same file
//! runs through the CLI (crates/atlas-cli/tests/conflicts.rs), with the scripted model and the
//! local one.

use atlas_domain::policy::consolidation::SAME_FACT_SIMILARITY;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::policy::reading::tag_fact;
use atlas_domain::policy::relations::{is_functional, kind};
use atlas_domain::policy::retain::harvest;
use atlas_domain::policy::timeline::{
    JUDGE_SIMILARITY, Relation, Statement, StoredFact, Verdict, by_rule_for, reconcile,
};
use atlas_domain::{Body, Memory, MemoryId, NewMemory, Scope, Timestamp};
use atlas_testing::conflicts::{Scenario, said_on, scenarios};
use std::collections::BTreeMap;

/// The facts of every subject and predicate, as a store keeps them.
#[derive(Default)]
struct Facts {
    by_key: BTreeMap<(String, String), Vec<StoredFact>>,
    next_id: i64,
}

impl Facts {
    /// One cycle over `turns` (episode id, day, text).
    fn cycle(&mut self, turns: &[(i64, i64, &str)], judge: Option<Verdict>) {
        let mut keyed: BTreeMap<(String, String), Vec<Statement>> = BTreeMap::new();
        for (id, day, text) in turns {
            for tag in harvest(text) {
                let fact = tag_fact(tag, "user");
                keyed.entry((normalize(&fact.subject), fact.predicate)).or_default().push(Statement {
                    source: MemoryId(*id),
                    said_at: said_on(*day),
                    object: fact.object,
                    confidence: fact.confidence,
                    origin: fact.origin.to_owned(),
                    wording: fact.wording,
                });
            }
        }
        for (key, statements) in keyed {
            let relate = |a: &str, b: &str| match by_rule_for(
                kind(&key.1),
                a,
                b,
                None,
                SAME_FACT_SIMILARITY,
                JUDGE_SIMILARITY,
            ) {
                Relation::Decided(v) => v,
                Relation::Ambiguous => judge.unwrap_or(Verdict::Both),
            };
            let stored = self.by_key.remove(&key).unwrap_or_default();
            let timeline = reconcile(is_functional(&key.1), &stored, &statements, &relate);
            let ids: Vec<MemoryId> = timeline
                .segments
                .iter()
                .map(|s| {
                    s.fact.unwrap_or_else(|| {
                        self.next_id += 1;
                        MemoryId(1_000 + self.next_id)
                    })
                })
                .collect();
            let facts = timeline
                .segments
                .iter()
                .zip(&ids)
                .map(|(s, id)| StoredFact {
                    id: *id,
                    object: s.object.clone(),
                    validity: s.validity,
                    confidence: s.confidence,
                    sources: s.sources.clone(),
                    supersedes: s.replaces.map(|i| ids[i]).into_iter().collect(),
                })
                .collect();
            self.by_key.insert(key, facts);
        }
    }

    /// The facts as the memories a store would hold.
    fn memories(&self) -> Vec<Memory> {
        let mut out = Vec::new();
        for ((subject, predicate), facts) in &self.by_key {
            for f in facts {
                let body = Body::Fact {
                    subject: subject.clone(),
                    predicate: predicate.clone(),
                    object: f.object.clone(),
                    confidence: f.confidence,
                };
                let new = NewMemory {
                    body,
                    validity: f.validity,
                    ..NewMemory::episode(f.object.clone(), Scope::default(), None, f.validity.valid_from, Timestamp(0))
                };
                out.push(new.with_id(f.id));
            }
        }
        out
    }
}

/// Every way the scenario fails with `judge` under both batchings, as readable lines.
fn failures(s: &Scenario, judge: Option<Verdict>) -> Vec<String> {
    let turns: Vec<(i64, i64, &str)> =
        s.says.iter().enumerate().map(|(i, (day, text))| (i as i64 + 1, *day, text.as_str())).collect();
    let mut once = Facts::default();
    once.cycle(&turns, judge);
    let mut each = Facts::default();
    for turn in &turns {
        each.cycle(std::slice::from_ref(turn), judge);
    }
    let mode = if judge.is_some() { "judged" } else { "rules" };
    let mut out = Vec::new();
    for (batching, facts) in [("one cycle", &once), ("a cycle per turn", &each)] {
        let misses = s.misses(&facts.memories(), judge.is_some());
        out.extend(misses.into_iter().map(|m| format!("({mode}, {batching}) {m}")));
    }
    out
}

#[test]
fn the_conflict_suite_holds_on_the_rules_and_on_a_judging_model() {
    let all = scenarios();
    assert!(all.len() >= 40, "at least 40 scenarios, found {}", all.len());
    let mut failed = Vec::new();
    for s in &all {
        failed.extend(failures(s, None));
        if let Some(verdict) = s.judge {
            failed.extend(failures(s, Some(verdict)));
        }
    }
    assert!(failed.is_empty(), "{} of the checks failed:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn a_model_band_scenario_differs_from_the_rules_alone() {
    // The judged runs are not the rules again: some scenario's truth needs the model.
    assert!(scenarios().iter().any(|s| s.rules_expect.as_ref().is_some_and(|r| *r != s.expect)));
}
