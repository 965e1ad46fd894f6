//! Who said a turn: the agent (or its tools) or someone it talks with, the one reading of a
//! speaker that standing instructions and recall's reading of a question share.

use crate::Memory;

/// Speakers whose lines are the agent's own, or its tools'.
const AGENT_SPEAKERS: &[&str] = &["assistant", "agent", "ai", "bot", "system", "model", "tool"];

/// Whether `speaker` names the agent's role (or a tool's) rather than a person: case and
/// surrounding spaces aside.
pub fn is_agent_role(speaker: &str) -> bool {
    AGENT_SPEAKERS.iter().any(|a| speaker.trim().eq_ignore_ascii_case(a))
}

/// Whether `memory` is a turn the agent said: under an agent role, or under the agent's own
/// name (a speaker equal to the memory's scope agent). A memory with no speaker is not.
pub fn said_by_the_agent(memory: &Memory) -> bool {
    let Some(speaker) = memory.body.speaker() else { return false };
    let own = memory.scope.agent.as_deref();
    is_agent_role(speaker) || own.is_some_and(|a| a.trim().eq_ignore_ascii_case(speaker.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryId, NewMemory, Scope, Timestamp};

    fn turn(speaker: Option<&str>, agent: Option<&str>) -> Memory {
        let scope = Scope { agent: agent.map(str::to_owned), ..Scope::default() };
        let at = Timestamp::from_millis(0);
        NewMemory::episode("hello", scope, speaker.map(str::to_owned), at, at).with_id(MemoryId(1))
    }

    #[test]
    fn the_agent_speaks_under_a_role_or_its_own_name() {
        for role in ["assistant", " Assistant ", "AI", "tool", "system"] {
            assert!(is_agent_role(role), "{role:?}");
            assert!(said_by_the_agent(&turn(Some(role), None)), "{role:?}");
        }
        assert!(said_by_the_agent(&turn(Some("Atlas"), Some("atlas"))));
        for person in ["user", "Caroline", "assistant manager"] {
            assert!(!is_agent_role(person), "{person:?}");
            assert!(!said_by_the_agent(&turn(Some(person), Some("atlas"))), "{person:?}");
        }
        assert!(!said_by_the_agent(&turn(None, Some("atlas"))));
    }
}
