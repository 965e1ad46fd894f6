//! The access keys' port on Qdrant: one vectorless point per key in the space's meta
//! collection (`type` = `access_key`), so that every process of every host sees the same keys.
//! Only the token's hash is stored.

use crate::QdrantStore;
use crate::meta::{field, object, point_id_of};
use async_trait::async_trait;
use atlas_domain::access::{AccessKey, Role};
use atlas_domain::ports::KeyStore;
use atlas_domain::{AtlasError, Result, Scope, Timestamp};
use qdrant_client::qdrant::{Condition, Filter, GetPointsBuilder, PointId, PointStruct, RetrievedPoint};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The `type` of a key's point.
pub const ACCESS_KEY: &str = "access_key";

const ID: &str = "key_id";
const TOKEN_SHA256: &str = "token_sha256";
const ROLE: &str = "role";
const CREATED_AT: &str = "created_at";
const REVOKED_AT: &str = "revoked_at";

fn key_point_id(id: &str) -> PointId {
    point_id_of(&format!("{ACCESS_KEY}\0{id}"))
}

fn key_point(key: &AccessKey) -> PointStruct {
    let payload = object(json!({
        field::TYPE: ACCESS_KEY,
        ID: key.id,
        TOKEN_SHA256: key.token_sha256,
        field::USER: key.tenant.user,
        field::AGENT: key.tenant.agent,
        ROLE: key.role.as_str(),
        CREATED_AT: key.created_at.millis(),
        REVOKED_AT: key.revoked_at.map(Timestamp::millis),
    }));
    PointStruct::new(key_point_id(&key.id), HashMap::<String, qdrant_client::qdrant::Vector>::new(), payload)
}

fn key_of(p: RetrievedPoint) -> Result<AccessKey> {
    let payload: serde_json::Map<String, Value> = p.payload.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
    let bad = |what: &str| AtlasError::Storage(format!("access key point {:?}: {what}", p.id));
    let text = |k: &str| payload.get(k).and_then(Value::as_str).map(str::to_owned);
    let role = text(ROLE).ok_or_else(|| bad("no role"))?.parse::<Role>().map_err(|e| bad(&e))?;
    Ok(AccessKey {
        id: text(ID).ok_or_else(|| bad("no id"))?,
        token_sha256: text(TOKEN_SHA256).ok_or_else(|| bad("no hash"))?,
        tenant: Scope { user: text(field::USER), agent: text(field::AGENT), session: None },
        role,
        created_at: Timestamp(payload.get(CREATED_AT).and_then(Value::as_i64).ok_or_else(|| bad("no created_at"))?),
        revoked_at: payload.get(REVOKED_AT).and_then(Value::as_i64).map(Timestamp),
    })
}

impl QdrantStore {
    async fn key(&self, id: &str) -> Result<Option<AccessKey>> {
        if !self.meta.exists().await? {
            return Ok(None);
        }
        let request = GetPointsBuilder::new(self.meta.name(), vec![key_point_id(id)]).with_payload(true);
        let points = self.meta.call("read an access key", self.meta.client().get_points(request.build())).await?;
        points.into_iter().next().map(key_of).transpose()
    }
}

#[async_trait]
impl KeyStore for QdrantStore {
    async fn add_key(&self, key: AccessKey) -> Result<()> {
        if self.key(&key.id).await?.is_some() {
            return Err(AtlasError::invalid("keys add", format!("a key with id {} exists already", key.id)));
        }
        self.meta.ensure(None).await?;
        self.meta.upsert(vec![key_point(&key)]).await
    }

    async fn keys(&self) -> Result<Vec<AccessKey>> {
        let filter = Filter::must([Condition::matches(field::TYPE, ACCESS_KEY.to_owned())]);
        let mut keys = self.meta.scroll_matching(filter).await?.into_iter().map(key_of).collect::<Result<Vec<_>>>()?;
        keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(keys)
    }

    async fn revoke_key(&self, id: String, at: Timestamp) -> Result<bool> {
        match self.key(&id).await? {
            Some(key) if key.is_live() => {
                self.meta.upsert(vec![key_point(&AccessKey { revoked_at: Some(at), ..key })]).await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
