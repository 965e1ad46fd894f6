//! Scopes: whose memory this is (user), which agent holds it, and which session it came from.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a memory belongs. Each part is optional; as a recall filter, every part that is set
/// must match exactly, so a recall for user `alice` never sees user `bob`'s memories, nor
/// memories that belong to no user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// The scope dimensions, in the order they are written (`user:alice`).
pub const SCOPE_KEYS: [&str; 3] = ["user", "agent", "session"];

impl Scope {
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.agent.is_none() && self.session.is_none()
    }

    /// Whether a memory with scope `memory` passes this scope used as a filter.
    pub fn admits(&self, memory: &Scope) -> bool {
        fn part(filter: &Option<String>, value: &Option<String>) -> bool {
            filter.as_ref().is_none_or(|f| value.as_ref() == Some(f))
        }
        part(&self.user, &memory.user) && part(&self.agent, &memory.agent) && part(&self.session, &memory.session)
    }

    /// Sets one dimension from `key:value` text, as the CLI's `--scope user:alice` writes it.
    pub fn set_from_pair(&mut self, pair: &str) -> Result<(), String> {
        let (key, value) =
            pair.split_once(':').ok_or_else(|| format!("scope {pair:?} is not KEY:VALUE (e.g. user:alice)"))?;
        self.set(key.trim(), value.trim())
    }

    /// Sets one dimension by name; an unknown name is an error that lists the known ones.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if value.is_empty() {
            return Err(format!("scope {key:?} has an empty value"));
        }
        let slot = match key {
            "user" => &mut self.user,
            "agent" => &mut self.agent,
            "session" => &mut self.session,
            other => {
                return Err(format!("unknown scope {other:?} (known scopes: {})", SCOPE_KEYS.join(", ")));
            }
        };
        *slot = Some(value.to_owned());
        Ok(())
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [("user", &self.user), ("agent", &self.agent), ("session", &self.session)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}:{v}")))
            .collect();
        if parts.is_empty() { f.write_str("(global)") } else { f.write_str(&parts.join(" ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_scope_is_named() {
        let err = Scope::default().set_from_pair("team:x").unwrap_err();
        assert!(err.contains("\"team\"") && err.contains("user, agent, session"), "{err}");
        assert!(Scope::default().set_from_pair("user").is_err());
        assert!(Scope::default().set_from_pair("user:").is_err());
    }

    #[test]
    fn filter_requires_every_set_part() {
        let mut filter = Scope::default();
        filter.set("user", "alice").unwrap();
        let alice = Scope { user: Some("alice".into()), session: Some("s1".into()), ..Scope::default() };
        let bob = Scope { user: Some("bob".into()), ..Scope::default() };
        assert!(filter.admits(&alice));
        assert!(!filter.admits(&bob));
        assert!(!filter.admits(&Scope::default()));
        assert!(Scope::default().admits(&bob));
    }
}
