//! Access keys of a served space (`atlas keys`): a token is made here from the operating
//! system's randomness, shown once, and kept only as its SHA-256 by the store's
//! [`atlas_domain::ports::KeyStore`]. Tokens carry 256 random bits, so a fast hash is enough: no
//! guess can be checked faster than the space is searched.

use crate::{Atlas, now};
use atlas_domain::access::{AccessKey, Role};
use atlas_domain::{AtlasError, Result, Scope};
use sha2::{Digest, Sha256};

/// What every token starts with, so that it is recognised in a config file or a leak scanner.
pub const TOKEN_PREFIX: &str = "atlas_";

/// A key just made: its token, which is never stored and never shown again, and its record.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub token: String,
    pub key: AccessKey,
}

/// The SHA-256 of a token, in hex: what the store keeps and what a request's token is compared by.
pub fn token_sha256(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key's id: the first 12 hex digits of its token's hash.
pub fn key_id(token_sha256: &str) -> String {
    token_sha256[..12].to_owned()
}

impl Atlas {
    /// Makes a key confined to `tenant` (user and/or agent; none only for an admin) with `role`.
    pub async fn add_key(&self, tenant: Scope, role: Role) -> Result<NewKey> {
        AccessKey::validate(&tenant, role).map_err(|m| AtlasError::invalid("keys add", m))?;
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| AtlasError::Storage(format!("no randomness for a token: {e}")))?;
        let token = format!("{TOKEN_PREFIX}{}", secret.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let hash = token_sha256(&token);
        let key =
            AccessKey { id: key_id(&hash), token_sha256: hash, tenant, role, created_at: now(), revoked_at: None };
        self.parts.keys.add_key(key.clone()).await?;
        Ok(NewKey { token, key })
    }

    /// Every key, revoked ones included, oldest first.
    pub async fn keys(&self) -> Result<Vec<AccessKey>> {
        self.parts.keys.keys().await
    }

    /// Revokes a key by id; an unknown or already revoked id is not found.
    pub async fn revoke_key(&self, id: &str) -> Result<()> {
        if self.parts.keys.revoke_key(id.to_owned(), now()).await? {
            Ok(())
        } else {
            Err(AtlasError::invalid("keys revoke", format!("no live key with id {id:?} (see `atlas keys list`)")))
        }
    }
}
