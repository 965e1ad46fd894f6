//! Access keys of a served space: which tenant (user and/or agent) a caller is confined to and
//! what its role lets it do. Pure rules; the tokens themselves are made and hashed by the
//! runtime, kept by a [`crate::ports::KeyStore`] and checked by the server.

use crate::{Scope, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a key may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Recall, context, get, explain, export and the agent memories' searches.
    Read,
    /// Also remember, import, forget, learn and record outcomes.
    Write,
    /// Everything, over every tenant: stats, metrics, consolidation, any scope.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?} (read, write or admin)")),
        }
    }
}

/// A key as stored: never the token, only its SHA-256 (hex). `id` is the first 12 hex digits
/// of that hash, so that a key is named in lists and logs without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    pub id: String,
    pub token_sha256: String,
    /// The tenant it is confined to: `user` and/or `agent` (never `session`). Empty only for an
    /// admin key, which sees every tenant.
    pub tenant: Scope,
    pub role: Role,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

impl AccessKey {
    /// Checks a new key's tenant and role: a read or write key must name a user or an agent
    /// (an unconfined key is an admin's); a session never confines a key.
    pub fn validate(tenant: &Scope, role: Role) -> Result<(), String> {
        if tenant.session.is_some() {
            return Err("a key is confined to a user and/or an agent, not to a session".into());
        }
        for (name, value) in [("user", &tenant.user), ("agent", &tenant.agent)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(format!("the key's {name} is empty"));
            }
        }
        if tenant.user.is_none() && tenant.agent.is_none() && role != Role::Admin {
            return Err(format!("a {role} key needs a tenant: --user and/or --agent (only an admin key sees all)"));
        }
        Ok(())
    }

    pub fn is_live(&self) -> bool {
        self.revoked_at.is_none()
    }
}

/// Who is calling: the whole space (the single configured token, an unconfined admin key, or
/// an open loopback server without keys), or one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Caller {
    #[default]
    All,
    Tenant {
        tenant: Scope,
        role: Role,
        key: String,
    },
}

/// Why a caller may not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Its role is too low for the operation.
    Role { needed: Role, has: Role },
    /// It named a scope outside its tenant; `field` is the dimension (`user` or `agent`).
    Scope { field: &'static str, tenant: String, asked: String },
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Role { needed, has } => write!(f, "this key's role is {has}; the operation needs {needed}"),
            Denied::Scope { field, tenant, asked } => {
                write!(f, "this key is confined to {field} {tenant:?}; {asked:?} is outside it")
            }
        }
    }
}

impl Denied {
    /// As the error a port or the runtime returns, at `location` (a field, `file:line`).
    pub fn at(&self, location: &str) -> crate::AtlasError {
        let message = match self {
            // Named like every other field error, so that the door reports `scope.user`.
            Denied::Scope { field, .. } => format!("field \"scope.{field}\": {self}"),
            Denied::Role { .. } => self.to_string(),
        };
        crate::AtlasError::Forbidden { location: location.to_owned(), message }
    }
}

impl Caller {
    /// The caller of an access key (an admin key without a tenant sees all).
    pub fn of_key(key: &AccessKey) -> Caller {
        if key.role == Role::Admin && key.tenant.user.is_none() && key.tenant.agent.is_none() {
            Caller::All
        } else {
            Caller::Tenant { tenant: key.tenant.clone(), role: key.role, key: key.id.clone() }
        }
    }

    pub fn may(&self, needed: Role) -> Result<(), Denied> {
        match self {
            Caller::All => Ok(()),
            Caller::Tenant { role, .. } if *role >= needed => Ok(()),
            Caller::Tenant { role, .. } => Err(Denied::Role { needed, has: *role }),
        }
    }

    /// Whether a memory of scope `memory` is this caller's to see and touch.
    pub fn sees(&self, memory: &Scope) -> bool {
        match self {
            Caller::All => true,
            Caller::Tenant { tenant, .. } => Scope { session: None, ..tenant.clone() }.admits(memory),
        }
    }

    /// The scope a request of this caller runs in: `asked` with the tenant's user and agent
    /// forced onto it. Naming another user or agent is refused, never silently replaced.
    pub fn confine(&self, asked: Scope) -> Result<Scope, Denied> {
        let Caller::Tenant { tenant, .. } = self else { return Ok(asked) };
        let mut scope = asked;
        for (field, own, slot) in [("user", &tenant.user, &mut scope.user), ("agent", &tenant.agent, &mut scope.agent)]
        {
            let Some(own) = own else { continue };
            match slot {
                Some(asked) if asked != own => {
                    return Err(Denied::Scope { field, tenant: own.clone(), asked: asked.clone() });
                }
                _ => *slot = Some(own.clone()),
            }
        }
        Ok(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn part() -> impl Strategy<Value = Option<String>> {
        prop::option::of(prop::sample::select(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]))
    }

    fn scope() -> impl Strategy<Value = Scope> {
        (part(), part(), part()).prop_map(|(user, agent, session)| Scope { user, agent, session })
    }

    fn tenant_caller() -> impl Strategy<Value = Caller> {
        (part(), part(), prop::sample::select(vec![Role::Read, Role::Write, Role::Admin]))
            .prop_filter("a tenant", |(u, a, _)| u.is_some() || a.is_some())
            .prop_map(|(user, agent, role)| Caller::Tenant {
                tenant: Scope { user, agent, session: None },
                role,
                key: "k".into(),
            })
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        /// A confined scope is always one the caller sees, and it keeps what was asked within.
        #[test]
        fn confined_scopes_stay_inside_the_tenant(caller in tenant_caller(), asked in scope()) {
            match caller.confine(asked.clone()) {
                Ok(scope) => {
                    prop_assert!(caller.sees(&scope));
                    prop_assert_eq!(&scope.session, &asked.session);
                    if asked.user.is_some() { prop_assert_eq!(&scope.user, &asked.user); }
                    if asked.agent.is_some() { prop_assert_eq!(&scope.agent, &asked.agent); }
                }
                Err(Denied::Scope { field, .. }) => {
                    let Caller::Tenant { tenant, .. } = &caller else { unreachable!() };
                    let (own, asked) = if field == "user" { (&tenant.user, &asked.user) } else { (&tenant.agent, &asked.agent) };
                    prop_assert!(own.is_some() && asked.is_some() && own != asked);
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        /// A memory the caller sees never matches another tenant's confined filter, and every
        /// memory a confined filter admits is one the caller sees.
        #[test]
        fn what_a_confined_filter_admits_is_seen(caller in tenant_caller(), asked in scope(), memory in scope()) {
            if let Ok(filter) = caller.confine(asked)
                && filter.admits(&memory)
            {
                prop_assert!(caller.sees(&memory));
            }
        }

        #[test]
        fn roles_are_ordered(caller in tenant_caller()) {
            let Caller::Tenant { role, .. } = &caller else { unreachable!() };
            for needed in [Role::Read, Role::Write, Role::Admin] {
                prop_assert_eq!(caller.may(needed).is_ok(), needed <= *role);
            }
            prop_assert!(Caller::All.may(Role::Admin).is_ok());
        }
    }

    #[test]
    fn keys_need_a_tenant_unless_admin() {
        assert!(AccessKey::validate(&Scope::default(), Role::Read).is_err());
        assert!(AccessKey::validate(&Scope::default(), Role::Admin).is_ok());
        let session = Scope { user: Some("u".into()), session: Some("s".into()), ..Scope::default() };
        assert!(AccessKey::validate(&session, Role::Write).is_err());
        let blank = Scope { user: Some(" ".into()), ..Scope::default() };
        assert!(AccessKey::validate(&blank, Role::Write).is_err());
    }
}
