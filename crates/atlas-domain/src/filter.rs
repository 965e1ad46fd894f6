//! The filter every recall signal applies: scope, kind, event time and validity; soft-deleted
//! memories never pass, unless a listing asks for them alone (`forgotten`).

use crate::{Memory, MemoryKind, Scope, Timestamp};

/// Restricts which memories a search may return. Every store pushes it down into its own query;
/// [`RecallFilter::admits`] is the reference semantics the conformance suite checks them against.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecallFilter {
    pub scope: Scope,
    /// Empty means every kind.
    pub kinds: Vec<MemoryKind>,
    /// Event time lower bound, inclusive.
    pub since: Option<Timestamp>,
    /// Event time upper bound, exclusive.
    pub until: Option<Timestamp>,
    /// Only memories valid at this time; `None` ignores validity.
    pub valid_at: Option<Timestamp>,
    /// Only soft-deleted memories (what `recover` can bring back) instead of live ones: for
    /// listings of what was forgotten; recall never sets it.
    pub forgotten: bool,
}

impl RecallFilter {
    pub fn admits(&self, m: &Memory) -> bool {
        m.lifecycle.is_deleted() == self.forgotten
            && self.scope.admits(&m.scope)
            && (self.kinds.is_empty() || self.kinds.contains(&m.kind()))
            && self.since.is_none_or(|s| m.event_time >= s)
            && self.until.is_none_or(|u| m.event_time < u)
            && self.valid_at.is_none_or(|t| m.validity.holds_at(t))
    }
}
