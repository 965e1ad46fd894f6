//! Who is calling: the server's token (every tenant), a tenant's key (read from the space and
//! read again at least once a second, so that `atlas keys add` and `revoke` in another process
//! take effect without a restart), or nobody on an open loopback server without keys.

use crate::ops::ApiError;
use atlas_domain::access::{AccessKey, Caller};
use atlas_runtime::Atlas;
use atlas_runtime::keys::token_sha256;
use axum::http::{HeaderMap, header};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How stale the keys may be: a revoked key is refused within this.
const REFRESH: Duration = Duration::from_millis(1000);
/// A token not among the keys reads them again when they are older than this (a key just
/// added works at once), and no more often.
const MISS_REFRESH: Duration = Duration::from_millis(100);

/// The space's live keys by their token's hash, as last read.
#[derive(Default)]
struct KeySet {
    by_hash: HashMap<String, AccessKey>,
    read_at: Option<Instant>,
}

/// The server's copy of the space's keys.
#[derive(Default)]
pub struct Keys {
    current: RwLock<Arc<KeySet>>,
    reading: tokio::sync::Mutex<()>,
}

impl Keys {
    async fn fresh(&self, atlas: &Atlas, max_age: Duration) -> Result<Arc<KeySet>, ApiError> {
        let young = |set: &KeySet| set.read_at.is_some_and(|t| t.elapsed() < max_age);
        let set = Arc::clone(&self.current.read().expect("keys lock"));
        if young(&set) {
            return Ok(set);
        }
        // One request reads them; the others wait for its answer.
        let _reading = self.reading.lock().await;
        let set = Arc::clone(&self.current.read().expect("keys lock"));
        if young(&set) {
            return Ok(set);
        }
        match atlas.keys().await {
            Ok(keys) => {
                let by_hash =
                    keys.into_iter().filter(AccessKey::is_live).map(|k| (k.token_sha256.clone(), k)).collect();
                let set = Arc::new(KeySet { by_hash, read_at: Some(Instant::now()) });
                *self.current.write().expect("keys lock") = Arc::clone(&set);
                Ok(set)
            }
            // Keys read before stay in force for a while; never read, nobody gets in.
            Err(e) if set.read_at.is_some_and(|t| t.elapsed() < REFRESH * 30) => {
                tracing::warn!("cannot read the access keys again: {e}");
                Ok(set)
            }
            Err(e) => Err(ApiError::new(503, "busy", format!("cannot read the access keys: {e}"), None)),
        }
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(401, "unauthorized", message, Some("authorization"))
}

/// The caller of a request, or 401.
pub async fn authenticate(
    keys: &Keys,
    atlas: &Atlas,
    token: Option<&str>,
    require_token: bool,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let set = keys.fresh(atlas, REFRESH).await?;
    if token.is_none() && set.by_hash.is_empty() {
        if require_token {
            return Err(unauthorized("this server takes no calls without a key, and every key is revoked"));
        }
        // An open server (loopback only: `serve` refuses anything else without a token).
        return Ok(Caller::All);
    }
    let given = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let value = value.to_str().map_err(|_| unauthorized("the Authorization header is not text"))?;
            let (scheme, credential) = value.split_once(' ').unwrap_or((value, ""));
            if !scheme.eq_ignore_ascii_case("bearer") || credential.trim().is_empty() {
                return Err(unauthorized("expected `Authorization: Bearer <token>`"));
            }
            Some(credential.trim())
        }
    };
    let Some(given) = given else { return Err(unauthorized("missing bearer token")) };
    let hash = token_sha256(given);
    // Compared by hash: equal lengths, and no early exit that tells how much of a guess matched.
    if token.is_some_and(|t| token_sha256(t) == hash) {
        return Ok(Caller::All);
    }
    if let Some(key) = set.by_hash.get(&hash) {
        return Ok(Caller::of_key(key));
    }
    let set = keys.fresh(atlas, MISS_REFRESH).await?;
    match set.by_hash.get(&hash) {
        Some(key) => Ok(Caller::of_key(key)),
        None => Err(unauthorized("wrong bearer token, or a revoked key")),
    }
}
