//! Who is calling: the server's token (every tenant), a tenant's key (read from the space and
//! read again at least once a second, so that `atlas keys add` and `revoke` in another process
//! take effect without a restart), or nobody on an open loopback server of a space that never
//! had a key (once a key is made, revoking them all does not open it again).

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

/// The space's live keys by their token's hash, as last read.
#[derive(Default)]
struct KeySet {
    by_hash: HashMap<String, AccessKey>,
    /// Whether any key was ever made (revoked ones count): a space with keys is never open.
    made_any: bool,
    read_at: Option<Instant>,
}

/// The server's copy of the space's keys.
#[derive(Default)]
pub struct Keys {
    current: RwLock<Arc<KeySet>>,
    reading: tokio::sync::Mutex<()>,
}

impl Keys {
    /// The keys as read less than `max_age` ago, or read after `since`, whichever is given.
    async fn fresh(&self, atlas: &Atlas, max_age: Duration, since: Option<Instant>) -> Result<Arc<KeySet>, ApiError> {
        let young = |set: &KeySet| match since {
            Some(since) => set.read_at.is_some_and(|t| t > since),
            None => set.read_at.is_some_and(|t| t.elapsed() < max_age),
        };
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
                let made_any = !keys.is_empty();
                let by_hash =
                    keys.into_iter().filter(AccessKey::is_live).map(|k| (k.token_sha256.clone(), k)).collect();
                let set = Arc::new(KeySet { by_hash, made_any, read_at: Some(Instant::now()) });
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
    let asked = Instant::now();
    let mut set = keys.fresh(atlas, REFRESH, None).await?;
    let open = |set: &KeySet| token.is_none() && !set.made_any && !require_token;
    let given = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let credential = value.to_str().ok().and_then(|v| {
                let (scheme, credential) = v.split_once(' ')?;
                (scheme.eq_ignore_ascii_case("bearer") && !credential.trim().is_empty()).then(|| credential.trim())
            });
            match credential {
                Some(credential) => Some(credential),
                // An open server has no use for the header: whatever it holds, it is not refused.
                None if open(&set) => None,
                None => return Err(unauthorized("expected `Authorization: Bearer <token>`")),
            }
        }
    };
    if let Some(given) = given {
        let hash = token_sha256(given);
        // Compared by hash: equal lengths, and no early exit that tells how much of a guess matched.
        if token.is_some_and(|t| token_sha256(t) == hash) {
            return Ok(Caller::All);
        }
        if let Some(key) = set.by_hash.get(&hash) {
            return Ok(Caller::of_key(key));
        }
        // A key added before this request works at once: the keys are read again unless they
        // were read since it came (requests that miss together share one read).
        set = keys.fresh(atlas, REFRESH, Some(asked)).await?;
        if let Some(key) = set.by_hash.get(&hash) {
            return Ok(Caller::of_key(key));
        }
    }
    if open(&set) {
        // An open server (loopback only: `serve` refuses anything else without a token).
        return Ok(Caller::All);
    }
    if token.is_none() && set.by_hash.is_empty() {
        return Err(unauthorized("every key of this space is revoked: add one with `atlas keys add`"));
    }
    Err(unauthorized(if given.is_some() { "wrong bearer token, or a revoked key" } else { "missing bearer token" }))
}
