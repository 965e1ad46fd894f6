//! The conflict suite's scenarios (`crates/atlas-domain/tests/conflicts.jsonl`) for tests above
//! the domain: each scenario in its own user's scope, its checks against the facts a space
//! holds, and a model that judges ambiguous pairs as the scenarios say a correct one would.

use async_trait::async_trait;
use atlas_domain::policy::consolidation::normalize;
use atlas_domain::policy::retain::harvest;
use atlas_domain::policy::timeline::Verdict;
use atlas_domain::ports::{Completion, Llm, LlmRequest};
use atlas_domain::{Body, Memory, Result, Scope, Timestamp};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const DAY: i64 = 86_400_000;

/// A checkpoint: a day (its end, after everything said that day) or now, and the facts that
/// hold then, as `subject|predicate|object`.
pub type Checkpoint = (Option<i64>, BTreeSet<String>);

pub struct Scenario {
    pub name: String,
    pub category: String,
    /// In import order: the day each was said, and the turn.
    pub says: Vec<(i64, String)>,
    pub expect: Vec<Checkpoint>,
    /// What a correct model answers for the scenario's ambiguous pairs.
    pub judge: Option<Verdict>,
    /// What the rules alone give, where the model's judgment changes it.
    pub rules_expect: Option<Vec<Checkpoint>>,
}

/// When a statement said on `day` was said: its noon.
pub fn said_on(day: i64) -> Timestamp {
    Timestamp(day * DAY + DAY / 2)
}

fn end_of(day: i64) -> Timestamp {
    Timestamp(day * DAY + DAY - 1)
}

fn checkpoints(v: &Value) -> Vec<Checkpoint> {
    v.as_array()
        .expect("checkpoints: an array")
        .iter()
        .map(|c| {
            let holds = c["holds"].as_array().expect("holds").iter().map(|h| h.as_str().unwrap().to_owned()).collect();
            (c["day"].as_i64(), holds)
        })
        .collect()
}

/// Every scenario of the suite.
pub fn scenarios() -> Vec<Scenario> {
    include_str!("../../atlas-domain/tests/conflicts.jsonl")
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("conflicts.jsonl:{}: {e}", i + 1));
            Scenario {
                name: v["name"].as_str().unwrap().to_owned(),
                category: v["category"].as_str().unwrap_or_default().to_owned(),
                says: v["says"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| (s["day"].as_i64().unwrap(), s["text"].as_str().unwrap().to_owned()))
                    .collect(),
                expect: checkpoints(&v["expect"]),
                judge: v.get("judge").map(|j| serde_json::from_value(j.clone()).unwrap()),
                rules_expect: v.get("rules_expect").map(checkpoints),
            }
        })
        .collect()
}

impl Scenario {
    /// Its own user: scenarios share a space and never each other's facts.
    pub fn scope(&self) -> Scope {
        Scope { user: Some(self.name.clone()), agent: None, session: Some("conflicts".into()) }
    }

    /// The subjects its turns' tags are about, normalised.
    pub fn subjects(&self) -> Vec<String> {
        let subjects: BTreeSet<String> = self
            .says
            .iter()
            .flat_map(|(_, text)| harvest(text))
            .map(|tag| normalize(&atlas_domain::policy::reading::tag_fact(tag, "user").subject))
            .collect();
        subjects.into_iter().collect()
    }

    /// What should hold: with a model's judgment (`judged`), or by the rules alone.
    pub fn expected(&self, judged: bool) -> &[Checkpoint] {
        match (&self.rules_expect, judged) {
            (Some(rules), false) => rules,
            _ => &self.expect,
        }
    }

    /// How `facts` (every fact of the scenario's scope) miss what should hold, one line each.
    pub fn misses(&self, facts: &[Memory], judged: bool) -> Vec<String> {
        let mut out = Vec::new();
        for (day, wanted) in self.expected(judged) {
            let got: BTreeSet<String> = facts
                .iter()
                .filter(|m| match day {
                    Some(day) => m.validity.holds_at(end_of(*day)) && !m.lifecycle.is_deleted(),
                    None => m.validity.valid_until.is_none() && !m.lifecycle.is_deleted(),
                })
                .filter_map(|m| match &m.body {
                    Body::Fact { subject, predicate, object, .. } => Some(format!("{subject}|{predicate}|{object}")),
                    _ => None,
                })
                .collect();
            if &got != wanted {
                let when = day.map_or("now".to_owned(), |d| format!("day {d}"));
                out.push(format!("{} {when}: expected {wanted:?}, got {got:?}", self.name));
            }
        }
        out
    }
}

/// A model that judges every pair it is asked about as the scenario holding that pair says;
/// it answers nothing else (extraction is never asked of it: every turn of the suite is tagged).
pub struct JudgeAsScenarios {
    verdicts: BTreeMap<(String, String), Verdict>,
}

impl JudgeAsScenarios {
    pub fn new(scenarios: &[Scenario]) -> Self {
        let mut verdicts = BTreeMap::new();
        for s in scenarios {
            let Some(verdict) = s.judge else { continue };
            let objects: Vec<String> = s
                .says
                .iter()
                .flat_map(|(_, text)| harvest(text))
                .map(|tag| atlas_domain::policy::reading::tag_fact(tag, "user").object)
                .collect();
            for a in &objects {
                for b in &objects {
                    if a < b {
                        verdicts.insert((a.clone(), b.clone()), verdict);
                    }
                }
            }
        }
        JudgeAsScenarios { verdicts }
    }
}

#[async_trait]
impl Llm for JudgeAsScenarios {
    async fn complete(&self, request: LlmRequest) -> Result<Completion> {
        let mut judgments = Vec::new();
        for (i, line) in request.prompt.lines().enumerate() {
            let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            let [a, b] = quoted[..] else { continue };
            let key = if a <= b { (a.to_owned(), b.to_owned()) } else { (b.to_owned(), a.to_owned()) };
            if let Some(verdict) = self.verdicts.get(&key) {
                judgments.push(serde_json::json!({"pair": i + 1, "verdict": verdict}));
            }
        }
        let text = serde_json::json!({ "judgments": judgments }).to_string();
        Ok(Completion { text, input_tokens: 0, output_tokens: 0, cost: 0.0 })
    }
}

/// A space the suite runs in: the runtime's tests and `cargo xtask eval --sleep` each give one
/// (an [`atlas_domain`]-only crate cannot build a runtime), and [`run_suite`] drives both alike.
#[async_trait]
pub trait SuiteSpace: Sync {
    /// Remembers `text` as the user's turn in `scope`, said at `time`.
    async fn say(&self, scope: Scope, time: Timestamp, text: String) -> Result<()>;
    /// Runs one sleep cycle; how many episodes it failed.
    async fn sleep(&self) -> Result<usize>;
    /// Every fact about `subjects` in `scope`'s user and agent, past and current.
    async fn facts(&self, subjects: Vec<String>, scope: Scope) -> Result<Vec<Memory>>;
}

/// Runs every scenario in `space`: its turns remembered in import order, a sleep cycle after
/// each round (late imports are consolidated late), then checked as of each day and now.
/// Returns, per scenario, how it missed (empty: it passed); `judged` when a model decides the
/// ambiguous band. A cycle that failed an episode is an error: the suite's turns are all read
/// by rules.
pub async fn run_suite(space: &dyn SuiteSpace, all: &[Scenario], judged: bool) -> Result<Vec<(String, Vec<String>)>> {
    let rounds = all.iter().map(|s| s.says.len()).max().unwrap_or(0);
    for round in 0..rounds {
        for s in all {
            let Some((day, text)) = s.says.get(round) else { continue };
            space.say(s.scope(), said_on(*day), text.clone()).await?;
        }
        let failed = space.sleep().await?;
        if failed > 0 {
            return Err(atlas_domain::AtlasError::Llm(format!("round {round}: the cycle failed {failed} episodes")));
        }
    }
    let mut out = Vec::new();
    for s in all {
        let scope = Scope { session: None, ..s.scope() };
        let facts = space.facts(s.subjects(), scope).await?;
        out.push((s.name.clone(), s.misses(&facts, judged && s.judge.is_some())));
    }
    Ok(out)
}
