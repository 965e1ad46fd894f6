//! The model's judgment of pairs of facts that rules cannot tell apart: the same fact in other
//! words, one replacing the other, or both true at once; each pair judged or left to the rule
//! goes into the cycle's report.

use super::{CycleReport, Judgment};
use crate::Parts;
use atlas_domain::policy::model_answer::read_answer;
use atlas_domain::policy::timeline::Verdict;
use atlas_domain::ports::LlmRequest;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Two objects of one subject and predicate, `a` before `b` in text order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pair {
    subject: String,
    predicate: String,
    a: String,
    b: String,
}

impl Pair {
    pub(super) fn of(subject: &str, predicate: &str, x: &str, y: &str) -> Pair {
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        Pair { subject: subject.to_owned(), predicate: predicate.to_owned(), a: a.to_owned(), b: b.to_owned() }
    }
}

const JUDGE_SYSTEM: &str = "You keep an agent's long-term memory consistent. Each numbered line holds two \
statements about the same subject and relation, made at different times. Say for each how they relate: \
\"same\" (the same fact in other words), \"replaces\" (they cannot both be true: the later one makes the earlier \
one no longer true), or \"both\" (both can be true at once). Answer with JSON only, of the form \
{\"judgments\": [{\"pair\": 1, \"verdict\": \"same\"}]}.";

/// Most pairs one judgment call reads.
const PAIRS_PER_CALL: usize = 32;

fn judge_schema(pairs: usize) -> Value {
    json!({
        "type": "object",
        "required": ["judgments"],
        "properties": {"judgments": {"type": "array", "maxItems": pairs, "items": {
            "type": "object",
            "required": ["pair", "verdict"],
            "properties": {
                "pair": {"type": "integer", "minimum": 1, "maximum": pairs},
                "verdict": {"type": "string", "enum": ["same", "replaces", "both"]}
            }
        }}}
    })
}

/// Reads a judgment answer; any departure from its schema fails it whole (policy::model_answer).
fn parse_judgments(text: &str, pairs: usize) -> std::result::Result<BTreeMap<usize, Verdict>, String> {
    let value = read_answer(text, &judge_schema(pairs))?;
    let items = value.get("judgments").and_then(Value::as_array).ok_or("the answer has no \"judgments\" array")?;
    let mut out = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let pair =
            item.get("pair").and_then(Value::as_u64).ok_or_else(|| format!("judgments[{i}].pair: not a pair"))?;
        let verdict: Verdict = item
            .get("verdict")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| format!("judgments[{i}].verdict: not one of same, replaces, both"))?;
        out.insert(pair as usize, verdict);
    }
    Ok(out)
}

/// The model's verdicts on `unclear` pairs, at most [`PAIRS_PER_CALL`] a call and `calls_left`
/// calls; every pair, judged or left to the rule (different: both hold), goes into the report.
pub(super) async fn judge(
    parts: &Parts,
    unclear: std::collections::BTreeSet<Pair>,
    calls_left: &mut usize,
    report: &mut CycleReport,
) -> BTreeMap<Pair, Verdict> {
    let mut verdicts = BTreeMap::new();
    let pairs: Vec<Pair> = unclear.into_iter().collect();
    for chunk in pairs.chunks(PAIRS_PER_CALL) {
        let answer: std::result::Result<BTreeMap<usize, Verdict>, String> = match &parts.llm {
            None => Err("no model is configured".into()),
            Some(_) if *calls_left == 0 => {
                Err("the cycle's judgment calls are spent (consolidation.judge_calls)".into())
            }
            Some(llm) => {
                *calls_left -= 1;
                report.llm_calls += 1;
                let prompt = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        format!(
                            "{}. {} / {}: \"{}\" | \"{}\"",
                            i + 1,
                            p.subject,
                            p.predicate.replace('_', " "),
                            p.a,
                            p.b
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let request =
                    LlmRequest { system: JUDGE_SYSTEM.into(), prompt, json_schema: Some(judge_schema(chunk.len())) };
                match llm.complete(request).await {
                    Ok(answer) => {
                        report.input_tokens += answer.input_tokens;
                        report.output_tokens += answer.output_tokens;
                        report.cost_usd += answer.cost;
                        parse_judgments(&answer.text, chunk.len())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        if let Err(why) = &answer {
            tracing::debug!(%why, pairs = chunk.len(), "ambiguous pairs left to the rule");
        }
        for (i, pair) in chunk.iter().enumerate() {
            let by_model = answer.as_ref().ok().and_then(|a| a.get(&(i + 1)).copied());
            let why = match &answer {
                Ok(_) if by_model.is_none() => Some("the model's answer left this pair out".to_owned()),
                Ok(_) => None,
                Err(why) => Some(why.clone()),
            };
            let verdict = by_model.unwrap_or(Verdict::Both);
            report.judgments.push(Judgment {
                subject: pair.subject.clone(),
                predicate: pair.predicate.clone(),
                objects: [pair.a.clone(), pair.b.clone()],
                verdict,
                by: if by_model.is_some() { "model" } else { "rule" },
                why,
            });
            if by_model.is_some() {
                verdicts.insert(pair.clone(), verdict);
            }
        }
    }
    verdicts
}
