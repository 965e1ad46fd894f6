//! What the model extracts from turns the rules could not read: the prompt, the schema that
//! bounds the answer, the parser that refuses any departure from it, and the facts it proposed
//! keyed by the one rule.

use super::CycleReport;
use crate::Parts;
use atlas_domain::Memory;
use atlas_domain::policy::consolidation::Candidate;
use atlas_domain::policy::grounding::{grounded, names};
use atlas_domain::policy::model_answer::read_answer;
use atlas_domain::policy::reading::key_statements;
use atlas_domain::ports::LlmRequest;
use serde_json::{Value, json};

/// One prompt for every model. The model only writes each fact as a plain sentence; the one
/// rule (`policy::reading`) reads its relation, as it reads a person's `- W:` line, so a small
/// model never has to pick a predicate from a vocabulary or put a name in the right field.
const SYSTEM: &str = "You write down the lasting facts that people's messages state about them or about \
someone they name, for an agent's long-term memory. Each numbered line is one message. Write each fact as its \
own short sentence: a name, a verb, a value. Use the speaker's name, not I. Write only what the message says. \
A question, a greeting, a joke or what might happen states no fact. Answer with JSON only, each fact with the \
number of its message. Examples:\n\
1. Ann: I work at Brightwave as a designer.\n\
{\"facts\": [{\"turn\": 1, \"fact\": \"Ann works at Brightwave\"}, {\"turn\": 1, \"fact\": \"Ann works as a designer\"}]}\n\
1. Ann: My brother Tom lives in Oslo, he loves skiing.\n\
{\"facts\": [{\"turn\": 1, \"fact\": \"Ann's brother is Tom\"}, {\"turn\": 1, \"fact\": \"Tom lives in Oslo\"}, \
{\"turn\": 1, \"fact\": \"Tom loves skiing\"}]}\n\
1. Ann: Do you know a good cafe? If I win the lottery I'll buy a boat.\n\
{\"facts\": []}";

/// Most facts one message may yield.
const FACTS_PER_TURN: usize = 3;

/// Bounded everywhere: a constrained small model otherwise repeats items, or one string,
/// until it runs out of tokens.
fn schema(turns: usize) -> Value {
    json!({
        "type": "object",
        "required": ["facts"],
        "properties": {"facts": {"type": "array", "maxItems": FACTS_PER_TURN * turns, "items": {
            "type": "object",
            "required": ["turn", "fact"],
            "properties": {
                "turn": {"type": "integer", "minimum": 1, "maximum": turns},
                "fact": {"type": "string", "minLength": 1, "maxLength": 120},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}
            }
        }}}
    })
}

/// One fact as the model proposed it, checked against the schema.
#[derive(Debug)]
struct Proposed {
    turn: usize,
    statement: String,
    confidence: f32,
}

/// Reads the model's answer; any departure from the schema it was asked for (a string longer
/// than its `maxLength`, more facts than `maxItems`, a turn out of range) fails the whole
/// answer, so that a half-understood reply never becomes memory and the turns wait for another
/// cycle (policy::model_answer).
fn parse_answer(text: &str, turns: usize) -> std::result::Result<Vec<Proposed>, String> {
    let value = read_answer(text, &schema(turns))?;
    let facts = value.get("facts").and_then(Value::as_array).ok_or("the answer has no \"facts\" array")?;
    facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let statement = f
                .get("fact")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("facts[{i}].fact: blank"))?;
            let turn = f.get("turn").and_then(Value::as_u64).ok_or_else(|| format!("facts[{i}].turn: not a turn"))?;
            let confidence = f.get("confidence").and_then(Value::as_f64).unwrap_or(0.8) as f32;
            Ok(Proposed { turn: turn as usize, statement: statement.to_owned(), confidence })
        })
        .collect()
}

/// Why an extraction failed: `refused` when the model answered outside its schema (rather than
/// the call failing).
pub(super) struct Failed {
    pub(super) why: String,
    pub(super) refused: bool,
}

/// One model call over `turns`; the facts it proposed as candidates, or why it failed.
pub(super) async fn extract(
    parts: &Parts,
    turns: &[&Memory],
    report: &mut CycleReport,
) -> std::result::Result<Vec<(Candidate, &'static str)>, Failed> {
    let llm = parts.llm.as_ref().expect("only called with a model");
    let prompt = turns
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}. {}", i + 1, atlas_domain::policy::embedding::line(e)))
        .collect::<Vec<_>>()
        .join("\n");
    let request = LlmRequest { system: SYSTEM.to_owned(), prompt, json_schema: Some(schema(turns.len())) };
    report.llm_calls += 1;
    let answer = llm.complete(request).await.map_err(|e| Failed { why: e.to_string(), refused: false })?;
    report.input_tokens += answer.input_tokens;
    report.output_tokens += answer.output_tokens;
    report.cost_usd += answer.cost;
    let proposed = parse_answer(&answer.text, turns.len()).map_err(|why| Failed { why, refused: true })?;
    let mut out = Vec::new();
    for p in proposed {
        let episode = turns[p.turn - 1];
        let speaker = episode.body.speaker().unwrap_or("user");
        // The one rule reads it, a clause at a time, as it reads a person's `- W:` line; what
        // is not a plain statement about someone (what might be, a question) is not filed.
        let keyed = key_statements(&p.statement, speaker);
        if keyed.is_empty() {
            report.predicates_rejected += 1;
        }
        for keyed in keyed {
            // A statement kept whole is its value after the person it opens with.
            let value = keyed.object.strip_prefix(keyed.subject_shown.as_str()).unwrap_or(&keyed.object);
            // Said in the turn it cites, about its speaker or someone it names; else made up.
            let named = keyed.predicate != "fact" || names(&keyed.subject, &episode.text, speaker);
            if !named || !grounded(&keyed.subject_shown, value, &episode.text, speaker) {
                report.facts_ungrounded += 1;
                continue;
            }
            out.push((
                Candidate {
                    subject: keyed.subject,
                    subject_shown: keyed.subject_shown,
                    predicate: keyed.predicate,
                    object: keyed.object,
                    confidence: p.confidence,
                    source: episode.id,
                    said_at: episode.event_time,
                    wording: keyed.wording,
                },
                "llm",
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn answers_outside_the_schema_fail_whole() {
        assert!(parse_answer("not json", 2).is_err());
        assert!(parse_answer("{\"facts\": {}}", 2).is_err());
        assert!(parse_answer("{\"facts\": [{\"turn\": 3, \"fact\": \"Ann lives in Rome\"}]}", 2).is_err());
        assert!(parse_answer("{\"facts\": [{\"turn\": 1, \"fact\": \"\"}]}", 2).is_err());
        let long = format!("{{\"facts\": [{{\"turn\": 1, \"fact\": \"{}\"}}]}}", "s".repeat(300));
        assert!(parse_answer(&long, 2).unwrap_err().contains("300 characters, more than the schema's 120"));
        let many: Vec<String> = (0..1000).map(|_| "{\"turn\": 1, \"fact\": \"Ann likes jazz\"}".to_owned()).collect();
        let many = format!("{{\"facts\": [{}]}}", many.join(","));
        assert!(parse_answer(&many, 4).unwrap_err().contains("1000 items, more than the schema's 12"));
        let ok = parse_answer(
            "```json\n{\"facts\": [{\"turn\": 2, \"fact\": \"Ann prefers Rust\", \"confidence\": 0.7}]}\n```",
            2,
        )
        .unwrap();
        assert_eq!((ok[0].turn, ok[0].statement.as_str(), ok[0].confidence), (2, "Ann prefers Rust", 0.7));
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_answer_parser_never_panics(text in "\\PC{0,300}", turns in 0usize..5) {
            let _ = parse_answer(&text, turns);
        }
    }
}
