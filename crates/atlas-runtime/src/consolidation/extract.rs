//! What the model extracts from turns the rules could not read: the prompt, the schema that
//! bounds the answer, the parser that refuses any departure from it, and the facts it proposed
//! keyed by the one rule.

use super::CycleReport;
use crate::Parts;
use atlas_domain::Memory;
use atlas_domain::policy::consolidation::Candidate;
use atlas_domain::policy::grounding::grounded;
use atlas_domain::policy::model_answer::read_answer;
use atlas_domain::policy::reading::key_fact;
use atlas_domain::policy::relations;
use atlas_domain::ports::LlmRequest;
use serde_json::{Value, json};

const SYSTEM: &str = "You extract durable facts from conversation turns for an agent's long-term memory. \
Answer with JSON only, of the form {\"facts\": [{\"turn\": 1, \"subject\": \"...\", \"predicate\": \"...\", \
\"object\": \"...\", \"confidence\": 0.9}]}. `turn` is the number of the turn that states the fact. The \
subject is who or what the fact is about: the speaker's name for \"I\" and \"me\", or a name said in the turn. \
The object is the value, in the turn's own words. Only facts the turn states; none for small talk, questions, \
jokes or what might happen. For example, the turn \"1. Ann: I moved to Rome and I love jazz. Do you like it?\" \
gives {\"facts\": [{\"turn\": 1, \"subject\": \"Ann\", \"predicate\": \"lives_in\", \"object\": \"Rome\"}, \
{\"turn\": 1, \"subject\": \"Ann\", \"predicate\": \"likes\", \"object\": \"jazz\"}]}. Predicates: ";

/// Bounded everywhere: a constrained small model otherwise repeats items, or one string,
/// until it runs out of tokens.
fn schema(turns: usize) -> Value {
    let text = |max: usize| json!({"type": "string", "minLength": 1, "maxLength": max});
    json!({
        "type": "object",
        "required": ["facts"],
        "properties": {"facts": {"type": "array", "maxItems": 2 * turns, "items": {
            "type": "object",
            "required": ["turn", "subject", "predicate", "object"],
            "properties": {
                "turn": {"type": "integer", "minimum": 1, "maximum": turns},
                "subject": text(60), "predicate": text(30), "object": text(120),
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}
            }
        }}}
    })
}

/// Most turns one model call reads.
pub(super) const TURNS_PER_CALL: usize = 24;

/// One fact as the model proposed it, checked against the schema.
#[derive(Debug)]
struct Proposed {
    turn: usize,
    subject: String,
    predicate: String,
    object: String,
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
            let text = |key: &str| {
                f.get(key)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("facts[{i}].{key}: blank"))
            };
            let turn = f.get("turn").and_then(Value::as_u64).ok_or_else(|| format!("facts[{i}].turn: not a turn"))?;
            let confidence = f.get("confidence").and_then(Value::as_f64).unwrap_or(0.8) as f32;
            Ok(Proposed {
                turn: turn as usize,
                subject: text("subject")?,
                predicate: text("predicate")?,
                object: text("object")?,
                confidence,
            })
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
    let vocabulary = relations::vocabulary().collect::<Vec<_>>().join(", ");
    let prompt = turns
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!("{}. [{}] {}", i + 1, e.event_time.to_rfc3339(), atlas_domain::policy::embedding::line(e))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let request =
        LlmRequest { system: format!("{SYSTEM}{vocabulary}."), prompt, json_schema: Some(schema(turns.len())) };
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
        let subject = match p.subject.to_lowercase().as_str() {
            "i" | "me" | "myself" => speaker.to_owned(),
            _ => p.subject,
        };
        // The one rule keys it: a predicate of the table, or words it can read.
        let Some(keyed) = key_fact(&subject, &p.predicate, &p.object, speaker) else {
            report.predicates_rejected += 1;
            continue;
        };
        // Said in the turn it cites, about its speaker or someone it names; else made up.
        if !grounded(&subject, &p.object, &episode.text, speaker) {
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
        assert!(
            parse_answer(
                "{\"facts\": [{\"turn\": 3, \"subject\": \"a\", \"predicate\": \"b\", \"object\": \"c\"}]}",
                2
            )
            .is_err()
        );
        assert!(
            parse_answer("{\"facts\": [{\"turn\": 1, \"subject\": \"\", \"predicate\": \"b\", \"object\": \"c\"}]}", 2)
                .is_err()
        );
        let long = format!(
            "{{\"facts\": [{{\"turn\": 1, \"subject\": \"{}\", \"predicate\": \"b\", \"object\": \"c\"}}]}}",
            "s".repeat(300)
        );
        assert!(parse_answer(&long, 2).unwrap_err().contains("300 characters, more than the schema's 60"));
        let many: Vec<String> = (0..1000)
            .map(|_| "{\"turn\": 1, \"subject\": \"a\", \"predicate\": \"b\", \"object\": \"c\"}".to_owned())
            .collect();
        let many = format!("{{\"facts\": [{}]}}", many.join(","));
        assert!(parse_answer(&many, 4).unwrap_err().contains("1000 items, more than the schema's 8"));
        let ok = parse_answer("```json\n{\"facts\": [{\"turn\": 2, \"subject\": \"Ann\", \"predicate\": \"prefers\", \"object\": \"Rust\", \"confidence\": 0.7}]}\n```", 2).unwrap();
        assert_eq!((ok[0].turn, ok[0].object.as_str(), ok[0].confidence), (2, "Rust", 0.7));
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_answer_parser_never_panics(text in "\\PC{0,300}", turns in 0usize..5) {
            let _ = parse_answer(&text, turns);
        }
    }
}
