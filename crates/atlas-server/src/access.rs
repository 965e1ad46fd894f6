//! Who may do what: the role or whole-space access each operation needs, a request's scope
//! confined to the caller's tenant, and whether a memory (in the store or only the archive) is
//! the caller's; another tenant's memory is "not found", so that ids tell nothing.

use crate::Op;
use crate::args::{ScopeArgs, memory_id, scope};
use crate::error::ApiError;
use atlas_domain::access::{Caller, Role};
use atlas_domain::{AtlasError, MemoryId, Scope};
use atlas_runtime::Atlas;

/// What an operation needs of its caller: a role, or the whole space (an unconfined caller).
enum Needs {
    Role(Role),
    WholeSpace,
}

fn needs(op: Op) -> Needs {
    match op {
        Op::Health | Op::OpenApi => Needs::Role(Role::Read),
        Op::Recall | Op::RecallMany | Op::Get | Op::Explain | Op::Context | Op::Export => Needs::Role(Role::Read),
        Op::Experiences | Op::Strategies | Op::Concepts => Needs::Role(Role::Read),
        Op::List | Op::Entity | Op::Sessions | Op::Session | Op::Archived => Needs::Role(Role::Read),
        Op::Recover | Op::Feedback => Needs::Role(Role::Write),
        Op::Remember | Op::RememberMany | Op::Import | Op::Forget | Op::Learn => Needs::Role(Role::Write),
        Op::StrategyOutcome | Op::ConceptOutcome => Needs::Role(Role::Write),
        // Counts and cycles over every tenant's memories.
        Op::Stats | Op::Metrics | Op::Consolidate | Op::Cycles => Needs::WholeSpace,
    }
}

/// Whether `caller` may run `op` at all (403 naming `authorization` if not).
pub fn permit(caller: &Caller, op: Op) -> Result<(), ApiError> {
    match (needs(op), caller) {
        (Needs::Role(role), _) => caller.may(role).map_err(|d| ApiError::forbidden("authorization", &d.to_string())),
        (Needs::WholeSpace, Caller::All) => Ok(()),
        (Needs::WholeSpace, Caller::Tenant { .. }) => Err(ApiError::forbidden(
            "authorization",
            "this covers every tenant of the space: it needs an unconfined admin key or the server's token \
             (the sleep cycle also runs in the background)",
        )),
    }
}

/// The request's scope within the caller's tenant: its user and agent forced, another's refused
/// (403 naming `<prefix>scope.user`).
pub(crate) fn confined(caller: &Caller, s: Option<ScopeArgs>, prefix: &str) -> Result<Scope, ApiError> {
    if let Some(s) = &s {
        for (field, value) in [("user", &s.user), ("agent", &s.agent), ("session", &s.session)] {
            if let Some(value) = value {
                let field = format!("{prefix}scope.{field}");
                atlas_domain::policy::limits::check_scope_id(value, &field, &field)?;
            }
        }
    }
    caller.confine(scope(s)).map_err(|d| {
        let field = match &d {
            atlas_domain::access::Denied::Scope { field, .. } => format!("{prefix}scope.{field}"),
            atlas_domain::access::Denied::Role { .. } => "authorization".to_owned(),
        };
        ApiError::forbidden(&field, &d.to_string())
    })
}

/// The memory `id` if the caller may see it; another tenant's is not found, so that ids do not
/// tell what exists.
pub(crate) async fn own_memory(
    atlas: &Atlas,
    caller: &Caller,
    id: i64,
) -> Result<atlas_runtime::MemoryDetail, ApiError> {
    let id = memory_id(id)?;
    match atlas.get(id).await? {
        Some(detail) if caller.sees(&detail.memory.scope) => Ok(detail),
        _ => Err(AtlasError::NotFound(id).into()),
    }
}

/// Whether memory `id` is the caller's: one still in the store is checked there, one only the
/// archive holds by the archive's copy. Whole-space callers own whatever exists.
pub(crate) async fn owns(atlas: &Atlas, caller: &Caller, id: MemoryId) -> Result<bool, ApiError> {
    let scope = match atlas.get(id).await? {
        Some(detail) => Some(detail.memory.scope),
        None => atlas.archived_memory(id)?.map(|m| m.scope),
    };
    Ok(scope.is_some_and(|scope| caller.sees(&scope)))
}

/// The receipt key of a write under the caller's `Idempotency-Key`: a tenant's keys live in
/// their own space, and a batch's key never meets a single write's.
pub(crate) fn receipt_key(caller: &Caller, kind: &str, key: Option<String>) -> Option<String> {
    key.map(|k| match caller {
        Caller::All => format!("{kind}:{k}"),
        Caller::Tenant { tenant, .. } => format!("{kind}@{}:{k}", atlas_runtime::tenant_label(tenant)),
    })
}
