//! The access keys' port on SQLite: the `access_keys` table (schema 9), hashes only.

use crate::SqliteStore;
use crate::error::storage;
use async_trait::async_trait;
use atlas_domain::access::{AccessKey, Role};
use atlas_domain::ports::KeyStore;
use atlas_domain::{AtlasError, Result, Scope, Timestamp};
use rusqlite::{OptionalExtension, params};

#[async_trait]
impl KeyStore for SqliteStore {
    async fn add_key(&self, key: AccessKey) -> Result<()> {
        self.writer
            .write(move |conn| {
                let exists = conn
                    .query_row("SELECT 1 FROM access_keys WHERE id = ?", [&key.id], |_| Ok(()))
                    .optional()
                    .map_err(storage)?
                    .is_some();
                if exists {
                    return Err(AtlasError::invalid("keys add", format!("a key with id {} exists already", key.id)));
                }
                conn.execute(
                    "INSERT INTO access_keys (id, token_sha256, user, agent, role, created_at, revoked_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                    params![
                        key.id,
                        key.token_sha256,
                        key.tenant.user,
                        key.tenant.agent,
                        key.role.as_str(),
                        key.created_at.millis(),
                        key.revoked_at.map(|t| t.millis()),
                    ],
                )
                .map_err(storage)?;
                Ok(())
            })
            .await
    }

    async fn keys(&self) -> Result<Vec<AccessKey>> {
        self.readers
            .read(|conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT id, token_sha256, user, agent, role, created_at, revoked_at FROM access_keys \
                         ORDER BY created_at, id",
                    )
                    .map_err(storage)?;
                let rows = stmt
                    .query_map([], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, String>(4)?,
                            r.get::<_, i64>(5)?,
                            r.get::<_, Option<i64>>(6)?,
                        ))
                    })
                    .map_err(storage)?;
                let mut keys = Vec::new();
                for row in rows {
                    let (id, token_sha256, user, agent, role, created_at, revoked_at) = row.map_err(storage)?;
                    let role = role.parse::<Role>().map_err(AtlasError::Storage)?;
                    keys.push(AccessKey {
                        id,
                        token_sha256,
                        tenant: Scope { user, agent, session: None },
                        role,
                        created_at: Timestamp(created_at),
                        revoked_at: revoked_at.map(Timestamp),
                    });
                }
                Ok(keys)
            })
            .await
    }

    async fn revoke_key(&self, id: String, at: Timestamp) -> Result<bool> {
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE access_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    params![at.millis(), id],
                )
                .map(|n| n > 0)
                .map_err(storage)
            })
            .await
    }
}
