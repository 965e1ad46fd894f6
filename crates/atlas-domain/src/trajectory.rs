//! A trajectory: one task an agent did, the steps it took, what came out and how it went. The
//! Experience memory remembers trajectories; the Strategy bank and the Concept library are
//! abstracted from them.

use crate::{Body, NewMemory, Outcome, Scope, Timestamp, Validity};

#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    /// The caller's id, unique per trajectory (storing it twice stores it once).
    pub id: String,
    pub task: String,
    /// Code lines or actions, in order.
    pub steps: Vec<String>,
    pub output: String,
    pub feedback: Option<String>,
    pub success: bool,
    /// When it was done.
    pub time: Timestamp,
    /// Domain tags (`"grid"`, `"symmetry"`).
    pub tags: Vec<String>,
}

impl Trajectory {
    pub fn outcome(&self) -> Outcome {
        if self.success { Outcome::Success } else { Outcome::Failure }
    }

    /// The searchable text of its experience: the task, then how it went and what was said of
    /// it, so that a search for a similar task finds it and a reader sees the lesson.
    pub fn text(&self) -> String {
        let verdict = if self.success { "succeeded" } else { "failed" };
        match self.feedback.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
            Some(feedback) => format!("{}\n({verdict}: {feedback})", self.task.trim()),
            None => format!("{}\n({verdict})", self.task.trim()),
        }
    }

    /// The experience memory that remembers it, learned at `recorded_at`.
    pub fn to_experience(&self, scope: Scope, recorded_at: Timestamp) -> NewMemory {
        NewMemory {
            scope,
            text: self.text(),
            event_time: self.time,
            recorded_at,
            validity: Validity::from(self.time),
            meta: serde_json::Map::new(),
            body: Body::Experience {
                task: self.task.clone(),
                outcome: self.outcome(),
                feedback: self.feedback.clone(),
                trajectory: Some(self.id.clone()),
                steps: self.steps.clone(),
                output: self.output.clone(),
                tags: self.tags.clone(),
                merged: Vec::new(),
            },
        }
    }
}
