//! A trajectory line (what the agent memories learn from: `atlas experience store`, `atlas
//! concept compress`): read with the same errors, naming line and field, as a memory's line.

use super::{LineError, object, opt_string, opt_time, type_name};
use crate::Timestamp;
use serde_json::Value;

/// The fields of a trajectory line (`atlas experience store`, `atlas concept compress`).
const TRAJECTORY_FIELDS: [&str; 8] = ["id", "task", "steps", "output", "feedback", "success", "time", "tags"];

/// Parses one trajectory line: `{"id", "task", "steps": [str, ...], "output"?, "feedback"?,
/// "success": bool, "time"?, "tags"?: [str, ...]}`. `id` is a string or a number; `time`
/// (RFC 3339) defaults to `now`. Unknown fields are errors, like everywhere in this format.
pub fn parse_trajectory_line(line: &str, now: Timestamp) -> Result<crate::Trajectory, LineError> {
    let obj = object(line)?;
    if let Some(unknown) = obj.keys().find(|k| !TRAJECTORY_FIELDS.contains(&k.as_str())) {
        return Err(LineError::at(unknown, format!("unknown field (known fields: {})", TRAJECTORY_FIELDS.join(", "))));
    }
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(LineError::at(
                "id",
                format!("expected a non-empty string or a number, got {}", type_name(other)),
            ));
        }
        None => return Err(LineError::at("id", "missing")),
    };
    let task = opt_string(&obj, "task")?
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| LineError::at("task", "missing or blank"))?;
    let strings = |field: &str, required: bool| -> Result<Vec<String>, LineError> {
        match obj.get(field) {
            None | Some(Value::Null) if !required => Ok(Vec::new()),
            None | Some(Value::Null) => Err(LineError::at(field, "missing")),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(LineError::at(
                        &format!("{field}[{i}]"),
                        format!("expected a string, got {}", type_name(other)),
                    )),
                })
                .collect(),
            Some(other) => Err(LineError::at(field, format!("expected an array of strings, got {}", type_name(other)))),
        }
    };
    let steps = strings("steps", true)?;
    let tags = strings("tags", false)?;
    let success = match obj.get("success") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(LineError::at("success", format!("expected true or false, got {}", type_name(other))));
        }
        None => return Err(LineError::at("success", "missing")),
    };
    Ok(crate::Trajectory {
        id,
        task,
        steps,
        output: opt_string(&obj, "output")?.unwrap_or_default(),
        feedback: opt_string(&obj, "feedback")?,
        success,
        time: opt_time(&obj, "time")?.unwrap_or(now),
        tags,
    })
}
