//! How much each indexed field of a memory counts in full-text ranking, on every store.
//!
//! Measured on the LoCoMo dev set (docs/EVAL.md): the speaker at half weight helps questions that
//! name people; the context (the turn answered) at 0.2 finds replies by their question, and the
//! gain is flat for weights 0.1–0.5.

/// The memory's own text.
pub const TEXT_WEIGHT: f64 = 1.0;
/// The speaker's name.
pub const SPEAKER_WEIGHT: f64 = 0.5;
/// [`crate::Memory::context`]: the line of the turn this one answers.
pub const CONTEXT_WEIGHT: f64 = 0.2;
