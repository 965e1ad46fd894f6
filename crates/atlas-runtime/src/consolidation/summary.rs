//! Summaries of closed sessions: the model's within the cycle's budget, or an extractive one.

use super::CycleReport;
use super::filing::Plan;
use crate::Parts;
use atlas_domain::policy::model_answer::read_answer;
use atlas_domain::ports::{LlmRequest, Revision};
use atlas_domain::{Body, EdgeKind, NewMemory, Validity};
use serde_json::{Value, json};

const SUMMARY_SYSTEM: &str = "You summarise one conversation session for an agent's long-term memory, in at \
most three sentences: who took part, what was decided, learned or planned, and what was left open. Answer with \
JSON only: {\"summary\": \"...\"}.";

/// Most characters of a session the model reads (its last turns when longer).
const SUMMARY_INPUT_CHARS: usize = 12_000;

/// The most characters of a model's summary (its schema's `maxLength`).
const SUMMARY_CHARS: usize = 600;

/// Characters an extractive summary may quote.
const EXTRACTIVE_CHARS: usize = 600;

/// Adds the summary of a closed session to the plan: the model's, when one is configured and
/// the cycle's budget allows (a session waits otherwise; a failed call falls back to the
/// extractive summary), or an extractive one. It is `derived_from` every turn and supersedes
/// the session's older summary.
pub(super) async fn summarise(
    parts: &Parts,
    session: atlas_domain::ports::ClosedSession,
    plan: &mut Plan,
    report: &mut CycleReport,
    calls_left: &mut usize,
) {
    use atlas_domain::policy::summary::{Turn, extractive};
    let Some(last) = session.turns.last() else { return };
    let said_at = last.event_time;
    let mut written: Option<(String, &str)> = None;
    if let Some(llm) = &parts.llm {
        if *calls_left == 0 {
            report.summaries_deferred += 1;
            return;
        }
        *calls_left -= 1;
        report.llm_calls += 1;
        let mut lines: Vec<String> = Vec::new();
        let mut size = 0;
        for turn in session.turns.iter().rev() {
            let line = format!("[{}] {}", turn.event_time.to_rfc3339(), atlas_domain::policy::embedding::line(turn));
            size += line.len() + 1;
            if size > SUMMARY_INPUT_CHARS && !lines.is_empty() {
                break;
            }
            lines.push(line);
        }
        lines.reverse();
        let schema = json!({
            "type": "object", "required": ["summary"],
            "properties": {"summary": {"type": "string", "minLength": 1, "maxLength": SUMMARY_CHARS}}
        });
        let request =
            LlmRequest { system: SUMMARY_SYSTEM.into(), prompt: lines.join("\n"), json_schema: Some(schema.clone()) };
        match llm.complete(request).await {
            Ok(answer) => {
                report.input_tokens += answer.input_tokens;
                report.output_tokens += answer.output_tokens;
                report.cost_usd += answer.cost;
                let text = read_answer(&answer.text, &schema).and_then(|v| {
                    v.get("summary")
                        .and_then(Value::as_str)
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .ok_or_else(|| "answer.summary: blank".to_owned())
                });
                match text {
                    Ok(text) => written = Some((text, "llm")),
                    Err(why) => {
                        tracing::warn!(%why, "the model's summary is outside its schema; an extractive one is kept");
                        report.refuse(format!("summary of session {:?}: {why}", session.scope.session));
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "summary call failed; an extractive summary is kept"),
        }
    }
    let (text, origin) = match written {
        Some(w) => w,
        None => {
            let turns: Vec<Turn<'_>> =
                session.turns.iter().map(|t| Turn { speaker: t.body.speaker(), text: &t.text }).collect();
            (extractive(&turns, EXTRACTIVE_CHARS), "extractive")
        }
    };
    if text.is_empty() {
        return;
    }
    let name = session.scope.session.clone().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    meta.insert("origin".into(), Value::from(origin));
    let summary = plan.add(NewMemory {
        scope: session.scope.clone(),
        text,
        event_time: said_at,
        recorded_at: plan.now,
        validity: Validity::from(said_at),
        meta,
        body: Body::Summary { session: name, turns: session.turns.len() as u32 },
    });
    report.summaries_added += 1;
    for turn in &session.turns {
        plan.link(summary, turn.id, EdgeKind::DerivedFrom, said_at);
        // Provenance, not association: recall's graph walk does not pass through a summary
        // from one turn of its session to all the others (the temporal walk relates turns).
        plan.batch.edges.last_mut().expect("just linked").weight = 0.0;
    }
    if let Some(previous) = session.previous {
        plan.batch.revisions.push(Revision {
            id: previous,
            valid_from: None,
            valid_until: Some(said_at),
            confidence: None,
        });
        plan.link(summary, previous, EdgeKind::Supersedes, said_at);
    }
}
